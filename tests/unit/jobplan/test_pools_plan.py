"""plan_pools: the first build's rule, the measured plan chosen by simulation, the plan file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sparkbuild.jobplan.heavy_units import rule_match
from sparkbuild.jobplan.ninja_graph import Edge
from sparkbuild.jobplan.ninja_shim import heavy_edge
from sparkbuild.jobplan.pools import (
    HEADROOM,
    HEAVY_PATTERNS,
    fitting_depth,
    heavy_indices,
    plan_pools,
    pool_depth,
    single_plan_jobs,
    write_plan_file,
)
from sparkbuild.jobplan.schedule import KnownUnit, simulate
from sparkbuild.jobplan.unit_order import expected_seconds, longest_first

GIB = 1024**3


def by_rule(source: str) -> bool:
    return rule_match(source, HEAVY_PATTERNS)


def _unit(name: str, seconds: float, peak_gib: float | None, start: float = 0.0) -> KnownUnit:
    edge = Edge([f"CMakeFiles/_C.dir/{name}.o"], "CUDA_COMPILER__C", [f"/TREE/{name}"],
                variables={"FLAGS": "-O3"})
    return KnownUnit(name, edge.flags_key(), seconds,
                     int(peak_gib * GIB) if peak_gib is not None else None, start)


def _predicted(plan_units: list[KnownUnit], plan: object) -> float:
    """The plan's makespan with its units started as the ninja wrapper lists them."""
    from sparkbuild.jobplan.pools import PoolPlan

    assert isinstance(plan, PoolPlan)
    ordered = [plan_units[i] for i in longest_first([u.seconds for u in plan_units])] \
        if plan.seconds else plan_units
    peaks = [float(u.peak_bytes or 0) for u in ordered]
    return simulate([u.seconds for u in ordered], peaks, plan.jobs,
                    heavy_indices(plan, ordered), plan.depth).makespan


def test_first_build_rule_never_constrains_heavy_units_below_the_single_plans_max_jobs() -> None:
    usable = 115.2 * GIB
    plan = plan_pools(cores=20, usable_bytes=usable, job_memory_gib=8.7)
    assert single_plan_jobs(20, usable, 8.7) == 13 == plan.single_plan_jobs
    assert pool_depth(usable, 20, 8.7 * GIB, 3 * GIB) == 9
    assert (plan.basis, plan.jobs, plan.depth) == ("rule", 20, 13)
    assert "never get fewer slots than the single plan's MAX_JOBS=13" in " ".join(plan.reasons)
    small = plan_pools(cores=16, usable_bytes=30 * GIB, job_memory_gib=6.0)
    # one 6 GiB heavy unit beside 15 light ones of 3 GiB is over 30 GiB: 1 + 24 / 3 jobs
    assert (small.jobs, small.depth) == (9, 5)
    roomy = plan_pools(cores=8, usable_bytes=500 * GIB, job_memory_gib=6.0)
    assert roomy.depth == 8


def test_fitting_depth_uses_the_actual_peaks() -> None:
    assert fitting_depth([10, 10, 10], [1, 1, 1, 1], 4, 23) == 2  # 10+10+1+1
    assert fitting_depth([10, 10, 10], [1, 1, 1, 1], 4, 33) == 4  # every heavy unit fits
    assert fitting_depth([10], [20, 20, 20], 4, 30) is None
    assert fitting_depth([], [1, 1], 4, 2) == 4 and fitting_depth([], [3, 3], 2, 5) is None


