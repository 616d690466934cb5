"""Read NVIDIA machine code (SASS) with cuobjdump.

Which GPU architectures an object, cubin, fatbin, executable or shared library carries
(:func:`list_cuda_archs`), and which instructions its kernels use (:func:`read_sass`):
counts, FP64 instructions, the E2M1 conversion.  cuobjdump comes from the
``nvidia-cuda-cuobjdump`` wheel (``nvidia/cu13/bin/cuobjdump`` in site-packages), a CUDA
toolkit, or ``PATH``; ``cuobjdump -sass`` also needs nvdisasm (``nvidia-cuda-nvdisasm``).
Parsing is pure and separate from running, so it is unit-tested on captured text.

:func:`summarize` judges the code for one architecture the way a person reading the SASS
would: how many block-scaled MMA instructions the FP4 GEMMs got (``OMMA.SF...`` on SM12x),
and which kernels are *trap-only*.  CUTLASS and vLLM guard arch-specific kernel bodies with
feature macros and compile, for any other target, a body that prints an error and traps;
nvcc exits 0 either way, so only the machine code shows that a kernel is empty.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sparkbuild.errors import CommandFailed, ToolchainError
from sparkbuild.proc import Streams, run
from sparkbuild.records import EMPTY, Record, as_json
from sparkbuild.settings import CUOBJDUMP, NVDISASM, Setting

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

FP64_OPCODES = frozenset({"DADD", "DMUL", "DFMA", "DSETP", "DSET", "DMNMX", "DMMA"})
"""Opcodes that are FP64 arithmetic by themselves."""

CONVERSION_OPCODES = frozenset({"F2F", "F2I", "I2F", "FRND", "F2IP", "I2FP"})
"""Opcodes that are FP64 when one of their type modifiers is F64."""

MEMORY_OPCODES = frozenset({
    "LD", "ST", "LDG", "STG", "LDS", "STS", "LDSM", "STSM", "LDGSTS", "ATOM", "ATOMG",
    "ATOMS", "RED", "UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UBLKCP", "UBLKRED", "TLD",
    "TEX", "TLDS", "TLD4", "SULD", "SUST", "SUATOM", "SURED",
})
"""Opcodes that read or write global, shared or texture memory: a kernel's real work.
Local memory (``LDL``/``STL``) and constants (``LDC``) are not here: printf's arguments
pass through them."""

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ARCH_HEADER = re.compile(r"^\s*arch\s*=\s*(sm_\w+)")
_CODE_FOR = re.compile(r"^\s*code for\s+(sm_\w+)")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+([^;]*?)\s*;")
_ELF_ENTRY = re.compile(r"^ELF file\s+\d+:\s+(\S+)", re.MULTILINE)
_PTX_ENTRY = re.compile(r"^PTX file\s+\d+:\s+(\S+)", re.MULTILINE)
_ARCH_IN_NAME = re.compile(r"\.(sm_\d+[a-z]?)\.(?:cubin|ptx)$")
_NO_DEVICE_CODE = "does not contain device code"


@dataclass(frozen=True)
class Instruction:
    address: int
    opcode: str
    """The base opcode: ``F2FP`` of ``F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C``."""
    modifiers: tuple[str, ...]
    operands: str
    predicate: str | None = None

    @property
    def mnemonic(self) -> str:
        return ".".join((self.opcode, *self.modifiers))

    @property
    def is_fp64(self) -> bool:
        if self.opcode in FP64_OPCODES:
            return True
        if self.opcode in CONVERSION_OPCODES and "F64" in self.modifiers:
            return True
        return self.opcode == "MUFU" and any(m.endswith("64H") for m in self.modifiers)

    @property
    def is_e2m1_conversion(self) -> bool:
        """A hardware conversion to or from FP4 E2M1 (``F2FP...E2M1``, ``F2F...E2M1``); an
        FP4 MMA (``OMMA.SF...E2M1.E2M1...``) names the type too, but converts nothing."""
        return "E2M1" in self.modifiers and not self.opcode.endswith("MMA")

    @property
    def is_padding(self) -> bool:
        return self.opcode == "NOP"

    def is_self_branch(self) -> bool:
        """``BRA`` to its own address: the loop ptxas puts after a kernel's last ``EXIT``."""
        return self.opcode == "BRA" and _branch_target(self.operands) == self.address


