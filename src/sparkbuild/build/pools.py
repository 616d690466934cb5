"""Every core busy, never out of memory: the build's job plan.

Today's plan gives every unit the worst unit's memory (MAX_JOBS = min(cores, memory /
budget)), which leaves cores idle while light units compile.  The pool plan gives the
build every core (MAX_JOBS = cores) and puts the units known to be heavy into a ninja job
pool, :data:`HEAVY_POOL`, whose depth is what the memory holds: ``depth`` heavy units
and ``cores - depth`` light ones at once fit the usable memory.

Which units are heavy: those whose measured peak (:mod:`sparkbuild.build.unit_memory`)
is above their fair share of memory (usable / cores); a unit never measured is judged by
:data:`HEAVY_PATTERNS` (CUTLASS GEMMs and the like), the rule the first build uses.  A
unit killed for memory is heavy from then on.  The pool itself is declared by
sparkbuild's top-level CMake include (``JOB_POOLS``); the ninja wrapper
(:mod:`sparkbuild.build.ninja_shim`) puts the heavy units' edges into it after CMake
wrote ``build.ninja``, from the plan file :func:`write_plan_file` writes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3
HEAVY_POOL = "sparkbuild_heavy"
PLAN_VARIABLE = "SPARKBUILD_POOL_PLAN"
DEPTH_VARIABLE = "SPARKBUILD_HEAVY_POOL_DEPTH"
SWITCH_VARIABLE = "SPARKBUILD_JOB_PLAN"
"""``single``: today's plan (one MAX_JOBS for every unit, no pool); else the pool plan."""

HEAVY_PATTERNS = (
    r"cutlass", r"scaled_mm", r"gemm", r"gemv", r"mma", r"fp4", r"marlin", r"machete",
    r"allspark", r"_sm90", r"_sm100", r"_sm120", r"flash_?attn", r"flashmla", r"moe_data",
)
"""The first build's rule, on a unit's source path (case-insensitive): CUTLASS and GEMM
kernels and the like are the units that took 4 to 11 GiB in measured vLLM builds."""

LIGHT_UNIT_GIB = 3.0
"""A unit outside the rule, before anything is measured: cc1plus and cudafe++ peaked at
2.9 GiB on vLLM's torch-including units (bench/real-build/nvcc-memory.json)."""

HEADROOM = 1.15
"""Measured peaks are scaled by this before planning (a sample can miss the very top)."""


def pools_enabled() -> bool:
    return os.environ.get(SWITCH_VARIABLE, "pools").strip().lower() != "single"


@dataclass(frozen=True)
class PoolPlan:
    jobs: int
    """MAX_JOBS: every core (per nvcc thread)."""
    depth: int
    """How many heavy units may compile at once."""
    basis: str
    """``rule`` (nothing measured yet) or ``measured``."""
    threshold_bytes: int
    """A measured unit above this peak is heavy: the fair share, usable memory / jobs."""
    heavy_budget_bytes: int
    light_budget_bytes: int
    measured: Mapping[str, int] = field(default_factory=dict)
    """``source|flags`` -> peak bytes, for this target arch."""
    patterns: tuple[str, ...] = HEAVY_PATTERNS
    killed: tuple[str, ...] = ()
    """Sources killed for memory before: heavy whatever was measured."""
    reasons: tuple[str, ...] = ()

    def heavy_measured(self) -> list[str]:
        return sorted(k.split("|")[0] for k, v in self.measured.items()
                      if v * HEADROOM > self.threshold_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"pool": HEAVY_POOL, "jobs": self.jobs, "depth": self.depth,
                "basis": self.basis, "threshold_gib": round(self.threshold_bytes / GIB, 2),
                "heavy_budget_gib": round(self.heavy_budget_bytes / GIB, 2),
                "light_budget_gib": round(self.light_budget_bytes / GIB, 2),
                "measured_units": len(self.measured),
                "heavy_measured": self.heavy_measured(),
                "patterns": list(self.patterns),
                "killed": list(self.killed), "reasons": list(self.reasons)}


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def pool_depth(usable: float, jobs: int, heavy: float, light: float) -> int:
    """The most heavy units that may run beside ``jobs - depth`` light ones in ``usable``."""
    if heavy <= light:
        return jobs
    return max(1, min(jobs, math.floor((usable - jobs * light) / (heavy - light))))


