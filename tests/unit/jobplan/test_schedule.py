"""The list-scheduling simulator the planner and bench/schedule_sim.py share."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.jobplan import schedule
from sparkbuild.jobplan.schedule import Schedule, simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.script_loader import schedule_sim

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
    bench = schedule_sim()
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


def test_the_gate_keeps_pooled_units_host_work_on_its_slots() -> None:
    from sparkbuild.jobplan.schedule import TeamSchedule, TeamShape, simulate_team

    # no server: every remote part falls back.  Three pooled units of 10 s and a light
    # one, all in flight, on 2 host cores.  Without the gate: 40 s of work on 2 cores.
    seconds, peaks = [10.0] * 4, [8.0, 8.0, 8.0, 1.0]

    def run(servers: list[int], share: float | list[float],
            slots: int | None = None) -> TeamSchedule:
        shape = TeamShape(host_cores=2, servers=servers, local_share=share, host_slots=slots)
        return simulate_team(seconds, peaks, shape, jobs=4, pool={0, 1, 2}, depth=3)

    assert run([], 0.5).makespan == 20.0
    # the gate's one slot: the pooled units' 30 s one at a time on it, the light one's 10
    # s on the other core
    gated = run([], 0.5, 1)
    assert gated.makespan == 30.0 and gated.fallback_seconds == 20.0
    # each unit's own share: the pooled ones keep nothing here, the light one all of it
    each = run([3], [0.0, 0.0, 0.0, 1.0], 1)
    assert each.remote_busy == 30.0 and each.host_busy == 10.0 and each.makespan == 10.0
    # slots that are every core: no split
    assert run([], 0.5, 2).makespan == 20.0


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
    bench: Any = schedule_sim()
    path = tmp_path / "units.json"
    path.write_text(table)
    assert bench.main([str(path), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["error"] == "UsageError" and says in error["what"]
    assert error["where"] == str(path)


def _share_row(unit: str, share: float, cpu: float, moved: int) -> dict[str, Any]:
    return {"unit": unit, "failed_steps": [], "cpu_s": cpu, "local_share": share,
            "up_bytes": moved, "down_bytes": moved}


def test_bench_team_takes_each_tables_measured_share(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    bench: Any = schedule_sim()
    vllm, fi = tmp_path / "vllm.json", tmp_path / "fi.json"
    vllm.write_text(json.dumps({"units": [
        {"path": f"csrc/u{i}.cu", "seconds": 40.0, "peak_rss_gib": 3.0} for i in range(30)]}))
    fi.write_text(json.dumps({"units": [
        {"path": f"fused_moe_120/g{i}.cu", "seconds": 100.0, "peak_rss_gib": 10.0}
        for i in range(6)]}))
    shares = tmp_path / "share.json"
    shares.write_text(json.dumps({"units": [
        _share_row("vllm 0.29.0 a.cu", 0.10, 10.0, 5_000_000),
        _share_row("flashinfer 0.6.18 fused_moe_120 g.cu", 0.04, 90.0, 8_000_000)]}))
    assert bench.measured_share(shares)["local_share"] == pytest.approx(0.10)
    picked = bench.measured_share(shares, "flashinfer ")
    assert picked["local_share"] == pytest.approx(0.04) and picked["bytes"] == 16_000_000
    assert bench.main([str(vllm), "--team", str(shares), "--second-table", str(fi),
                       "--second-share", str(shares), "--sparks", "1,2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # CPU-weighted over the units: 1200 s at 10 %, 600 s at 4 %
    assert report["local_share"] == pytest.approx((1200 * 0.10 + 600 * 0.04) / 1800, abs=1e-4)
    assert len(report["shares"]) == 2 and report["units"] == 36
    one, two = report["rows"]
    assert one["of_one_spark"] == 1 and two["of_one_spark"] < 1
    assert two["pool_depth"] >= two["local_pool_depth"] and two["max_jobs"] <= 40
    assert two["floor_cores_s"] == pytest.approx(194 + 1800 / 40, abs=0.1)