def _branch_target(operands: str) -> int | None:
    match = re.fullmatch(r"\s*(0x[0-9a-fA-F]+)\s*", operands)
    return int(match.group(1), 16) if match else None


@dataclass(frozen=True)
class SassFunction:
    name: str
    arch: str | None
    instructions: tuple[Instruction, ...]

    @property
    def body(self) -> tuple[Instruction, ...]:
        """The instructions without the closing self-branch and the NOP padding."""
        end = len(self.instructions)
        while end and (
            self.instructions[end - 1].is_padding or self.instructions[end - 1].is_self_branch()
        ):
            end -= 1
        return self.instructions[:end]

    @property
    def count(self) -> int:
        return len(self.body)

    def opcode_counts(self) -> Counter[str]:
        return Counter(instruction.opcode for instruction in self.body)

    def fp64_instructions(self) -> list[Instruction]:
        return [instruction for instruction in self.body if instruction.is_fp64]

    def e2m1_instructions(self) -> list[Instruction]:
        return [instruction for instruction in self.body if instruction.is_e2m1_conversion]

    def block_scaled_mma(self) -> int:
        """Block-scaled MMA instructions (``OMMA.SF...``, ``QMMA.SF...``): FP4/FP8 GEMM work."""
        return sum(1 for i in self.body if i.opcode.endswith("MMA") and "SF" in i.modifiers)

    @property
    def is_trap_only(self) -> bool:
        """It traps (``BPT.TRAP``) and touches no global, shared or texture memory and no
        tensor core: the body a feature guard leaves for a target without the feature
        (printf's call and the trap are all there is)."""
        traps = any(i.opcode == "BPT" and "TRAP" in i.modifiers for i in self.body)
        return traps and not self._does_work

    @property
    def is_guard_stub(self) -> bool:
        """A kernel that only prints and traps or exits: no memory access, no MMA.

        A superset of :attr:`is_trap_only`: CUTLASS 4.7 guards compile an unsupported kernel
        to printf + ``BPT.TRAP``, CUTLASS 4.2 to printf + ``EXIT`` -- a kernel that silently
        does nothing.  Device functions (they end in ``RET``, no ``EXIT``) are not kernels."""
        if self.is_trap_only:
            return True
        body = self.body
        if not any(i.opcode == "EXIT" for i in body):
            return False
        return any(i.opcode == "CALL" for i in body) and not self._does_work

    @property
    def _does_work(self) -> bool:
        """It touches global, shared or texture memory, or a tensor core."""
        return any(i.opcode in MEMORY_OPCODES or i.opcode.endswith("MMA") for i in self.body)

    def facts(self) -> FunctionFacts:
        return FunctionFacts(self.name, self.arch, self.count, self.block_scaled_mma(),
                             self.is_trap_only, self.is_guard_stub)


@dataclass(frozen=True)
class FunctionFacts:
    """What :func:`summarize` needs of one function, without its instructions: a large
    library's SASS (gigabytes of text) is read one ELF per process, and only these facts
    come back (:mod:`sparkbuild.toolchain.sass_library`)."""

    name: str
    arch: str | None
    count: int
    block_scaled_mma: int
    is_trap_only: bool
    is_guard_stub: bool


@dataclass(frozen=True)
class SassSummary(Record):
    """What the machine code for one architecture holds (``check`` and ``verify`` report it)."""

    arch: str
    functions: int
    instructions: int
    block_scaled_mma: int
    trap_only_kernels: tuple[str, ...]
    guard_stub_kernels: tuple[str, ...] = ()
    """Kernels that only print and trap or exit (the trap-only ones among them)."""


def as_facts(function: SassFunction | FunctionFacts) -> FunctionFacts:
    """The facts of a function read whole, or the facts as they are."""
    return function.facts() if isinstance(function, SassFunction) else function


