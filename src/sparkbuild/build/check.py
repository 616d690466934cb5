"""``sparkbuild check``: compile only what the series touched, for the target arch, now.

A vLLM build takes hours; a patch that breaks one fp4 kernel for sm_121 shows up near the
end.  ``check`` finds the translation units the series changed (see
:mod:`sparkbuild.build.touched_units`), asks the tree's own CMake how the build would compile
each one (see :mod:`sparkbuild.toolchain.cmake_recorder`), and runs exactly those nvcc commands in
parallel, as many at once as doctor's build plan allows.  Minutes instead of hours.

A unit whose headers cannot be had on this machine (CUTLASS is cloned from GitHub at
configure time) is reported as ``skipped-missing-headers`` with the header named, not
as a failure of the tree; a header missing from the tree itself is a failure.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.build.doctor import BuildPlan, plan_build, read_memory
from sparkbuild.build.touched_units import select_units
from sparkbuild.console import count_progress, info, step
from sparkbuild.errors import CommandFailed, ToolchainError, UsageError
from sparkbuild.proc import format_command, run
from sparkbuild.toolchain import tools
from sparkbuild.toolchain.cmake_recorder import BuildRecord, RecordInputs, record_build
from sparkbuild.toolchain.compile_flags import UnitCommand, UnsupportedGenex, unit_command

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.recipe import Recipe

MISSING_HEADER_RES = (
    re.compile(r"fatal error: ([^\s:]+): No such file or directory"),
    re.compile(r'cannot open source file "([^"]+)"'),
)
UNIT_TIMEOUT_S = 3600
BUILD_TYPE = "RelWithDebInfo"
"""vLLM's setup.py default."""


@dataclass(frozen=True)
class UnitOutcome:
    path: str
    status: str
    """ok, failed, skipped-missing-headers, or not-built (CMake does not compile it)."""
    reason: str
    seconds: float = 0.0
    target: str | None = None
    gencode: tuple[str, ...] = ()
    missing_headers: tuple[str, ...] = ()
    log: Path | None = None
    command: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "status": self.status, "reason": self.reason,
            "seconds": round(self.seconds, 2), "target": self.target,
            "gencode": list(self.gencode), "missing_headers": list(self.missing_headers),
            "log": str(self.log) if self.log else None,
            "command": format_command(self.command) if self.command else None,
        }


