"""The record of aot16_run.sh's build (flashinfer's model set at 12.1a on a 16-core machine),
with bench/schedule_sim.py's prediction for that machine beside the measurement.

    python bench/flashinfer-gpu/aot16_report.py FILES_DIR RECORD_DIR [--title TEXT]

FILES_DIR: what aot16_run.sh's ``watch`` put in $OUT (aot.json, mem.jsonl, verify.json,
results.tar.gz).  RECORD_DIR gets ``record.json`` and ``README.md`` (its section), and the
small files unpacked.  The prediction is schedule_sim's ``plans`` over
bench/flashinfer/units-model-12.1a.json (the 2-core measured table the carried cache held)
for the machine's own cores and MemTotal (machine.txt): its pool plan (``pools``, what the
build plans from that table) and the first build's rule.  Nothing is filled in: a file that
did not come back is named under ``missing``.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import re
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for bench/
from bench.script_loader import schedule_sim

BENCH = Path(__file__).resolve().parents[1]
TABLE = BENCH / "flashinfer" / "units-model-12.1a.json"
PROJECTED_S = 371.0
"""The 16-core projection BENCHMARKS.md quotes for this set (its Projections table)."""
GIB = 1024**3
_PLAN_LINE = re.compile(r"job plan: MAX_JOBS=(\d+), heavy units in pool (\S+) of depth (\d+) "
                        r"\((\w+)\)")


def read_files(folder: Path) -> dict[str, str]:
    """name -> text of what came back, results.tar.gz's members included (flattened)."""
    files = {p.name: p.read_text(encoding="utf-8", errors="replace")
             for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in (".json", ".jsonl")}
    archive = folder / "results.tar.gz"
    if archive.is_file():
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    files[Path(member.name).name] = io.TextIOWrapper(
                        handle, encoding="utf-8", errors="replace").read()
    return files


def machine(text: str) -> dict[str, Any]:
    """nproc, MemTotal, MemAvailable (bytes) and the rest of machine.txt's lines."""
    found: dict[str, Any] = {"lines": text.splitlines()}
    for line in text.splitlines():
        if line.startswith("nproc "):
            found["cores"] = int(line.split()[1])
        for key in ("MemTotal", "MemAvailable"):
            if line.startswith(key + ":"):
                found[key.lower()] = int(line.split()[1]) * 1024
    return found


def memory(text: str) -> dict[str, Any]:
    samples = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not samples:
        return {"samples": 0}
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(samples)]
    return {"samples": len(samples), "span_s": samples[-1]["t"],
            "interval_s": round(sum(gaps) / len(gaps), 2) if gaps else None,
            "peak_used_gib": round(max(s["used"] for s in samples) / GIB, 2),
            "peak_tree_rss_gib": round(max(s["tree_rss"] for s in samples) / GIB, 2),
            "before_used_gib": round(samples[0]["used"] / GIB, 2),
            "peak_procs": max(s["procs"] for s in samples)}


def plan_line(lines: list[str]) -> dict[str, Any]:
    """MAX_JOBS and the pool from sparkbuild's ``job plan:`` line, the last one given."""
    plan: dict[str, Any] = {}
    for line in lines:
        if (match := _PLAN_LINE.search(line)) is not None:
            plan = {"max_jobs": int(match[1]), "pool": match[2], "depth": int(match[3]),
                    "basis": match[4], "line": line.strip()}
    return plan


def build(aot: dict[str, Any], stderr: str = "") -> dict[str, Any]:
    """The plan sparkbuild printed (its --json environment, else its stderr), the unit
    table's sums and the wheel, from --json."""
    plan = plan_line(list(aot.get("environment", [])) or stderr.splitlines())
    if "error" in aot:
        return {"error": aot["error"], "plan": plan}
    units = aot.get("units", [])
    return {"plan": plan, "builder_seconds": aot.get("seconds"),
            "modules": len(aot.get("modules", [])), "sources": aot.get("sources"),
            "wheel": aot.get("wheel"), "wheel_bytes": aot.get("size"),
            "units": len(units),
            "cpu_seconds": round(sum(float(u.get("cpu_seconds", u.get("seconds", 0)))
                                     for u in units), 1),
            "highest_unit_peak_gib": max((float(u.get("peak_rss_gib") or 0) for u in units),
                                         default=0.0),
            "pooled_units": sum(1 for u in units if u.get("pool"))}


def verdict(verify: dict[str, Any]) -> dict[str, Any]:
    return {"ok": verify.get("ok"), "libraries": verify.get("library_count"),
            "refused_libraries": verify.get("refused_libraries"),
            "seconds": verify.get("seconds"),
            "per_library": [{"library": lib["library"].rsplit("/", 1)[-1],
                             "kernels": lib["kernels"], "ok": lib["ok"],
                             "accepted_stubs": sum(len(u["kernels"])
                                                   for u in lib["unreachable_stubs"])}
                            for lib in verify.get("libraries", [])]}