def summarize(functions: Iterable[SassFunction | FunctionFacts], arch: str) -> SassSummary:
    """Counts over the functions compiled for ``arch``, as cuobjdump names it (``sm_121a``
    and plain ``sm_121`` are different targets)."""
    chosen = [as_facts(f) for f in functions if f.arch == arch]
    return SassSummary(
        arch=arch,
        functions=len(chosen),
        instructions=sum(function.count for function in chosen),
        block_scaled_mma=sum(function.block_scaled_mma for function in chosen),
        trap_only_kernels=tuple(sorted({f.name for f in chosen if f.is_trap_only})),
        guard_stub_kernels=tuple(sorted({f.name for f in chosen if f.is_guard_stub})),
    )


# -- which code runs where ---------------------------------------------------------------


def arch_digits(arch: str) -> str:
    """``12.1`` -> ``121``; ``sm_121a`` -> ``121``: one spelling for comparing."""
    return re.sub(r"[^0-9]", "", re.sub(r"[a-z]+$", "", arch.lower().removeprefix("sm_")))


_SASS_ARCH = re.compile(r"sm_(\d+)(\d)([af]?)")


def runs_on(arch: str, target: str) -> bool:
    """Whether SASS built for ``arch`` (cuobjdump's ``sm_121a``, ``sm_120f``, ``sm_121``) runs
    on a GPU of ``target`` (``12.1a``): CUDA's binary compatibility.  Code of the same
    compute capability runs whatever its suffix; plain (``sm_120``) and family (``sm_120f``)
    code runs on the same major at that minor or above; arch-specific code (``sm_120a``)
    runs on its own GPU only."""
    found = _SASS_ARCH.fullmatch(arch)
    wanted = _SASS_ARCH.fullmatch(f"sm_{arch_digits(target)}")
    if found is None or wanted is None:
        return False
    if found.group(1, 2) == wanted.group(1, 2):
        return True
    return (found.group(3) in ("f", "") and found.group(1) == wanted.group(1)
            and int(found.group(2)) <= int(wanted.group(2)))


def parse_instruction(address: int, text: str) -> Instruction:
    """``@!P0 FMNMX R1, |R2|, 1, !PT`` -> predicate, opcode, modifiers and operands."""
    predicate = None
    words = text.split(None, 1)
    if words and words[0].startswith("@"):
        predicate = words[0][1:]
        words = words[1].split(None, 1) if len(words) > 1 else []
    if not words:
        return Instruction(address, "", (), "", predicate)
    opcode, *modifiers = words[0].split(".")
    operands = words[1] if len(words) > 1 else ""
    return Instruction(address, opcode, tuple(modifiers), operands.strip(), predicate)


def parse_sass(text: str) -> list[SassFunction]:
    """The kernels and device functions of ``cuobjdump -sass`` output, in order."""
    functions: list[SassFunction] = []
    arch: str | None = None
    current: tuple[str, str | None] | None = None  # name and arch of the function being read
    body: list[Instruction] = []
    for line in text.splitlines():
        if header := _ARCH_HEADER.match(line):
            arch = header.group(1)  # "arch = sm_120f": the fatbin's name, with its suffix
        elif code_for := _CODE_FOR.match(line):
            if arch is None or not arch.startswith(code_for.group(1)):
                arch = code_for.group(1)  # a lone cubin names its target only here
        elif function_match := _FUNCTION.match(line):
            if current is not None:
                functions.append(SassFunction(*current, tuple(body)))
            current, body = (function_match.group(1), arch), []
        elif current is not None and (instruction := _INSTRUCTION.match(line)):
            body.append(parse_instruction(int(instruction.group(1), 16), instruction.group(2)))
    if current is not None:
        functions.append(SassFunction(*current, tuple(body)))
    return functions


def _sorted_unique(archs: Iterable[str]) -> list[str]:
    def key(arch: str) -> tuple[int, str]:
        digits = re.search(r"\d+", arch)
        return (int(digits.group()) if digits else 0, arch)

    return sorted(set(archs), key=key)


