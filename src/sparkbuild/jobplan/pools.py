"""Every core busy, never out of memory: the build's job plan.

The single plan gives every unit the worst unit's memory (MAX_JOBS = min(cores, memory /
budget)), which leaves cores idle while light units compile.  The pool plan gives the
build every core (MAX_JOBS = cores) and puts the units known to be heavy into a ninja job
pool, :data:`HEAVY_POOL`, whose depth is what the memory holds: ``depth`` heavy units
and ``cores - depth`` light ones at once fit the usable memory.

Which units are heavy: those whose measured peak (:mod:`sparkbuild.jobplan.unit_memory`) is
above their fair share of memory (usable / cores); a unit never measured is judged by
:data:`HEAVY_PATTERNS` (CUTLASS GEMMs and the like), the rule the first build uses. A unit
killed for memory is heavy from then on (the test itself:
:func:`sparkbuild.jobplan.heavy_units.is_heavy`, the one the ninja wrapper applies). The
pool itself is declared by sparkbuild's top-level CMake include (``JOB_POOLS``); the ninja
wrapper (:mod:`sparkbuild.jobplan.ninja_shim`) puts the heavy units' edges into it after
CMake wrote ``build.ninja``, from the plan file :func:`write_plan_file` writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from sparkbuild.jobplan.heavy_units import is_heavy, rule_match
from sparkbuild.jobplan.schedule import KnownUnit, simulate
from sparkbuild.jobplan.unit_order import longest_first, max_by_source
from sparkbuild.records import Record, as_json, rounded
from sparkbuild.settings import JOB_PLAN
from sparkbuild.store.files import write_text_atomic

GIB = 1024**3
HEAVY_POOL = "sparkbuild_heavy"
SWITCH_VARIABLE = JOB_PLAN.name
"""``single``: the single plan (one MAX_JOBS for every unit, no pool); else the pool plan."""
OLD_MAKESPAN_KEY = "today_makespan_s"
"""The former name of ``single_plan_makespan_s`` in ``build_plan.pool``, which
docs/check-and-verify.md named: written beside it, with the same value, for one release."""

HEAVY_PATTERNS = (
    r"cutlass", r"scaled_mm", r"gemm", r"gemv", r"mma", r"fp4", r"machete",
    r"allspark", r"_sm90", r"_sm100", r"_sm120", r"flashmla", r"moe_data",
)
"""The first build's rule, on a unit's source path (case-insensitive): CUTLASS and GEMM
kernels and the like are the units that took 4 to 11 GiB in measured vLLM builds.

FlashAttention-2's units (``csrc/flash_attn/src/flash_fwd_*_sm80.cu``) are not in it: at 12.1a
all 55 peaked at 3.9 to 4.2 GiB on 16 cores (bench/full-build/part1), and counting them
heavy at 8.7 GiB kept 3 of the 16 cores idle for the whole part (busy 0.68).  FA3's
Hopper units still are (``_sm90``).  Nor are Marlin's (``gptq_marlin``, ``marlin_moe_wna16``):
at 12.1a all 33 peaked at 2.4 to 2.7 GiB (bench/full-build/part2-3)."""

LIGHT_UNIT_GIB = 3.0
"""A unit outside the rule, before anything is measured: cc1plus and cudafe++ peaked at
2.9 GiB on vLLM's torch-including units (bench/real-build/nvcc-memory.json)."""

HEADROOM = 1.15
"""Measured peaks are scaled by this before planning (a sample can miss the very top)."""


