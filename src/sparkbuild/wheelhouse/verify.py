"""Check a wheelhouse before trusting it: every byte, and the GPU code inside.

A wheelhouse travels (USB stick, scp, a shared disk) before it is installed on an
air-gapped Spark.  ``verify`` re-hashes every file against ``manifest.json`` and
``requirements.lock`` and names each one that differs, is missing or was added; then it
lists the CUDA architectures whose machine code each shared library of the built wheels
carries (cuobjdump) and judges every kernel of it for each target arch
(:func:`sparkbuild.toolchain.sass.coverage`; which wheels are built, and the archs they are
judged at, are read from the files, not taken on the manifest's word:
:mod:`sparkbuild.wheelhouse.wheel_roles`) by the kernel policy
(:mod:`sparkbuild.toolchain.kernel_policy`): native code the target loads passes; a kernel
with no code for a target fails verify; a PTX-only one (the driver JIT-compiles it at load)
fails it too unless the recipe set ``allow_jit`` (the manifest's target says so, and its
``jit_kernels`` must list that kernel).  It also reads the machine code itself
(``cuobjdump -sass``) that a GPU of each target would load (``sm_121a``, and the family
code ``sm_121f``/``sm_120f`` that runs there too): per library, the block-scaled MMA
instructions (``OMMA.SF``: the FP4 GEMMs are real) and the kernels that are only a trap
(a feature guard compiled the body away, as CUTLASS does for plain sm_121).  A trap-only
kernel fails verify, naming the library and the kernel.  The lock must also meet every
wheel's ``Requires-Dist`` on the target, recorded overrides aside, and ship the torch the
build was compiled against (:mod:`sparkbuild.wheelhouse.requirements_check`).

``verify`` reads the machine code afresh every time: :func:`verify_wheelhouse` takes no
kept machine code facts, so nothing the cache holds can vouch for a wheelhouse that
travelled.  Only ``wheel``, reading the libraries it has just built, passes them to
:func:`gpu_libraries` (``kept_code``, :mod:`sparkbuild.toolchain.kept_sass`), and then
checks its staged wheelhouse with those very facts.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from sparkbuild.console import escaped, shown, unsafe_characters
from sparkbuild.errors import DestinationError, SparkbuildError, VerifyError
from sparkbuild.flashinfer.jit_cache import codeless_modules
from sparkbuild.flashinfer.jit_cache_wheel import JIT_CACHE_PROJECT
from sparkbuild.flashinfer.unreachable_stubs import RULES as UNREACHABLE_RULES
from sparkbuild.records import Record, as_json
from sparkbuild.store.files import fsync_dir, partial_beside, sweep_partials_beside
from sparkbuild.store.hashing import sha256_bytes, sha256_file
from sparkbuild.store.wheel_check import manifest_wheel_problems, same_version
from sparkbuild.store.wheel_members import READ_ERRORS, open_member
from sparkbuild.toolchain.kept_sass import LibraryCode
from sparkbuild.toolchain.kernel_policy import (
    Refusal,
    UnreachableStubs,
    refusals,
    unreachable_stubs,
)
from sparkbuild.toolchain.sass import (
    PTX_ONLY,
    Coverage,
    arch_digits,
    as_facts,
    coverage_at,
    machine_code,
)
from sparkbuild.wheelhouse.lock import LOCK_NAME, parse_lock
from sparkbuild.wheelhouse.manifest import (
    MANIFEST_NAME,
    expected_hashes,
    load_manifest,
    manifest_fingerprint,
    manifest_target,
    stand_in_line,
    stand_ins_of,
)
from sparkbuild.wheelhouse.requirements_check import check_wheelhouse_requirements
from sparkbuild.wheelhouse.standards import Agreement, check_standards
from sparkbuild.wheelhouse.target_tags import target_tag_problem
from sparkbuild.wheelhouse.wheel_roles import built_wheels

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sparkbuild.flashinfer.builder import AotResult
    from sparkbuild.recipe import Recipe
    from sparkbuild.toolchain.kept_sass import CodeCache
    from sparkbuild.toolchain.sass import CoverageKind, FunctionFacts, KernelCode, SassFunction

    ArchLister = Callable[[Path], list[str]]
    SassReader = Callable[[Path], Sequence[SassFunction | FunctionFacts]]
    KernelReader = Callable[[Path], list[KernelCode]]

NAMED_KERNELS = 10
"""Kernels an error message names per library (``--json`` names them all)."""

@dataclass(frozen=True)
class Mismatch(Record):
    file: str
    problem: str

    def describe(self) -> str:
        """``FILE (PROBLEM)``, the name quoted and the problem escaped where they hold a
        character that would forge a line of output (a newline) or turn it (U+202E)."""
        return f"{shown(self.file)} ({escaped(self.problem)})"

    def line(self) -> str:
        return f"  MISMATCH {shown(self.file)}: {escaped(self.problem)}"


def _unreachable(found: tuple[tuple[UnreachableStubs, tuple[str, ...]], ...]
                 ) -> list[dict[str, Any]]:
    return [{"rule": rule, "kernels": kernels} for rule, kernels in found]


@dataclass(frozen=True)
class LibraryArchs(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "wheel", "library", "archs", "missing", "sass_archs", "block_scaled_mma",
        "trap_only_kernels", "guard_stub_kernels", "unreachable_stubs",
    )

    wheel: str
    library: str
    archs: tuple[str, ...]
    """Machine code architectures, as cuobjdump names them (``sm_121a``)."""
    missing: tuple[str, ...]
    block_scaled_mma: int = 0
    """``OMMA.SF``/``QMMA.SF`` instructions in the code a target GPU loads."""
    trap_only_kernels: tuple[str, ...] = ()
    """Kernels of that code whose whole body is printf + ``BPT.TRAP``."""
    sass_archs: tuple[str, ...] = ()
    """The SASS read for the targets, as cuobjdump's fatbin headers name it (``sm_121a``)."""
    guard_stub_kernels: tuple[str, ...] = ()
    """Kernels that only print and trap or exit (CUTLASS 4.2's guards end in ``EXIT``): the
    trap-only ones and those that silently do nothing."""
    coverage: tuple[Coverage, ...] = ()
    """Every kernel of the library, per target arch: native, PTX only or none."""
    unreachable: tuple[tuple[UnreachableStubs, tuple[str, ...]], ...] = field(
        default=(), metadata=as_json("unreachable_stubs", dump=_unreachable))
    """Guard stubs the library's own dispatcher never launches at the targets, each group
    with the rule that names it before the compile (:mod:`sparkbuild.flashinfer.
    unreachable_stubs`): accepted, and listed."""

    @property
    def unreachable_kernels(self) -> tuple[str, ...]:
        return tuple(k for _, kernels in self.unreachable for k in kernels)

    def kernels_of(self, kind: CoverageKind) -> list[tuple[str, str, str | None]]:
        """(target, kernel, code) of every kernel of ``kind`` (``ptx``, ``none``)."""
        return [(c.target, k.name, k.code) for c in self.coverage for k in c.of_kind(kind)]

    def refusals(self, *, allow_jit: bool) -> list[Refusal]:
        """What the kernel policy refuses of this library: its guard stubs, then the
        kernels with no code for a target and (unless ``allow_jit``) those with PTX only."""
        return refusals(self.coverage, allow_jit=allow_jit, stub_archs=self.sass_archs,
                        guard_stubs=self.guard_stub_kernels, trap_only=self.trap_only_kernels,
                        unreachable=self.unreachable_kernels)

    def unreachable_lines(self) -> list[str]:
        """One line per rule: how many stubs it accepted, and why."""
        return [f"{len(kernels)} guard stub(s) never launched at the target: "
                f"{rule.describe()}" for rule, kernels in self.unreachable]

    def jit_kernels(self) -> list[dict[str, Any]]:
        """The PTX-only kernels, as the manifest's ``jit_kernels`` lists them."""
        return [{"wheel": self.wheel, "library": self.library, "target": target,
                 "kernel": name, "ptx_arch": code}
                for target, name, code in self.kernels_of(PTX_ONLY)]