def parse_arch_listing(text: str) -> tuple[list[str], list[str]]:
    """``cuobjdump -lelf -lptx`` output -> (SASS architectures, PTX architectures).

    Entries read ``ELF file 1: name.1.sm_121a.cubin`` and ``PTX file 1: name.1.sm_90.ptx``;
    a family target (sm_120f) is listed under its base name (sm_120), as cuobjdump names it.
    """
    elf = [m.group(1) for n in _ELF_ENTRY.findall(text) if (m := _ARCH_IN_NAME.search(n))]
    ptx = [m.group(1) for n in _PTX_ENTRY.findall(text) if (m := _ARCH_IN_NAME.search(n))]
    return _sorted_unique(elf), _sorted_unique(ptx)


def _wheel_bin_dirs() -> Iterator[Path]:
    """``bin`` folders of the ``nvidia`` namespace package: cu13/bin, cuda_cuobjdump/bin, ..."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        yield from sorted(Path(root).glob("*/bin"))


def _find_tool(name: str, setting: Setting) -> Path | None:
    override = setting.path()
    if override is not None:
        return override
    candidates = [*_wheel_bin_dirs(), Path(sys.executable).parent]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for directory in candidates:
        if (directory / name).is_file():
            return directory / name
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    for root in (cuda_home, "/usr/local/cuda"):
        if root and (Path(root) / "bin" / name).is_file():
            return Path(root) / "bin" / name
    return None


def installed_cuobjdump() -> Path | None:
    """cuobjdump from SPARKBUILD_CUOBJDUMP, the nvidia-cuda-cuobjdump wheel, PATH or CUDA;
    None when it is nowhere to be found."""
    return _find_tool("cuobjdump", CUOBJDUMP)


def find_cuobjdump() -> Path:
    """:func:`installed_cuobjdump` for a command that needs it: ToolchainError without."""
    found = installed_cuobjdump()
    if found is None:
        raise ToolchainError(
            "cuobjdump not found",
            where="looked in SPARKBUILD_CUOBJDUMP, the nvidia wheels, PATH, CUDA_HOME/bin "
            "and /usr/local/cuda/bin",
            hint="pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm",
        )
    return found


def find_nvdisasm() -> Path | None:
    """nvdisasm, which ``cuobjdump -sass`` runs; None when it is nowhere to be found."""
    return _find_tool("nvdisasm", NVDISASM)


def _sass_env() -> dict[str, str]:
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        raise ToolchainError(
            "nvdisasm not found (cuobjdump needs it to print SASS)",
            hint="pip install nvidia-cuda-nvdisasm",
        )
    path = os.environ.get("PATH", "")
    return {"PATH": f"{nvdisasm.parent}{os.pathsep}{path}" if path else str(nvdisasm.parent)}


def dump_sass(binary: Path, *, log: Path | None = None) -> str:
    """``cuobjdump -sass binary``: the SASS of every kernel of every architecture in it."""
    result = run([find_cuobjdump(), "-sass", binary], env=_sass_env(), log=log, echo=False)
    return result.full_output()


def read_sass(binary: Path, *, log: Path | None = None) -> list[SassFunction]:
    return parse_sass(dump_sass(binary, log=log))


def _list_entries(binary: Path) -> str:
    """``cuobjdump -lelf -lptx``; empty for a file with no device code (cuobjdump exits 255)."""
    argv: list[str | os.PathLike[str]] = [find_cuobjdump(), "-lelf", "-lptx", binary]
    result = run(argv, check=False, echo=False)
    if result.returncode == 0 or _NO_DEVICE_CODE in result.output:
        return result.output
    raise CommandFailed(
        f"cuobjdump cannot read {binary}: {result.output.strip()}",
        where=str(binary),
        hint="pass an object, cubin, fatbin, executable or shared library that exists",
    )


def list_cuda_archs(binary: Path) -> list[str]:
    """The SM architectures whose machine code ``binary`` holds, e.g. ``["sm_120", "sm_121a"]``.

    Works on objects, cubins, fatbins, executables and shared libraries; an empty list when
    it holds no GPU code.  PTX is not machine code: see :func:`list_ptx_archs`.
    """
    return parse_arch_listing(_list_entries(binary))[0]


def list_ptx_archs(binary: Path) -> list[str]:
    """The virtual architectures whose PTX ``binary`` embeds (JIT-compiled at load time)."""
    return parse_arch_listing(_list_entries(binary))[1]


def functions_named(functions: Iterable[SassFunction], name: str) -> list[SassFunction]:
    return [function for function in functions if function.name == name]


def machine_code(functions: Sequence[FunctionFacts], targets: Sequence[str]
                 ) -> tuple[tuple[str, ...], int, tuple[str, ...], tuple[str, ...]]:
    """(SASS archs read, block-scaled MMA count, trap-only kernels, guard stubs) of the
    code among ``functions`` that a GPU of any of ``targets`` would load: what verify
    reads of a built library and the compile's unit watch of each object."""
    chosen = sorted({f.arch for f in functions
                     if f.arch and any(runs_on(f.arch, t) for t in targets)})
    summaries = [summarize(functions, arch) for arch in chosen]
    traps = sorted({name for s in summaries for name in s.trap_only_kernels})
    stubs = sorted({name for s in summaries for name in s.guard_stub_kernels})
    return (tuple(chosen), sum(s.block_scaled_mma for s in summaries), tuple(traps),
            tuple(stubs))


