"""What ``check`` compiles: the tree's CMake recorded as patched and as it was, and the units.

The recorder (:mod:`sparkbuild.toolchain.cmake_recorder`) runs on a scratch copy of the
tree (``.sparkbuild/check/src``), so that the tree's configure-time generators (marlin's
``generate_kernels.py``, ...) write there and not into the tree.  The series' arch edit
changes CMake files only; to find the units whose gencode it moved, the CMake files the
applied diffs touched (``.sparkbuild/applied/NAME/NNN.diff``) are reverse-applied with
``git apply -R`` in a second scratch directory whose other entries link to the first, the
tree is recorded again, and each source's ``-gencode`` values are compared
(:func:`sparkbuild.checks.touched_units.gencode_changed`).  No file name is special.
"""

from __future__ import annotations

import platform
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.checks.touched_units import cuda_units, gencode_changed, select_units
from sparkbuild.console import step
from sparkbuild.errors import ToolchainError, UsageError
from sparkbuild.patches.engine import RECORD_DIR, git_apply
from sparkbuild.patches.series import load_series, parse_diff, render_diff
from sparkbuild.recipe import require_spark_target
from sparkbuild.records import Record, as_json
from sparkbuild.toolchain import sass, tools
from sparkbuild.toolchain.archs import entry_for
from sparkbuild.toolchain.cmake_recorder import (
    BuildRecord,
    RecordInputs,
    find_recorder_cmake,
    gencode_for,
    record_build,
)
from sparkbuild.toolchain.compile_flags import (
    UnitCommand,
    UnsupportedGenex,
    gencode_codes,
    source_gencode,
    unit_command,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.recipe import Recipe

BUILD_TYPE = "RelWithDebInfo"
"""vLLM's setup.py default."""
SCRATCH_IGNORE = (".git", ".sparkbuild")


def is_cmake_file(path: str) -> bool:
    return Path(path).name == "CMakeLists.txt" or path.endswith(".cmake")


def unit_key(source: str, root: Path) -> str:
    """A recorded source as check names it: tree-relative when under ``root``."""
    path = Path(source)
    if path.is_absolute() and path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return source


def scratch_copy(tree: Path, dest: Path) -> Path:
    """A fresh copy of ``tree`` (without .git and .sparkbuild) for generators to write in."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(tree, dest, symlinks=True, ignore=shutil.ignore_patterns(*SCRATCH_IGNORE))
    return dest


def applied_cmake_diffs(tree: Path, recipe: Recipe) -> list[str]:
    """The applied diffs of the series, in application order, cut down to CMake files."""
    diffs: list[str] = []
    for patch in load_series(recipe.series).patches:
        for record in sorted((tree / RECORD_DIR / patch.name).glob("*.diff")):
            files = [f for f in parse_diff(record.read_text(encoding="utf-8"), origin=str(record))
                     if is_cmake_file(f.path)]
            if files:
                diffs.append(render_diff(files))
    return diffs


def _mirror(source: Path, dest: Path, real: set[str]) -> None:
    """``dest`` mirrors ``source`` with symbolic links, except the ``real`` files (copied)
    and the directories above them (created)."""
    parents = {p.as_posix() for r in real for p in Path(r).parents if p != Path()}

    def walk(relative: Path) -> None:
        (dest / relative).mkdir(parents=True, exist_ok=True)
        for child in sorted((source / relative).iterdir()):
            child_relative = (relative / child.name)
            key = child_relative.as_posix()
            if key in real:
                shutil.copy2(child, dest / child_relative)
            elif key in parents and child.is_dir() and not child.is_symlink():
                walk(child_relative)
            else:
                (dest / child_relative).symlink_to(child)

    if dest.exists():
        shutil.rmtree(dest)
    walk(Path())


def unpatched_copy(scratch: Path, diffs: list[str], dest: Path) -> Path | None:
    """``scratch`` with the series' CMake changes taken out; None when they do not revert."""
    real = {f.path for diff in diffs for f in parse_diff(diff, origin="series")}
    _mirror(scratch, dest, real)
    for diff in reversed(diffs):
        reverted, _output = git_apply(dest, diff, reverse=True)
        if not reverted:
            return None
    return dest


@dataclass(frozen=True)
class Recorder:
    """How to record a tree for one check run: the toolchain and the recipe's target."""

    cmake: Path
    nvcc: tools.Tool
    cuda_root: Path
    archs: tuple[str, ...]
    nvcc_threads: int | None

    def inputs(self, tree: Path, binary_dir: Path, *, generators: bool,
               python: Path | None = None, site: Path | None = None) -> RecordInputs:
        """``python``/``site``: the build environment's interpreter and site-packages, whose
        torch the build compiles against (default: this interpreter's)."""
        torch_includes = tools.torch_include_dirs(site)
        torch = tools.torch_version(site)
        if not torch_includes or torch is None:
            raise ToolchainError(
                "torch is not installed, so its headers and its CUDA flags (torch's "
                "share/cmake) cannot be had",
                hint="pip install the torch the tree pins (`sparkbuild doctor --tree` names "
                "it); a CPU build of torch has the same headers and CMake files",
            )
        gcc = tools.find_host_compiler()
        version = self.nvcc.version or tools.MIN_NVCC_FOR_SM121
        defines = {"NVCC_THREADS": str(self.nvcc_threads)} if self.nvcc_threads else {}
        return RecordInputs(
            tree=tree, binary_dir=binary_dir, cmake=self.cmake,
            python=python or Path(sys.executable),
            python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
            python_include=Path(sysconfig.get_paths()["include"]),
            cuda_version=f"{version.major}.{version.minor}", cuda_root=self.cuda_root,
            arch_list=";".join(self.archs), torch_version=str(torch.public),
            torch_includes=tuple(torch_includes),
            torch_cmake_dir=torch_includes[0].parent / "share" / "cmake",
            cxx_version=str(gcc.version) if gcc and gcc.version else "0",
            build_type=BUILD_TYPE, processor=platform.machine(),
            run_generators=generators, stop_at_fatal=True, defines=defines,
        )

    def inputs_any_torch(self, tree: Path, binary_dir: Path) -> RecordInputs:
        """:meth:`inputs` with this interpreter's torch, or, where none is installed, with
        the ``-gencode`` flags torch's CMake would add for the archs (what ``vendor`` does
        on a machine without torch): what is built and fetched reads the same."""
        if tools.torch_include_dirs(None) and tools.torch_version(None) is not None:
            return self.inputs(tree, binary_dir, generators=False)
        gcc = tools.find_host_compiler()
        version = self.nvcc.version or tools.MIN_NVCC_FOR_SM121
        return RecordInputs(
            tree=tree, binary_dir=binary_dir, cmake=self.cmake, python=Path(sys.executable),
            python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
            python_include=Path(sysconfig.get_paths()["include"]),
            cuda_version=f"{version.major}.{version.minor}", cuda_root=self.cuda_root,
            arch_list=";".join(self.archs), gencode=gencode_for(self.archs),
            torch_version="0", torch_includes=(),
            cxx_version=str(gcc.version) if gcc and gcc.version else "0",
            build_type=BUILD_TYPE, processor=platform.machine(), run_generators=False)

    def record(self, tree: Path, binary_dir: Path, *, generators: bool) -> BuildRecord:
        step(f"reading {tree / 'CMakeLists.txt'} in CMake script mode")
        return record_build(self.inputs(tree, binary_dir, generators=generators))


def make_recorder(nvcc: tools.Tool, recipe: Recipe) -> Recorder:
    return Recorder(find_recorder_cmake(), nvcc, tools.cuda_root(nvcc), recipe.target.cuda_archs,
                    recipe.build.nvcc_threads)


# --- what to compile, and how ---------------------------------------------------------

@dataclass
class CheckPlan:
    """Everything decided before the first compile."""

    tree: Path
    scratch: Path
    archs: tuple[str, ...]
    work: Path
    nvcc: tools.Tool
    recorder: Recorder
    record: BuildRecord
    touched: list[str]
    units: dict[str, str]
    """Unit -> why it was chosen."""
    not_built: list[str]
    extra_includes: list[Path]
    cuda_root: Path
    gencode_changed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    allow_jit: bool = False
    """The recipe's ``allow_jit``: PTX-only kernels do not fail the check."""
    no_target_sass: list[GencodeCoverage] = field(default_factory=list)
    """Units of the build whose recorded gencode gives a target no SASS (every unit, chosen
    or not: known before anything compiles)."""

    @property
    def native_code(self) -> str:
        """The Spark's SASS (``sm_121a``), whatever the order of the recipe's archs."""
        arch = entry_for(self.archs, "12.1") or self.archs[0]
        return "sm_" + arch.replace("+PTX", "").replace(".", "")

    def source_of(self, unit: str) -> str:
        """The recorded source name of a unit (relative, or absolute outside the tree)."""
        for source in self.record.sources():
            if unit_key(source, self.scratch) == unit:
                return source
        return unit

    def command(self, unit: str, obj: Path) -> UnitCommand:
        source = self.source_of(unit)
        target = self.record.targets_of(source)[0]
        try:
            return unit_command(self.record, target, source, tree=self.scratch,
                                nvcc=self.nvcc.path, obj=obj, build_type=BUILD_TYPE,
                                extra_system_includes=self.extra_includes)
        except UnsupportedGenex as exc:
            raise ToolchainError(
                f"the tree's CMake gives {unit} a generator expression sparkbuild cannot "
                f"evaluate: {exc}",
                where=str(self.tree / "CMakeLists.txt"),
                hint="report it; `sparkbuild wheel` is not affected",
            ) from exc


def _extra_includes(cuda_root: Path) -> list[Path]:
    """NVIDIA library wheels' headers, only when the toolkit lacks cuBLAS's."""
    if (cuda_root / "include" / "cublas_v2.h").is_file():
        return []
    return tools.wheel_cuda_include_dirs()


def _search_dirs(record: BuildRecord, root: Path) -> list[Path]:
    dirs = [*record.directory.get("includes", [])]
    for target in record.targets.values():
        dirs.extend(target.includes)
    return [root / d for d in dict.fromkeys(dirs) if "$<" not in d and not Path(d).is_absolute()]


def _touched(tree: Path, recipe: Recipe) -> list[str]:
    from sparkbuild.patches.engine import touched_files

    relative = set()
    for path in touched_files(tree, recipe):
        absolute = path if path.is_absolute() else tree / path
        relative.add(absolute.resolve().relative_to(tree).as_posix())
    return sorted(relative)


def gencodes(record: BuildRecord, root: Path) -> dict[str, tuple[str, ...]]:
    """Each CUDA unit of the record and the gencode values the build compiles it for."""
    found: dict[str, tuple[str, ...]] = {}
    for source in cuda_units(record.sources()):
        try:
            found[unit_key(source, root)] = source_gencode(
                record, record.targets_of(source)[0], source)
        except UnsupportedGenex:
            found[unit_key(source, root)] = ("?",)
    return found


@dataclass(frozen=True)
class GencodeCoverage(Record):
    """A unit whose ``-gencode`` gives ``target`` no SASS: ``ptx`` (``code``: the virtual
    arch the driver would JIT at load) or ``none``."""

    unit: str
    target: str
    gencode: tuple[str, ...]
    kind: sass.CoverageKind = field(metadata=as_json("coverage"))
    code: str | None = field(metadata=as_json("ptx_arch"))

    def describe(self) -> str:
        what = f"PTX only ({self.code})" if self.kind == sass.PTX_ONLY else "no code"
        return f"{self.unit}: {what} for {self.target} [{' '.join(self.gencode)}]"


def units_without_target_sass(found: dict[str, tuple[str, ...]], archs: Sequence[str]
                              ) -> list[GencodeCoverage]:
    """The units of ``found`` (unit -> gencode, :func:`gencodes`) whose gencode embeds no
    SASS a GPU of each target loads, classified as a kernel of them would be.  A unit with
    no ``-gencode`` (archs set another way) or one that could not be evaluated is left out."""
    lacking = []
    for unit, codes in sorted(found.items()):
        if not codes or codes == ("?",):
            continue
        sass_codes, ptx = gencode_codes(codes)
        for arch in archs:
            target = sass.target_name(arch)
            got = sass.classify_kernel(sass.KernelCode(unit, sass_codes, ptx), target)
            if got.kind != sass.NATIVE:
                lacking.append(GencodeCoverage(unit, target, codes, got.kind, got.code))
    return lacking


def _series_units(plan: CheckPlan, recipe: Recipe, recorder_dir: Path) -> None:
    """Touched units, and units whose gencode the series changed."""
    built = {unit_key(s, plan.scratch) for s in plan.record.sources()}
    units, plan.not_built = select_units(plan.scratch, plan.touched, built,
                                         _search_dirs(plan.record, plan.scratch))
    plan.units.update(dict.fromkeys(units, "touched"))
    diffs = applied_cmake_diffs(plan.tree, recipe)
    if not diffs:
        return
    before_tree = unpatched_copy(plan.scratch, diffs, plan.work / "before")
    if before_tree is None:
        plan.notes.append("the series' CMake changes do not reverse-apply to a copy of the "
                          "tree: units whose gencode it changed were not looked for")
        return
    before = plan.recorder.record(before_tree, recorder_dir / "cmake-before", generators=False)
    plan.gencode_changed = gencode_changed(gencodes(before, before_tree),
                                           gencodes(plan.record, plan.scratch))
    for unit in plan.gencode_changed:
        plan.units.setdefault(unit, "gencode")


def _named_units(plan: CheckPlan, only: Sequence[str]) -> None:
    built = set(cuda_units({unit_key(s, plan.scratch) for s in plan.record.sources()}))
    for name in only:
        unit = Path(name).as_posix().removeprefix("./")
        if unit in built:
            plan.units[unit] = "named"
        elif (plan.tree / unit).is_file():
            plan.not_built.append(unit)
        else:
            raise UsageError(f"no such unit: {name}", where=str(plan.tree),
                             hint="name a .cu file by its path inside the tree")


def _refuse_outside(tree: Path, only: Sequence[str]) -> None:
    """Every ``--unit`` is a path inside the tree, checked before any work."""
    for name in only:
        path = Path(name)
        if path.is_absolute() or not (tree / path).resolve().is_relative_to(tree):
            raise UsageError(f"--unit {name} is outside the tree", where=str(tree),
                             hint="name a .cu file by its path inside the tree, such as "
                             "csrc/quantization/fp4/nvfp4_quant_kernels.cu")


def plan_check(
    tree: Path, recipe: Recipe, *, only: Sequence[str] | None = None, all_units: bool = False
) -> CheckPlan:
    """Record the tree's CMake, choose the units and how to compile them; compile nothing."""
    tree = tree.resolve()
    if not (tree / "CMakeLists.txt").is_file():
        raise UsageError("not a source tree with a CMakeLists.txt", where=str(tree),
                         hint="pass the directory `sparkbuild prepare --dest` wrote")
    _refuse_outside(tree, only or ())
    require_spark_target(recipe)
    nvcc = tools.find_nvcc()
    tools.require_sm121(nvcc)
    sass.find_cuobjdump()
    work = tree / ".sparkbuild" / "check"
    touched = _touched(tree, recipe)
    recorder = make_recorder(nvcc, recipe)
    step(f"copying {tree} to a scratch tree for the configure-time generators")
    scratch = scratch_copy(tree, work / "src")
    record = recorder.record(scratch, work / "cmake", generators=True)
    plan = CheckPlan(tree, scratch, recipe.target.cuda_archs, work, nvcc, recorder, record,
                     touched, {}, [], _extra_includes(recorder.cuda_root), recorder.cuda_root,
                     allow_jit=recipe.target.allow_jit)
    plan.no_target_sass = units_without_target_sass(gencodes(record, scratch), plan.archs)
    if only:
        _named_units(plan, only)
    elif all_units:
        plan.units.update(dict.fromkeys(
            cuda_units({unit_key(s, scratch) for s in record.sources()}), "all"))
    else:
        _series_units(plan, recipe, work)
    return plan