def _by_file(agreement: list[Agreement]) -> dict[str, Agreement]:
    return {item.file: item for item in agreement}


@dataclass
class VerifyResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "wheelhouse", "fingerprint", "stand_ins", "files_checked", "ok", "mismatches",
        "target_archs", "allow_jit",
    )

    directory: Path = field(metadata=as_json("wheelhouse"))
    checked: int = field(metadata=as_json("files_checked"))
    target_archs: tuple[str, ...]
    mismatches: list[Mismatch] = field(default_factory=list)
    libraries: list[LibraryArchs] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    requirements: dict[str, Any] = field(default_factory=dict)
    """The Requires-Dist and torch check (RequirementsReport.to_dict())."""
    agreement: list[Agreement] = field(default_factory=list, metadata=as_json(dump=_by_file))
    """Whether pylock.toml and sbom.cdx.json agree with the wheels present."""
    allow_jit: bool = False
    """The recipe's ``allow_jit`` (the manifest's target says it): PTX-only kernels pass."""
    stand_ins: list[dict[str, str]] = field(default_factory=list)
    """Sources the build took from another commit than the tree's pin (the manifest's)."""
    fingerprint: str = ""
    """The wheelhouse's fingerprint (:func:`.manifest.manifest_fingerprint`)."""

    def json_extra(self) -> dict[str, Any]:
        return {"ok": self.error is None}

    def summary(self) -> list[str]:
        verdict = "OK" if self.error is None else "FAILED"
        lines = [f"verify {self.directory}: {verdict} ({self.checked} files re-hashed)"]
        lines += [f"  wheelhouse fingerprint: {self.fingerprint}"] if self.fingerprint else []
        lines += [m.line() for m in self.mismatches]
        for lib in self.libraries:
            archs = ", ".join(lib.archs) or "no GPU code"
            sass = (f"  [{', '.join(lib.sass_archs)}: {lib.block_scaled_mma} block-scaled MMA]"
                    if lib.sass_archs else "")
            kernels = "".join(f"; kernels {c.describe()}" for c in lib.coverage)
            lines.append(f"  {shown(lib.wheel)}: {shown(lib.library)}: {archs}{sass}{kernels}")
            accepted = set(lib.unreachable_kernels)
            lines += [f"    UNREACHABLE {escaped(line)}" for line in lib.unreachable_lines()]
            lines += [f"    TRAP-ONLY {shown(name)}" for name in lib.trap_only_kernels
                      if name not in accepted]
            lines += [f"    GUARD STUB (prints and exits) {shown(name)}"
                      for name in lib.guard_stub_kernels
                      if name not in lib.trap_only_kernels and name not in accepted]
        lines += [item.line() for item in self.agreement]
        lines += [f"  {escaped(stand_in_line(s))}" for s in self.stand_ins]
        lines += [f"  note: {escaped(note)}" for note in self.notes]
        return lines

    @property
    def error(self) -> SparkbuildError | None:
        refused = [f"{shown(f'{lib.wheel}:{lib.library}')} "
                   f"({escaped(found.describe(width=160, shown=NAMED_KERNELS))})"
                   for lib in self.libraries for found in lib.refusals(allow_jit=self.allow_jit)]
        if not self.mismatches and not refused:
            return None
        named = [m.describe() for m in self.mismatches] + refused
        return VerifyError(
            f"{len(named)} problem(s) in the wheelhouse: " + "; ".join(named),
            where=str(self.directory),
            hint="do not install it: copy it again, or rebuild it with `sparkbuild wheel`",
        )