# -- coverage per kernel -----------------------------------------------------------------
#
# Every kernel a binary holds (an ``ENTRY`` of some ELF's symbol table, or a ``.entry`` of
# some PTX), and, for one target GPU, what the driver can give it: ``native`` machine code
# the target loads (:func:`runs_on`), ``ptx`` only (the driver JIT-compiles that PTX at load,
# on every node, into its JIT cache), or ``none`` (it cannot run there).

CoverageKind = Literal["native", "ptx", "none"]
"""A kernel at a target: its own machine code, PTX the driver compiles, or no code."""
NATIVE: CoverageKind = "native"
PTX_ONLY: CoverageKind = "ptx"
NO_CODE: CoverageKind = "none"
COVERAGE_KINDS: tuple[CoverageKind, ...] = (NATIVE, PTX_ONLY, NO_CODE)

_FATBIN_KIND = re.compile(r"^Fatbin (elf|ptx) code:")
_ELF_ENTRY_SYMBOL = re.compile(r"^\s*FUNC\s+\S+\s+\S+\s+ENTRY\s+(\S+)\s*$")
_PTX_DOT_ENTRY = re.compile(r"^\s*(?:\.\w+\s+)*\.entry\s+([A-Za-z_$%][\w$.%]*)")
_VIRTUAL_ARCH = re.compile(r"(?:sm|compute)_(\d+)(\d)([af]?)")


@dataclass(frozen=True)
class KernelCode:
    """What one binary holds for one kernel: the SASS archs as the fatbin headers name them
    (``sm_121a``, ``sm_120f``) and the virtual archs of its PTX (``compute_80``)."""

    name: str
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    demangled: str | None = None


def _fatbin_sections(text: str) -> Iterator[tuple[str, str | None, str]]:
    """(``elf``/``ptx``, the header's arch, a line) for each line of a fatbin section of
    ``cuobjdump -symbols`` or ``-ptx`` output; lines before any header: kind ``elf``."""
    kind, arch = "elf", None
    for line in text.splitlines():
        if found := _FATBIN_KIND.match(line):
            kind, arch = found.group(1), None
        elif arch is None and (header := _ARCH_HEADER.match(line)):
            arch = header.group(1)
        else:
            yield kind, arch, line


def elf_header_archs(text: str) -> list[str]:
    """``cuobjdump -symbols`` (or ``-sass``) output -> the arch of each ELF section, in
    order, as its fatbin header names it (``sm_120f``; an extracted cubin says ``sm_120``)."""
    archs: list[str] = []
    in_elf_header = False
    for line in text.splitlines():
        if found := _FATBIN_KIND.match(line):
            in_elf_header = found.group(1) == "elf"
        elif in_elf_header and (header := _ARCH_HEADER.match(line)):
            archs.append(header.group(1))
            in_elf_header = False
    return archs