def test_measured_plan_pools_only_units_above_the_fair_share_and_fits_memory() -> None:
    usable = 64 * GIB
    heavy = [_unit(f"h{i}.cu", 100.0, 10.0, i) for i in range(8)]
    light = [_unit(f"l{i}.cu", 50.0, 1.0, 8 + i) for i in range(80)]
    units = heavy + light
    plan = plan_pools(cores=16, usable_bytes=usable, job_memory_gib=8.7, known=units)
    assert plan.basis == "measured" and plan.jobs == 16 and plan.single_plan_jobs == 7
    pooled = heavy_indices(plan, units)
    assert pooled == set(range(8))
    assert all(units[i].peak_bytes * HEADROOM > usable / 16 for i in pooled)  # type: ignore[operator]
    # 4 x 11.5 GiB + 12 x 1.15 GiB fit 64 GiB; a flat 3 GiB per light unit would allow 1
    assert plan.depth == 4
    assert plan.predicted_seconds is not None and plan.single_plan_seconds is not None
    assert plan.predicted_seconds < 0.6 * plan.single_plan_seconds  # memory allows: better
    assert plan.predicted_seconds == pytest.approx(_predicted(units, plan))
    assert plan.to_dict()["predicted_makespan_s"] == round(plan.predicted_seconds, 1)
    as_json = plan.to_dict()
    assert as_json["single_plan_jobs"] == 7
    assert as_json["single_plan_makespan_s"] == round(plan.single_plan_seconds, 1)
    # the key docs/check-and-verify.md named before, kept beside the new one
    assert as_json["today_makespan_s"] == as_json["single_plan_makespan_s"]
    assert "today_jobs" not in as_json


def test_when_memory_fitting_pools_are_slower_heavy_units_keep_the_single_plans_limit() -> None:
    heavy = [_unit(f"gemm{i}.cu", 1000.0, 12.0, i) for i in range(4)]
    light = [_unit(f"l{i}.cu", 10.0, 1.0, 4 + i) for i in range(8)]
    units = heavy + light
    plan = plan_pools(cores=8, usable_bytes=40 * GIB, job_memory_gib=10.0, known=units)
    assert plan.single_plan_jobs == 4 and plan.depth == 4 and plan.jobs == 8
    assert "heavy units keep its limit" in " ".join(plan.reasons)
    assert plan.predicted_seconds is not None and plan.single_plan_seconds is not None
    assert plan.predicted_seconds <= plan.single_plan_seconds


def test_never_predicted_slower_than_the_single_plan_on_random_tables() -> None:
    rng = random.Random(18)
    for _ in range(40):
        cores = rng.choice([4, 8, 16, 20])
        units = [_unit(f"u{i}.cu", rng.choice([1.0, 5.0, 30.0, 300.0]) * rng.random() + 1,
                       rng.choice([0.5, 2.0, 3.0, 6.0, 11.0]), i)
                 for i in range(rng.randint(5, 60))]
        usable = rng.choice([16, 48, 115]) * GIB
        plan = plan_pools(cores=cores, usable_bytes=usable, job_memory_gib=rng.choice([4, 8.7]),
                          known=units)
        assert plan.predicted_seconds is not None and plan.single_plan_seconds is not None
        assert plan.predicted_seconds <= plan.single_plan_seconds * (1 + 1e-9)
        assert 1 <= plan.depth <= plan.jobs <= cores
        assert plan.predicted_seconds == pytest.approx(_predicted(units, plan))


def test_killed_units_are_heavy_and_unmeasured_units_follow_the_rule() -> None:
    units = [_unit("csrc/a.cu", 10.0, 0.5, 0), _unit("csrc/b.cu", 10.0, 0.5, 1),
             _unit("csrc/gemm_x.cu", 10.0, None, 2), _unit("csrc/plain.cu", 10.0, None, 3)]
    plan = plan_pools(cores=4, usable_bytes=16 * GIB, job_memory_gib=8.0, known=units,
                      killed=("csrc/b.cu",))
    assert heavy_indices(plan, units) == {1, 2}  # b killed; gemm_x by the rule (8 > 4 GiB)
    roomy = plan_pools(cores=4, usable_bytes=400 * GIB, job_memory_gib=8.0, known=units)
    assert heavy_indices(roomy, units) == set() and roomy.patterns == ()


def test_measured_peaks_without_seconds_still_plan() -> None:
    measured = {f"csrc/u{i}.cu|": (10 if i < 3 else 1) * GIB for i in range(10)}
    plan = plan_pools(cores=8, usable_bytes=40 * GIB, job_memory_gib=8.0, measured=measured)
    assert plan.basis == "measured"
    assert sorted(plan.heavy_measured()) == ["csrc/u0.cu", "csrc/u1.cu", "csrc/u2.cu"]
    assert "units counted alike" in " ".join(plan.reasons)


