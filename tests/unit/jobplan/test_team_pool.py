"""The heavy pool with dist: its depth from the build servers' memory and cores."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import RecipeError, UsageError
from sparkbuild.jobplan.pools import GIB, HEADROOM, PoolPlan, plan_pools
from sparkbuild.jobplan.schedule import KnownUnit
from sparkbuild.jobplan.team_pool import ServerMemory, server_memory, split_peaks, team_depth
from sparkbuild.recipe import load_recipe

if TYPE_CHECKING:
    from pathlib import Path


def _measured_pool() -> PoolPlan:
    """20 cores, 115 GiB: 24 units of 10 GiB (a fused_moe_120 GEMM's size) and 200 of 3."""
    units = [KnownUnit(f"moe/gemm_{i}.cu", "", 150.0, 10 * GIB) for i in range(24)]
    units += [KnownUnit(f"csrc/light_{i}.cu", "", 60.0, 3 * GIB) for i in range(200)]
    return plan_pools(cores=20, usable_bytes=115 * GIB, job_memory_gib=8.7, known=units,
                      measured={f"{u.source}|": int(u.peak_bytes or 0) for u in units})


def test_the_depth_is_what_the_servers_memory_holds_by_the_local_rule() -> None:
    pool = _measured_pool()
    heavy, light = split_peaks(pool)
    assert len(heavy) == 24 and heavy[0] == pytest.approx(10 * GIB * HEADROOM)
    assert len(light) == 200
    local = pool.depth
    assert 1 <= local < 24  # the build host alone holds a few
    alike = ServerMemory(115 * GIB, "test", usable=True)
    # one server like the build host holds what the build host holds: the same rule
    one, _ = team_depth(pool, servers=1, team_cpus=20, memory=alike, jobs=40)
    assert one == local
    # three: 345 GiB, 60 cpus; d heavy at 11.5 GiB beside 60 - d light at 3.45 GiB
    three, why = team_depth(pool, servers=3, team_cpus=60, memory=alike, jobs=80)
    assert three == int((345 - 60 * 3 * HEADROOM) / ((10 - 3) * HEADROOM))
    assert three > local and "3 server(s), 60 cpus" in why
    assert f"local plan's depth {local}" in why
    # never deeper than MAX_JOBS, never below the local plan
    assert team_depth(pool, servers=3, team_cpus=60, memory=alike, jobs=12)[0] == 12
    tiny = ServerMemory(8 * GIB, "--dist-server-memory")
    assert team_depth(pool, servers=3, team_cpus=60, memory=tiny, jobs=80)[0] == local


def test_each_servers_memory_comes_from_the_flag_then_the_recipe() -> None:
    flag = server_memory(119.2, 64.0)
    assert flag is not None and flag.by == "--dist-server-memory"
    assert flag.usable_bytes == pytest.approx(119.2 * GIB - 4 * GIB)  # the system's 4 GiB
    recipe = server_memory(None, 16.0)
    assert recipe is not None and "dist_server_memory_gib" in recipe.by
    assert recipe.usable_bytes == pytest.approx(16 * GIB * 0.9)
    assert server_memory(None, None) is None
    for bad in (0.0, -3.0, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="--dist-server-memory must be a number of GiB"):
            server_memory(bad, None)


def test_the_recipe_names_each_servers_memory(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    body = '[source]\nspec = "."\n[series]\npath = "series"\n[build]\n'
    recipe.write_text(body + "dist_server_memory_gib = 119.2\n")
    assert load_recipe(recipe).build.dist_server_memory_gib == 119.2
    recipe.write_text(body)
    assert load_recipe(recipe).build.dist_server_memory_gib is None
    for bad in ('"lots"', "0", "-1"):
        recipe.write_text(body + f"dist_server_memory_gib = {bad}\n")
        with pytest.raises(RecipeError) as caught:
            load_recipe(recipe)
        assert "build.dist_server_memory_gib" in caught.value.what
        if bad != '"lots"':  # a string is refused by the schema's type check first
            assert "doctor --dist URL --build-server DIR" in (caught.value.hint or "")


def test_the_team_plan_is_the_fastest_simulated_candidate_that_fits_a_server() -> None:
    from sparkbuild.jobplan.team_pool import plan_team

    pool = _measured_pool()
    assert len(pool.table) == 224
    alike = ServerMemory(115 * GIB, "test", usable=True)
    choice = plan_team(pool, servers=3, team_cpus=60, memory=alike, most_jobs=80)
    assert choice.seconds is not None and "simulated candidates" in choice.reason
    assert pool.depth <= choice.depth <= 24 and 60 <= choice.jobs <= 80
    # faster than the local plan's depth with every core, which it also simulated
    from sparkbuild.jobplan.schedule import simulate_team
    from sparkbuild.jobplan.team_pool import (
        DIST_LOCAL_SHARE,
        STEP_ROUND_TRIPS_S,
        _shape_of,
    )
    from sparkbuild.jobplan.unit_order import longest_first

    order = longest_first([u.seconds for u in pool.table])
    ordered = [pool.table[i] for i in order]
    pooled = {i for i, u in enumerate(ordered) if u.source.startswith("moe/")}
    narrow = simulate_team([u.seconds for u in ordered],
                           [float(u.peak_bytes or 0) * HEADROOM for u in ordered],
                           _shape_of(pool, 3, 60, local_share=DIST_LOCAL_SHARE),
                           transfer=[STEP_ROUND_TRIPS_S] * len(ordered), jobs=80,
                           pool=pooled, depth=pool.depth)
    assert choice.seconds <= narrow.makespan
    # servers too small for any candidate: the servers' worst case, MAX_JOBS as given
    tiny = plan_team(pool, servers=3, team_cpus=60, memory=ServerMemory(
        8 * GIB, "test", usable=True), most_jobs=80)
    assert (tiny.jobs, tiny.depth, tiny.seconds) == (80, pool.depth, None)
    assert "no simulated candidate fits" in tiny.reason
    # a first build (no table): the worst case, MAX_JOBS as given
    rule = plan_pools(cores=20, usable_bytes=115 * GIB, job_memory_gib=8.7)
    first = plan_team(rule, servers=3, team_cpus=60, memory=alike, most_jobs=80)
    assert first.jobs == 80 and first.seconds is None and first.depth >= rule.depth


def test_the_dist_model_gives_each_unit_its_share_and_transfer() -> None:
    from sparkbuild.jobplan.team_pool import DIST_LOCAL_SHARE, DistModel

    assert DistModel().per_unit(2) == ([DIST_LOCAL_SHARE] * 2, [2.0, 2.0])
    assert DistModel([0.1, 0.04], 3.0).per_unit(2) == ([0.1, 0.04], [3.0, 3.0])


def test_a_host_that_holds_every_unit_keeps_every_job() -> None:
    from sparkbuild.jobplan.team_pool import plan_team

    units = [KnownUnit(f"csrc/u{i}.cu", "", 30.0 + i, GIB // 4) for i in range(40)]
    pool = plan_pools(cores=2, usable_bytes=20 * GIB, job_memory_gib=8.7, known=units,
                      measured={f"{u.source}|": int(u.peak_bytes or 0) for u in units})
    assert pool.depth >= pool.jobs
    choice = plan_team(pool, servers=2, team_cpus=2, memory=ServerMemory(
        20 * GIB, "test", usable=True), most_jobs=4)
    assert choice.jobs == 4 and choice.seconds is None and "holds every unit" in choice.reason