def pools_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the plan is the pool plan (``$SPARKBUILD_JOB_PLAN`` is not ``single``)."""
    return JOB_PLAN.choice(environ) != "single"



def _in_gib(size: int) -> float:
    return round(size / GIB, 2)


_round = rounded(1)


@dataclass(frozen=True)
class PoolPlan(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "pool", "jobs", "depth", "basis", "threshold_gib", "heavy_budget_gib", "light_budget_gib",
        "measured_units", "heavy_measured", "patterns", "killed", "reasons", "single_plan_jobs",
        "predicted_makespan_s", "single_plan_makespan_s", OLD_MAKESPAN_KEY,
    )

    jobs: int
    """MAX_JOBS: every core (per nvcc thread)."""
    depth: int
    """How many heavy units may compile at once."""
    basis: str
    """``rule`` (nothing measured yet) or ``measured``."""
    threshold_bytes: int = field(metadata=as_json("threshold_gib", dump=_in_gib))
    """A measured unit above this peak is heavy: the fair share, usable memory / jobs."""
    heavy_budget_bytes: int = field(metadata=as_json("heavy_budget_gib", dump=_in_gib))
    light_budget_bytes: int = field(metadata=as_json("light_budget_gib", dump=_in_gib))
    measured: Mapping[str, int] = field(default_factory=dict,
                                        metadata=as_json("measured_units", dump=len))
    """``source|flags`` -> peak bytes, for this target arch."""
    patterns: tuple[str, ...] = HEAVY_PATTERNS
    killed: tuple[str, ...] = ()
    """Sources killed for memory before: heavy whatever was measured."""
    reasons: tuple[str, ...] = ()
    single_plan_jobs: int = 0
    """The single plan's MAX_JOBS on the same machine (one budget for every unit)."""
    predicted_seconds: float | None = field(
        default=None, metadata=as_json("predicted_makespan_s", dump=_round))
    """The simulated compile makespan of this plan (measured basis only)."""
    single_plan_seconds: float | None = field(
        default=None, metadata=as_json("single_plan_makespan_s", dump=_round))
    """... and of the single plan, on the same unit table."""
    seconds: Mapping[str, float] = field(default_factory=dict,
                                         metadata=as_json("timed_units", dump=len))
    """``source|flags`` -> measured seconds: the ninja wrapper starts units longest first."""
    local_depth: int | None = field(default=None, metadata=as_json(skip=True))
    """With dist: the heavy units the build host's own memory holds (the local plan's
    depth), its slots for steps that fall back (sparkbuild.team.heavy_gate); None: no
    dist, ``depth`` is the local one."""
    local_jobs: int | None = field(default=None, metadata=as_json(skip=True))
    """With dist: the local plan's MAX_JOBS (the build host's compile slots)."""
    table: tuple[KnownUnit, ...] = field(default=(), repr=False, metadata=as_json(skip=True))
    """The unit table the plan was simulated on (with dist, the team's candidates are
    simulated on it too: sparkbuild.jobplan.team_pool); () for the first build."""

    @property
    def peak_threshold(self) -> float:
        """A unit whose measured peak is above this is heavy (the threshold before the
        headroom): what the plan file gives the ninja wrapper."""
        return self.threshold_bytes / HEADROOM

    def heavy_measured(self) -> list[str]:
        return sorted(k.split("|")[0] for k, v in self.measured.items()
                      if v * HEADROOM > self.threshold_bytes)

    def json_extra(self) -> dict[str, Any]:
        return {"pool": HEAVY_POOL, "heavy_measured": self.heavy_measured(),
                OLD_MAKESPAN_KEY: _round(self.single_plan_seconds),
                "local_depth": self.depth if self.local_depth is None else self.local_depth}


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def pool_depth(usable: float, jobs: int, heavy: float, light: float) -> int:
    """The most heavy units that may run beside ``jobs - depth`` light ones in ``usable``."""
    if heavy <= light:
        return jobs
    return max(1, min(jobs, math.floor((usable - jobs * light) / (heavy - light))))


def rule_jobs(usable: float, jobs: int, heavy: float, light: float) -> int:
    """At most ``jobs``, and few enough that one heavy unit beside the light ones fits
    ``usable`` (at least one job)."""
    if heavy + (jobs - 1) * light <= usable or light <= 0:
        return jobs
    return max(1, min(jobs, 1 + math.floor((usable - heavy) / light)))


