"""The makespan of today's job plan and of the pool plan, on a unit table.

    python bench/schedule_sim.py UNITS.json [--json]

UNITS.json: ``wheel --json`` output (its ``units``) or ``{"units": [...]}``; each unit has
``path``, ``seconds`` and ``peak_rss_gib`` (a unit without a peak counts 2.9 GiB).
Both plans are list scheduling in the table's order (ninja's order): a free slot takes
the next unit that may start.
  * today's: MAX_JOBS = min(cores, usable / 8.7 GiB), one budget for every unit;
  * the pool plan (sparkbuild.build.pools): MAX_JOBS = cores, the units above their fair
    share of memory in a pool of the depth plan_pools chooses from the measured peaks.
Each is reported with its peak memory in flight (the sum of running units' peaks).
Machines: a 20-core/128 GB DGX Spark and the 16-core/128 GiB device machine.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkbuild.build.doctor import usable_memory
from sparkbuild.build.pools import HEADROOM, plan_pools

GIB = 1024**3
TODAY_BUDGET_GIB = 8.7
MACHINES = {"spark-20c-128GB": (20, 128 * 10**9), "device-16c-128GiB": (16, 128 * GIB)}


def simulate(units: list[dict[str, Any]], jobs: int, pool: set[int], depth: int
             ) -> tuple[float, float]:
    """(makespan seconds, peak GiB in flight) of list scheduling with a pool."""
    pending = list(range(len(units)))
    running: list[tuple[float, int]] = []
    now = peak = in_flight = 0.0
    in_pool = 0
    while pending or running:
        started = True
        while started and len(running) < jobs:
            started = False
            for position, index in enumerate(pending):
                if index in pool and in_pool >= depth:
                    continue
                pending.pop(position)
                in_pool += index in pool
                in_flight += units[index]["peak_rss_gib"]
                heapq.heappush(running, (now + units[index]["seconds"], index))
                started = True
                break
        peak = max(peak, in_flight)
        now, done = heapq.heappop(running)
        in_pool -= done in pool
        in_flight -= units[done]["peak_rss_gib"]
    return now, peak


def plans(units: list[dict[str, Any]], cores: int, total: int) -> dict[str, Any]:
    usable = usable_memory(total, total)
    today_jobs = max(1, min(cores, math.floor(usable / (TODAY_BUDGET_GIB * GIB))))
    today, today_peak = simulate(units, today_jobs, set(), 0)
    measured = {f"{u['path']}|": int(u["peak_rss_gib"] * GIB) for u in units}
    plan = plan_pools(cores=cores, usable_bytes=usable, job_memory_gib=TODAY_BUDGET_GIB,
                      measured=measured)
    heavy = {i for i, u in enumerate(units)
             if int(u["peak_rss_gib"] * GIB) * HEADROOM > plan.threshold_bytes}
    pooled, pooled_peak = simulate(units, plan.jobs, heavy, plan.depth)
    return {"today": {"max_jobs": today_jobs, "makespan_s": round(today, 1),
                      "peak_gib": round(today_peak, 1)},
            "pools": {"max_jobs": plan.jobs, "pool_depth": plan.depth,
                      "pooled_units": len(heavy), "makespan_s": round(pooled, 1),
                      "peak_gib": round(pooled_peak, 1)},
            "ratio": round(pooled / today, 3) if today else None,
            "usable_gib": round(usable / GIB, 1)}


def load(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    units = data["units"] if isinstance(data, dict) else data
    for unit in units:
        unit["peak_rss_gib"] = float(unit.get("peak_rss_gib") or 2.9)
    return list(units)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    units = load(args.table)
    report = {name: plans(units, cores, total) for name, (cores, total) in MACHINES.items()}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{len(units)} units, {sum(u['seconds'] for u in units):.0f} unit-seconds")
    for name, result in report.items():
        today, pools = result["today"], result["pools"]
        print(f"{name}: today MAX_JOBS={today['max_jobs']} makespan {today['makespan_s']:.0f} s"
              f" (peak {today['peak_gib']} GiB); pools MAX_JOBS={pools['max_jobs']} depth "
              f"{pools['pool_depth']} ({pools['pooled_units']} pooled) makespan "
              f"{pools['makespan_s']:.0f} s (peak {pools['peak_gib']} GiB); ratio "
              f"{result['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
