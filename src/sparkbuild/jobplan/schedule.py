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


@dataclass(frozen=True)
class TeamSchedule:
    makespan: float
    host_busy: float
    """Core-seconds the build host's cores worked (local steps and fallbacks)."""
    remote_busy: float
    fallback_seconds: float
    """Remote work that found every server slot taken and ran on the build host."""
    server_peak: float
    """The highest sum of the peaks of the steps in flight on one server."""


@dataclass(frozen=True, kw_only=True)
class TeamShape:
    """The machines of a team build, as sccache-dist uses them (:func:`simulate_team`)."""

    host_cores: int
    servers: Sequence[int]
    """Each build server's cores."""
    local_share: float | Sequence[float]
    """The part of a unit's seconds that holds a core of the build host (preprocessing,
    fatbinary, what sccache adds): one share, or each unit's."""
    host_slots: int | None = None
    """The gate (sparkbuild.team.heavy_gate): the pooled units' work on the build host --
    their local share and their fallbacks -- on this many of its cores, the others' on the
    rest; None: every unit's on every core."""
    start_delay: float = 0.0
    """When the servers start work (the client packaging its toolchains)."""


class _Host:
    """The build host's cores: one queue, or the gate's two (pooled units / the others)."""

    def __init__(self, shape: TeamShape, pooled: set[int]) -> None:
        cores = max(1, shape.host_cores)
        slots = shape.host_slots
        self.split = slots is not None and 0 < slots < cores
        self.pooled = pooled
        heavy = slots if self.split and slots is not None else 0
        self.free = [max(1, cores - heavy), heavy]
        self.queue: list[deque[tuple[int, float]]] = [deque(), deque()]

    def side(self, unit: int) -> int:
        return 1 if self.split and unit in self.pooled else 0


def _per_unit(value: float | Sequence[float], count: int) -> list[float]:
    return [float(value)] * count if isinstance(value, (int, float)) else list(value)


def simulate_team(seconds: Sequence[float], peaks: Sequence[float], shape: TeamShape, *,
                  transfer: Sequence[float] | None = None, jobs: int | None = None,
                  pool: Collection[int] = (), depth: int = 0) -> TeamSchedule:
    """Units ``0..n-1`` in order, as sccache-dist runs them on ``shape``: each first holds a
    core of the build host for its local share (``shape.local_share``: one share, or each
    unit's), then its remote part (plus ``transfer`` seconds) on the least-loaded server
    with a free core, or -- every server full -- on the build host (sccache's local
    fallback; with ``shape.host_slots``, a pooled unit's only on the gate's slots).  At most
    ``jobs`` units in flight (default: every core of the team), the ``pool`` units at most
    ``depth`` at once; the servers start work at ``shape.start_delay``.  Dependencies are
    not modelled, as in :func:`simulate`."""
    count = len(seconds)
    if len(peaks) != count:
        raise ValueError("seconds and peaks differ in length")
    servers = list(shape.servers)
    shares = _per_unit(shape.local_share, count)
    moves = transfer or [0.0] * count
    limit = max(1, jobs or shape.host_cores + sum(servers))
    depth = max(1, depth)
    waiting = deque(range(count))
    pooled = set(pool)
    host = _Host(shape, pooled)
    events: list[tuple[float, int, int, int]] = []  # (time, order, kind, unit): kind 0 local
    running = [0] * len(servers)                     # done, 1 remote done on server / host
    memory = [0.0] * len(servers)
    where: dict[int, int] = {}
    now = host_busy = remote_busy = fallback = server_peak = 0.0
    in_flight = in_pool = order = 0

    def on_host(unit: int, work: float) -> None:
        nonlocal host_busy, order
        side = host.side(unit)
        if host.free[side]:
            host.free[side] -= 1
            host_busy += work
            order += 1
            heapq.heappush(events, (now + work, order, 0, unit))
        else:
            host.queue[side].append((unit, work))

    def start_units() -> None:
        nonlocal in_flight, in_pool
        while waiting and in_flight < limit:
            unit = next((u for u in waiting if u not in pooled or in_pool < depth), None)
            if unit is None:
                return
            waiting.remove(unit)
            in_flight += 1
            in_pool += unit in pooled
            on_host(unit, seconds[unit] * shares[unit])

    start_units()
    remote_phase: set[int] = set()
    while events:
        now, _, kind, unit = heapq.heappop(events)
        if kind == 0:  # a host core is free again
            side = host.side(unit)
            host.free[side] += 1
            if host.queue[side]:
                on_host(*host.queue[side].popleft())
        if kind == 0 and unit not in remote_phase:  # the local part ended: out it goes
            remote_phase.add(unit)
            work = seconds[unit] * (1.0 - shares[unit])
            free = [i for i, cores in enumerate(servers) if running[i] < cores]
            if free:
                chosen = min(free, key=lambda i: (running[i] / servers[i], i))
                running[chosen] += 1
                memory[chosen] += peaks[unit]
                server_peak = max(server_peak, memory[chosen])
                where[unit] = chosen
                remote_busy += work
                order += 1
                begins = max(now, shape.start_delay)
                heapq.heappush(events, (begins + work + moves[unit], order, 1, unit))
            else:
                fallback += work
                on_host(unit, work)
            continue
        if kind == 1:
            chosen = where.pop(unit)
            running[chosen] -= 1
            memory[chosen] -= peaks[unit]
        in_flight -= 1
        in_pool -= unit in pooled
        start_units()
    return TeamSchedule(now, host_busy, remote_busy, fallback, server_peak)
