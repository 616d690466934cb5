"""What ``check`` found: one outcome per unit, and whether that is a pass.

A check passes only when it compiled something, every unit it chose compiled, and the
kernel policy (:mod:`sparkbuild.toolchain.kernel_policy`) accepts every kernel of them and
every unit's recorded gencode: native code for the target (or PTX only, with
``allow_jit``), and no kernel for the target arch a trap: nvcc exits 0 when a feature guard
compiles a kernel's body to ``printf`` plus ``trap``, so the machine code
(:mod:`sparkbuild.toolchain.sass`) is what counts.  A unit skipped because its headers or
sources are not on this machine, or a configure that would stop before the build, is not a
pass either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sparkbuild.errors import CommandFailed, SparkbuildError, ToolchainError
from sparkbuild.proc import format_command
from sparkbuild.records import Record, as_json, rounded
from sparkbuild.toolchain.kernel_policy import kernel_names, refused

if TYPE_CHECKING:
    from pathlib import Path

    from sparkbuild.checks.check_plan import GencodeCoverage
    from sparkbuild.jobplan.machine import BuildPlan
    from sparkbuild.toolchain.sass import Coverage, SassSummary

UnitStatus = Literal["ok", "failed", "skipped-missing-headers", "skipped-missing-sources",
                     "not-built"]
STATUSES: tuple[UnitStatus, ...] = ("ok", "failed", "skipped-missing-headers",
                                    "skipped-missing-sources", "not-built")
HEADERS_HINT = (
    "CUTLASS headers: set VLLM_CUTLASS_SRC_DIR to a CUTLASS checkout at the tag the tree "
    "pins (offline: `git archive` that tag from a local mirror, or unpack the "
    "nvidia-cutlass wheel from the package index and use its cutlass_library/source); "
    "CUDA library headers (cuBLAS, cuSPARSE, cuSOLVER): the full toolkit, or "
    "`pip install 'sparkbuild[check]'`")



def _command(command: tuple[str, ...]) -> str | None:
    return format_command(command) if command else None


@dataclass(frozen=True)
class UnitOutcome(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "path", "status", "reason", "seconds", "target", "gencode", "missing_headers", "sass",
        "why", "coverage",
    )

    path: str
    status: UnitStatus
    """One of :data:`STATUSES`; not-built: the tree's CMake does not compile it."""
    reason: str
    seconds: float = field(default=0.0, metadata=as_json(dump=rounded(2)))
    target: str | None = None
    gencode: tuple[str, ...] = ()
    missing_headers: tuple[str, ...] = ()
    log: Path | None = None
    command: tuple[str, ...] = field(default=(), metadata=as_json(dump=_command))
    sass: SassSummary | None = field(default=None, metadata=as_json(skip=True))
    why: str = ""
    """Why check chose it: touched, gencode, named, all."""
    guard_stubs: tuple[str, ...] = field(default=(), metadata=as_json(skip=True))
    """Kernels that only print and trap or exit (trap-only ones included)."""
    coverage: tuple[Coverage, ...] = ()
    """Every kernel of the object per target arch: native, PTX only or none."""
    coverage_failure: str | None = field(default=None, metadata=as_json(skip=True))
    """Why its kernels fail: no code for a target, or PTX only without ``allow_jit``."""

    def json_extra(self) -> dict[str, Any]:
        return {"sass": ({**self.sass.to_dict(), "guard_stub_kernels": list(self.guard_stubs)}
                         if self.sass else None)}


