"""The machine's job plan: MAX_JOBS and NVCC_THREADS from memory and cores.

A pure function of memory and cores, so that the choice for a 128 GB Spark can be tested
on any machine; each number carries its reason.  With the pool plan
(:mod:`sparkbuild.jobplan.pools`) every core builds and the heavy units share a pool that
memory holds.  ``doctor``, ``check`` and ``wheel`` take a recipe's plan from one function,
:func:`sparkbuild.jobplan.job_plan.recipe_job_plan`, which resolves what was asked and
calls these.  The memory kept for the system (:func:`usable_memory`) and the MAX_JOBS
formula (:func:`sparkbuild.jobplan.pools.single_plan_jobs`) are each written once.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.jobplan.pools import PoolPlan, jobs_by_cores, jobs_by_memory, plan_pools
from sparkbuild.jobplan.team_pool import SERVERS_ALIKE, DistModel, ServerMemory, plan_team
from sparkbuild.records import Record, as_json

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.jobplan.schedule import KnownUnit

GIB = 1024**3
MAX_SYSTEM_RESERVE_GIB = 4.0


@dataclass(frozen=True)
class BuildPlan(Record):
    max_jobs: int
    nvcc_threads: int
    launcher: str | None
    reasons: tuple[str, ...]
    pool: PoolPlan | None = None
    """The heavy units' job pool (sparkbuild.jobplan.pools); None: the single plan, one
    MAX_JOBS for every unit."""
    requested_jobs: int | None = field(default=None, metadata=as_json(skip=True))
    """The MAX_JOBS that was asked for (``--jobs``, ``$MAX_JOBS``, the recipe's), which wins
    over the plan's own; None: the plan chose."""

    def env(self) -> dict[str, str]:
        """The variables vLLM's setup.py reads."""
        return {"MAX_JOBS": str(self.max_jobs), "NVCC_THREADS": str(self.nvcc_threads)}

    def with_launcher(self, launcher: str, why: str) -> BuildPlan:
        """The plan with another compiler launcher (the shared cache's sccache), and why."""
        return dataclasses.replace(self, launcher=launcher,
                                   reasons=(*self.reasons, f"compiler launcher: {why}"))

    def pool_lines(self) -> list[str]:
        """doctor's account of the pool plan: its depth and why."""
        if self.pool is None:
            return ["job plan: one MAX_JOBS for every unit (SPARKBUILD_JOB_PLAN=single)"]
        return [f"job plan: MAX_JOBS={self.pool.jobs}, heavy units in pool sparkbuild_heavy "
                f"of depth {self.pool.depth} ({self.pool.basis})",
                *(f"  - {reason}" for reason in self.pool.reasons)]


@dataclass(frozen=True)
class MachineFacts:
    """What the plan needs of the machine it runs on."""

    total_memory_bytes: int
    available_memory_bytes: int
    cores: int

    @classmethod
    def read(cls) -> MachineFacts:
        total, available = read_memory()
        return cls(total, available, os.cpu_count() or 1)


def gib_text(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _as_requested(by: str) -> str:
    return f"as requested ({by})" if by else "as requested"


def _nvcc_threads(nvcc_threads: int | None, arch_count: int, by: str) -> tuple[int, str]:
    if nvcc_threads is not None:
        return max(1, nvcc_threads), f"NVCC_THREADS={nvcc_threads}: {_as_requested(by)}"
    if arch_count <= 1:
        return 1, "NVCC_THREADS=1: one target arch, and nvcc --threads only splits work by arch"
    return 1, "NVCC_THREADS=1: vLLM's default; parallelism comes from MAX_JOBS"


def plan_build(
    machine: MachineFacts,
    *,
    job_memory_gib: float,
    nvcc_threads: int | None = None,
    arch_count: int = 1,
    launcher: str | None = None,
    requested_jobs: int | None = None,
    requested_by: str = "",
    threads_by: str = "",
) -> BuildPlan:
    """MAX_JOBS from memory and cores: the smaller of the two limits wins.

    Each nvcc job may take ``job_memory_gib`` per thread (CUTLASS FP4 kernels take
    3 to 8 GiB); 10% of the memory, at most 4 GiB, stays with the system.
    ``requested_by`` and ``threads_by`` say where a requested number came from.
    """
    total_memory_bytes, available_memory_bytes = (machine.total_memory_bytes,
                                                  machine.available_memory_bytes)
    cores = machine.cores
    threads, threads_reason = _nvcc_threads(nvcc_threads, arch_count, threads_by)
    reserve = system_reserve(total_memory_bytes)
    usable = usable_memory(total_memory_bytes, available_memory_bytes)
    by_memory = jobs_by_memory(usable, job_memory_gib, threads)
    by_cores = jobs_by_cores(cores, threads)
    memory_reason = (
        f"memory: {gib_text(available_memory_bytes)} available of "
        f"{gib_text(total_memory_bytes)}, "
        f"{gib_text(reserve)} kept for the system, {job_memory_gib:g} GiB per job x {threads} "
        f"thread(s) -> {by_memory} job(s)"
    )
    cores_reason = f"cores: {cores} / {threads} thread(s) per job -> {by_cores} job(s)"
    reasons = [memory_reason, cores_reason, threads_reason]
    jobs = max(1, min(by_memory, by_cores))
    if requested_jobs is not None:
        jobs = requested_jobs
        reasons.append(f"MAX_JOBS={jobs}: {_as_requested(requested_by)} (doctor would pick "
                       f"{max(1, min(by_memory, by_cores))})")
    elif by_memory < 1:
        reasons.append("MAX_JOBS=1: not even one job fits the budget; the build may swap")
    else:
        bound = "memory" if by_memory <= by_cores else "cores"
        reasons.append(f"MAX_JOBS={jobs}: bounded by {bound}")
    if launcher:
        reasons.append(f"compiler launcher: {launcher} (rebuilds reuse unchanged objects)")
    else:
        reasons.append("compiler launcher: none found (install ccache for fast rebuilds)")
    return BuildPlan(jobs, threads, launcher, tuple(reasons), requested_jobs=requested_jobs)


def system_reserve(total_memory_bytes: int) -> float:
    """The memory kept for the system: 10% of it, at most :data:`MAX_SYSTEM_RESERVE_GIB`."""
    return min(MAX_SYSTEM_RESERVE_GIB * GIB, 0.1 * total_memory_bytes)


def usable_memory(total_memory_bytes: int, available_memory_bytes: int) -> float:
    """What the build may use: the available memory less the system's share."""
    return max(0.0, available_memory_bytes - system_reserve(total_memory_bytes))


def with_pools(plan: BuildPlan, machine: MachineFacts, *, job_memory_gib: float,
               measured: dict[str, int] | None = None,
               killed: tuple[str, ...] = (), requested_jobs: int | None = None,
               requested_by: str = "", known: Sequence[KnownUnit] | None = None) -> BuildPlan:
    """``plan`` with the pool plan: every core, the heavy units in a pool (an explicit
    MAX_JOBS still wins, as the pool's ceiling)."""
    pool = plan_pools(cores=machine.cores, job_memory_gib=job_memory_gib,
                      usable_bytes=usable_memory(machine.total_memory_bytes,
                                                 machine.available_memory_bytes),
                      nvcc_threads=plan.nvcc_threads, measured=measured, killed=killed,
                      known=known)
    jobs = requested_jobs or pool.jobs
    if jobs != pool.jobs or pool.depth > jobs:
        pool = dataclasses.replace(pool, jobs=jobs, depth=min(pool.depth, jobs))
    reasons = tuple(r for r in plan.reasons if not r.startswith("MAX_JOBS="))
    return BuildPlan(jobs, plan.nvcc_threads, plan.launcher,
                     (*reasons, f"MAX_JOBS={jobs}: " + (_as_requested(requested_by)
                      if requested_jobs else "every core; memory is held by the heavy units' "
                      "pool")), pool, requested_jobs=requested_jobs)


def parse_meminfo(text: str) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if match:
            values[match.group(1)] = int(match.group(2)) * 1024
    total = values.get("MemTotal", 0)
    return total, values.get("MemAvailable", values.get("MemFree", total))


def read_memory() -> tuple[int, int]:
    try:
        return parse_meminfo(Path("/proc/meminfo").read_text(encoding="ascii"))
    except OSError:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return pages, pages


DIST_LOCAL_GIB = 0.5
"""What one unit in flight holds on the build host while its steps compile on a build
server: nvcc's driver, the local preprocessing (``gcc -E`` of a torch-including unit peaked
at 0.23 GB here) and sccache's buffers of the inputs it ships (tens of MB), with headroom."""


def with_team_cores(plan: BuildPlan, *, team_cpus: int, servers: int, scheduler: str,
                    usable_bytes: float, requested_jobs: int | None = None,
                    server_memory: ServerMemory | None = None,
                    model: DistModel | None = None) -> BuildPlan:
    """``plan`` with the team's cores counted: MAX_JOBS = this machine's jobs + the build
    servers' cpus (their status at the start), as far as the build host's memory holds
    :data:`DIST_LOCAL_GIB` per unit in flight, and with a measured unit table the team
    plan's choice (:func:`sparkbuild.jobplan.team_pool.plan_team`).  The heavy units' pool
    takes the depth the servers' memory holds (their cicc and ptxas run there),
    ``server_memory`` each (None: the build host's usable memory counts as a server's);
    the local plan's depth stays the build host's slots for the steps that fall back
    (``local_depth``, which sparkbuild.team.heavy_gate enforces).  ``model``: how the team
    plan simulates a unit (:class:`sparkbuild.jobplan.team_pool.DistModel`; None: the
    measured defaults)."""
    if team_cpus <= 0:
        return plan
    if requested_jobs:
        return BuildPlan(plan.max_jobs, plan.nvcc_threads, plan.launcher, (
            *plan.reasons, f"dist: {servers} build server(s), {team_cpus} cpus at "
            f"{scheduler}; MAX_JOBS={plan.max_jobs} as requested"), plan.pool,
            requested_jobs=plan.requested_jobs)
    by_memory = max(1, math.floor(usable_bytes / (DIST_LOCAL_GIB * GIB)))
    most = max(plan.max_jobs, min(plan.max_jobs + team_cpus, by_memory))
    bound = "" if most == plan.max_jobs + team_cpus else (
        f", bounded by memory ({gib_text(usable_bytes)} usable, {DIST_LOCAL_GIB:g} GiB per "
        "unit in flight)")
    reasons = tuple(r for r in plan.reasons if not r.startswith("MAX_JOBS="))
    pool, jobs = plan.pool, most
    if pool is not None:
        memory = server_memory or ServerMemory(usable_bytes, SERVERS_ALIKE, usable=True)
        choice = plan_team(pool, servers=max(1, servers), team_cpus=team_cpus, memory=memory,
                           most_jobs=most, model=model)
        jobs = choice.jobs
        if jobs != most:
            bound = f"; the team plan chose {jobs} of up to {most}"
        pool = dataclasses.replace(pool, jobs=jobs, depth=choice.depth, local_depth=pool.depth,
                                   local_jobs=pool.jobs, reasons=(
            *pool.reasons, f"dist: MAX_JOBS={jobs} with the team's cores", choice.reason,
            f"local slots: a pooled unit whose steps fall back compiles here in one of "
            f"{pool.depth} slot(s) of the heavy units' sccache server, at most "
            f"{pool.depth} at once (its jobserver: {pool.depth} cpu(s)); the others' "
            f"server has the other {max(1, pool.jobs - pool.depth)}"))
    return BuildPlan(jobs, plan.nvcc_threads, plan.launcher, (
        *reasons, f"MAX_JOBS={jobs}: this machine's {plan.max_jobs} + the team's {team_cpus} "
        f"cpus ({servers} build server(s) at {scheduler}){bound}"), pool,
        requested_jobs=plan.requested_jobs)

