"""``sparkbuild check``: compile what the series changed, for the target arch, and read the SASS.

A vLLM build takes hours; a patch that breaks one FP4 kernel for the Spark shows up near
the end, or not at all: a kernel whose arch guard shuts the target out compiles to a trap
and nvcc exits 0.  ``check`` records the tree's CMake as the build would run it (see
:mod:`sparkbuild.checks.check_plan`), picks the units, compiles exactly the nvcc commands the
build would run, as many at once as doctor's plan allows, and reads each object's machine
code for the target arch with cuobjdump (:mod:`sparkbuild.toolchain.sass`), judged by the
kernel policy verify applies (:mod:`sparkbuild.toolchain.kernel_policy`).

Which units: by default those whose text the series changed (directly or through a
header) and those whose ``-gencode`` the series changed; ``--unit PATH`` only the named
ones; ``--all`` every CUDA unit the build compiles for the target.  A unit whose headers
cannot be had here (CUTLASS is cloned at configure time) is ``skipped-missing-headers``
with the header named; the result says how to get them.  See
:mod:`sparkbuild.checks.check_result` for what counts as a pass.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.checks.check_plan import CheckPlan, plan_check, unit_key
from sparkbuild.checks.check_result import CheckResult, UnitOutcome, UnitStatus
from sparkbuild.console import count_progress, info, step
from sparkbuild.jobplan.job_plan import recipe_job_plan
from sparkbuild.jobplan.machine import MachineFacts
from sparkbuild.proc import format_command, run
from sparkbuild.toolchain import sass
from sparkbuild.toolchain.compile_flags import gencode_codes
from sparkbuild.toolchain.kernel_policy import GUARD_STUB, Refusal, because, refusals

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.recipe import Recipe
    from sparkbuild.toolchain.cmake_recorder import BuildRecord
    from sparkbuild.toolchain.compile_flags import UnitCommand

MISSING_HEADER_RES = (
    re.compile(r"fatal error: ([^\s:]+): No such file or directory"),
    re.compile(r'cannot open source file "([^"]+)"'),
)
UNIT_TIMEOUT_S = 3600
CUDA_LIBRARY_HEADERS = {"cublas": "cuBLAS", "cusparse": "cuSPARSE", "cusolver": "cuSOLVER",
                        "curand": "cuRAND", "cufft": "cuFFT"}
"""CUDA toolkit libraries whose headers torch's ATen/cuda headers include."""


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
    library = next((lib for lib in CUDA_LIBRARY_HEADERS if header.startswith(lib)), None)
    if library is not None:
        return (f"{CUDA_LIBRARY_HEADERS[library]} headers, absent from {cuda_root}/include: "
                f"install the toolkit's, or the nvidia-{library} wheel of the same CUDA major "
                "release (`pip install 'sparkbuild[check]'`)")
    if header.startswith(("torch/", "ATen/", "c10/")):
        return "torch's headers: install the torch version the tree pins"
    return None


def classify(
    command: UnitCommand, returncode: int, output: str, record: BuildRecord,
    cuda_root: Path, native_code: str,
) -> tuple[UnitStatus, str, tuple[str, ...]]:
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


def target_code(gencode: tuple[str, ...], native: str) -> str | None:
    """The SASS target among ``gencode`` that runs on ``native`` (sm_121a), by the rule
    verify applies (:func:`sparkbuild.toolchain.sass.runs_on`): itself, another 12.1
    variant, or a family code such as sm_120f; None when none does."""
    codes = gencode_codes(gencode)[0]

    def preference(code: str) -> int:
        same_gpu = sass.arch_digits(code) == sass.arch_digits(native)
        return 0 if code == native else 1 if same_gpu else 2

    return min((c for c in codes if sass.runs_on(c, native)), key=preference, default=None)


# --- running it ------------------------------------------------------------------------

def _missing_source(plan: CheckPlan, unit: str) -> UnitOutcome | None:
    """A unit of a fetched dependency whose source is not on this machine."""
    if (plan.scratch / unit).is_file():
        return None
    for name, fetch in plan.record.fetches.items():
        available = fetch.get("available", "")
        if available and unit.startswith(available.rstrip("/") + "/"):
            declared = fetch.get("declared", "")
            return UnitOutcome(unit, "skipped-missing-sources", f"a source of {name} "
                               f"({declared}), fetched at configure time and not here: set its "
                               "*_SRC_DIR override (`sparkbuild vendor --plan` names it)")
    return UnitOutcome(unit, "skipped-missing-sources", "the source file does not exist")


def _read_machine_code(plan: CheckPlan, command: UnitCommand, obj: Path, log: Path
                       ) -> tuple[sass.SassSummary | None, tuple[str, ...], str]:
    arch = target_code(command.gencode, plan.native_code)
    if arch is None:
        return None, (), f"; no SASS for {plan.native_code} (gencode {', '.join(command.gencode)})"
    functions = sass.read_sass(obj, log=log.with_suffix(".sass.log"))
    summary = sass.summarize(functions, arch)
    return summary, summary.guard_stub_kernels, ""


def unit_coverage(plan: CheckPlan, obj: Path) -> tuple[sass.Coverage, ...]:
    """Every kernel of the object, per target arch of the recipe."""
    return sass.coverage_at(sass.read_kernels(obj), plan.archs)


