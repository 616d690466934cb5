"""The heavy pool with dist: its depth from where a heavy unit's memory is spent.

With sccache-dist a unit's cicc and ptxas -- the steps that take a heavy unit's gigabytes
-- run on the build server the scheduler gives them; the build host keeps the
preprocessing, fatbinary and the link (7.4 % of a vLLM unit's CPU, bench/team/
2026-12-05-local-share.json; ``gcc -E`` of a torch unit peaked at 0.23 GB).  So with dist
the pool's depth is what the *servers'* memory and cores hold, by the rule the local plan
applies to one machine (:func:`sparkbuild.jobplan.pools.fitting_depth`: the ``depth``
largest heavy peaks and the largest light ones on the other cores fit the memory), applied
to the team: the scheduler's servers and cpus (its status) and each server's memory
(:class:`ServerMemory`: ``--dist-server-memory GIB``, the recipe's ``[build]
dist_server_memory_gib``, each less the system's share; else the build host's own usable
memory, as a team of alike Sparks has; sccache-dist's status reports no memory).
sccache-dist's scheduler gives a step to the least-loaded server by count, not memory, so
the team's memory is counted as one, the servers taken as alike.

The build host's own memory still bounds what falls back to it: the local plan's depth
is kept as the heavy units' local slots (``PoolPlan.local_depth``), which the gate in
front of sccache enforces (:mod:`sparkbuild.team.heavy_gate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkbuild.errors import UsageError
from sparkbuild.jobplan.pools import (
    GIB,
    HEADROOM,
    PoolPlan,
    fitting_depth,
    heavy_indices,
    pool_depth,
)
from sparkbuild.jobplan.schedule import TeamShape, simulate_team
from sparkbuild.jobplan.unit_order import longest_first
from sparkbuild.recipe import SERVER_MEMORY_HINT, check_job_memory_gib

SERVERS_ALIKE = ("the build host's own: servers taken as alike (--dist-server-memory GIB "
                 "when they are not)")


@dataclass(frozen=True)
class ServerMemory:
    """Each build server's memory, as its ``doctor --build-server`` reports it."""

    size_bytes: float
    by: str
    """Where the figure came from, in words."""
    usable: bool = False
    """``size_bytes`` is already usable (the build host's own); else a total, of which the
    system keeps its share."""

    @property
    def usable_bytes(self) -> float:
        """What a server's steps may use: its memory less the system's share (10 %, at most
        4 GiB, as on the build host)."""
        if self.usable:
            return self.size_bytes
        return max(0.0, self.size_bytes - min(4.0 * GIB, 0.1 * self.size_bytes))


@dataclass(frozen=True)
class TeamFacts:
    """A dist build's team as a second builder plans with it (flashinfer's, alongside):
    the scheduler's servers and cpus at the start, each server's memory."""

    servers: int
    cpus: int
    memory: ServerMemory | None = None


def server_memory(flag_gib: float | None, recipe_gib: float | None) -> ServerMemory | None:
    """``--dist-server-memory``, else the recipe's ``dist_server_memory_gib``; None: neither
    (the build host's own usable memory then counts as each server's)."""
    if flag_gib is not None:
        gib = check_job_memory_gib(flag_gib, where="--dist-server-memory", error=UsageError,
                                   name="--dist-server-memory", hint=SERVER_MEMORY_HINT)
        return ServerMemory(gib * GIB, "--dist-server-memory")
    if recipe_gib is not None:
        return ServerMemory(recipe_gib * GIB, "the recipe's [build] dist_server_memory_gib")
    return None


def split_peaks(pool: PoolPlan) -> tuple[list[float], list[float]]:
    """The measured peaks (x headroom) of the units ``pool`` holds heavy and of the others,
    each largest first."""
    peaks = sorted((p * HEADROOM for p in pool.measured.values()), reverse=True)
    return ([p for p in peaks if p > pool.threshold_bytes],
            [p for p in peaks if p <= pool.threshold_bytes])


