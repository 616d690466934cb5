"""The one-piece hold, projected from measured pieces (not a measurement of the one piece).

    python bench/full-build/one-piece/project.py [--units bench/full-build/units-12.1a.json]
        [--flashinfer-cpu-s 0,2000,4000,8000,12000] [--json]

What is measured and read here, never typed in:
  * the compile: ``bench/schedule_sim.py``'s plans over the unit table (155 units of the
    whole 12.1a build of vllm 0.20.0, each measured on the device), on the device's 16
    cores: the first build's plan (the path rule in CMake's order: the one piece's cache
    has no unit table) and the pool plan from a unit table (a later build);
  * the phases before the compile (bundle import to configure) and after it (link to
    wheelhouse) from the parts-2-3 run's ``wheel.json``, the code forecast's from the
    2026-12-04 moe-pools run's, the machine code scaled from parts 2-3's rate to the whole
    build's kernels (1472 + 4634);
  * run.sh's verify after ``wheel``: the machine code phase once more.
What is assumed, and said: the machine's start (``--start-s``, a minute or more: README),
each call's transfer (``--call-s``), and flashinfer's model set, unmeasured until issue 42
measures it: ``--flashinfer-cpu-s`` CPU-seconds, with two models of where they run:
  * ``alongside``: today's ``flashinfer/alongside.py``, a quarter of the jobs (4 of 16)
    beside vLLM's compile and after it: the compile's wall is the longer of vLLM's plan on
    the cores left over and X / 4;
  * ``pooled``: flashinfer's units in the same job plan (issue 42, item 3): every core,
    the wall the longer of vLLM's plan and (vLLM's unit-seconds + X) / 16 at its busy share.
vLLM 0.29.0's own units are not measured anywhere (``check --all`` here compiles one unit
at a time, 2 cores, without FA2): the table is 0.20.0's, the closest measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository, for bench/
from bench.script_loader import schedule_sim

BENCH = Path(__file__).resolve().parents[2]
GIB = 1024**3
GOAL_S = 1800.0
PRE = ("bundle verify", "bundle import", "tree copy", "prepare", "pins", "vendor", "doctor",
       "build environment", "code forecast", "metadata", "configure")
POST = ("link", "install and package", "wheel rewrite", "verify", "wheelhouse")


def _phases(path: Path) -> dict[str, float]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {k: float(v) for k, v in data["timeline"]["phases"].items()}


def _kernels(path: Path) -> int:
    data = json.loads(path.read_text(encoding="utf-8"))
    return sum(int(c["kernels"]) for lib in data["libraries"] for c in lib["coverage"])


def project(units_path: Path, *, cores: int, memory_gib: float, start_s: float,
            call_s: float, calls: int, flashinfer: list[float]) -> dict[str, Any]:
    sim = schedule_sim()
    units = sim.load(units_path)
    plans = sim.plans(units, cores, int(memory_gib * GIB))
    unit_seconds = sum(float(u["seconds"]) for u in units)
    parts = BENCH / "full-build"
    measured = _phases(parts / "part2-3" / "wheel.json")
    forecast = _phases(parts / "2026-12-04-moe-pools" / "wheel.json")["code forecast"]
    kernels = {name: _kernels(parts / name / "verify.json") for name in ("part1", "part2-3")}
    rate = measured["machine code"] / kernels["part2-3"]  # seconds a kernel, read in parallel
    machine_code = rate * sum(kernels.values())
    pre = sum(measured.get(k, 0.0) for k in PRE if k != "code forecast") + forecast
    post = sum(measured.get(k, 0.0) for k in POST) + machine_code
    verify = machine_code
    overhead = start_s + calls * call_s
    rows = []
    for plan in ("first_build_rule", "pools"):
        vllm = float(plans[plan]["makespan_s"])
        busy = unit_seconds / (vllm * cores)
        for x in flashinfer:
            alongside = max(vllm * cores / (cores - cores // 4), x / (cores // 4)) if x else vllm
            pooled = max(vllm, (unit_seconds + x) / (cores * busy))
            for mode, compile_s in (("alongside", alongside), ("pooled", pooled)):
                hold = overhead + pre + compile_s + post + verify
                rows.append({"plan": plan, "flashinfer_cpu_s": x, "builder": mode,
                             "compile_s": round(compile_s),
                             "wheel_s": round(pre + compile_s + post),
                             "hold_s": round(hold), "fits": hold <= GOAL_S})
    budget = GOAL_S - overhead - pre - post - verify
    largest = {}
    for plan in ("first_build_rule", "pools"):
        vllm = float(plans[plan]["makespan_s"])
        busy = unit_seconds / (vllm * cores)
        largest[plan] = {
            "alongside": round(max(0.0, budget * (cores // 4))) if budget * (cores - cores // 4)
            >= vllm * cores else 0,
            "pooled": round(max(0.0, budget * cores * busy - unit_seconds)),
        }
    return {"units": len(units), "unit_seconds": round(unit_seconds),
            "vllm_compile_s": {p: plans[p]["makespan_s"]
                               for p in ("first_build_rule", "pools", "today")},
            "pre_s": round(pre, 1), "post_s": round(post, 1), "verify_s": round(verify, 1),
            "machine_code_s_per_kernel": round(rate, 5), "kernels": kernels,
            "start_and_calls_s": overhead, "goal_s": GOAL_S,
            "compile_budget_s": round(budget), "rows": rows,
            "largest_flashinfer_cpu_s_that_fits": largest}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=Path, default=BENCH / "full-build" / "units-12.1a.json")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--memory-gib", type=float, default=128.0)
    parser.add_argument("--start-s", type=float, default=90.0,
                        help="the machine's start, before the first command (assumed)")
    parser.add_argument("--call-s", type=float, default=15.0,
                        help="one call's transfer and return (assumed)")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--flashinfer-cpu-s", default="0,2000,4000,8000,12000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = project(args.units, cores=args.cores, memory_gib=args.memory_gib,
                     start_s=args.start_s, call_s=args.call_s, calls=args.calls,
                     flashinfer=[float(x) for x in args.flashinfer_cpu_s.split(",") if x])
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['units']} units, {result['unit_seconds']} unit-seconds; vLLM's compile on "
          f"{args.cores} cores: {result['vllm_compile_s']}")
    print(f"before the compile {result['pre_s']} s, after it {result['post_s']} s, run.sh's "
          f"verify {result['verify_s']} s, machine start and {args.calls} calls "
          f"{result['start_and_calls_s']} s: {result['compile_budget_s']} s of the "
          f"{GOAL_S:.0f} s hold left for the compile")
    print("| plan | flashinfer CPU-s | builder | compile s | wheel s | hold s | fits |")
    print("|---|---|---|---|---|---|---|")
    for row in result["rows"]:
        print(f"| {row['plan']} | {row['flashinfer_cpu_s']:.0f} | {row['builder']} | "
              f"{row['compile_s']} | {row['wheel_s']} | {row['hold_s']} | "
              f"{'yes' if row['fits'] else 'no'} |")
    print(f"largest flashinfer set that fits (CPU-seconds on the device): "
          f"{result['largest_flashinfer_cpu_s_that_fits']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