@dataclass
class CheckResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "tree", "archs", "nvcc", "selection", "touched", "gencode_changed", "units", "counts",
        "plan", "configure_stops", "notes", "seconds", "allow_jit", "no_target_sass",
    )

    tree: Path
    archs: tuple[str, ...]
    nvcc: str
    touched: list[str]
    units: list[UnitOutcome]
    plan: BuildPlan
    configure_stops: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = field(default=0.0, metadata=as_json(dump=rounded(2)))
    gencode_changed: list[str] = field(default_factory=list)
    selection: str = "series"
    """series (touched or gencode moved), named (--unit) or all (--all)."""
    no_target_sass: list[GencodeCoverage] = field(default_factory=list)
    """Units of the build whose recorded gencode gives a target no SASS."""
    allow_jit: bool = False

    def gencode_problems(self) -> list[GencodeCoverage]:
        """The units of :attr:`no_target_sass` that fail: no code, or PTX without allow_jit;
        with ``--unit``, only the named units' (the others are reported, not failed)."""
        named = {u.path for u in self.units}
        return [u for u in self.no_target_sass if refused(u.kind, allow_jit=self.allow_jit)
                and (self.selection != "named" or u.unit in named)]

    def with_status(self, status: UnitStatus) -> list[UnitOutcome]:
        return [unit for unit in self.units if unit.status == status]

    def problems(self) -> list[tuple[type[SparkbuildError], str]]:
        """Every reason this check is not a pass, most serious first."""
        found: list[tuple[type[SparkbuildError], str]] = []
        failed = self.with_status("failed")
        traps = [f"{u.path}: {len(u.guard_stubs)} kernel(s), "
                 f"{len(u.sass.trap_only_kernels) if u.sass else 0} trap-only: "
                 + kernel_names(u.guard_stubs) for u in failed if u.guard_stubs]
        if traps:
            found.append((CommandFailed, "kernels for the target arch compiled to a trap or "
                          "a printf-and-exit stub by a feature guard: " + "; ".join(traps)))
        uncovered = [f"{u.path}: {u.coverage_failure}" for u in failed if u.coverage_failure]
        if uncovered:
            found.append((CommandFailed, "kernels without native code for the target (set "
                          "allow_jit = true under [target] to accept PTX-only ones): "
                          + "; ".join(uncovered)))
        lacking = self.gencode_problems()
        if lacking:
            found.append((CommandFailed, f"{len(lacking)} unit(s) of the build get no SASS for "
                          "the target from their gencode: "
                          + "; ".join(u.describe() for u in lacking)))
        broken = [u.path for u in failed if not u.guard_stubs and not u.coverage_failure]
        if broken:
            found.append((CommandFailed, f"{len(broken)} unit(s) failed to compile for "
                          f"{', '.join(self.archs)}: {', '.join(broken)}"))
        for status in ("skipped-missing-headers", "skipped-missing-sources"):
            skipped = self.with_status(status)
            if skipped:
                found.append((ToolchainError, f"{len(skipped)} unit(s) {status}: "
                              + "; ".join(f"{u.path} ({u.reason})" for u in skipped)))
        if not self.with_status("ok") and not self.with_status("failed"):
            found.append((ToolchainError, "no unit was compiled: a check that compiled "
                          "nothing is not a pass"))
        found += [(ToolchainError, f"the real configure would stop: {stop}")
                  for stop in self.configure_stops]
        return found

    @property
    def error(self) -> SparkbuildError | None:
        problems = self.problems()
        if not problems:
            return None
        kind = problems[0][0]
        where = next((f"log: {u.log}" for u in self.with_status("failed") if u.log), None)
        headers = any(u.status == "skipped-missing-headers" for u in self.units)
        if headers:
            hint = HEADERS_HINT
        elif kind is CommandFailed:
            hint = ("the full build would fail the same way; fix the series (or the target: "
                    "12.1a) and run check again")
        elif self.configure_stops:
            hint = ("the real build stops at configure too: fix what it names (for an old "
                    "GCC, point CXX and CUDAHOSTCXX at a newer one) and run check again")
        else:
            hint = "name units with --unit PATH, or check every unit with --all"
        return kind("\n".join(text for _, text in problems), where=where, hint=hint)

    def json_extra(self) -> dict[str, Any]:
        return {"counts": {status: len(self.with_status(status)) for status in STATUSES},
                "coverage": self.coverage_counts()}

    def coverage_counts(self) -> dict[str, dict[str, int]]:
        """Per target: kernels native, PTX only and none over every compiled unit."""
        totals: dict[str, dict[str, int]] = {}
        for unit in self.units:
            for cover in unit.coverage:
                into = totals.setdefault(cover.target, {"native": 0, "ptx": 0, "none": 0})
                for kind, count in cover.counts().items():
                    into[kind] += count
        return totals

    def summary(self) -> list[str]:
        lines = [f"check of {self.tree} for {', '.join(self.archs)} with nvcc {self.nvcc} "
                 f"({self.plan.max_jobs} job(s), {self.seconds:.0f} s)"]
        for unit in self.units:
            arch = f" [{' '.join(unit.gencode)}]" if unit.gencode else ""
            sass = (f" sass {unit.sass.arch}: {unit.sass.instructions} instr, "
                    f"{unit.sass.block_scaled_mma} block-scaled MMA") if unit.sass else ""
            kernels = "".join(f"; kernels {c.describe()}" for c in unit.coverage)
            lines.append(f"  {unit.status:24} {unit.path}{arch} {unit.seconds:.0f} s{sass}"
                         f"{kernels} -- {unit.reason}")
        lines.extend(f"  no SASS from the gencode: {u.describe()}" for u in self.no_target_sass)
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.extend(f"  the real configure would stop: {stop}" for stop in self.configure_stops)
        lines.append("  " + ", ".join(f"{len(self.with_status(s))} {s}" for s in STATUSES))
        return lines