# -- hashes ----------------------------------------------------------------------------


def actual_hashes(directory: Path) -> dict[str, str]:
    return plain_files(directory)[0]


def _not_plain(path: Path, mode: int) -> str | None:
    """Why ``path`` (by its lstat mode) is not a plain file or directory of the wheelhouse."""
    if stat.S_ISLNK(mode):
        return (f"a symbolic link (to {shown(str(path.readlink()))}), not a plain file: "
                "refused, even to identical bytes")
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "not a plain file (a device, socket or pipe): refused, not read"


def plain_files(directory: Path) -> tuple[dict[str, str], list[Mismatch]]:
    """The sha256 of every plain file under ``directory`` (manifest.json aside), and each
    thing that is not a plain file or directory, named: a symbolic link is never followed."""
    hashes: dict[str, str] = {}
    refused: list[Mismatch] = []
    for top, subdirs, files in os.walk(directory):
        base = Path(top)
        for name in sorted([*subdirs, *files]):
            path = base / name
            relative = path.relative_to(directory).as_posix()
            problem = _not_plain(path, path.lstat().st_mode)
            if problem is not None:
                refused.append(Mismatch(relative, problem))
            elif name in files and relative != MANIFEST_NAME:
                hashes[relative] = sha256_file(path)
        subdirs[:] = [d for d in subdirs if not (base / d).is_symlink()]
    return dict(sorted(hashes.items())), refused