def parse_elf_entries(text: str) -> dict[str, set[str]]:
    """``cuobjdump -symbols`` output -> SASS arch (``sm_121a``) -> the kernels (``FUNC ...
    ENTRY`` symbols) of that ELF.  Device functions and objects are not kernels."""
    found: dict[str, set[str]] = {}
    for kind, arch, line in _fatbin_sections(text):
        if kind == "elf" and arch and (entry := _ELF_ENTRY_SYMBOL.match(line)):
            found.setdefault(arch, set()).add(entry.group(1))
    return found


def virtual_arch(arch: str) -> str:
    """The PTX header's ``sm_80`` (or ``compute_80``) as nvcc names a virtual arch."""
    return "compute_" + arch.removeprefix("sm_").removeprefix("compute_")


def parse_ptx_entries(text: str) -> dict[str, set[str]]:
    """``cuobjdump -ptx`` output -> virtual arch (``compute_80``) -> the ``.entry`` kernels of
    that PTX."""
    found: dict[str, set[str]] = {}
    for kind, arch, line in _fatbin_sections(text):
        if kind == "ptx" and arch and (entry := _PTX_DOT_ENTRY.match(line)):
            found.setdefault(virtual_arch(arch), set()).add(entry.group(1))
    return found


def kernel_table(elf: dict[str, set[str]], ptx: dict[str, set[str]]) -> list[KernelCode]:
    """Every kernel of either listing, with its SASS and PTX archs, by name."""
    names = sorted({n for found in (*elf.values(), *ptx.values()) for n in found})
    return [KernelCode(name, tuple(_sorted_unique(a for a, k in elf.items() if name in k)),
                       tuple(_sorted_unique(a for a, k in ptx.items() if name in k)))
            for name in names]


def jit_runs_on(arch: str, target: str) -> bool:
    """Whether the driver can JIT-compile PTX of virtual arch ``arch`` (``compute_80``,
    ``compute_121a``, ``compute_120f``) for a GPU of ``target`` (``12.1a``): plain PTX of
    that arch or an older one; arch-specific PTX on that very GPU; family PTX on a GPU of
    the same major at that minor or above."""
    found = _VIRTUAL_ARCH.fullmatch(arch)
    wanted = _VIRTUAL_ARCH.fullmatch(f"sm_{arch_digits(target)}")
    if found is None or wanted is None:
        return False
    have = (int(found.group(1)), int(found.group(2)))
    gpu = (int(wanted.group(1)), int(wanted.group(2)))
    if found.group(3) == "a":
        return have == gpu
    if found.group(3) == "f":
        return have[0] == gpu[0] and have[1] <= gpu[1]
    return have <= gpu


@dataclass(frozen=True)
class KernelCoverage(Record):
    """One kernel at one target: ``native`` (``code``: the SASS arch loaded), ``ptx``
    (``code``: the virtual arch the driver JIT-compiles) or ``none``."""

    json_order: ClassVar[tuple[str, ...]] = ("kernel", "coverage", "ptx_arch")

    name: str = field(metadata=as_json("kernel"))
    kind: CoverageKind = field(metadata=as_json("coverage"))
    code: str | None = field(default=None, metadata=as_json(skip=True))
    demangled: str | None = field(default=None, metadata=as_json(omit=EMPTY))

    def json_extra(self) -> dict[str, Any]:
        return {"ptx_arch": self.code} if self.kind == PTX_ONLY else {}


def _code_rank(arch: str) -> tuple[int, int]:
    found = _VIRTUAL_ARCH.fullmatch(arch)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def classify_kernel(kernel: KernelCode, target: str) -> KernelCoverage:
    """Native when some SASS of the kernel runs on ``target``; else PTX when the driver can
    JIT some PTX of it there (the newest such arch is named); else none."""
    native = [a for a in kernel.sass if runs_on(a, target)]
    if native:
        exact = [a for a in native if arch_digits(a) == arch_digits(target)]
        return KernelCoverage(kernel.name, NATIVE, (exact or native)[0], kernel.demangled)
    jit = [a for a in kernel.ptx if jit_runs_on(a, target)]
    if jit:
        return KernelCoverage(kernel.name, PTX_ONLY, max(jit, key=_code_rank), kernel.demangled)
    return KernelCoverage(kernel.name, NO_CODE, None, kernel.demangled)