def test_the_plan_file_makes_the_wrapper_decide_as_the_planner(tmp_path: Path) -> None:
    rng = random.Random(7)
    units = [_unit(f"csrc/{'gemm' if i % 5 == 0 else 'k'}{i}.cu", rng.uniform(1, 100),
                   rng.choice([None, 0.5, 2.5, 4.0, 9.0]), i) for i in range(50)]
    measured = {f"{u.source}|{u.flags}": u.peak_bytes for u in units if u.peak_bytes}
    for usable in (12, 30, 60):
        plan = plan_pools(cores=8, usable_bytes=usable * GIB, job_memory_gib=6.0,
                          known=units, measured=measured, killed=("csrc/k1.cu",))
        data = json.loads(write_plan_file(plan, tmp_path / "plan.json",
                                          Path("/TREE")).read_text(encoding="utf-8"))
        assert data["depth"] == plan.depth
        edges = [Edge([f"{u.source}.o"], "CUDA_COMPILER__C", [f"/TREE/{u.source}"],
                      variables={"FLAGS": "-O3"}) for u in units]
        by_wrapper = {i for i, edge in enumerate(edges) if heavy_edge(edge, data)}
        assert by_wrapper == heavy_indices(plan, units), usable


def test_the_rule_counts_flash_attention_2_light_and_its_hopper_units_heavy() -> None:
    # measured at 12.1a: every FA2 unit peaked at 3.9-4.2 GiB (bench/full-build/part1)
    dep = "deps/vllm-flash-attn-e0b575756f09"
    assert not by_rule(f"{dep}/csrc/flash_attn/src/flash_fwd_split_hdim64_bf16_sm80.cu")
    assert by_rule(f"{dep}/hopper/instantiations/flash_fwd_hdim64_bf16_sm90.cu")


def test_the_rule_counts_marlin_light_and_the_cutlass_gemms_beside_it_heavy() -> None:
    # measured at 12.1a (bench/full-build/part2-3): 33 Marlin units at 2.4-2.7 GiB, the
    # CUTLASS GEMMs at 6.9-9.3 GiB
    assert not by_rule("csrc/moe/marlin_moe_wna16/sm80_kernel_bfloat16_u8b128_bfloat16.cu")
    assert not by_rule("csrc/quantization/gptq_marlin/gptq_marlin.cu")
    assert by_rule("csrc/libtorch_stable/quantization/w8a8/cutlass/c3x/scaled_mm_sm120_fp8.cu")
    assert by_rule("deps/qutlass-a2a935190698/qutlass/csrc/gemm.cu")
    assert by_rule("csrc/libtorch_stable/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu")


def test_measured_seconds_start_the_longest_units_first(tmp_path: Path) -> None:
    """The _moe_C shape: CMake lists the longest units late, so they start late."""
    short = [_unit(f"csrc/k{i}.cu", 100.0, 1.0, i) for i in range(4)]
    long_ = [_unit(f"csrc/marlin{i}.cu", 200.0, 1.0, 4 + i) for i in range(2)]
    units = short + long_
    plan = plan_pools(cores=4, usable_bytes=64 * GIB, job_memory_gib=8.0, known=units)
    assert plan.single_plan_seconds == pytest.approx(300.0)  # 4 short, then the 2 long
    assert plan.predicted_seconds == pytest.approx(200.0)  # 2 long beside 2 + 2 short
    assert plan.predicted_seconds == pytest.approx(_predicted(units, plan))
    assert dict(plan.seconds) == {f"{u.source}|{u.flags}": u.seconds for u in units}
    assert "units start longest first: 6 timed unit(s), the longest 200 s" in " ".join(
        plan.reasons)
    assert plan.to_dict()["timed_units"] == 6
    data = json.loads(write_plan_file(plan, tmp_path / "plan.json",
                                      Path("/TREE")).read_text(encoding="utf-8"))
    wrapper = [expected_seconds(u.source, u.flags, data) for u in units]
    assert [units[i] for i in longest_first(wrapper)] == long_ + short  # the wrapper's order
    assert data["by_source_seconds"]["csrc/marlin0.cu"] == 200.0