def leaves_directory(name: str) -> bool:
    """A manifest entry that is not a plain relative path inside the wheelhouse."""
    parts = PurePosixPath(name).parts
    return (not name or "\\" in name or PurePosixPath(name).is_absolute() or ".." in parts
            or parts in ((), (".",)))


@dataclass
class CheckedFiles:
    """What :func:`verify_files` read: the manifest's bytes (the fingerprint is
    taken of them) and what they say, the lock's bytes, each plain file's sha256, the mismatches."""

    directory: Path
    manifest_bytes: bytes
    manifest: dict[str, Any]
    lock_bytes: bytes | None
    actual: dict[str, str]
    mismatches: list[Mismatch]
    built: tuple[str, ...] = ()
    """The wheels this build made, present, decided from the files
    (:mod:`sparkbuild.wheelhouse.wheel_roles`): judged by their machine code."""
    targets: tuple[str, ...] = ()
    """The archs the built wheels are judged at (the target's, the build record's, the
    labels')."""

    def error(self, hint: str) -> VerifyError | None:
        if not self.mismatches:
            return None
        named = "; ".join(m.describe() for m in self.mismatches)
        return VerifyError(f"{len(self.mismatches)} problem(s) in the wheelhouse: {named}",
                           where=str(self.directory), hint=hint)


def verify_files(directory: Path, *, target_tags: bool = True) -> CheckedFiles:
    """Every file of ``directory`` against its manifest and lock: the one integrity check,
    for ``verify`` and for ``install``.  The lock is read once, hashed and parsed from the
    same bytes; a manifest entry that leaves the directory is named and never read; each
    wheel's recorded size is its file's.  Each wheel with the manifest's sha256 is then read
    inside, its entries and the manifest's name and version of it
    (:mod:`sparkbuild.store.wheel_check`).  Which wheels this build made is decided from the
    files, and the target must name the archs they were built for
    (:mod:`sparkbuild.wheelhouse.wheel_roles`); with ``target_tags``, each built wheel must
    install on the declared platform and Python (:mod:`sparkbuild.wheelhouse.target_tags`;
    ``wheel`` says so of a foreign build in a note instead)."""
    raw, manifest = load_manifest(directory)
    actual, refused = plain_files(directory)
    lock_bytes = None
    if LOCK_NAME in actual:
        lock_bytes = (directory / LOCK_NAME).read_bytes()
        actual[LOCK_NAME] = sha256_bytes(lock_bytes)
    expected = expected_hashes(manifest)
    outside = [Mismatch(name, "leaves the wheelhouse directory: refused, not read")
               for name in sorted(expected) if leaves_directory(name)]
    skip = {m.file for m in outside} | {m.file for m in refused}
    listed = {k: v for k, v in expected.items() if k not in skip}
    same = {name for name, digest in listed.items() if actual.get(name) == digest}
    built = built_wheels(directory, manifest, set(actual) - skip, same)
    target = manifest_target(manifest)
    problems = [*outside, *refused,
                *(m for m in compare(listed, actual) if m.file not in skip),
                *size_mismatches(directory, manifest, set(actual) - skip),
                *check_lock(directory, actual, lock_bytes),
                *(Mismatch(file, problem) for file, problem
                  in manifest_wheel_problems(directory, manifest, same, built.files)),
                *(Mismatch(file, problem) for file, problem in built.problems),
                *(Mismatch(file, problem) for file in (built.files if target_tags else ())
                  if (problem := target_tag_problem(file, target.platform, target.python))
                  is not None)]
    return CheckedFiles(directory, raw, manifest, lock_bytes, actual, merged(problems),
                        built.files, built.targets)


def size_mismatches(directory: Path, manifest: dict[str, Any], present: set[str]
                    ) -> list[Mismatch]:
    """Each wheel whose size the manifest records and its file is not."""
    found = []
    for wheel in manifest["wheels"]:
        file, size = str(wheel["file"]), wheel.get("size")
        if size is None or file not in present:
            continue
        actual = (directory / file).lstat().st_size
        if actual != size:
            found.append(Mismatch(file, f"its size is {actual} bytes, manifest.json records "
                                        f"{size}"))
    return found


