"""The pinned wheelhouse: everything an air-gapped Spark needs to install the build.

``out/`` holds the built wheels (deterministic, relabelled ``+sm121.<series hash>``), the
recipe's pins byte-identical to the index's, the runtime closure for the target platform,
``requirements.lock`` with one exact ``--hash`` per file, a PEP 503 ``simple/`` index of
the same files, and ``manifest.json`` saying where every byte came from.  A pin that
contradicts a requirement of any wheel here is refused unless it carries ``override``; the
manifest and the lock's header record every override (the pin, what it replaced, why).  No
file may be a version ``recipes/known_bad.toml`` lists.

Everything is written into a staging directory beside ``out`` and renamed into place at the
end (:mod:`sparkbuild.wheelhouse.destination`), manifest last: a run killed at any point
leaves no directory that looks like a complete wheelhouse. Before the rename, the staged
wheelhouse goes through ``verify`` (:mod:`sparkbuild.wheelhouse.verify`): bytes, lock and
the built wheels' machine code for the target. A library with a trap-only kernel, or a
kernel with no code for the target, or a PTX-only kernel (unless the recipe sets
``allow_jit``), fails the run and leaves no wheelhouse; the manifest records each library's
block-scaled MMA count, trap-only kernels and coverage per kernel, and lists the PTX-only
kernels it accepted as ``jit_kernels``. Pins and closure files pass through
the content-addressed cache, so a second run (``--offline``) takes them from there
(:mod:`sparkbuild.wheelhouse.closure` fetches them).
"""

from __future__ import annotations

import html
import platform as py_platform
import shlex
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.requirements import Requirement
from packaging.tags import platform_tags
from packaging.utils import parse_wheel_filename