def test_the_table_order_is_kept_where_longest_first_is_predicted_slower() -> None:
    """List scheduling longest first is not always best: on 2 cores, 3, 3, 2, 2, 2 finish
    at 7 longest first and at 6 in the order 3, 2, 2, 3, 2 ... kept as given."""
    units = [_unit(f"csrc/u{i}.cu", s, 1.0, i) for i, s in enumerate([3.0, 2.0, 2.0, 3.0, 2.0])]
    plan = plan_pools(cores=2, usable_bytes=64 * GIB, job_memory_gib=8.0, known=units)
    assert plan.seconds == {} and "longest first" not in " ".join(plan.reasons)
    assert plan.predicted_seconds == pytest.approx(6.0) == plan.single_plan_seconds


def _worst_case(plan_units: list[KnownUnit], plan: object) -> float:
    """What the plan lets run at once at worst: the ``depth`` largest pooled peaks and the
    ``jobs - depth`` largest others (x HEADROOM), whatever the order."""
    from sparkbuild.jobplan.pools import PoolPlan

    assert isinstance(plan, PoolPlan)
    pooled = heavy_indices(plan, plan_units)
    peaks = [float(u.peak_bytes or 0) * HEADROOM for u in plan_units]
    heavy = sorted((peaks[i] for i in pooled), reverse=True)
    light = sorted((p for i, p in enumerate(peaks) if i not in pooled), reverse=True)
    depth = min(plan.depth, len(heavy))
    return sum(heavy[:depth]) + sum(light[:plan.jobs - depth])


def test_a_small_runner_gets_fewer_jobs_rather_than_a_plan_memory_cannot_hold() -> None:
    # flashinfer's set on GitHub's 4-core/16 GB arm runner: one 10.4 GiB MoE unit beside
    # three 2 GiB ones is over the 13.4 GiB usable, at any pool depth
    usable = 13.4 * GIB
    units = ([_unit(f"moe_gemm_{i}.cu", 300.0, 10.4, i) for i in range(6)]
             + [_unit(f"moe_light_{i}.cu", 40.0, 2.0, 6 + i) for i in range(30)]
             + [_unit(f"xqa_{i}.cu", 5.0, 0.6, 36 + i) for i in range(36)])
    plan = plan_pools(cores=4, usable_bytes=usable, job_memory_gib=8.7, known=units)
    assert plan.jobs < 4
    assert _worst_case(units, plan) <= usable
    assert any("no plan fits memory" in r for r in plan.reasons)
    assert plan.predicted_seconds is not None and plan.single_plan_seconds is not None
    assert plan.predicted_seconds < plan.single_plan_seconds  # still better than one job


def test_a_roomy_machine_keeps_every_core_and_fits() -> None:
    units = ([_unit(f"moe_gemm_{i}.cu", 300.0, 10.4, i) for i in range(6)]
             + [_unit(f"moe_light_{i}.cu", 40.0, 2.0, 6 + i) for i in range(30)])
    plan = plan_pools(cores=20, usable_bytes=115.2 * GIB, job_memory_gib=8.7, known=units)
    assert plan.jobs == 20 and _worst_case(units, plan) <= 115.2 * GIB
    assert not any("no plan fits memory" in r for r in plan.reasons)


def test_the_first_build_rule_lowers_max_jobs_where_one_heavy_unit_and_the_rest_overflow(
) -> None:
    plan = plan_pools(cores=4, usable_bytes=13.4 * GIB, job_memory_gib=8.7)
    # 8.7 GiB heavy + 3 x 3 GiB light = 17.7 GiB > 13.4: two jobs, 8.7 + 3 fit
    assert (plan.basis, plan.jobs, plan.depth) == ("rule", 2, 1)
    assert plan.reasons[1].startswith("MAX_JOBS=2: one heavy unit")
    assert plan_pools(cores=4, usable_bytes=5 * GIB, job_memory_gib=8.7).jobs == 1
