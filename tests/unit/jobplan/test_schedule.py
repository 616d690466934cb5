"""The list-scheduling simulator the planner and bench/schedule_sim.py share."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sparkbuild.jobplan import schedule
from sparkbuild.jobplan.schedule import Schedule, simulate

REPO = Path(__file__).resolve().parents[3]


def test_slots_limit_how_many_run_at_once() -> None:
    assert simulate([10, 10, 10], [1, 1, 1], 2) == Schedule(20.0, 2.0)
    assert simulate([10, 10, 10], [1, 1, 1], 3) == Schedule(10.0, 3.0)
    assert simulate([], [], 4) == Schedule(0.0, 0.0)


def test_a_full_pool_lets_the_next_light_unit_start() -> None:
    # h0 and l2 start at 0 (h1 waits for the pool), l3 at 1, h1 at 10
    run = simulate([10, 10, 1, 1], [5, 5, 1, 1], 2, pool={0, 1}, depth=1)
    assert run == Schedule(20.0, 6.0)
    # without the pool both heavy units run together
    assert simulate([10, 10, 1, 1], [5, 5, 1, 1], 2) == Schedule(11.0, 10.0)


def test_the_table_order_is_the_start_order() -> None:
    assert simulate([1, 1, 1, 9], [0, 0, 0, 0], 2).makespan == 10.0
    assert simulate([9, 1, 1, 1], [0, 0, 0, 0], 2).makespan == 9.0


def test_lengths_must_agree() -> None:
    with pytest.raises(ValueError):
        simulate([1.0], [], 1)


def test_bench_schedule_sim_uses_this_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "bench" / "schedule_sim.py"
    spec = importlib.util.spec_from_file_location("schedule_sim", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.simulate is schedule.simulate
    table = REPO / "bench" / "real-build" / "units-derived.json"
    assert bench.main([str(table), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"spark-20c-128GB", "device-16c-128GiB"}
    for result in report.values():
        assert result["pools"]["makespan_s"] <= result["today"]["makespan_s"]
        assert result["first_build_rule"]["makespan_s"] <= result["today"]["makespan_s"]
        assert result["pools"]["max_jobs"] > result["today"]["max_jobs"]