def team_depth(pool: PoolPlan, *, servers: int, team_cpus: int, memory: ServerMemory,
               jobs: int) -> tuple[int, str]:
    """The heavy pool's depth on ``servers`` build servers of ``team_cpus`` cpus in all,
    each of ``memory``, at most ``jobs``, never below the local plan's; and why."""
    usable = servers * memory.usable_bytes
    heavy, light = split_peaks(pool)
    if heavy:
        fit = fitting_depth(heavy, light, team_cpus, usable)
        basis = (f"the {min(len(heavy), team_cpus)} largest pooled peaks beside the largest "
                 "light ones on the other cpus")
    else:
        fit = pool_depth(usable, team_cpus, pool.heavy_budget_bytes, pool.light_budget_bytes)
        basis = (f"pooled units at {pool.heavy_budget_bytes / GIB:.1f} GiB beside light ones "
                 f"at {pool.light_budget_bytes / GIB:.1f} GiB")
    depth = min(jobs, max(pool.depth, fit or 0))
    return depth, (
        f"dist: pool depth {depth} from the build servers' memory: {servers} server(s), "
        f"{team_cpus} cpus, {memory.usable_bytes / GIB:.1f} GiB usable each ({memory.by}), "
        f"{usable / GIB:.1f} GiB in all hold {fit or 0} at once ({basis}; the "
        f"local plan's depth {pool.depth} is the floor and stays the build host's local "
        "slots for steps that fall back)")


DIST_LOCAL_SHARE = 0.074
"""What a unit keeps on the build host with dist, of its CPU-seconds: 7.4 % of a real vLLM
unit's (CPU-weighted over four, bench/team/2026-12-05-local-share.json)."""
STEP_ROUND_TRIPS_S = 2.0
"""Four remote steps a unit, 0.5 s of allocation and transfer each (measured 0.2 to 1 s on
loopback under load)."""
TOOLCHAINS_S = 10.0
"""Before a server's first step: the client packs cudafe++, cicc, ptxas and gcc (about
10 s measured) and sends them (85 MB)."""
MOST_DEPTHS = 24


@dataclass(frozen=True)
class DistModel:
    """How the team plan simulates a unit under sccache-dist: what it keeps here (one
    share, or each of ``pool.table``'s units'), its seconds of transfer and round trips,
    and when the servers start.  The defaults are the measured figures above;
    ``bench/schedule_sim.py --team`` gives each table's measured share and bytes."""

    local_share: float | Sequence[float] = DIST_LOCAL_SHARE
    transfer_s: float | Sequence[float] = STEP_ROUND_TRIPS_S
    start_delay_s: float = TOOLCHAINS_S

    def per_unit(self, count: int) -> tuple[list[float], list[float]]:
        """(shares, transfers) of ``count`` units, in the table's order."""
        def spread(value: float | Sequence[float]) -> list[float]:
            return ([float(value)] * count if isinstance(value, (int, float))
                    else [float(v) for v in value])
        return spread(self.local_share), spread(self.transfer_s)


@dataclass(frozen=True)
class TeamChoice:
    """The team plan: MAX_JOBS, the heavy pool's depth, and why."""

    jobs: int
    depth: int
    reason: str
    seconds: float | None = None
    """The simulated compile (None: nothing measured to simulate)."""