def prediction(sim: ModuleType, cores: int, total: int) -> dict[str, Any]:
    plans: dict[str, Any] = sim.plans(sim.load(TABLE), cores, total)
    return {"table": str(TABLE.relative_to(BENCH.parent)), "cores": cores,
            "mem_total_bytes": total, "usable_gib": plans["usable_gib"],
            "pools": plans["pools"], "first_build_rule": plans["first_build_rule"],
            "quoted_projection_s": PROJECTED_S,
            "command": f"python bench/schedule_sim.py {TABLE.relative_to(BENCH.parent)} "
                       f"--machine device={cores},{total / 1e9:.3f}"}


def record(files: dict[str, str], sim: ModuleType) -> dict[str, Any]:
    wanted = ("aot.json", "mem.jsonl", "verify.json", "wall.json", "machine.txt")
    out: dict[str, Any] = {"missing": [n for n in wanted if n not in files]}
    box = machine(files.get("machine.txt", ""))
    out["machine"] = box
    out["wall"] = json.loads(files["wall.json"]) if "wall.json" in files else None
    out["memory"] = memory(files.get("mem.jsonl", ""))
    out["build"] = (build(json.loads(files["aot.json"]), files.get("aot-err-tail.txt", ""))
                    if "aot.json" in files else None)
    out["verify"] = verdict(json.loads(files["verify.json"])) if "verify.json" in files else None
    out["pool_plan_file"] = ({k: v for k, v in json.loads(files["pool-plan.json"]).items()
                              if k in ("pool", "depth", "threshold")}
                             if "pool-plan.json" in files else None)
    out["table_in_cache"] = files.get("table.txt", "").strip() or None
    out["prediction"] = (prediction(sim, box["cores"], box["memtotal"])
                         if "cores" in box and "memtotal" in box else None)
    return out


def readme(rec: dict[str, Any], title: str) -> str:
    wall, mem, got, pred = rec["wall"], rec["memory"], rec["build"], rec["prediction"]
    lines = [f"## {title}", ""]
    if rec["missing"]:
        lines += [f"- Did not come back: {', '.join(rec['missing'])}.", ""]
    lines += [f"- Machine: {'; '.join(rec['machine']['lines'])}."]
    if wall:
        lines.append(f"- `sparkbuild flashinfer-aot --offline`: rc {wall['rc']}, "
                     f"**{wall['wall_s']} s wall** (the whole command)")
    if got and "error" not in got:
        plan = got["plan"]
        lines += [f"- Plan (sparkbuild's own line): MAX_JOBS={plan.get('max_jobs')}, pool "
                  f"{plan.get('pool')} depth {plan.get('depth')} ({plan.get('basis')}); unit "
                  f"table in the cache: {rec['table_in_cache']}",
                  f"- Builder {got['builder_seconds']} s; {got['modules']} modules, "
                  f"{got['units']} units, {got['cpu_seconds']} CPU-s, highest unit peak "
                  f"{got['highest_unit_peak_gib']} GiB; wheel {got['wheel_bytes']} bytes"]
    elif got:
        lines.append(f"- flashinfer-aot failed (plan: {got['plan'].get('line')}): "
                     f"{str(got['error'].get('what', got['error']))[-300:]!r}")
    if mem.get("samples"):
        lines.append(f"- Memory, {mem['samples']} samples every {mem['interval_s']} s: peak in "
                     f"use {mem['peak_used_gib']} GiB (machine, MemTotal - MemAvailable; "
                     f"{mem['before_used_gib']} GiB at the start), peak of the build's process "
                     f"tree {mem['peak_tree_rss_gib']} GiB")
    if rec["verify"]:
        ver = rec["verify"]
        lines.append(f"- Verify per kernel: {ver['libraries']} libraries, "
                     f"{ver['refused_libraries']} refused (verify.json)")
    if pred:
        pools, rule = pred["pools"], pred["first_build_rule"]
        lines += [f"- Predicted (`{pred['command']}`): pools MAX_JOBS={pools['max_jobs']} "
                  f"depth {pools['pool_depth']}: **{pools['makespan_s']} s** (peak "
                  f"{pools['peak_gib']} GiB); first build's rule {rule['makespan_s']} s; "
                  f"quoted projection {pred['quoted_projection_s']:.0f} s"]
        if wall and got and "error" not in got and got["builder_seconds"]:
            lines.append(f"- Measured builder seconds / predicted makespan: "
                         f"{got['builder_seconds'] / pools['makespan_s']:.2f}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path)
    parser.add_argument("record", type=Path)
    parser.add_argument("--title", default="flashinfer's model set at 12.1a on 16 cores")
    args = parser.parse_args()
    files = read_files(args.files)
    rec = record(files, schedule_sim())
    args.record.mkdir(parents=True, exist_ok=True)
    (args.record / "record.json").write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    (args.record / "README.md").write_text(readme(rec, args.title), encoding="utf-8")
    for name in ("wall.json", "machine.txt", "pool-plan.json", "chain.log"):
        if name in files:
            (args.record / name).write_text(files[name], encoding="utf-8")
    print(readme(rec, args.title), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
