"""The makespan of today's job plan and of the pool plan, on a unit table.

    python bench/schedule_sim.py UNITS.json [--today-order TODAY.json] [--json]

UNITS.json: ``wheel --json`` output (its ``units``) or ``{"units": [...]}``; each unit has
``path``, ``seconds`` and ``peak_rss_gib`` (a unit without a peak counts 2.9 GiB).
Every plan is list scheduling by the planner's own simulator (sparkbuild.jobplan.schedule):
a free slot takes the next unit that may start.
  * today's: MAX_JOBS = min(cores, usable / 8.7 GiB), one budget for every unit, the units
    in the table's order (CMake's, as the earlier build started them);
  * the pool plan (sparkbuild.jobplan.pools.plan_pools, given the table as the cache would
    hold it: seconds and peaks): MAX_JOBS = cores, the heavy units in a pool, the
    threshold and depth it chooses by simulating its candidates, the units started
    longest first (sparkbuild.jobplan.unit_order) unless that is predicted slower;
  * the first build's plan (nothing known: the path rule, each heavy unit 8.7 GiB).
Each is reported with its peak memory in flight (the sum of running units' peaks).
A table from a build that started its units longest first lists them in that order; with
``--today-order TODAY.json`` (a build with today's plan of the same units) the units are
put in TODAY's start order first, CMake's, which today's plan would start them in.
Machines: a 20-core/128 GB DGX Spark and the 16-core/128 GiB device machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkbuild.jobplan.machine import usable_memory
from sparkbuild.jobplan.pools import heavy_indices, plan_pools, today_jobs
from sparkbuild.jobplan.schedule import KnownUnit, simulate
from sparkbuild.jobplan.unit_order import longest_first

GIB = 1024**3
TODAY_BUDGET_GIB = 8.7
MACHINES = {"spark-20c-128GB": (20, 128 * 10**9), "device-16c-128GiB": (16, 128 * GIB)}


def _row(jobs: int, depth: int, pooled: set[int], seconds: list[float], peaks: list[float]
         ) -> dict[str, Any]:
    run = simulate(seconds, peaks, jobs, pooled, depth)
    return {"max_jobs": jobs, "pool_depth": depth if pooled else None,
            "pooled_units": len(pooled), "makespan_s": round(run.makespan, 1),
            "peak_gib": round(run.peak, 1)}


def plans(units: list[dict[str, Any]], cores: int, total: int) -> dict[str, Any]:
    usable = usable_memory(total, total)
    seconds = [float(u["seconds"]) for u in units]
    peaks = [float(u["peak_rss_gib"]) for u in units]
    today = today_jobs(cores, usable, TODAY_BUDGET_GIB)
    table = [KnownUnit(str(u["path"]), "", float(u["seconds"]),
                       int(u["peak_rss_gib"] * GIB), float(i)) for i, u in enumerate(units)]
    measured = plan_pools(cores=cores, usable_bytes=usable, job_memory_gib=TODAY_BUDGET_GIB,
                          known=table)
    rule = plan_pools(cores=cores, usable_bytes=usable, job_memory_gib=TODAY_BUDGET_GIB)
    unmeasured = [KnownUnit(u.source, u.flags, u.seconds, None) for u in table]
    order = (longest_first(seconds) if measured.seconds else list(range(len(table))))
    result: dict[str, Any] = {
        "today": _row(today, 0, set(), seconds, peaks),
        "pools": _row(measured.jobs, measured.depth,
                      heavy_indices(measured, [table[i] for i in order]),
                      [seconds[i] for i in order], [peaks[i] for i in order]),
        "first_build_rule": _row(rule.jobs, rule.depth, heavy_indices(rule, unmeasured),
                                 seconds, peaks),
        "usable_gib": round(usable / GIB, 1), "longest_first": bool(measured.seconds)}
    assert result["pools"]["makespan_s"] == round(measured.predicted_seconds or 0.0, 1)
    for name in ("pools", "first_build_rule"):
        result[name]["ratio"] = round(result[name]["makespan_s"]
                                      / result["today"]["makespan_s"], 3)
    result["ratio"] = result["pools"]["ratio"]
    return result


def load(path: Path, today_order: Path | None = None) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    units = list(data["units"] if isinstance(data, dict) else data)
    for unit in units:
        unit["peak_rss_gib"] = float(unit.get("peak_rss_gib") or 2.9)
    if today_order is not None:
        started = sorted(load(today_order), key=lambda u: (float(u.get("start") or 0.0),
                                                           str(u["path"])))
        rank = {str(u["path"]): index for index, u in enumerate(started)}
        units.sort(key=lambda u: rank.get(str(u["path"]), len(rank)))
    return units


def _describe(row: dict[str, Any]) -> str:
    pool = (f" depth {row['pool_depth']} ({row['pooled_units']} pooled)"
            if row["pool_depth"] else "")
    return (f"MAX_JOBS={row['max_jobs']}{pool} makespan {row['makespan_s']:.0f} s "
            f"(peak {row['peak_gib']} GiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--today-order", type=Path, default=None,
                        help="a build with today's plan: its start order is today's")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    units = load(args.table, args.today_order)
    report = {name: plans(units, cores, total) for name, (cores, total) in MACHINES.items()}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{len(units)} units, {sum(u['seconds'] for u in units):.0f} unit-seconds")
    for name, result in report.items():
        print(f"{name} ({result['usable_gib']} GiB usable): today {_describe(result['today'])}"
              f"; pools {_describe(result['pools'])}"
              f"{' longest first' if result['longest_first'] else ''}, ratio "
              f"{result['pools']['ratio']}; "
              f"first build (rule) {_describe(result['first_build_rule'])}, ratio "
              f"{result['first_build_rule']['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