@dataclass(frozen=True)
class Coverage(Record):
    """Every kernel of a binary at one target arch (``12.1a``)."""

    target: str
    kernels: tuple[KernelCoverage, ...] = field(metadata=as_json(dump=len))

    def of_kind(self, kind: CoverageKind) -> tuple[KernelCoverage, ...]:
        return tuple(k for k in self.kernels if k.kind == kind)

    @property
    def not_native(self) -> tuple[KernelCoverage, ...]:
        return tuple(k for k in self.kernels if k.kind != NATIVE)

    def counts(self) -> dict[str, int]:
        return {kind: len(self.of_kind(kind)) for kind in COVERAGE_KINDS}

    def describe(self) -> str:
        """``12.1a: 3 native, 1 ptx (compute_80), 0 none``."""
        ptx = sorted({k.code for k in self.of_kind(PTX_ONLY) if k.code})
        counts = self.counts()
        return (f"{self.target}: {counts[NATIVE]} native, {counts[PTX_ONLY]} ptx"
                + (f" ({', '.join(ptx)})" if ptx else "") + f", {counts[NO_CODE]} none")

    def json_extra(self) -> dict[str, Any]:
        return {**self.counts(), "not_native": self.not_native}


def coverage(kernels: Iterable[KernelCode], target: str) -> Coverage:
    return Coverage(target, tuple(classify_kernel(k, target) for k in kernels))


def target_name(arch: str) -> str:
    """A recipe's arch (``12.1a``, ``8.0+PTX``) as a target GPU for :func:`coverage`."""
    return arch.removesuffix("+PTX")


def coverage_at(kernels: Sequence[KernelCode], archs: Iterable[str]) -> tuple[Coverage, ...]:
    """Every kernel at each of a recipe's ``archs`` (``12.1a``, ``8.0+PTX``)."""
    return tuple(coverage(kernels, target_name(arch)) for arch in archs)


def dump_listing(binary: Path, option: str) -> str:
    """``cuobjdump OPTION binary``; empty for a file with no device code."""
    argv: list[str | os.PathLike[str]] = [find_cuobjdump(), option, binary]
    result = run(argv, check=False, echo=False)
    if result.returncode == 0:
        return result.output
    if _NO_DEVICE_CODE in result.output:
        return ""
    raise CommandFailed(f"cuobjdump {option} cannot read {binary}: {result.output.strip()}",
                        where=str(binary))


def read_kernels(binary: Path) -> list[KernelCode]:
    """Every kernel of ``binary`` with the SASS and PTX archs it holds (``cuobjdump -symbols``
    and ``cuobjdump -ptx``), demangled where ``c++filt`` is at hand."""
    table = kernel_table(parse_elf_entries(dump_listing(binary, "-symbols")),
                         parse_ptx_entries(dump_listing(binary, "-ptx")))
    names = demangle(k.name for k in table)
    return [KernelCode(k.name, k.sass, k.ptx, names.get(k.name)) for k in table]


def find_demangler() -> Path | None:
    """``cu++filt`` or ``c++filt`` on ``PATH``, which :func:`demangle` runs; None without."""
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    return Path(tool) if tool else None


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled -> demangled, through ``c++filt`` when it is here (one process for all); an
    empty mapping without it.  Names that are not mangled are left out."""
    wanted = sorted({n for n in names if n.startswith("_Z")})
    tool = find_demangler()
    if not wanted or tool is None:
        return {}
    result = run([tool], check=False, echo=False,
                 streams=Streams(stdin_data="\n".join(wanted) + "\n"))
    lines = result.output.splitlines()
    if result.returncode != 0 or len(lines) != len(wanted):
        return {}
    return {m: d for m, d in zip(wanted, lines, strict=True) if d != m}
