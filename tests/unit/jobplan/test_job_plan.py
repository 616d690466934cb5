"""One job plan for doctor and wheel: the same recipe, machine, cache and environment give
the same MAX_JOBS, pool and reasons; what was asked wins in one order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkbuild.compile.doctor import doctor_plan
from sparkbuild.errors import UsageError
from sparkbuild.jobplan.job_plan import recipe_job_plan
from sparkbuild.jobplan.machine import (
    GIB,
    BuildPlan,
    MachineFacts,
    plan_build,
    system_reserve,
    usable_memory,
)
from sparkbuild.jobplan.pools import single_plan_jobs
from sparkbuild.jobplan.unit_memory import remember
from sparkbuild.pipeline import wheel_job_plan
from sparkbuild.recipe import DEFAULT_RECIPE, Recipe, load_recipe

TWO_CORES = MachineFacts(total_memory_bytes=128 * GIB, available_memory_bytes=120 * GIB, cores=2)


@pytest.fixture
def recipe() -> Recipe:
    loaded = load_recipe(DEFAULT_RECIPE)
    assert loaded.flashinfer.aot  # the builder's memory is kept out of both plans
    return loaded


def _measured_cache(tmp_path: Path, recipe: Recipe) -> Path:
    cache = tmp_path / "cache"
    arch = recipe.target.torch_cuda_arch_list
    remember(cache, arch, [
        {"source": "csrc/big_gemm.cu", "flags": "-O3", "seconds": 300.0, "start": 0.0,
         "peak_rss_bytes": 11 * GIB},
        {"source": "csrc/small.cu", "flags": "-O3", "seconds": 40.0, "start": 1.0,
         "peak_rss_bytes": 2 * GIB},
    ])
    return cache


def _both(recipe: Recipe, cache: Path, environ: dict[str, str],
          machine: MachineFacts = TWO_CORES) -> tuple[BuildPlan, BuildPlan]:
    doctor = doctor_plan(recipe, machine, job_memory_gib=None, launcher=None,
                         cache_root=cache, environ=environ)
    wheel = wheel_job_plan(recipe, machine, jobs_flag=None, launcher=None, cache_root=cache,
                           environ=environ)
    return doctor, wheel


def test_doctor_and_wheel_build_with_the_max_jobs_of_the_environment(
        tmp_path: Path, recipe: Recipe) -> None:
    """MAX_JOBS=3 on a 2-core machine: doctor says 3, and wheel builds with 3."""
    doctor, wheel = _both(recipe, _measured_cache(tmp_path, recipe), {"MAX_JOBS": "3"})
    assert doctor.max_jobs == wheel.max_jobs == 3
    assert doctor.to_dict() == wheel.to_dict()
    assert doctor.pool is not None and doctor.pool.basis == "measured"
    assert doctor.requested_jobs == wheel.requested_jobs == 3
    assert "MAX_JOBS=3: as requested ($MAX_JOBS)" in doctor.reasons


def test_doctor_and_wheel_agree_without_a_request_and_on_every_input(
        tmp_path: Path, recipe: Recipe) -> None:
    cache = _measured_cache(tmp_path, recipe)
    small = MachineFacts(16 * GIB, 13 * GIB, 4)
    for environ, machine, changed in [
            ({}, TWO_CORES, recipe),
            ({}, small, recipe),
            ({"NVCC_THREADS": "2"}, small, recipe),
            ({"SPARKBUILD_JOB_PLAN": "single"}, small, recipe),
            ({}, small, dataclasses.replace(recipe, build=dataclasses.replace(
                recipe.build, jobs=3))),
    ]:
        doctor, wheel = _both(changed, cache, environ, machine)
        assert doctor.to_dict() == wheel.to_dict(), (environ, machine)
    doctor, _ = _both(recipe, cache, {"NVCC_THREADS": "2"}, small)
    assert doctor.nvcc_threads == 2
    single, _ = _both(recipe, cache, {"SPARKBUILD_JOB_PLAN": "single"}, small)
    assert single.pool is None


def test_what_was_asked_wins_in_one_order(tmp_path: Path, recipe: Recipe) -> None:
    cache = _measured_cache(tmp_path, recipe)
    with_jobs = dataclasses.replace(recipe, build=dataclasses.replace(recipe.build, jobs=4))
    assert wheel_job_plan(with_jobs, TWO_CORES, jobs_flag=None, launcher=None,
                          cache_root=cache, environ={}).max_jobs == 4
    by_env = wheel_job_plan(with_jobs, TWO_CORES, jobs_flag=None, launcher=None,
                            cache_root=cache, environ={"MAX_JOBS": "3"})
    assert by_env.max_jobs == 3
    by_flag = wheel_job_plan(with_jobs, TWO_CORES, jobs_flag=5, launcher=None,
                             cache_root=cache, environ={"MAX_JOBS": "3"})
    assert by_flag.max_jobs == 5 and "MAX_JOBS=5: as requested (--jobs)" in by_flag.reasons


def test_a_bad_max_jobs_is_refused_by_both(tmp_path: Path, recipe: Recipe) -> None:
    for value in ("0", "three", "-1"):
        with pytest.raises(UsageError, match="MAX_JOBS must be a positive whole number"):
            doctor_plan(recipe, TWO_CORES, job_memory_gib=None, launcher=None,
                        cache_root=tmp_path, environ={"MAX_JOBS": value})
        with pytest.raises(UsageError, match="MAX_JOBS must be a positive whole number"):
            wheel_job_plan(recipe, TWO_CORES, jobs_flag=None, launcher=None,
                           cache_root=tmp_path, environ={"MAX_JOBS": value})


def test_check_takes_the_single_plan_of_the_same_resolution(recipe: Recipe) -> None:
    plan = recipe_job_plan(recipe, TWO_CORES, units_from=None, environ={"MAX_JOBS": "3"})
    assert plan.pool is None and plan.max_jobs == 3


def test_the_system_reserve_and_the_max_jobs_formula_are_one() -> None:
    total, available = 16 * GIB, 14 * GIB
    assert usable_memory(total, available) == available - system_reserve(total)
    plan = plan_build(
        MachineFacts(total_memory_bytes=total, available_memory_bytes=available, cores=8),
        job_memory_gib=3.0)
    assert plan.max_jobs == single_plan_jobs(8, usable_memory(total, available), 3.0)
    assert f"{system_reserve(total) / GIB:.1f} GiB kept for the system" in plan.reasons[0]