from sparkbuild import __version__
from sparkbuild.console import step, warn
from sparkbuild.errors import (
    SparkbuildError,
    VerifyError,
)
from sparkbuild.recipe import check_known_bad
from sparkbuild.records import Record, as_json
from sparkbuild.store.cache import Cache
from sparkbuild.store.files import write_text_atomic
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.phases import phase
from sparkbuild.toolchain.kept_sass import CodeReads
from sparkbuild.wheelhouse.closure import (
    Fetching,
    Outside,
    RealOutside,
    WheelhouseFile,
    fetch_closure,
    fetch_pin,
)
from sparkbuild.wheelhouse.destination import check_destination, staging_dir, swap_into_place
from sparkbuild.wheelhouse.lock import (
    LOCK_NAME,
    ClosureTarget,
    LockedRequirement,
    render_lock,
)
from sparkbuild.wheelhouse.manifest import (
    MANIFEST_NAME,
    build_manifest,
    render_manifest,
)
from sparkbuild.wheelhouse.overrides import (
    Override,
    merge_overrides,
    override_comments,
    pin_conflicts,
    recorded_demands,
    settle,
    target_environment,
)
from sparkbuild.wheelhouse.requirements_check import (
    CLOSURE_LEFT_OUT,
    read_dist,
    settle_wheelhouse,
    wheel_demands,
)
from sparkbuild.wheelhouse.sbom import WHEEL_SBOM, BuildFacts, wheel_sbom
from sparkbuild.wheelhouse.standards import write_standards
from sparkbuild.wheelhouse.target_tags import fits_platform
from sparkbuild.wheelhouse.verify import (
    LibraryArchs,
    gpu_libraries,
    verify_wheelhouse,
)
from sparkbuild.wheelhouse.wheel_rewrite import (
    local_label,
    metadata_field,
    normalize_wheel,
    source_date_epoch,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from sparkbuild.recipe import Recipe
    from sparkbuild.toolchain.kept_sass import CodeCache
    from sparkbuild.wheelhouse.verify import ArchLister, KernelReader, SassReader

SIMPLE_DIR = "simple"


# -- results ---------------------------------------------------------------------------


@dataclass
class WheelhouseResult(Record):
    json_order: ClassVar[tuple[str, ...]] = ("wheelhouse", "local_label", "target")

    out: Path = field(metadata=as_json("wheelhouse"))
    files: list[WheelhouseFile] = field(metadata=as_json("wheels"))
    target: ClosureTarget = field(metadata=as_json(dump=ClosureTarget.key))
    label: str = field(metadata=as_json("local_label"))
    manifest: dict[str, Any] = field(default_factory=dict, metadata=as_json(skip=True))
    overrides: list[Override] = field(default_factory=list)
    libraries: list[LibraryArchs] = field(default_factory=list)
    """The built wheels' shared libraries and their machine code for the target."""
    note: str | None = field(default=None, metadata=as_json(skip=True))
    """Says when the target platform is not the machine that built the wheelhouse."""
    machine_code: CodeReads | None = None
    """How many of ``libraries`` were read with cuobjdump, how many came from the cache."""

    def summary(self) -> list[str]:
        counts = {role: sum(f.role == role for f in self.files)
                  for role in ("built", "pin", "closure")}
        lines = [f"wheelhouse {self.out} for {self.target.describe()}: {counts['built']} built, "
                 f"{counts['pin']} pinned, {counts['closure']} dependencies"]
        lines += [f"  {f.role:<7} {f.file}  sha256:{f.sha256}" for f in self.files
                  if f.role != "closure"]
        lines += [f"  OVERRIDE {o.describe()}" for o in self.overrides]
        lines += [f"  GPU code {lib.library}: {', '.join(lib.sass_archs) or 'none'}, "
                  f"{lib.block_scaled_mma} block-scaled MMA, "
                  f"{len(lib.trap_only_kernels)} trap-only kernel(s)"
                  + (f", {len(lib.unreachable_kernels)} guard stub(s) never launched at the "
                     "target (named before the compile)" if lib.unreachable else "")
                  + "".join(f"; kernels {c.describe()}" for c in lib.coverage)
                  for lib in self.libraries]
        if self.machine_code and self.machine_code.libraries:
            lines.append(f"  {self.machine_code.line()}")
        lines += [f"  JIT kernel ({k['target']} from {k['ptx_arch']}) {k['library']}: "
                  f"{k['kernel']}" for k in self.manifest.get("jit_kernels", [])]
        if self.note:
            lines.append(f"  {self.note}")
        python = shlex.quote(sys.executable or "python3")  # a command that works as copied
        lines.append(f"  install: {python} -m sparkbuild install {self.out} --venv VENV")
        return lines

    @property
    def error(self) -> SparkbuildError | None:
        return None


# -- small helpers ---------------------------------------------------------------------


def _built_file(wheel: Path, staging: Path, label: str, epoch: int,
                facts: BuildFacts) -> WheelhouseFile:
    """The built wheel, rewritten: deterministic, relabelled, its SBOM under
    ``.dist-info/sboms/`` (PEP 770); its requirements as built."""
    normalized = normalize_wheel(wheel, staging, label=label, epoch=epoch, extra=lambda name,
                                 version: {WHEEL_SBOM: wheel_sbom(facts, name, version)})
    return WheelhouseFile(normalized.path.name, normalized.name, normalized.version,
                          normalized.sha256, normalized.size, "built")


def wheel_metadata(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist()
                 if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        return archive.read(names[0]) if names else b""


def runtime_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist without extras: what installing it pulls in."""
    found = []
    for line in wheel_metadata(wheel).decode("utf-8").split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() != "requires-dist":
            continue
        requirement = Requirement(value.strip())
        if requirement.marker is None or "extra" not in str(requirement.marker):
            found.append(value.strip())
    return found


# -- index, lock and manifest ----------------------------------------------------------


def _page(title: str, links: Sequence[str]) -> str:
    body = "\n".join(links)
    return (f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" '
            f'content="1.0"><title>{html.escape(title)}</title></head><body>\n'
            f"{body}\n</body></html>\n")


def write_simple_index(staging: Path, files: Sequence[WheelhouseFile]) -> list[Path]:
    """A PEP 503 index of the wheelhouse: ``pip --index-url file://DIR/simple`` works."""
    root = staging / SIMPLE_DIR
    projects: dict[str, list[WheelhouseFile]] = {}
    for item in files:
        projects.setdefault(item.key, []).append(item)
    written = [root / "index.html"]
    root.mkdir(parents=True, exist_ok=True)
    links = [f'<a href="{html.escape(p)}/">{html.escape(p)}</a>' for p in sorted(projects)]
    written[0].write_text(_page("Simple index", links), encoding="utf-8")
    for project, items in sorted(projects.items()):
        (root / project).mkdir()
        anchors = [_anchor(staging / item.file, item) for item in sorted(items, key=_by_file)]
        page = root / project / "index.html"
        page.write_text(_page(f"Links for {project}", anchors), encoding="utf-8")
        written.append(page)
    return written


def _by_file(item: WheelhouseFile) -> str:
    return item.file


def _anchor(path: Path, item: WheelhouseFile) -> str:
    requires = metadata_field(wheel_metadata(path), "Requires-Python")
    attribute = f' data-requires-python="{html.escape(requires)}"' if requires else ""
    href = html.escape(f"../../{item.file}#sha256={item.sha256}")
    return f'<a href="{href}"{attribute}>{html.escape(item.file)}</a>'


def wheelhouse_lock(files: Sequence[WheelhouseFile]) -> list[LockedRequirement]:
    """One requirement per project, with the exact hash of each of its files here."""
    merged: dict[tuple[str, str], list[str]] = {}
    names: dict[str, str] = {}
    for item in files:
        merged.setdefault((item.key, item.version), []).append(item.sha256)
        names.setdefault(item.key, item.name)
    return [LockedRequirement(names[key], version, tuple(sorted(hashes)))
            for (key, version), hashes in sorted(merged.items())]


# -- the stage -------------------------------------------------------------------------


def _warn_foreign(files: Sequence[WheelhouseFile], target: ClosureTarget) -> None:
    """A built wheel for another machine than the closure's cannot install beside it."""
    if not target.platform:
        return
    for item in files:
        if not fits_platform(item.file, target.platform):
            built_for = ".".join(sorted({t.platform for t in parse_wheel_filename(item.file)[3]}))
            warn(f"{item.file} is built for {built_for}, the closure for {target.platform}")


def host_note(recipe_platform: str, built: Sequence[str], target: ClosureTarget) -> str | None:
    """One line when the recipe's platform is not this machine's (the demo on x86_64 for an
    aarch64 Spark), naming the built wheels that will not install there; else None."""
    if not recipe_platform or recipe_platform in set(platform_tags()):
        return None
    machine = py_platform.machine() or sysconfig.get_platform()
    foreign = [name for name in built if not fits_platform(name, recipe_platform)]
    what = (f"{', '.join(foreign)} installs only on {machine}, not there" if foreign
            else "the built wheels are platform-independent")
    closure = ("" if target.platform else
               f"; the dependencies are for this machine (--platform {recipe_platform} for "
               "the target's)")
    return (f"note: the recipe targets {recipe_platform}, this machine is {machine}: "
            f"{what}{closure}")


@dataclass(frozen=True, kw_only=True)
class WheelhouseInputs:
    """What one wheelhouse is written from: the recipe, the build's facts and where the
    closure comes from, passed whole to :func:`write_wheelhouse`."""

    recipe: Recipe
    source: dict[str, Any]
    patches: list[dict[str, Any]]
    built_wheels: list[Path]
    build_settings: dict[str, Any]
    """The manifest's ``build`` (:func:`sparkbuild.compile.build_record.build_settings`)."""
    cache_root: Path
    offline: bool
    platform: str | None
    """The closure's platform; None: this machine's."""
    toolchain: dict[str, str | None] | None = None
    """nvcc, cmake, ninja, gcc, torch and python versions; probed when None."""
    closure: bool = True
    """False (``--no-closure``): the built wheels and the pins only."""
    vendored: Sequence[Mapping[str, Any]] = ()
    """The sources built into the wheels (name, kind, url, ref, commit, sha256, patched),
    for the SBOMs."""
    bundled_closure: Sequence[dict[str, Any]] | None = None
    """The closure files a bundle carried (offline, from the cache)."""
    kept_code: CodeCache | None = None
    """The machine code facts of libraries by their bytes, so that a library a rebuild did
    not change is not read again (:mod:`sparkbuild.toolchain.kept_sass`; ``wheel`` passes
    one, ``verify`` never does)."""


@dataclass(frozen=True, kw_only=True)
class WheelhouseReaders:
    """What reaches outside the process: the index and cuobjdump, unless a test passes its
    own (each None: the real one)."""

    outside: Outside | None = None
    list_archs: ArchLister | None = None
    read_functions: SassReader | None = None
    read_kernels: KernelReader | None = None


def write_wheelhouse(out: Path, inputs: WheelhouseInputs,
                     readers: WheelhouseReaders | None = None) -> WheelhouseResult:
    """Write the wheelhouse ``out`` from ``inputs`` (see the module docstring)."""
    readers = readers or WheelhouseReaders()
    outside = readers.outside or RealOutside()
    recipe, closure, offline = inputs.recipe, inputs.closure, inputs.offline
    source, patches, kept_code = inputs.source, inputs.patches, inputs.kept_code
    check_destination(out)
    target = ClosureTarget(inputs.platform, recipe.target.python if inputs.platform else None)
    label = local_label(recipe.target.cuda_archs, patches)
    epoch = source_date_epoch(source)
    cache = Cache(inputs.cache_root)
    toolchain = inputs.toolchain or outside.toolchain()
    facts = BuildFacts(recipe.package, recipe.name, epoch, source=source, patches=patches,
                       vendored=inputs.vendored, toolchain=toolchain,
                       cuda_archs=recipe.target.cuda_archs, label=label)
    with staging_dir(out) as staging:
        step(f"writing the wheelhouse {out} (label +{label})")
        with phase("wheel rewrite"):
            built = [_built_file(wheel, staging, label, epoch, facts)
                     for wheel in inputs.built_wheels]
        _warn_foreign(built, target)
        env = target_environment(target.platform, target.python)
        direct = [d for w in built for d in wheel_demands(read_dist(staging / w.file))]
        early = settle(recipe.pins, pin_conflicts(recipe.pins, direct + recorded_demands(recipe),
                                                  env), where=str(recipe.path))
        with cache.locked():
            pins = [fetch_pin(p, cache, staging, outside, offline=offline) for p in recipe.pins]
            requirements = [r for w in built for r in runtime_requirements(staging / w.file)]
            skip = {f.key for f in (*built, *pins)}
            # closure=False (--no-closure): the built wheels and the pins only; the node
            # already holds the runtime dependencies (NVIDIA's containers, --no-deps).
            closure_files = fetch_closure(requirements, recipe.pins, skip, target,
                                          Fetching(cache, staging, outside, offline),
                                          bundled=inputs.bundled_closure) if closure else []
        files = sorted((*built, *pins, *closure_files), key=_by_file)
        for item in files:
            check_known_bad(item.name, item.version, what=f"{item.role} wheel", where=item.file)
        late = settle_wheelhouse([read_dist(staging / f.file) for f in files], recipe.pins,
                                 env, where=str(recipe.path), closure_left_out=not closure)
        note = host_note(recipe.target.platform, [f.file for f in built], target)
        result = WheelhouseResult(out, files, target, label, note=note,
                                  overrides=merge_overrides(early, late))
        extra = _write_lock_and_index(staging, files, recipe, target, result.overrides)
        extra.update(write_standards(staging, files, facts, target))
        step("reading the machine code of the built wheels (cuobjdump)")
        with phase("machine code"):
            result.libraries, _notes = gpu_libraries(
                [staging / f.file for f in built], recipe.target.cuda_archs,
                list_archs=readers.list_archs, read_functions=readers.read_functions,
                read_kernels=readers.read_kernels, kept_code=kept_code)
        count = len(result.libraries)
        result.machine_code = kept_code.reads() if kept_code else CodeReads(count, count, 0)
        result.manifest = build_manifest(
            recipe, facts, target=target.key(), build_settings=inputs.build_settings,
            wheels=[f.to_dict() for f in files],
            overrides=[o.to_dict() for o in result.overrides],
            libraries=[lib.to_dict() for lib in result.libraries], files=extra)
        result.manifest["closure"] = "included" if closure else CLOSURE_LEFT_OUT
        result.manifest["jit_kernels"] = [k for lib in result.libraries
                                          for k in lib.jit_kernels()]
        write_text_atomic(staging / MANIFEST_NAME, render_manifest(result.manifest))
        with phase("verify"):
            _verify_staged(staging, out, result.libraries)
        swap_into_place(staging, out)
    return result


def _verify_staged(staging: Path, out: Path, libraries: Sequence[LibraryArchs]) -> None:
    """``verify`` on the staged wheelhouse; its failure leaves no wheelhouse at ``out``."""
    step("verifying the staged wheelhouse")
    # a build for another machine than this one's is the host note's to say (host_note)
    error = verify_wheelhouse(staging, libraries=libraries, target_tags=False).error
    if error is not None:
        raise VerifyError(
            f"the wheelhouse fails verify, so it was not written: {error.what}",
            where=str(out),
            hint="a trap-only kernel is a feature guard that compiled the kernel away: build "
            "for 12.1a (cuda_archs under [target]); a kernel with no code or PTX only means "
            "the arch lists did not select the target (`allow_jit = true` under [target] "
            "accepts PTX-only kernels, JIT-compiled on every node at first use)",
        )


def _write_lock_and_index(staging: Path, files: Sequence[WheelhouseFile], recipe: Recipe,
                          target: ClosureTarget, overrides: Sequence[Override]
                          ) -> dict[str, str]:
    comments = [f"written by sparkbuild {__version__}: the wheelhouse of {recipe.package} "
                f"for {target.describe()}",
                "install with: pip install --no-index --find-links DIR --require-hashes "
                f"-r DIR/{LOCK_NAME}", *override_comments(overrides)]
    lock = staging / LOCK_NAME
    write_text_atomic(lock, render_lock(wheelhouse_lock(files), comments))
    written = [lock, *write_simple_index(staging, files)]
    return {p.relative_to(staging).as_posix(): sha256_file(p) for p in written}
