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
Machines: a 20-core/128 GB DGX Spark and the 16-core/128 GiB device machine, or those
``--machine NAME=CORES,GB`` names (repeatable; GitHub's ubuntu-24.04-arm runner is
``--machine gh-arm=4,16``).  ``--second-table`` appends another table (flashinfer's model
set beside vLLM's: one main job compiles both).

    python bench/schedule_sim.py UNITS.json --team SHARE.json [--sparks 1,2,4] [--cores 20]
        [--link-gbps 10] [--second-table FLASHINFER.json [--second-share SHARE2.json]]
        [--before S] [--after S] [--json]

``--team``: a team of N Sparks through sccache-dist, SHARE.json from
``bench/dist_local_share.py``: the local share (CPU-seconds the build host keeps per unit:
preprocessing, fatbinary, what sccache adds) and the bytes shipped per unit, the
CPU-weighted mean and the mean of its real vLLM units; ``--second-share``: the same of its
``flashinfer `` rows, for the ``--second-table``'s units (flashinfer's model set, compiled
through the same client; default: the first table's share).  One Spark is the pool plan
above.  For N > 1 the plan is sparkbuild's own (sparkbuild.jobplan.machine.with_team_cores,
the team plan of sparkbuild.jobplan.team_pool.plan_team simulated with these shares and
bytes, each server a Spark of 128 GB): MAX_JOBS and the heavy pool's depth, the build
host's local slots for what falls back.  It is then simulated
(sparkbuild.jobplan.schedule.simulate_team): the build host's cores do every unit's local
share and the N - 1 others its remote part, each unit on the least-loaded server with a free
core, a remote part that finds every core taken falling back to the build host (a pooled
one only into the local slots), units longest first.  A unit's remote part pays its bytes
at the link speed and four round trips (STEP_LATENCY_S each); the servers start once the
client has packed and sent the toolchains.  The whole main job adds the measured seconds
before and after the compile (BEFORE_S, AFTER_S); each row gives both floor terms (every
core busy; the longest unit) and its ratio to one Spark.

A table that is not of this form (no list of units, an empty one, a unit without a path or
its seconds, a number that is not one), a flag that gives none, is a named error (exit 2,
``{"error": ...}`` with ``--json``), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkbuild.errors import SparkbuildError, UsageError
from sparkbuild.jobplan.machine import BuildPlan, usable_memory, with_team_cores
from sparkbuild.jobplan.pools import heavy_indices, plan_pools, single_plan_jobs
from sparkbuild.jobplan.schedule import KnownUnit, TeamShape, simulate, simulate_team
from sparkbuild.jobplan.team_pool import DistModel, ServerMemory
from sparkbuild.jobplan.unit_order import longest_first
from sparkbuild.store.user_files import parse_json, read_user_text
from sparkbuild.team.gate_server import gate_slots

GIB = 1024**3
TODAY_BUDGET_GIB = 8.7
MACHINES = {"spark-20c-128GB": (20, 128 * 10**9), "device-16c-128GiB": (16, 128 * GIB)}
BEFORE_S = 94.0
AFTER_S = 100.0
"""The whole 12.1a build's seconds before and after its compile, measured on the device
(BENCHMARKS.md, "Full build, projected"): prepare, vendor, doctor, configure; link, wheel
rewrite, machine code, verify, wheelhouse.  Local work: dist does not shorten it."""
STEP_LATENCY_S = 0.5
"""Per remote step: allocation, HTTPS, bwrap and overlay setup; 0.2 to 1 s measured on
loopback under load (issue 43's prototype); four steps per nvcc unit."""
TOOLCHAIN_PACK_S = 10.0
"""The client packs cudafe++, cicc, ptxas and gcc once (about 10 s measured)."""
TOOLCHAIN_BYTES = 85_244_633
"""What a fresh server receives first (measured through a counting proxy)."""


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
    today = single_plan_jobs(cores, usable, TODAY_BUDGET_GIB)
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


TABLE_LIMIT = 256 << 20
TABLE_HINT = ("a unit table is `wheel --json` output, {\"units\": [...]} or a list; each unit "
              "has path, seconds and (optionally) peak_rss_gib and start")


def read_json(path: Path, what: str) -> Any:
    """The JSON of ``path`` (``what`` names it); a file that is no regular file, too big or
    no JSON is a :class:`UsageError` naming it."""
    text = read_user_text(path, what, TABLE_LIMIT, error=UsageError)
    try:
        return parse_json(text)
    except ValueError as exc:
        raise UsageError(f"{what} is not JSON: {exc}", where=str(path)) from exc