def jobs_by_cores(cores: int, nvcc_threads: int = 1) -> int:
    """Every core busy: one job per ``nvcc_threads`` cores (at least one)."""
    return max(1, cores // max(1, nvcc_threads))


def jobs_by_memory(usable_bytes: float, job_memory_gib: float, nvcc_threads: int = 1) -> int:
    """How many jobs of ``job_memory_gib`` per nvcc thread ``usable_bytes`` hold (maybe 0)."""
    return math.floor(usable_bytes / (job_memory_gib * GIB * max(1, nvcc_threads)))


def single_plan_jobs(cores: int, usable_bytes: float, job_memory_gib: float,
                     nvcc_threads: int = 1) -> int:
    """The single plan: one MAX_JOBS for every unit, each budgeted ``job_memory_gib``."""
    return max(1, min(jobs_by_cores(cores, nvcc_threads),
                      jobs_by_memory(usable_bytes, job_memory_gib, nvcc_threads)))


def fitting_depth(heavy: list[float], light: list[float], jobs: int,
                  usable: float) -> int | None:
    """The largest depth at which the ``depth`` largest heavy peaks and the
    ``jobs - depth`` largest light ones fit ``usable`` together (both lists largest
    first); ``jobs`` when every heavy unit fits; None when not even one does."""
    if not heavy:
        return jobs if sum(light[:jobs]) <= usable else None
    best = None
    heavy_sum = 0.0
    for depth in range(1, min(jobs, len(heavy)) + 1):
        heavy_sum += heavy[depth - 1]
        if heavy_sum + sum(light[:jobs - depth]) > usable:
            break
        best = depth
    if best is not None and best == min(jobs, len(heavy)):
        return jobs
    return best


@dataclass(frozen=True)
class _Unit:
    seconds: float
    peak: float
    """Measured peak x HEADROOM, or the rule's estimate."""
    measured: bool
    rule: bool
    killed: bool

    def heavy(self, threshold: float) -> bool:
        """An unmeasured unit the rule names counts while its estimate (the per-job budget)
        is above ``threshold``: the plan keeps the rule's patterns only then."""
        return is_heavy(self.peak if self.measured else None, threshold, killed=self.killed,
                        by_rule=self.rule and self.peak > threshold)


@dataclass(frozen=True)
class _Candidate:
    threshold: float
    depth: int
    pooled: frozenset[int]
    fits: bool
    makespan: float
    peak: float
    jobs: int


def _table(known: Sequence[KnownUnit], measured: Mapping[str, int], killed: tuple[str, ...],
           heavy_est: float, light_est: float) -> list[_Unit]:
    units = list(known) or [KnownUnit(key.split("|")[0], key.partition("|")[2], 1.0, peak)
                            for key, peak in measured.items()]
    table = []
    for unit in sorted(units, key=lambda u: u.start) if known else units:
        peak = unit.peak_bytes or measured.get(f"{unit.source}|{unit.flags}")
        rule = rule_match(unit.source, HEAVY_PATTERNS)
        table.append(_Unit(max(0.0, unit.seconds), peak * HEADROOM if peak else
                           (heavy_est if rule else light_est), bool(peak), rule,
                           unit.source in killed))
    return table


def _candidates(table: list[_Unit], jobs: int, usable: float, fair: float, *,
                below_fair: bool = False) -> list[_Candidate]:
    """One candidate per threshold at or above the fair share (``below_fair``: at every
    peak, and only those that fit), each at the largest depth that fits ``usable``."""
    seconds = [u.seconds for u in table]
    peaks = [u.peak for u in table]
    out = []
    for threshold in sorted({fair, *(p for p in peaks if p > fair or below_fair)}):
        pooled = frozenset(i for i, u in enumerate(table) if u.heavy(threshold))
        heavy = sorted((peaks[i] for i in pooled), reverse=True)
        light = sorted((p for i, p in enumerate(peaks) if i not in pooled), reverse=True)
        fitting = fitting_depth(heavy, light, jobs, usable)
        if fitting is None and (threshold > fair or below_fair):
            continue  # the light units alone may not fit: not a candidate
        depth = fitting or 1
        run = simulate(seconds, peaks, jobs, pooled, depth)
        out.append(_Candidate(threshold, depth, pooled, fitting is not None, run.makespan,
                              run.peak, jobs))
    return out


def _fitting(table: list[_Unit], jobs: int, usable: float, fair: float) -> list[_Candidate]:
    """The candidates with every core; when none of them fits memory (one heavy unit
    beside ``jobs - 1`` light ones is too much: a 10 GiB unit on a 16 GB runner), those
    that do with fewer jobs and more units pooled, down to one job at a time."""
    found = _candidates(table, jobs, usable, fair)
    if any(c.fits for c in found):
        return found
    fewer = [c for n in range(jobs, 0, -1)
             for c in _candidates(table, n, usable, usable / n, below_fair=True)]
    return fewer or found


def _fastest(found: list[_Candidate]) -> _Candidate:
    return min(found, key=lambda c: (not c.fits, c.makespan, c.threshold))


def plan_pools(
    *, cores: int, usable_bytes: float, job_memory_gib: float, nvcc_threads: int = 1,
    measured: Mapping[str, int] | None = None, killed: tuple[str, ...] = (),
    known: Sequence[KnownUnit] | None = None,
) -> PoolPlan:
    """The pool plan for ``cores`` and ``usable_bytes`` (memory less the system's share).

    With a unit table from earlier builds (``known``: seconds and peaks; or ``measured``
    peaks alone), every candidate threshold at or above the fair share gets the largest
    depth that fits memory, and the candidate with the shortest simulated makespan wins
    -- unless the single plan is predicted faster: then heavy units keep its limit.
    Without one (the first build), the rule decides which units are heavy.
    """
    measured = dict(measured or {})
    known = list(known or ())
    threads = max(1, nvcc_threads)
    jobs = jobs_by_cores(cores, threads)
    single = single_plan_jobs(cores, usable_bytes, job_memory_gib, threads)
    fair = usable_bytes / jobs
    heavy_est = job_memory_gib * GIB * threads
    light_est = min(LIGHT_UNIT_GIB * GIB * threads, heavy_est)
    reasons = [f"MAX_JOBS={jobs}: every core ({cores} / {threads} nvcc thread(s)); the single "
               f"plan would give every unit {job_memory_gib:g} GiB: MAX_JOBS={single}"]
    if not measured and not known:
        fit_jobs = rule_jobs(usable_bytes, jobs, heavy_est, light_est)
        if fit_jobs < jobs:
            reasons.append(
                f"MAX_JOBS={fit_jobs}: one heavy unit ({_gib(heavy_est)}) beside {jobs - 1} "
                f"light ones ({_gib(light_est)} each) is over {_gib(usable_bytes)} usable")
            jobs = fit_jobs
        depth = pool_depth(usable_bytes, jobs, heavy_est, light_est)
        reasons += [
            f"rule (nothing measured yet): units whose path matches CUTLASS/GEMM/FP4 and the "
            f"like go into the pool, budgeted {_gib(heavy_est)} each (job_memory_gib); others "
            f"{_gib(light_est)}",
            f"pool {HEAVY_POOL} depth {max(depth, single)}: memory holds {depth} heavy beside "
            f"{jobs - depth} light unit(s) ({_gib(depth * heavy_est + (jobs - depth) * light_est)}"
            f" of {_gib(usable_bytes)} usable); heavy units never get fewer slots than "
            f"the single plan's MAX_JOBS={single}"]
        depth = min(jobs, max(depth, single))
        return PoolPlan(jobs, depth, "rule", int(fair), int(heavy_est), int(light_est),
                        measured, HEAVY_PATTERNS, killed, (*reasons, _RETRY),
                        single_plan_jobs=single)
    table = original = _table(known, measured, killed, heavy_est, light_est)
    baseline = simulate([u.seconds for u in table], [u.peak for u in table], single)
    unit_seconds = {f"{u.source}|{u.flags}": max(0.0, u.seconds) for u in known}
    # the single plan starts the units in the table's order (the earlier build's); the pool
    # plan longest first, as the ninja wrapper lists them -- unless that is predicted slower
    found = in_order = _fitting(table, jobs, usable_bytes, fair)
    starts_longest = False
    if unit_seconds:
        longest = [table[i] for i in longest_first([u.seconds for u in table])]
        by_longest = _fitting(longest, jobs, usable_bytes, fair)
        if _fastest(by_longest).makespan <= _fastest(in_order).makespan * (1 + 1e-9):
            table, found, starts_longest = longest, by_longest, True
    seconds, peaks = [u.seconds for u in table], [u.peak for u in table]
    best = _fastest(found)
    if best.jobs < jobs:
        reasons.append(
            f"MAX_JOBS={best.jobs}: with every core no plan fits memory (the heaviest unit "
            f"beside {jobs - 1} light ones is over {_gib(usable_bytes)}); fewer jobs and "
            f"every unit above {_gib(best.threshold)} pooled do")
        jobs = best.jobs
    timed = "seconds" if known else "no seconds known: units counted alike"
    reasons.append(
        f"measured: {len(table)} unit(s) from earlier builds ({timed}); the heaviest took "
        f"{_gib(max((u.peak / HEADROOM for u in table if u.measured), default=0.0))}; "
        f"{len(found)} candidate threshold(s) at or above the fair share "
        f"{_gib(fair)}, each at the largest depth that fits memory with every peak "
        f"(x{HEADROOM:g}) at once, simulated")
    if best.makespan > baseline.makespan * (1 + 1e-9):
        at_fair = found[0]
        floor = _Candidate(fair, max(at_fair.depth, single), at_fair.pooled, False, 0.0, 0.0,
                           jobs)
        run = simulate(seconds, peaks, jobs, floor.pooled, floor.depth)
        reasons.append(
            f"memory fits depth {best.depth} at best, predicted {best.makespan:.0f} s: slower "
            f"than the single plan ({baseline.makespan:.0f} s, which relies on the "
            f"{job_memory_gib:g} GiB budget); heavy units keep its limit")
        if run.makespan <= baseline.makespan * (1 + 1e-9):
            best = _Candidate(fair, floor.depth, floor.pooled, False, run.makespan, run.peak,
                              jobs)
        else:  # the single plan itself, in its order
            table, starts_longest = original, False
            seconds, peaks = [u.seconds for u in table], [u.peak for u in table]
            jobs, best = single, _Candidate(fair, single, in_order[0].pooled, False,
                                            baseline.makespan, baseline.peak, single)
            reasons.append(f"MAX_JOBS={single}: the single plan itself (no pool plan is predicted "
                           "faster)")
    if starts_longest:
        reasons.append(
            f"units start longest first: {len(unit_seconds)} timed unit(s), the longest "
            f"{max(unit_seconds.values()):.0f} s at once (the single plan starts them in CMake's "
            "order); an untimed unit counts as the longest")
    heavy = [peaks[i] for i in best.pooled]
    light = [p for i, p in enumerate(peaks) if i not in best.pooled]
    rule_heavy = heavy_est > best.threshold
    reasons.append(
        f"pool {HEAVY_POOL} depth {best.depth}: the {len(heavy)} unit(s) above "
        f"{_gib(best.threshold)}" + (" (and those killed for memory)" if killed else "")
        + f"; predicted compile {best.makespan:.0f} s vs the single plan's "
        f"{baseline.makespan:.0f} s (MAX_JOBS={single}); peaks (x{HEADROOM:g}) in flight "
        f"{_gib(best.peak)} "
        f"(its {_gib(baseline.peak)}) of {_gib(usable_bytes)} usable"
        + (f"; unmeasured units matching the rule count {_gib(heavy_est)}"
           if rule_heavy else "; unmeasured units are light"))
    # strictly above the chosen level: a unit whose peak is the level itself stays light
    return PoolPlan(jobs, best.depth, "measured", int(best.threshold) + 1,
                    int(max(heavy, default=0.0)), int(max(light, default=0.0)), measured,
                    HEAVY_PATTERNS if rule_heavy else (), killed, (*reasons, _RETRY),
                    single_plan_jobs=single, predicted_seconds=best.makespan,
                    single_plan_seconds=baseline.makespan,
                    seconds=unit_seconds if starts_longest else {}, table=tuple(known))


_RETRY = "a unit killed for memory (SIGKILL, exit 137) is retried in the pool"


def heavy_indices(plan: PoolPlan, units: Sequence[KnownUnit]) -> set[int]:
    """Which of ``units`` the plan pools: the ninja wrapper's test
    (:func:`sparkbuild.jobplan.heavy_units.is_heavy`) on what the plan file says."""
    return {index for index, unit in enumerate(units) if is_heavy(
        unit.peak_bytes or plan.measured.get(f"{unit.source}|{unit.flags}"),
        plan.peak_threshold, killed=unit.source in plan.killed,
        by_rule=rule_match(unit.source, plan.patterns))}


def write_plan_file(plan: PoolPlan, path: Path, tree: Path) -> Path:
    """The file the ninja wrapper reads (see :mod:`sparkbuild.jobplan.ninja_shim`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"pool": HEAVY_POOL, "depth": plan.depth, "tree": str(tree),
            "threshold": plan.peak_threshold, "patterns": list(plan.patterns),
            "measured": dict(plan.measured), "by_source": max_by_source(plan.measured),
            "killed": list(plan.killed), "seconds": dict(plan.seconds),
            "by_source_seconds": max_by_source(plan.seconds)}
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
    return path
