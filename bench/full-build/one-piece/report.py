"""What a one-piece build on the device gave, against its goal and the simulator's prediction.

    python bench/full-build/one-piece/report.py PART_DIR [--goal-s 1800] [--cores 16]
        [--memory-gib 128] [--expect LIB,LIB...] [--out RESULT.json]

PART_DIR holds what ``bench/full-build/run.sh`` brought back for the part (PART.tgz
unpacked): ``wheel.json`` (the timeline, the job plan, the unit table), ``verify.json``
(each library's kernels), ``mem.json`` (the memory sampler), ``doctor.json``.  It says:

* the wall time of ``wheel`` (its own timeline) against the goal (30 minutes: one hold);
* the compile's wall time against ``bench/schedule_sim.py`` on the same unit table, for the
  device's cores and memory, with the plan the build ran (a first build's path rule, or the
  pool plan from a unit table): how far the simulator's prediction was off;
* MAX_JOBS, the heavy units' pool, the compilers' peak memory;
* verify's per-kernel coverage per library, and the issue's acceptance: every expected
  library there, 0 PTX-only, 0 without code, 0 trap-only, 0 guard stubs.

Nothing here is assumed: a file that is missing is named in ``missing`` and every figure
that needs it is None, and the acceptance is then False.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository, for bench/
from bench.script_loader import schedule_sim

GIB = 1024**3
EXPECTED_12_1A = ("_C_stable_libtorch", "_moe_C_stable_libtorch", "_vllm_fa2_C",
                  "_qutlass_C", "_flashkda_C")
"""vLLM 0.29.0's libraries with kernels at 12.1a (setup.py's CUDA extensions whose arch
lists take 12.1a: sources.py ROLES); _deep_gemm_C holds host code only (its kernels are
JIT-compiled at run time), cumem_allocator, spinloop and fs_io_C no kernels."""


def _read(folder: Path, name: str, missing: list[str]) -> dict[str, Any]:
    try:
        data = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        missing.append(f"{name}: {error}")
        return {}
    return data if isinstance(data, dict) else {}


def coverage(verify: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per library with kernels: its coverage at each target and its refusals."""
    rows = []
    for lib in verify.get("libraries", []):
        for cov in lib.get("coverage", []):
            rows.append({"library": Path(str(lib["library"])).name.split(".")[0],
                         "file": lib["library"], "target": cov["target"],
                         "kernels": cov["kernels"], "native": cov["native"],
                         "ptx": cov["ptx"], "none": cov["none"],
                         "trap_only": len(lib.get("trap_only_kernels", [])),
                         "guard_stubs": len(lib.get("guard_stub_kernels", [])),
                         "block_scaled_mma": lib.get("block_scaled_mma", 0)})
    return rows


def predicted_compile(units: list[dict[str, Any]], cores: int, memory_gib: float
                      ) -> dict[str, Any] | None:
    """schedule_sim's plans for this very unit table on a machine of ``cores``."""
    timed = [dict(u) for u in units if u.get("seconds") is not None]
    if not timed:
        return None
    sim = schedule_sim()
    for unit in timed:
        unit["peak_rss_gib"] = float(unit.get("peak_rss_gib") or 2.9)
    result: dict[str, Any] = sim.plans(timed, cores, int(memory_gib * GIB))
    return result