@dataclass
class CheckResult:
    tree: Path
    archs: tuple[str, ...]
    nvcc: str
    touched: list[str]
    units: list[UnitOutcome]
    plan: BuildPlan
    configure_stops: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def with_status(self, status: str) -> list[UnitOutcome]:
        return [unit for unit in self.units if unit.status == status]

    @property
    def error(self) -> CommandFailed | None:
        failed = self.with_status("failed")
        if not failed:
            return None
        return CommandFailed(
            f"{len(failed)} of {len(self.units)} touched unit(s) failed to compile for "
            f"{', '.join(self.archs)}: {', '.join(unit.path for unit in failed)}",
            where=f"log: {failed[0].log}",
            hint="the full build would fail the same way; fix the series and run check again",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tree": str(self.tree), "archs": list(self.archs), "nvcc": self.nvcc,
            "touched": self.touched, "units": [unit.to_dict() for unit in self.units],
            "plan": self.plan.to_dict(), "configure_stops": self.configure_stops,
            "notes": self.notes, "seconds": round(self.seconds, 2),
        }

    def summary(self) -> list[str]:
        lines = [f"check of {self.tree} for {', '.join(self.archs)} with nvcc {self.nvcc} "
                 f"({self.plan.max_jobs} job(s), {self.seconds:.0f} s)"]
        for unit in self.units:
            arch = f" [{' '.join(unit.gencode)}]" if unit.gencode else ""
            lines.append(f"  {unit.status:24} {unit.path}{arch} {unit.seconds:.0f} s"
                         f" -- {unit.reason}")
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.extend(f"  the real configure would stop: {stop}" for stop in self.configure_stops)
        counts = {s: len(self.with_status(s)) for s in
                  ("ok", "failed", "skipped-missing-headers", "not-built")}
        lines.append("  " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        return lines


# --- outcome of one compile ------------------------------------------------------------

def missing_headers(output: str) -> list[str]:
    found: list[str] = []
    for pattern in MISSING_HEADER_RES:
        found.extend(h for h in pattern.findall(output) if h not in found)
    return found


def header_provider(header: str, record: BuildRecord, cuda_root: Path) -> str | None:
    """Where an external header comes from in a real build; None for the tree's own."""
    if header.startswith(("cutlass/", "cute/")):
        declared = record.fetches.get("cutlass", {}).get("declared", "the CUTLASS repository")
        return (f"CUTLASS headers ({declared}), which vLLM's CMake clones at configure time: "
                "not reachable here; set VLLM_CUTLASS_SRC_DIR to a checkout of that tag")
    if header.startswith("cublas"):
        return (f"cuBLAS headers, absent from {cuda_root}/include: install the toolkit's "
                "cuBLAS, or the nvidia-cublas wheel of the same CUDA major release")
    if header.startswith(("torch/", "ATen/", "c10/")):
        return "torch's headers: install the torch version the tree pins"
    return None


def classify(
    command: UnitCommand, returncode: int, output: str, record: BuildRecord,
    cuda_root: Path, native_code: str,
) -> tuple[str, str, tuple[str, ...]]:
    """(status, reason, missing headers) of one finished compile."""
    native = any(native_code in code for code in command.gencode)
    arch_note = "" if native else (f"; compiled for {', '.join(command.gencode) or 'no arch'}"
                                   f", not native {native_code}: the arch lists do not select it")
    if returncode == 0:
        return "ok", f"compiled{arch_note}", ()
    missing = missing_headers(output)
    providers = [header_provider(h, record, cuda_root) for h in missing]
    if missing and all(providers):
        reason = "; ".join(f"{h}: {p}" for h, p in zip(missing, providers, strict=True))
        return "skipped-missing-headers", reason, tuple(missing)
    if missing:
        return "failed", f"missing header(s) {', '.join(missing)}{arch_note}", tuple(missing)
    errors = [line.strip() for line in output.splitlines() if "error" in line.lower()]
    first = errors[0] if errors else f"nvcc exited with status {returncode}"
    return "failed", f"{first}{arch_note}", ()


# --- what to compile, and how ---------------------------------------------------------

def gencode_for(archs: tuple[str, ...]) -> str:
    """What torch's CMake puts in CMAKE_CUDA_FLAGS for TORCH_CUDA_ARCH_LIST=archs."""
    flags = []
    for arch in archs:
        base = arch.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode arch=compute_{base},code=sm_{base}")
        if arch.endswith("+PTX"):
            flags.append(f"-gencode arch=compute_{base},code=compute_{base}")
    return " ".join(flags)


@dataclass(frozen=True)
class CheckPlan:
    """Everything decided before the first compile."""

    tree: Path
    archs: tuple[str, ...]
    work: Path
    nvcc: tools.Tool
    record: BuildRecord
    touched: list[str]
    units: list[str]
    not_built: list[str]
    extra_includes: list[Path]
    cuda_root: Path

    @property
    def native_code(self) -> str:
        return "sm_" + self.archs[0].replace("+PTX", "").replace(".", "")

    def command(self, unit: str, obj: Path) -> UnitCommand:
        target = self.record.targets_of(unit)[0]
        try:
            return unit_command(self.record, target, unit, tree=self.tree, nvcc=self.nvcc.path,
                                obj=obj, build_type=BUILD_TYPE,
                                extra_system_includes=self.extra_includes)
        except UnsupportedGenex as exc:
            raise ToolchainError(
                f"the tree's CMake gives {unit} a generator expression sparkbuild cannot "
                f"evaluate: {exc}",
                where=str(self.tree / "CMakeLists.txt"),
                hint="report it; `sparkbuild wheel` is not affected",
            ) from exc


def _record(
    tree: Path, work: Path, archs: tuple[str, ...], nvcc: tools.Tool, cuda_root: Path
) -> BuildRecord:
    cmake = tools.find_cmake()
    if cmake is None:
        raise ToolchainError("cmake not found", hint="pip install 'cmake>=3.26'")
    torch_includes = tools.torch_include_dirs()
    torch = tools.torch_version()
    if not torch_includes or torch is None:
        raise ToolchainError(
            "torch is not installed, so its headers (torch/include, "
            "torch/include/torch/csrc/api/include) cannot be had",
            hint="pip install the torch the tree pins (`sparkbuild doctor --tree` names it); "
            "a CPU build of torch has the same headers",
        )
    gcc = tools.find_host_compiler()
    version = nvcc.version or tools.MIN_NVCC_FOR_SM121
    inputs = RecordInputs(
        tree=tree, binary_dir=work / "cmake", cmake=cmake.path, python=Path(sys.executable),
        python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
        python_include=Path(sysconfig.get_paths()["include"]),
        cuda_version=f"{version.major}.{version.minor}", cuda_root=cuda_root,
        gencode=gencode_for(archs), torch_version=str(torch.public),
        torch_includes=tuple(torch_includes),
        cxx_version=str(gcc.version) if gcc and gcc.version else "0",
        build_type=BUILD_TYPE, processor=platform.machine(),
    )
    step(f"reading {tree / 'CMakeLists.txt'} with cmake {cmake.version} in script mode")
    return record_build(inputs)


def _extra_includes(cuda_root: Path) -> list[Path]:
    """NVIDIA library wheels' headers, only when the toolkit lacks cuBLAS's."""
    if (cuda_root / "include" / "cublas_v2.h").is_file():
        return []
    return tools.wheel_cuda_include_dirs()


def _search_dirs(record: BuildRecord, tree: Path) -> list[Path]:
    dirs = [*record.directory.get("includes", [])]
    for target in record.targets.values():
        dirs.extend(target.includes)
    return [tree / d for d in dict.fromkeys(dirs) if "$<" not in d and not Path(d).is_absolute()]


def _touched(tree: Path, recipe: Recipe) -> list[str]:
    from sparkbuild.patches.engine import touched_files

    relative = set()
    for path in touched_files(tree, recipe):
        absolute = path if path.is_absolute() else tree / path
        relative.add(absolute.resolve().relative_to(tree).as_posix())
    return sorted(relative)


def plan_check(tree: Path, recipe: Recipe) -> CheckPlan:
    """Find the touched units and how the build compiles them; compile nothing yet."""
    tree = tree.resolve()
    if not (tree / "CMakeLists.txt").is_file():
        raise UsageError("not a source tree with a CMakeLists.txt", where=str(tree),
                         hint="pass the directory `sparkbuild prepare --dest` wrote")
    nvcc = tools.find_nvcc()
    tools.require_sm121(nvcc)
    touched = _touched(tree, recipe)
    work = tree / ".sparkbuild" / "check"
    archs = recipe.target.cuda_archs
    cuda_root = tools.cuda_root(nvcc)
    record = _record(tree, work, archs, nvcc, cuda_root)
    units, not_built = select_units(tree, touched, record.sources(), _search_dirs(record, tree))
    extra = _extra_includes(cuda_root)
    return CheckPlan(tree, archs, work, nvcc, record, touched, units, not_built, extra, cuda_root)


# --- running it ------------------------------------------------------------------------

def _compile(plan: CheckPlan, unit: str) -> UnitOutcome:
    name = unit.replace("/", "__")
    log = plan.work / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (plan.work / "obj").mkdir(parents=True, exist_ok=True)
    command = plan.command(unit, plan.work / "obj" / f"{name}.o")
    log.with_suffix(".cmd").write_text(format_command(command.argv) + "\n", encoding="utf-8")
    result = run(command.argv, cwd=plan.tree, log=log, echo=False, check=False,
                 timeout=UNIT_TIMEOUT_S)
    status, reason, missing = classify(command, result.returncode, result.output,
                                       plan.record, plan.cuda_root, plan.native_code)
    return UnitOutcome(unit, status, reason, result.seconds, command.target, command.gencode,
                       missing, log, command.argv)


def _compile_all(plan: CheckPlan, units: list[str], jobs: int) -> list[UnitOutcome]:
    outcomes: list[UnitOutcome] = []
    workers = max(1, min(jobs, len(units)))
    with count_progress("compiling touched units") as update, ThreadPoolExecutor(workers) as pool:
        for outcome in pool.map(lambda unit: _compile(plan, unit), units):
            outcomes.append(outcome)
            update(len(outcomes), len(units))
            info(f"{outcome.status}: {outcome.path} ({outcome.seconds:.0f} s)")
    return outcomes


def machine_plan(recipe: Recipe) -> BuildPlan:
    """doctor's MAX_JOBS for this machine and the recipe's per-job memory budget."""
    total, available = read_memory()
    return plan_build(
        total_memory_bytes=total, available_memory_bytes=available, cores=os.cpu_count() or 1,
        job_memory_gib=recipe.build.job_memory_gib, nvcc_threads=recipe.build.nvcc_threads,
        arch_count=len(recipe.target.cuda_archs), requested_jobs=recipe.build.jobs,
    )


def _notes(plan: CheckPlan, only: Sequence[str] | None) -> list[str]:
    notes: list[str] = []
    for item in plan.record.skipped:
        scripts = [part for part in item.split(";") if part.endswith(".py")]
        note = "not run while reading CMake: " + (scripts[0] if scripts else item)
        if note not in notes:
            notes.append(note)
    if plan.extra_includes:
        notes.append("cuBLAS headers taken from installed NVIDIA wheels: "
                     + ", ".join(str(p) for p in plan.extra_includes))
    if only is not None:
        notes.append(f"restricted to {len(only)} requested unit(s)")
    if not plan.units:
        notes.append(f"no compiled unit is touched by the series "
                     f"({len(plan.touched)} file(s) changed)")
    return notes


def check_tree(tree: Path, recipe: Recipe, *, only: Sequence[str] | None = None) -> CheckResult:
    """Compile the units the series touched, as the build would, for the recipe's archs.

    ``only`` narrows the run to some of those units (tree-relative paths)."""
    started = time.monotonic()
    plan = plan_check(tree, recipe)
    units = [u for u in plan.units if only is None or u in only]
    build_plan = machine_plan(recipe)
    step(f"compiling {len(units)} touched unit(s), {build_plan.max_jobs} at a time")
    outcomes = _compile_all(plan, units, build_plan.max_jobs) if units else []
    outcomes += [UnitOutcome(path, "not-built", "includes a touched file, but the tree's "
                             f"CMake does not compile it for {', '.join(plan.archs)}")
                 for path in plan.not_built if only is None or path in only]
    return CheckResult(plan.tree, plan.archs, str(plan.nvcc.version), plan.touched, outcomes,
                       build_plan, plan.record.fatals, _notes(plan, only),
                       time.monotonic() - started)