def _number(unit: dict[str, Any], key: str, *, above_zero: bool = False) -> str | None:
    """Why ``unit[key]`` is not a finite number of 0 or more (above 0); None when it is."""
    value = unit[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or value < 0 or (above_zero and value == 0):
        must = "a number above 0" if above_zero else "a number of 0 or more"
        return f"has {key} {str(value)[:40]!r}, not {must}"
    return None


def unit_problem(unit: object) -> str | None:
    """Why ``unit`` is not a unit of a table (path, seconds, optional peak and start)."""
    if not isinstance(unit, dict):
        return f"is a JSON {type(unit).__name__}, not an object"
    if not isinstance(unit.get("path"), str) or not unit["path"]:
        return "has no path"
    if unit.get("seconds") is None:
        return f"({unit['path']}) has no seconds"
    checks = [_number(unit, "seconds")]
    checks += [_number(unit, "peak_rss_gib", above_zero=True)] if unit.get(
        "peak_rss_gib") is not None else []
    checks += [_number(unit, "start")] if unit.get("start") is not None else []
    problem = next((c for c in checks if c is not None), None)
    return f"({unit['path']}) {problem}" if problem else None


def load(path: Path, today_order: Path | None = None) -> list[dict[str, Any]]:
    """The units of the table at ``path`` (copies: a unit without a peak counts 2.9 GiB);
    a table of another form, an empty one or a unit without its seconds is a named
    :class:`UsageError`."""
    data = read_json(path, f"the unit table {path.name}")
    raw = data.get("units") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise UsageError(f"{path.name}: units must be a list of units, not "
                         f"{type(raw).__name__ if raw is not None else 'absent'}",
                         where=str(path), hint=TABLE_HINT)
    if not raw:
        raise UsageError(f"{path.name} holds no unit: nothing to schedule", where=str(path),
                         hint=TABLE_HINT)
    for number, unit in enumerate(raw, start=1):
        problem = unit_problem(unit)
        if problem is not None:
            raise UsageError(f"{path.name}: unit {number} {problem}", where=str(path),
                             hint=TABLE_HINT)
    units = [{**unit, "peak_rss_gib": float(unit.get("peak_rss_gib") or 2.9)} for unit in raw]
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


def measured_share(path: Path, prefix: str = "vllm ") -> dict[str, float]:
    """The mean local share and bytes per unit of the measured units in SHARE.json
    (bench/dist_local_share.py) whose name starts with ``prefix`` (the real vLLM units;
    ``flashinfer `` for flashinfer's), weighted by their CPU-seconds."""
    data = read_json(path, f"the share table {path.name}")
    units = data.get("units") if isinstance(data, dict) else None
    if not isinstance(units, list):
        raise UsageError(f"{path.name}: no units list", where=str(path),
                         hint="SHARE.json is bench/dist_local_share.py's output")
    for number, row in enumerate(units, start=1):
        problem = _share_problem(row, prefix)
        if problem is not None:
            raise UsageError(f"{path.name}: unit {number} {problem}", where=str(path),
                             hint="SHARE.json is bench/dist_local_share.py's output")
    rows = [r for r in units if r["unit"].startswith(prefix) and not r["failed_steps"]]
    if not rows or not sum(r["cpu_s"] for r in rows):
        what = "real vLLM" if prefix == "vllm " else prefix.strip()
        raise UsageError(f"{path.name}: no {what} unit measured without a failed step",
                         where=str(path))
    cpu = sum(r["cpu_s"] for r in rows)
    return {"local_share": sum(r["local_share"] * r["cpu_s"] for r in rows) / cpu,
            "bytes": sum(r["up_bytes"] + r["down_bytes"] for r in rows) / len(rows),
            "units": len(rows)}


def _share_problem(row: object, prefix: str = "vllm ") -> str | None:
    """Why ``row`` is not a unit of SHARE.json (its name, failed steps, CPU-seconds, local
    share and bytes each way)."""
    if not isinstance(row, dict) or not isinstance(row.get("unit"), str):
        return "is not an object with a unit name"
    if not isinstance(row.get("failed_steps"), (list, int)):
        return f"({row['unit']}) has no failed_steps"
    if row["failed_steps"] or not row["unit"].startswith(prefix):
        return None  # not used
    for key in ("cpu_s", "local_share", "up_bytes", "down_bytes"):
        if row.get(key) is None:
            return f"({row['unit']}) has no {key}"
        problem = _number(row, key)
        if problem is not None:
            return f"({row['unit']}) {problem}"
    return None


def team(units: list[dict[str, Any]], sparks: int, cores: int, total: int,
         shares: list[dict[str, float]], link_gbps: float) -> dict[str, Any]:
    """The compile of ``units`` on ``sparks`` Sparks of ``cores`` cores and ``total`` bytes
    each (see --team); ``shares``: each unit's measured share and bytes."""
    one = plans(units, cores, total)
    if sparks == 1:
        return {"sparks": 1, "compile_s": one["pools"]["makespan_s"], "max_jobs": cores,
                "plan": "the pool plan on one Spark"}
    usable = usable_memory(total, total)
    seconds = [float(u["seconds"]) for u in units]
    peaks = [float(u["peak_rss_gib"]) for u in units]
    table = [KnownUnit(str(u["path"]), "", s, int(p * GIB), float(i))
             for i, (u, s, p) in enumerate(zip(units, seconds, peaks, strict=True))]
    local = plan_pools(cores=cores, usable_bytes=usable, job_memory_gib=TODAY_BUDGET_GIB,
                       known=table, measured={f"{u.source}|": int(u.peak_bytes or 0)
                                              for u in table})
    link = link_gbps * 1e9 / 8
    model = DistModel([s["local_share"] for s in shares],
                      [s["bytes"] / link + 4 * STEP_LATENCY_S for s in shares],
                      TOOLCHAIN_PACK_S + TOOLCHAIN_BYTES / link)
    plan = with_team_cores(BuildPlan(cores, 1, "sccache", (), local),
                           team_cpus=cores * (sparks - 1), servers=sparks - 1,
                           scheduler="projected", usable_bytes=usable,
                           server_memory=ServerMemory(total, "a Spark's"), model=model).pool
    assert plan is not None
    order = longest_first(seconds)
    pooled = heavy_indices(plan, [table[i] for i in order])
    moves = [shares[i]["bytes"] / link + 4 * STEP_LATENCY_S for i in order]
    slots = gate_slots(plan)
    shape = TeamShape(host_cores=cores, servers=[cores] * (sparks - 1),
                      local_share=[shares[i]["local_share"] for i in order],
                      host_slots=slots.slots if slots else None,
                      start_delay=TOOLCHAIN_PACK_S + TOOLCHAIN_BYTES / link)
    run = simulate_team([seconds[i] for i in order], [peaks[i] for i in order], shape,
                        transfer=moves, jobs=plan.jobs, pool=pooled, depth=plan.depth)
    return {"sparks": sparks, "compile_s": round(run.makespan, 1),
            "max_jobs": plan.jobs, "pool_depth": plan.depth,
            "local_pool_depth": local.depth, "local_slots": slots.slots if slots else None,
            "pooled": len(pooled),
            "host_busy": round(run.host_busy / (run.makespan * cores), 3),
            "remote_busy": round(run.remote_busy / (run.makespan * cores * (sparks - 1)), 3),
            "fallback_s": round(run.fallback_seconds, 1),
            "server_peak_gib": round(run.server_peak, 1), "usable_gib": round(usable / GIB, 1),
            "bytes_shipped_gb": round(sum(share["bytes"] for share in shares) / 1e9, 2)}


def team_report(units: list[dict[str, Any]], sparks: list[int], cores: int,
                shares: list[dict[str, float]], link_gbps: float, before: float, after: float
                ) -> dict[str, Any]:
    total = 128 * 10**9
    rows = [team(units, n, cores, total, shares, link_gbps) for n in sparks]
    for row in rows:
        row["whole_job_s"] = round(before + row["compile_s"] + after, 1)
        row["whole_job_min"] = round(row["whole_job_s"] / 60, 1)
        # the floor's two terms on this many Sparks: every core busy, or the longest unit
        row["floor_cores_s"] = round(before + sum(float(u["seconds"]) for u in units)
                                     / (cores * row["sparks"]) + after, 1)
    if rows and rows[0]["sparks"] == 1:
        for row in rows:
            row["of_one_spark"] = round(row["whole_job_s"] / rows[0]["whole_job_s"], 3)
    longest = max(units, key=lambda u: float(u["seconds"]))
    seen = {id(s): s for s in shares}
    return {"units": len(units), "unit_seconds": round(sum(float(u["seconds"])
                                                           for u in units)),
            "longest_unit_s": float(longest["seconds"]), "longest_unit": longest["path"],
            "cores": cores, "link_gbps": link_gbps,
            "local_share": round(sum(s["local_share"] * float(u["seconds"])
                                     for s, u in zip(shares, units, strict=True))
                                 / max(1e-9, sum(float(u["seconds"]) for u in units)), 4),
            "shares": [{k: round(v, 4) for k, v in s.items()} for s in seen.values()],
            "bytes_per_unit": round(sum(s["bytes"] for s in shares) / len(shares)),
            "share_units": sum(s["units"] for s in seen.values()),
            "before_s": before, "after_s": after,
            "floor_s": round(before + float(longest["seconds"]) + after, 1), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--today-order", type=Path, default=None,
                        help="a build with today's plan: its start order is today's")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--team", type=Path, metavar="SHARE.json",
                        help="project a team of Sparks through sccache-dist")
    parser.add_argument("--sparks", default="1,2,4")
    parser.add_argument("--cores", type=int, default=20)
    parser.add_argument("--link-gbps", type=float, default=10.0)
    parser.add_argument("--second-table", type=Path, default=None,
                        help="another unit table through the same client (flashinfer's)")
    parser.add_argument("--local-share", type=float, default=None,
                        help="instead of the measured one (a sensitivity run)")
    parser.add_argument("--second-share", type=Path, default=None, metavar="SHARE.json",
                        help="the --second-table's units' measured share (flashinfer's rows "
                        "of bench/dist_local_share.py); default: the --team table's")
    parser.add_argument("--machine", action="append", default=[], metavar="NAME=CORES,GB",
                        help="simulate this machine instead of the Spark and the device")
    parser.add_argument("--before", type=float, default=BEFORE_S)
    parser.add_argument("--after", type=float, default=AFTER_S)
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except SparkbuildError as error:
        if args.json:
            print(json.dumps({"error": error.to_dict()}, indent=1))
        print(error.render(), file=sys.stderr)
        return error.exit_code