def compare(expected: dict[str, str], actual: dict[str, str]) -> list[Mismatch]:
    problems = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            problems.append(Mismatch(name, "missing"))
        elif name not in expected:
            problems.append(Mismatch(name, "not listed in manifest.json"))
        elif expected[name] != actual[name]:
            problems.append(Mismatch(name, f"sha256 {actual[name]} differs from the "
                                           f"manifest's {expected[name]}"))
    return problems


def check_lock(directory: Path, actual: dict[str, str], lock_bytes: bytes | None = None
               ) -> list[Mismatch]:
    """Each wheel's bytes must be one the lock allows, and each lock line must have a wheel.
    ``lock_bytes``: the lock as already read (and hashed); else it is read here."""
    lock_path = directory / LOCK_NAME
    try:
        data = lock_bytes if lock_bytes is not None else lock_path.read_bytes()
        locked = parse_lock(data.decode("utf-8"), where=str(lock_path))
    except (OSError, UnicodeDecodeError, VerifyError) as exc:
        return [Mismatch(LOCK_NAME, f"cannot be read: {exc}")]
    by_key = {canonicalize_name(item.name): item for item in locked}
    problems, seen = [], set()
    for name, digest in actual.items():
        if "/" in name or not name.endswith(".whl"):
            continue
        try:
            project, version, _build, _tags = parse_wheel_filename(name)
        except InvalidWheelFilename as exc:
            problems.append(Mismatch(name, f"not a valid wheel file name ({exc})"))
            continue
        item = by_key.get(project)
        seen.add(project)
        if item is None or not same_version(item.version, version) or (
                digest not in item.hashes):
            problems.append(Mismatch(name, "its sha256 is not the one requirements.lock pins"))
    problems += [Mismatch(LOCK_NAME, f"{item.name}=={item.version} has no wheel here")
                 for key, item in sorted(by_key.items()) if key not in seen]
    return problems


def merged(problems: Sequence[Mismatch]) -> list[Mismatch]:
    """One entry per file, its problems joined: a person reads each file's name once."""
    by_file: dict[str, list[str]] = {}
    for problem in problems:
        by_file.setdefault(problem.file, []).append(problem.problem)
    return [Mismatch(name, "; ".join(found)) for name, found in by_file.items()]


# -- GPU code --------------------------------------------------------------------------