def report(folder: Path, *, goal_s: float, cores: int, memory_gib: float,
           expect: tuple[str, ...]) -> dict[str, Any]:
    missing: list[str] = []
    wheel = _read(folder, "wheel.json", missing)
    verify = _read(folder, "verify.json", missing)
    memory = _read(folder, "mem.json", missing)
    timeline = wheel.get("timeline", {})
    build = timeline.get("build", {})
    plan = wheel.get("build_plan", {})
    pool = plan.get("pool") or {}
    units = list(wheel.get("units", []))
    wall = timeline.get("wall_seconds")
    compile_s = build.get("compile_wall_seconds")
    sim = predicted_compile(units, cores, memory_gib) if units else None
    # the plan the build ran: a first build (nothing measured in its cache) pools by the
    # path rule in CMake's order; one that planned from a unit table, by the table
    simulated_plan = (None if sim is None else
                      "first_build_rule" if pool.get("basis") == "rule" else "pools")
    predicted = sim[simulated_plan]["makespan_s"] if sim and simulated_plan else None
    rows = coverage(verify)
    libraries = sorted({row["library"] for row in rows})
    totals = {key: sum(int(row[key]) for row in rows)
              for key in ("kernels", "native", "ptx", "none", "trap_only", "guard_stubs",
                          "block_scaled_mma")}
    absent = [name for name in expect if name not in libraries]
    acceptance = {
        "verify_ok": verify.get("ok") is True,
        "every_expected_library": bool(rows) and not absent,
        "zero_ptx_only": bool(rows) and totals["ptx"] == 0,
        "zero_none": bool(rows) and totals["none"] == 0,
        "zero_trap_only": bool(rows) and totals["trap_only"] == 0,
        "zero_guard_stubs": bool(rows) and totals["guard_stubs"] == 0,
        "within_goal": wall is not None and float(wall) <= goal_s,
    }
    return {
        "part": folder.name, "missing": missing, "recipe": wheel.get("recipe"),
        "wall_s": wall, "goal_s": goal_s,
        "goal_margin_s": round(goal_s - float(wall), 1) if wall is not None else None,
        "phases": timeline.get("phases", {}),
        "compile_s": compile_s, "busy": build.get("busy"),
        "critical_path": build.get("critical_path"),
        "units": len(units), "unit_seconds": round(sum(float(u.get("seconds") or 0)
                                                        for u in units), 1),
        "predicted_compile_s": predicted, "simulated_plan": simulated_plan,
        "prediction_error": (round((float(compile_s) - predicted) / predicted, 3)
                             if compile_s is not None and predicted else None),
        "simulated_plans": sim,
        "max_jobs": plan.get("max_jobs"),
        "pool": {key: pool.get(key) for key in ("pool", "jobs", "depth", "basis",
                                                 "threshold_gib", "measured_units")},
        "plan_reasons": plan.get("reasons", []),
        "memory": {key: memory.get(key) for key in ("peak_total_rss_gib",
                                                    "peak_concurrent_cicc",
                                                    "min_mem_available_gib",
                                                    "peak_rss_by_tool_gib")},
        "coverage": rows, "coverage_totals": totals, "libraries": libraries,
        "expected_libraries": list(expect), "absent_libraries": absent,
        "acceptance": acceptance, "accepted": all(acceptance.values()),
    }


def markdown(result: dict[str, Any]) -> str:
    def fmt(value: Any) -> str:
        return "not measured" if value is None else str(value)

    lines = [f"part `{result['part']}` ({fmt(result['recipe'])})", "",
             "| | |", "|---|---|",
             f"| `wheel` wall | {fmt(result['wall_s'])} s (goal {result['goal_s']:.0f} s, "
             f"margin {fmt(result['goal_margin_s'])} s) |",
             f"| compile | {fmt(result['compile_s'])} s, busy {fmt(result['busy'])}, "
             f"{result['units']} units, {result['unit_seconds']} unit-seconds |",
             f"| schedule_sim on this table ({result['simulated_plan']}) | "
             f"{fmt(result['predicted_compile_s'])} s"
             f" (measured off by {fmt(result['prediction_error'])}) |",
             f"| MAX_JOBS, pool | {fmt(result['max_jobs'])}, {result['pool']} |",
             f"| memory | {result['memory']} |",
             f"| kernels | {result['coverage_totals']} |",
             f"| acceptance | {result['acceptance']} |"]
    lines += ["", "| library | target | kernels | native | PTX only | none | trap-only | "
              "guard stubs | block-scaled MMA |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['library']} | {r['target']} | {r['kernels']} | {r['native']} | {r['ptx']}"
              f" | {r['none']} | {r['trap_only']} | {r['guard_stubs']} | "
              f"{r['block_scaled_mma']} |" for r in result["coverage"]]
    if result["missing"]:
        lines += ["", "missing: " + "; ".join(result["missing"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", type=Path)
    parser.add_argument("--goal-s", type=float, default=1800.0)
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--memory-gib", type=float, default=128.0)
    parser.add_argument("--expect", default=",".join(EXPECTED_12_1A),
                        help="libraries that must be there (comma-separated)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = report(args.part, goal_s=args.goal_s, cores=args.cores,
                    memory_gib=args.memory_gib,
                    expect=tuple(n for n in args.expect.split(",") if n))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(markdown(result))
    return 0 if result["accepted"] else 1


if __name__ == "__main__":
    sys.exit(main())
