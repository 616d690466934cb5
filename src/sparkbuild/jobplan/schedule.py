"""The makespan of a job plan on a unit table: list scheduling, as ninja does it.

One piece of code for the planner (:func:`sparkbuild.jobplan.pools.plan_pools` chooses
among candidate pools by simulating each) and for ``bench/schedule_sim.py``.  The model:
units start in the table's order (ninja's: the previous build's start order); whenever
one of ``jobs`` slots is free, the next unit that may start takes it -- a pooled unit
only while fewer than ``depth`` pooled units run.  Each unit takes its seconds and holds
its peak memory while it runs; the peak in flight is the highest sum of running peaks.
Dependencies are not modelled (the compile units of one build hardly have any).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownUnit:
    """One unit of an earlier build, as the cache keeps it (sparkbuild.jobplan.unit_memory)."""

    source: str
    flags: str
    seconds: float
    peak_bytes: int | None
    """Measured peak resident memory; None: not measured (judged by the rule)."""
    start: float = 0.0
    """Seconds after the build's first ninja run began: the table's order."""


@dataclass(frozen=True)
class Schedule:
    makespan: float
    peak: float
    """Highest sum of the peaks of the units in flight (in the unit of ``peaks``)."""


def simulate(seconds: Sequence[float], peaks: Sequence[float], jobs: int,
             pool: Collection[int] = (), depth: int = 0) -> Schedule:
    """List scheduling of units ``0..n-1`` (in that order) on ``jobs`` slots, the units
    in ``pool`` at most ``depth`` at once (``depth`` < 1 counts as 1)."""
    if len(seconds) != len(peaks):
        raise ValueError("seconds and peaks differ in length")
    jobs, depth = max(1, jobs), max(1, depth)
    pooled = set(pool)
    heavy = deque(i for i in range(len(seconds)) if i in pooled)
    light = deque(i for i in range(len(seconds)) if i not in pooled)
    running: list[tuple[float, int]] = []
    now = in_flight = peak = 0.0
    in_pool = 0
    while heavy or light or running:
        while len(running) < jobs:
            may_pool = bool(heavy) and in_pool < depth
            if may_pool and (not light or heavy[0] < light[0]):
                index = heavy.popleft()
                in_pool += 1
            elif light:
                index = light.popleft()
            else:
                break
            in_flight += peaks[index]
            heapq.heappush(running, (now + max(0.0, seconds[index]), index))
        peak = max(peak, in_flight)
        now, done = heapq.heappop(running)
        in_pool -= done in pooled
        in_flight -= peaks[done]
    return Schedule(now, peak)
