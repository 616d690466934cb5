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

from dataclasses import dataclass

from sparkbuild.errors import UsageError
from sparkbuild.jobplan.pools import GIB, HEADROOM, PoolPlan, fitting_depth, pool_depth
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