def _counts(text: str, flag: str) -> list[int]:
    """``1,2,4``: positive counts, or a named UsageError."""
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise UsageError(f"{flag} {text!r} is not a list of positive counts",
                         hint=f"for example {flag} 1,2,4")
    return counts


def _machine(given: str) -> tuple[str, tuple[int, int]]:
    """``NAME=CORES,GB``, or a named UsageError."""
    name, _, spec = given.partition("=")
    cores, _, gigabytes = spec.partition(",")
    try:
        count, size = int(cores), float(gigabytes)
    except ValueError:
        count, size = 0, 0.0
    if not name or count < 1 or not math.isfinite(size) or size <= 0:
        raise UsageError(f"--machine {given!r} is not NAME=CORES,GB",
                         hint="for example --machine gh-arm=4,16")
    return name, (count, int(size * 10**9))


def _run(args: argparse.Namespace) -> int:
    if args.cores < 1 or not math.isfinite(args.link_gbps) or args.link_gbps <= 0:
        raise UsageError("--cores must be 1 or more and --link-gbps above 0",
                         hint="for example --cores 20 --link-gbps 10")
    units = load(args.table, args.today_order)
    if args.team is not None:
        share = measured_share(args.team)
        if args.local_share is not None:
            share["local_share"] = args.local_share
        shares = [share] * len(units)
        if args.second_table is not None:
            second = load(args.second_table)
            other = (measured_share(args.second_share, "flashinfer ")
                     if args.second_share is not None else share)
            if args.local_share is not None:
                other["local_share"] = args.local_share
            units += second
            shares += [other] * len(second)
        report = team_report(units, _counts(args.sparks, "--sparks"), args.cores,
                             shares, args.link_gbps, args.before, args.after)
        if args.json:
            print(json.dumps(report, indent=1))
            return 0
        print(f"{report['units']} units, {report['unit_seconds']} unit-seconds, longest "
              f"{report['longest_unit_s']:.0f} s ({report['longest_unit']}); local share "
              f"{report['local_share']} (CPU-weighted over the units), "
              f"{report['bytes_per_unit'] / 1e6:.1f} MB per unit at {args.link_gbps:g} Gb/s; "
              f"whole job at least {report['floor_s']:.0f} s (before + longest + after)")
        for row in report["rows"]:
            extra = (f", pool depth {row['pool_depth']} (local {row['local_pool_depth']}, "
                     f"slots {row['local_slots']}), host cores busy {row['host_busy']}, "
                     f"servers {row['remote_busy']}, fallback {row['fallback_s']} s, server "
                     f"peak {row['server_peak_gib']} GiB" if row["sparks"] > 1 else "")
            ratio = f", {row['of_one_spark']} of one Spark" if "of_one_spark" in row else ""
            print(f"{row['sparks']} Spark(s): compile {row['compile_s']:.0f} s, whole job "
                  f"{row['whole_job_s']:.0f} s ({row['whole_job_min']} min{ratio}), "
                  f"MAX_JOBS {row['max_jobs']}; floor: every core {row['floor_cores_s']:.0f} "
                  f"s, the longest unit {report['floor_s']:.0f} s{extra}")
        return 0
    if args.second_table is not None:
        units += load(args.second_table)
    machines = dict(MACHINES)
    if args.machine:
        machines = dict(_machine(given) for given in args.machine)
    report = {name: plans(units, cores, total) for name, (cores, total) in machines.items()}
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