def _is_shared_library(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


@dataclass(frozen=True)
class Readers:
    """How a library's machine code is read: cuobjdump unless a test passes its own."""

    list_archs: ArchLister
    read_functions: SassReader
    read_kernels: KernelReader

    def read(self, path: Path, *, with_code: bool) -> LibraryCode:
        """Its archs; with ``with_code`` (there are targets) its functions and kernels too."""
        with path.open("rb") as head:
            elf = head.read(4) == b"\x7fELF"
        # cuobjdump reads a file whole; a file that is no ELF (an empty one) holds no GPU code
        archs = tuple(self.list_archs(path)) if elf else ()
        functions = (tuple(as_facts(f) for f in self.read_functions(path))
                     if archs and with_code else ())
        kernels = tuple(self.read_kernels(path)) if with_code and elf else ()
        return LibraryCode(archs, functions, kernels)


def judged(wheel: str, member: str, code: LibraryCode, targets: Sequence[str]) -> LibraryArchs:
    """What is missing of ``targets``, what their machine code holds, each kernel's coverage."""
    wanted = {arch_digits(t): f"sm_{arch_digits(t)}" for t in targets}
    have = {arch_digits(a) for a in code.archs}
    missing = tuple(sorted(v for k, v in wanted.items() if k not in have)) if code.archs else ()
    sass: tuple[tuple[str, ...], int, tuple[str, ...], tuple[str, ...]] = ((), 0, (), ())
    if code.archs and targets:
        sass = machine_code(code.functions, targets)
    covered = coverage_at(code.kernels, targets) if code.kernels else ()
    accepted = unreachable_stubs(UNREACHABLE_RULES, _project(wheel), member, targets, sass[3])
    return LibraryArchs(wheel, member, code.archs, missing, sass[1], sass[2], sass[0],
                        sass[3], covered, tuple(accepted.items()))


def _project(wheel: str) -> str:
    """The wheel file's project, normalized; ``""`` for a name that is not a wheel's."""
    try:
        return str(parse_wheel_filename(wheel)[0])
    except InvalidWheelFilename:
        return ""


def _library_code(path: Path, readers: Readers, *, with_code: bool,
                  kept_code: CodeCache | None) -> LibraryCode:
    read = functools.partial(readers.read, with_code=with_code)
    if kept_code is None:
        return read(path)
    return kept_code.library_code(path, read, scope="archs+functions+kernels" if with_code
                                   else "archs")


def library_archs(wheel: Path, targets: Sequence[str], list_archs: ArchLister,
                  read_functions: SassReader, read_kernels: KernelReader | None = None,
                  kept_code: CodeCache | None = None) -> list[LibraryArchs]:
    """cuobjdump's architectures of each shared library in ``wheel``, what is missing, what
    the machine code for the targets holds, and each kernel's coverage per target.
    ``kept_code``: ``wheel``'s facts of libraries by their bytes (never ``verify``'s)."""
    readers = Readers(list_archs, read_functions, read_kernels or _default_kernels)
    with_code = bool(targets)
    found = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for info in sorted((i for i in archive.infolist() if _is_shared_library(i.filename)),
                           key=lambda i: i.filename):
            path = Path(tmp) / _scratch_name(info.filename)  # one at a time, never a path
            with open_member(archive, info) as source, path.open("wb") as copy:
                shutil.copyfileobj(source, copy)
            code = _library_code(path, readers, with_code=with_code, kept_code=kept_code)
            found.append(judged(wheel.name, info.filename, code, targets))
            path.unlink()
    return found


def _scratch_name(member: str) -> str:
    """The file name a library is read under: its own, unless that could not be one."""
    name = PurePosixPath(member).name
    return "library.so" if unsafe_characters(name) or "\\" in name else name


def gpu_libraries(built: Sequence[Path], targets: Sequence[str], *,
                  list_archs: ArchLister | None = None,
                  read_functions: SassReader | None = None,
                  read_kernels: KernelReader | None = None,
                  kept_code: CodeCache | None = None,
                  ) -> tuple[list[LibraryArchs], list[str]]:
    """Every shared library of the built wheels with its GPU code; and notes.
    ``kept_code``: only ``wheel`` passes one (:mod:`sparkbuild.toolchain.kept_sass`)."""
    libraries: list[LibraryArchs] = []
    notes: list[str] = []
    for wheel in built:
        try:
            libraries += library_archs(
                wheel, targets, list_archs or _default_lister,
                read_functions or (kept_code.read_functions if kept_code else _default_reader),
                read_kernels, kept_code)
        except READ_ERRORS as exc:
            notes.append(f"{wheel.name} is not a readable zip ({exc}): GPU code not listed")
    return libraries, notes


def check_archs(result: VerifyResult, built: Sequence[Path], list_archs: ArchLister,
                read_functions: SassReader, known: Sequence[LibraryArchs] | None = None,
                read_kernels: KernelReader | None = None) -> None:
    if known is not None:
        result.libraries += known
    else:
        libraries, notes = gpu_libraries(built, result.target_archs, list_archs=list_archs,
                                         read_functions=read_functions,
                                         read_kernels=read_kernels)
        result.libraries += libraries
        result.notes += notes
    for module in codeless_modules([(lib.wheel, lib.library, lib.archs)
                                    for lib in result.libraries]):
        result.mismatches.append(Mismatch(
            f"{JIT_CACHE_PROJECT}:{module}",
            f"flashinfer module {module} holds no GPU machine code for "
            f"{', '.join(result.target_archs) or 'the target'}: its kernels were compiled "
            "for no target arch (the moe_utils class, flashinfer#5237/#5238)"))
    coded = sorted({arch for lib in result.libraries for arch in lib.archs})
    if not result.target_archs and coded:
        result.mismatches.append(Mismatch(
            ", ".join(sorted({lib.wheel for lib in result.libraries if lib.archs})),
            f"holds GPU machine code ({', '.join(coded)}), but no target arch is named: its "
            "kernels were judged for nothing"))
    if not result.libraries:
        result.notes.append("the built wheels hold no shared library: no GPU code to check")
    elif result.target_archs and not any(lib.archs for lib in result.libraries):
        result.mismatches.append(Mismatch(
            ", ".join(sorted({lib.wheel for lib in result.libraries})),
            f"no shared library holds GPU machine code, but the target is "
            f"{', '.join(result.target_archs)}"))


@dataclass
class JudgedJitCache(Record):
    """``flashinfer-aot`` with a prebuilt jit-cache: the wheel taken, every kernel judged
    as verify judges a built one."""

    json_order: ClassVar[tuple[str, ...]] = ("...", "ok", "libraries", "codeless_modules", "notes")

    aot: AotResult = field(metadata=as_json(flatten=True))
    targets: tuple[str, ...] = field(metadata=as_json(skip=True))
    libraries: list[LibraryArchs]
    codeless: list[str] = field(metadata=as_json("codeless_modules"))
    notes: list[str] = field(default_factory=list)
    """Wheels whose GPU code could not be listed: refused, since nothing was judged."""
    source: str | None = field(default=None, metadata=as_json(skip=True))
    """The prebuilt wheel as the recipe names it (a refused wheel is never placed)."""
    placed: bool = field(default=True, metadata=as_json(skip=True))
    """Whether the wheel is in ``--out`` (:func:`take_judged_jit_cache` places only one
    that passes)."""
    allow_jit: bool = field(default=False, metadata=as_json(skip=True))
    """The recipe's ``[target] allow_jit``: a PTX-only kernel is accepted, as ``wheel``
    accepts it."""

    def json_extra(self) -> dict[str, Any]:
        return {"wheel": self.aot.wheel if self.placed else None, "ok": self.error is None}

    def summary(self) -> list[str]:
        lines = self.aot.summary()
        if not self.placed:
            lines[1:2] = ["  refused: nothing written to --out"]
        for lib in self.libraries:
            kernels = "; ".join(c.describe() for c in lib.coverage)
            lines.append(f"  {lib.library}: {', '.join(lib.archs) or 'no GPU code'}; {kernels}")
            lines += [f"    UNREACHABLE {escaped(line)}" for line in lib.unreachable_lines()]
        return lines

    @property
    def error(self) -> SparkbuildError | None:
        refused = [f"{lib.library} ({found.describe(width=160, shown=NAMED_KERNELS)})"
                   for lib in self.libraries
                   for found in lib.refusals(allow_jit=self.allow_jit)]
        refused += [f"{module}: no GPU machine code" for module in self.codeless]
        refused += [escaped(note) for note in self.notes]
        if not refused:
            return None
        return VerifyError(f"the prebuilt jit-cache has {len(refused)} module(s) the target "
                           f"{', '.join(self.targets)} cannot load as built: "
                           + "; ".join(refused), where=self.source or str(self.aot.wheel),
                           hint="take a jit-cache built for the target, or build the modules")


def judge_jit_cache(aot: AotResult, targets: Sequence[str], *,
                    allow_jit: bool = False) -> JudgedJitCache:
    """Every kernel of a prebuilt jit-cache's modules judged for ``targets`` by the kernel
    policy (``allow_jit``: PTX only is accepted)."""
    libraries, notes = gpu_libraries([aot.wheel], targets)
    codeless = codeless_modules([(lib.wheel, lib.library, lib.archs) for lib in libraries])
    return JudgedJitCache(aot, tuple(targets), libraries, codeless, notes,
                          allow_jit=allow_jit)


def take_judged_jit_cache(recipe: Recipe, cache_root: Path, *, out: Path,
                          offline: bool) -> JudgedJitCache:
    """``flashinfer-aot`` with a prebuilt jit-cache: the wheel taken into a staging directory
    beside ``out`` (``.OUT.partial-PID``), judged there, and renamed into ``out`` only when
    every module passes.  A refusal, an error or an interruption leaves ``out`` as it was;
    what a killed run left beside it is removed by the next."""
    from sparkbuild.flashinfer.jit_cache import take_recipe_jit_cache

    out = Path(os.path.normpath(out.absolute()))
    if not out.name:
        raise DestinationError("--out names no directory of its own", where=str(out),
                               hint="name a directory the wheel goes into")
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise DestinationError("--out exists and is not a directory", where=shown(str(out)),
                               hint="choose a directory for the wheel")
    sweep_partials_beside(out)
    staging = partial_beside(out)
    given = recipe.flashinfer.jit_cache
    source = shown(str(given.url or given.path)) if given is not None else None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        taken = take_recipe_jit_cache(recipe, cache_root, out=staging, offline=offline)
        judgement = judge_jit_cache(taken, recipe.target.cuda_archs,
                                    allow_jit=recipe.target.allow_jit)
        judgement.source = source
        judgement.placed = judgement.error is None
        if judgement.placed:
            judgement.aot = dataclasses.replace(taken, wheel=_placed(taken.wheel, out))
        return judgement
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _placed(staged: Path, out: Path) -> Path:
    """``staged`` renamed into ``out`` (one rename: ``out`` is beside the staging directory)."""
    target = out / staged.name
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise DestinationError(f"{shown(staged.name)} exists in --out and is not a file",
                               where=shown(str(target)), hint="remove it, or choose another --out")
    out.mkdir(exist_ok=True)
    staged.replace(target)
    fsync_dir(out)
    return target


def check_requirements(result: VerifyResult, directory: Path, manifest: dict[str, Any]
                       ) -> list[Mismatch]:
    """The lock against every wheel's Requires-Dist on the target, and the torch shipped."""
    try:
        locked = parse_lock((directory / LOCK_NAME).read_text(encoding="utf-8"), where=LOCK_NAME)
    except (OSError, VerifyError):
        return []  # check_lock names the lock
    versions = {str(canonicalize_name(item.name)): item.version for item in locked}
    report = check_wheelhouse_requirements(directory, manifest, versions)
    result.requirements = report.to_dict()
    result.notes += report.notes()
    return [Mismatch(file, problem) for file, problem in report.mismatches()]


def _check_agreement(result: VerifyResult, directory: Path, manifest: dict[str, Any],
                     actual: dict[str, str]) -> list[Mismatch]:
    """pylock.toml and sbom.cdx.json against the wheels present (standards.py)."""
    result.agreement = check_standards(directory, manifest, actual)
    return [Mismatch(file, problem) for item in result.agreement
            for file, problem in item.problems]


def _default_lister(path: Path) -> list[str]:
    from sparkbuild.toolchain.sass import list_cuda_archs

    return list_cuda_archs(path)


def _default_reader(path: Path) -> list[FunctionFacts]:
    from sparkbuild.toolchain.sass_library import read_library_facts

    return read_library_facts(path)


def _default_kernels(path: Path) -> list[KernelCode]:
    from sparkbuild.toolchain.sass import read_kernels

    return read_kernels(path)


def unlisted_jit_kernels(result: VerifyResult, manifest: dict[str, Any]) -> list[Mismatch]:
    """With ``allow_jit``, every PTX-only kernel must be one the manifest lists as JIT."""
    if not result.allow_jit:
        return []
    listed = {(str(k.get("library")), str(k.get("target")), str(k.get("kernel")))
              for k in manifest.get("jit_kernels", []) if isinstance(k, dict)}
    return [Mismatch(MANIFEST_NAME, f"{lib.library}: the PTX-only kernel {name} (at "
                     f"{target}) is not listed in jit_kernels")
            for lib in result.libraries for target, name, _ in lib.kernels_of(PTX_ONLY)
            if (lib.library, target, name) not in listed]


def verify_wheelhouse(directory: Path, *, list_archs: ArchLister | None = None,
                      read_functions: SassReader | None = None,
                      libraries: Sequence[LibraryArchs] | None = None,
                      read_kernels: KernelReader | None = None,
                      target_tags: bool = True) -> VerifyResult:
    """Re-hash ``directory`` against its manifest and lock; list the built wheels' GPU code
    and judge their machine code for the targets.  ``libraries``: already read (``wheel``
    reads them once, for the manifest and for this check of the staged wheelhouse);
    ``target_tags`` False: a built wheel need not install on the declared target
    (``wheel``'s check of a build for another machine, which its note names)."""
    checked = verify_files(directory, target_tags=target_tags)
    manifest, actual = checked.manifest, checked.actual
    result = VerifyResult(directory, len(actual) + 1, checked.targets,
                          allow_jit=manifest_target(manifest).allow_jit)
    result.stand_ins = stand_ins_of(manifest)
    result.fingerprint = manifest_fingerprint(checked.manifest_bytes)
    inside = {**manifest, "wheels": [w for w in manifest["wheels"] if str(w["file"]) in actual]}
    result.mismatches += merged(checked.mismatches
                                + check_requirements(result, directory, inside)
                                + _check_agreement(result, directory, manifest, actual))
    built = [directory / file for file in checked.built]
    check_archs(result, built, list_archs or _default_lister,
                read_functions or _default_reader, libraries, read_kernels)
    result.mismatches += unlisted_jit_kernels(result, manifest)
    return result
