"""The job plan resolved once, from the machine, the recipe, the unit table and what was asked.

``doctor``, ``check`` and ``wheel`` all take their plan from :func:`recipe_job_plan`, so the
``MAX_JOBS`` doctor prints for a recipe is the one ``wheel`` builds it with.  Its inputs:

* the machine (:class:`MachineFacts`: memory total and available, cores), read once;
* the recipe's ``[build]`` (``jobs``, ``job_memory_gib``, ``nvcc_threads``) and its archs;
* the unit table measured by earlier builds for those archs (:class:`UnitTable`, from the
  cache), which the pool plan simulates;
* what was asked, each with where it came from (:func:`asked_for`): the compile jobs from
  ``wheel --jobs``, else ``$MAX_JOBS``, else the recipe's ``jobs``; the nvcc threads from
  ``$NVCC_THREADS``, else the recipe's ``nvcc_threads`` (a variable of the environment
  outranks the recipe, a flag outranks both);
* memory kept for work beside the compile (flashinfer's builder alongside), taken from the
  available memory before anything is planned.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbuild.jobplan.machine import GIB, BuildPlan, MachineFacts, plan_build, with_pools
from sparkbuild.jobplan.pools import pools_enabled
from sparkbuild.jobplan.unit_memory import known_units, measured_for
from sparkbuild.recipe import BuildSettings
from sparkbuild.settings import MAX_JOBS, NVCC_THREADS

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from sparkbuild.jobplan.schedule import KnownUnit
    from sparkbuild.recipe import Recipe


@dataclass(frozen=True)
class UnitTable:
    """The units earlier builds measured for one arch list (empty for a first build)."""

    measured: Mapping[str, int] = field(default_factory=dict)
    """``source|flags`` -> peak bytes."""
    killed: tuple[str, ...] = ()
    """Sources killed for memory before."""
    known: tuple[KnownUnit, ...] = ()
    """Each unit's seconds and peak, in the last build's start order."""

    @classmethod
    def read(cls, cache_root: Path, arch: str) -> UnitTable:
        measured, killed = measured_for(cache_root, arch)
        return cls(measured, killed, tuple(known_units(cache_root, arch)))


@dataclass(frozen=True)
class Asked:
    """The numbers that were asked for, each with where it came from."""

    jobs: int | None = None
    jobs_by: str = ""
    nvcc_threads: int | None = None
    threads_by: str = ""


def asked_for(build: BuildSettings, *, jobs_flag: int | None = None,
              environ: Mapping[str, str] | None = None) -> Asked:
    """``--jobs``, else ``$MAX_JOBS``, else the recipe's ``jobs``; ``$NVCC_THREADS``, else
    the recipe's ``nvcc_threads`` (a bad variable is a UsageError naming it)."""
    env_jobs, env_threads = MAX_JOBS.count(environ), NVCC_THREADS.count(environ)
    if jobs_flag:
        jobs, jobs_by = jobs_flag, "--jobs"
    elif env_jobs is not None:
        jobs, jobs_by = env_jobs, "$MAX_JOBS"
    elif build.jobs:
        jobs, jobs_by = build.jobs, "the recipe's [build] jobs"
    else:
        jobs, jobs_by = None, ""
    if env_threads is not None:
        threads, threads_by = env_threads, "$NVCC_THREADS"
    elif build.nvcc_threads is not None:
        threads, threads_by = build.nvcc_threads, "the recipe's [build] nvcc_threads"
    else:
        threads, threads_by = None, ""
    return Asked(jobs, jobs_by, threads, threads_by)


@dataclass(frozen=True)
class Reserved:
    """Memory kept out of the plan for work beside the compile, and what it is kept for."""

    bytes: float = 0.0
    reason: str = ""


NOTHING_RESERVED = Reserved()


def resolve_job_plan(machine: MachineFacts, build: BuildSettings, asked: Asked, *,
                     arch_count: int, units: UnitTable | None, launcher: str | None = None,
                     reserved: Reserved = NOTHING_RESERVED,
                     environ: Mapping[str, str] | None = None) -> BuildPlan:
    """The plan: MAX_JOBS and NVCC_THREADS from memory and cores at ``build``'s per-job
    budget, what was asked winning; with ``units`` (a unit table, empty for a first build)
    the pool plan over it, unless ``$SPARKBUILD_JOB_PLAN`` is ``single``; without, one
    MAX_JOBS for every unit.  ``reserved.bytes`` of the available memory are kept for
    ``reserved.reason``."""
    available = max(0, int(machine.available_memory_bytes - reserved.bytes))
    total, cores, budget = machine.total_memory_bytes, machine.cores, build.job_memory_gib
    facts = MachineFacts(total, available, cores)
    plan = plan_build(facts, job_memory_gib=budget, nvcc_threads=asked.nvcc_threads,
                      arch_count=arch_count, launcher=launcher, requested_jobs=asked.jobs,
                      requested_by=asked.jobs_by, threads_by=asked.threads_by)
    if units is not None and pools_enabled(environ):
        plan = with_pools(plan, facts, job_memory_gib=budget, measured=dict(units.measured),
                          killed=units.killed, requested_jobs=asked.jobs,
                          requested_by=asked.jobs_by, known=units.known)
    if reserved.bytes:
        plan = dataclasses.replace(plan, reasons=(
            *plan.reasons, f"{reserved.reason}: {reserved.bytes / GIB:.1f} GiB of the available "
            "memory kept for it"))
    return plan


def recipe_job_plan(recipe: Recipe | None, machine: MachineFacts, *,
                    units_from: Path | None, jobs_flag: int | None = None,
                    job_memory_gib: float | None = None, launcher: str | None = None,
                    reserved: Reserved = NOTHING_RESERVED,
                    environ: Mapping[str, str] | None = None) -> BuildPlan:
    """The plan a build of ``recipe`` (None: the default build settings, one arch) runs with
    on ``machine``: what :func:`asked_for` finds, ``job_memory_gib`` in place of the
    recipe's, and with ``units_from`` (the cache's root) the pool plan over the unit table
    measured there for the recipe's archs; without it, one MAX_JOBS for every unit
    (``check``).  ``doctor`` and ``wheel`` both call it."""
    build = recipe.build if recipe is not None else BuildSettings()
    if job_memory_gib is not None:
        build = dataclasses.replace(build, job_memory_gib=job_memory_gib)
    units = None
    if units_from is not None:
        units = (UnitTable.read(units_from, recipe.target.torch_cuda_arch_list)
                 if recipe is not None else UnitTable())
    return resolve_job_plan(
        machine, build, asked_for(build, jobs_flag=jobs_flag, environ=environ),
        arch_count=len(recipe.target.cuda_archs) if recipe is not None else 1, units=units,
        launcher=launcher, reserved=reserved, environ=environ)