def _shape_of(pool: PoolPlan, servers: int, team_cpus: int, *,
              local_share: float | Sequence[float],
              start_delay: float = TOOLCHAINS_S) -> TeamShape:
    host = pool.jobs
    slots = pool.depth if pool.depth < host else None
    each = max(1, team_cpus // max(1, servers))
    return TeamShape(host_cores=host, servers=[each] * max(1, servers),
                     local_share=local_share, host_slots=slots, start_delay=start_delay)


def plan_team(pool: PoolPlan, *, servers: int, team_cpus: int, memory: ServerMemory,
              most_jobs: int, model: DistModel | None = None) -> TeamChoice:
    """MAX_JOBS and the heavy pool's depth for a build over ``servers`` build servers.

    With a measured unit table (``pool.table``): every depth from the local plan's up to
    what the team's cores could take (:data:`MOST_DEPTHS` at most), each with MAX_JOBS from
    the servers' cpus alone up to ``most_jobs`` (the build host's jobs besides), is
    simulated as sccache-dist runs it (:func:`sparkbuild.jobplan.schedule.simulate_team`:
    units longest first, :data:`DIST_LOCAL_SHARE` of each kept here, a remote part that
    finds every server core taken falling back here, a pooled one only into the local
    slots); the fastest whose simulated peak on a server fits its usable memory wins --
    the local planner's rule, with each server's simulated peak in place of one machine's
    worst case, which for a Spark holds two 10 GiB units beside its other cores' largest
    light ones and leaves the team's cores idle.  Without a table (a first build), or
    when no candidate fits: the servers' worst case (:func:`team_depth`) and
    ``most_jobs``; and ``most_jobs`` too where this machine holds every unit at its peak on
    each of its jobs (no gate: what falls back costs no wait)."""
    fit_depth, fit_reason = team_depth(pool, servers=servers, team_cpus=team_cpus,
                                       memory=memory, jobs=most_jobs)
    table = list(pool.table)
    if not table or min(u.seconds for u in table) < 0:
        return TeamChoice(most_jobs, fit_depth, fit_reason)
    if pool.depth >= pool.jobs:  # every unit fits here at its peak: a fallback costs nothing
        return TeamChoice(most_jobs, fit_depth, fit_reason + "; this machine holds every "
                          f"unit on each of its {pool.jobs} jobs: MAX_JOBS {most_jobs}")
    model = model or DistModel()
    shares, transfers = model.per_unit(len(table))
    seconds = [u.seconds for u in table]
    order = longest_first(seconds)
    ordered = [table[i] for i in order]
    pooled = heavy_indices(pool, ordered)
    peaks = [float(u.peak_bytes or pool.light_budget_bytes) * HEADROOM for u in ordered]
    shape = _shape_of(pool, servers, team_cpus, local_share=[shares[i] for i in order],
                      start_delay=model.start_delay_s)
    host = pool.jobs
    jobs_options = sorted({min(most_jobs, max(1, team_cpus + host * k // 4))
                           for k in range(5)})
    top = min(most_jobs, max(pool.depth, len(pooled)))
    depths = range(pool.depth, min(top, pool.depth + MOST_DEPTHS - 1) + 1)
    found: list[tuple[bool, float, int, int, float]] = []
    for depth in depths:
        for jobs in jobs_options:
            run = simulate_team([seconds[i] for i in order], peaks, shape,
                                transfer=[transfers[i] for i in order], jobs=jobs,
                                pool=pooled, depth=depth)
            found.append((run.server_peak <= memory.usable_bytes, run.makespan, depth, jobs,
                          run.server_peak))
    fitting = [c for c in found if c[0]]
    if not fitting:
        return TeamChoice(most_jobs, fit_depth, fit_reason + "; no simulated candidate fits "
                          "a server's memory")
    _, makespan, depth, jobs, peak = min(fitting, key=lambda c: (c[1], c[2], c[3]))
    return TeamChoice(jobs, depth, (
        f"dist: MAX_JOBS={jobs}, pool depth {depth}: the fastest of {len(found)} simulated "
        f"candidates (depth {depths.start} to {depths.stop - 1}, MAX_JOBS "
        f"{jobs_options[0]} to {jobs_options[-1]}; {len(pooled)} pooled unit(s), units "
        f"longest first, {sum(shares) / len(shares):.1%} of each here on average) whose peak "
        f"on a server fits "
        f"its {memory.usable_bytes / GIB:.1f} GiB ({memory.by}): compile {makespan:.0f} s, "
        f"a server's peak {peak / GIB:.1f} GiB; the worst case of one server alone would "
        f"give depth {fit_depth}"), makespan)