def _compile(plan: CheckPlan, unit: str, why: str) -> UnitOutcome:
    missing = _missing_source(plan, unit)
    if missing is not None:
        return UnitOutcome(missing.path, missing.status, missing.reason, why=why)
    name = unit.strip("/").replace("/", "__")
    log = plan.work / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (plan.work / "obj").mkdir(parents=True, exist_ok=True)
    obj = plan.work / "obj" / f"{name}.o"
    obj.unlink(missing_ok=True)
    command = plan.command(unit, obj)
    log.with_suffix(".cmd").write_text(format_command(command.argv) + "\n", encoding="utf-8")
    result = run(command.argv, cwd=plan.scratch, log=log, echo=False, check=False,
                 timeout=UNIT_TIMEOUT_S)
    status, reason, headers = classify(command, result.returncode, result.full_output(),
                                       plan.record, plan.cuda_root, plan.native_code)
    summary: sass.SassSummary | None = None
    stubs: tuple[str, ...] = ()
    covered: tuple[sass.Coverage, ...] = ()
    uncovered: str | None = None
    stub: Refusal | None = None
    if status == "ok":
        summary, stubs, note = _read_machine_code(plan, command, obj, log)
        reason += note
        covered = unit_coverage(plan, obj)
        stub, uncovered = judge_unit(summary, covered, allow_jit=plan.allow_jit)
        if stub is not None:
            status = "failed"
            reason = (f"{stub.describe()} (a feature guard left printf + trap or exit; "
                      "nvcc exited 0)")
        elif uncovered:
            status, reason = "failed", uncovered
    return UnitOutcome(unit, status, reason, result.seconds, command.target, command.gencode,
                       headers, log, command.argv, summary, why, stubs, covered,
                       uncovered if status == "failed" and stub is None else None)


def judge_unit(summary: sass.SassSummary | None, covered: Sequence[sass.Coverage], *,
               allow_jit: bool) -> tuple[Refusal | None, str | None]:
    """One compiled unit judged by the kernel policy, as verify judges a library: the
    refusal of its guard stubs in the target's SASS (None when the policy accepts them
    all), and why its coverage per target is refused (None when it is not)."""
    found = refusals(covered, allow_jit=allow_jit,
                     stub_archs=(summary.arch,) if summary is not None else (),
                     guard_stubs=summary.guard_stub_kernels if summary is not None else (),
                     trap_only=summary.trap_only_kernels if summary is not None else ())
    stub = next((r for r in found if r.kind == GUARD_STUB), None)
    return stub, because([r for r in found if r.kind != GUARD_STUB])


def _compile_all(plan: CheckPlan, jobs: int) -> list[UnitOutcome]:
    outcomes: list[UnitOutcome] = []
    units = list(plan.units.items())
    workers = max(1, min(jobs, len(units)))
    with count_progress("compiling units") as update, ThreadPoolExecutor(workers) as pool:
        for outcome in pool.map(lambda item: _compile(plan, *item), units):
            outcomes.append(outcome)
            update(len(outcomes), len(units))
            info(f"{outcome.status}: {outcome.path} ({outcome.seconds:.0f} s)")
    return outcomes


def _notes(plan: CheckPlan, selection: str) -> list[str]:
    notes = list(plan.notes)
    notes += [f"ran the configure-time generator {unit_key(g, plan.scratch)} (on the scratch "
              "copy)" for g in dict.fromkeys(plan.record.generators)]
    notes += [f"not run while reading CMake: {item}" for item in plan.record.skipped]
    notes += [f"{name}: a command of a fetched dependency, recorded and not run"
              for name in dict.fromkeys(plan.record.unknown_commands)]
    if plan.extra_includes:
        notes.append("cuBLAS headers taken from installed NVIDIA wheels: "
                     + ", ".join(str(p) for p in plan.extra_includes))
    if selection == "series" and not plan.units:
        notes.append(f"no compiled unit is touched by the series and none had its gencode "
                     f"changed ({len(plan.touched)} file(s) changed)")
    return notes


def check_tree(
    tree: Path, recipe: Recipe, *, only: Sequence[str] | None = None, all_units: bool = False
) -> CheckResult:
    """Compile the chosen units as the build would, for the recipe's archs, and read their
    SASS.  ``only``: just these units (tree-relative paths); ``all_units``: every CUDA unit."""
    started = time.monotonic()
    plan = plan_check(tree, recipe, only=only, all_units=all_units)
    selection = "named" if only else "all" if all_units else "series"
    build_plan = recipe_job_plan(recipe, MachineFacts.read(), units_from=None)
    if plan.no_target_sass:
        step(f"{len(plan.no_target_sass)} unit(s) of the build get no SASS for the target "
             "from their recorded gencode (before anything compiles):")
        for lacking in plan.no_target_sass:
            info(f"  {lacking.describe()}")
    step(f"compiling {len(plan.units)} unit(s), {build_plan.max_jobs} at a time")
    outcomes = _compile_all(plan, build_plan.max_jobs) if plan.units else []
    outcomes += [UnitOutcome(path, "not-built", "the tree's CMake does not compile it for "
                             f"{', '.join(plan.archs)}", why="touched" if not only else "named")
                 for path in plan.not_built]
    return CheckResult(plan.tree, plan.archs, str(plan.nvcc.version), plan.touched, outcomes,
                       build_plan, plan.record.fatals, _notes(plan, selection),
                       time.monotonic() - started, plan.gencode_changed, selection,
                       plan.no_target_sass, plan.allow_jit)