def plan_pools(
    *, cores: int, usable_bytes: float, job_memory_gib: float, nvcc_threads: int = 1,
    measured: Mapping[str, int] | None = None, killed: tuple[str, ...] = (),
) -> PoolPlan:
    """The pool plan for ``cores`` and ``usable_bytes`` (memory less the system's share)."""
    measured = dict(measured or {})
    threads = max(1, nvcc_threads)
    jobs = max(1, cores // threads)
    fair = usable_bytes / jobs
    reasons = [f"MAX_JOBS={jobs}: every core ({cores} / {threads} nvcc thread(s)); light "
               "units need no more than their share of memory"]
    if measured:
        peaks = sorted(peak * HEADROOM for peak in measured.values())
        heavy = peaks[-1]
        # The light level: units at or below it run anywhere, those above in the pool.
        # Chosen to make the busiest of the two queues shortest (units counted alike).
        best: tuple[float, float] | None = None
        for light_level in sorted({0.0, *peaks}):
            if light_level > fair and light_level < heavy:
                continue
            depth_here = pool_depth(usable_bytes, jobs, heavy, light_level)
            pooled = sum(1 for p in peaks if p > light_level)
            cost = max(len(peaks) / jobs, pooled / depth_here if pooled else 0.0)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, light_level)
        assert best is not None
        light = best[1]
        fair = light + 1.0  # the threshold: strictly above the light level
        heavy_peaks = [p for p in peaks if p > light]
        if not heavy_peaks:
            heavy = light
        basis = "measured"
        reasons.append(
            f"measured: {len(measured)} unit(s) from earlier builds; the heaviest took "
            f"{_gib(max(measured.values()))}; the {len(heavy_peaks)} above {_gib(light)} "
            f"(peaks x{HEADROOM:g}) go into the pool, the level that keeps both the pool's "
            f"queue and the cores busiest{' (and those killed for memory)' if killed else ''}")
    else:
        heavy = job_memory_gib * GIB * threads
        light = min(LIGHT_UNIT_GIB * GIB * threads, heavy)
        basis = "rule"
        reasons.append(
            f"rule (nothing measured yet): units whose path matches CUTLASS/GEMM/FP4 and the "
            f"like go into the pool, budgeted {_gib(heavy)} each (job_memory_gib); others "
            f"{_gib(light)}")
    depth = pool_depth(usable_bytes, jobs, heavy, light)
    reasons.append(
        f"pool {HEAVY_POOL} depth {depth}: {depth} heavy unit(s) x {_gib(heavy)} + "
        f"{jobs - depth} light x {_gib(light)} = {_gib(depth * heavy + (jobs - depth) * light)}"
        f" of {_gib(usable_bytes)} usable" + (" (all jobs: every heavy unit fits)"
                                               if depth == jobs else ""))
    reasons.append("a unit killed for memory (SIGKILL, exit 137) is retried in the pool")
    return PoolPlan(jobs, depth, basis, int(fair), int(heavy), int(light), measured,
                    HEAVY_PATTERNS, killed, tuple(reasons))


def write_plan_file(plan: PoolPlan, path: Path, tree: Path) -> Path:
    """The file the ninja wrapper reads (see :mod:`sparkbuild.build.ninja_shim`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    by_source: dict[str, int] = {}
    for key, peak in plan.measured.items():
        source = key.split("|")[0]
        by_source[source] = max(by_source.get(source, 0), peak)
    data = {"pool": HEAVY_POOL, "depth": plan.depth, "tree": str(tree),
            "threshold": plan.threshold_bytes / HEADROOM, "patterns": list(plan.patterns),
            "measured": dict(plan.measured), "by_source": by_source,
            "killed": list(plan.killed)}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path
