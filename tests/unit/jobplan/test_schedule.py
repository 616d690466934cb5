"""The list-scheduling simulator the planner and bench/schedule_sim.py share."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

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


def test_a_team_runs_the_remote_parts_on_its_servers() -> None:
    from sparkbuild.jobplan.schedule import TeamShape, simulate_team

    # 4 units of 10 s, 10% local, 2 in flight: one host core does the local tenths (1 s
    # each, in turn), two one-core servers the remote 9 s parts: 1-10, 2-11, 11-20, 12-21
    run = simulate_team([10] * 4, [1] * 4,
                        TeamShape(host_cores=1, servers=[1, 1], local_share=0.1), jobs=2)
    assert run.fallback_seconds == 0 and run.remote_busy == 36.0
    assert run.host_busy == 4.0 and run.server_peak == 1.0 and run.makespan == 21.0
    # 3 in flight (every core of the team): the third finds both servers full and falls
    # back to the build host (3-12); the fourth starts at 10, waits for the host, 13-22
    full = simulate_team([10] * 4, [1] * 4,
                         TeamShape(host_cores=1, servers=[1, 1], local_share=0.1))
    assert full.fallback_seconds == 9.0 and full.makespan == 22.0
    # every server full: the remote part falls back to the build host
    alone = simulate_team([10] * 2, [1] * 2, TeamShape(host_cores=1, servers=[], local_share=0.1))
    assert alone.fallback_seconds == 18.0 and alone.makespan == 20.0
    slow = simulate_team([10], [1],
                         TeamShape(host_cores=1, servers=[1], local_share=0.1, start_delay=5.0),
                         transfer=[2.0])
    assert slow.makespan == 16.0  # 1 local, then the server starts at 5: 5 + 9 + 2


def test_a_team_keeps_the_heavy_pool() -> None:
    from sparkbuild.jobplan.schedule import TeamShape, simulate_team

    run = simulate_team([10, 10], [8, 8], TeamShape(host_cores=2, servers=[4], local_share=0.0),
                        pool={0, 1}, depth=1)
    assert run.makespan == 20.0 and run.server_peak == 8.0


def _bench() -> object:
    path = REPO / "bench" / "schedule_sim.py"
    spec = importlib.util.spec_from_file_location("schedule_sim", path)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize(("table", "says"), [
    ('{"units": [{"path": "a.cu"}]}', "unit 1 (a.cu) has no seconds"),
    ('{"units": {"a.cu": 3}}', "units must be a list of units, not dict"),
    ("[]", "holds no unit"),
    ('[{"path": "a.cu", "seconds": true}]', "has seconds 'True', not a number of 0 or more"),
    ('[{"path": "a.cu", "seconds": 3, "peak_rss_gib": 0}]', "not a number above 0"),
    ('[{"seconds": 3}]', "unit 1 has no path"),
    ('[3]', "unit 1 is a JSON int, not an object"),
    ("{", "is not JSON"),
])
def test_bench_schedule_sim_names_a_bad_table(tmp_path: Path, table: str, says: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bench: Any = _bench()
    path = tmp_path / "units.json"
    path.write_text(table)
    assert bench.main([str(path), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["error"] == "UsageError" and says in error["what"]
    assert error["where"] == str(path)
