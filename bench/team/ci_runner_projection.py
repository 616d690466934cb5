"""The CI workflow's jobs on GitHub's ubuntu-24.04-arm runner (4 cores, 16 GB), projected.

    python bench/team/ci_runner_projection.py --unit-speed DIR [--json OUT.json]

Each job of .github/workflows/wheelhouse.yml that compiles, projected from the measured unit
tables by bench/schedule_sim.py's plans (the job plan of sparkbuild.jobplan for a machine of
4 cores and 16 GB: the pool plan over the measured table, and the first build's rule, which a
runner with an empty cache gets), each with its memory plan (MAX_JOBS, the heavy pool's depth,
the simulated peak against the usable memory), against GitHub's 6-hour job limit:

* ``vllm``: vLLM 0.20.0's 155 measured units at 12.1a (bench/full-build/units-12.1a.json,
  measured on the H200 host);
* ``flashinfer``: flashinfer 0.6.18's model set, 152 units (bench/flashinfer/
  units-model-12.1a.json, measured on this 2-core machine);
* ``one job``: both in one job, as before the split (``--second-table``).

A whole job adds schedule_sim's measured seconds before and after the compile (BEFORE_S,
AFTER_S: prepare, vendor, configure; link, wheel rewrite, machine code, verify, wheelhouse).
The runner's own steps (the CUDA toolkit's apt install, pip, the cache's restore and save,
the artifacts) are not measured and not counted.

The tables' seconds are the seconds of the cores that measured them.  ``--unit-speed DIR``
(bench/team/unit_speed.sh's record: one vLLM unit of the table compiled on this machine)
gives the ratio of this machine's CPU seconds to the table's for that unit; the projection is
given at the tables' cores and again with vLLM's table at this machine's cores (flashinfer's
is already at them).  Nothing here measures the runner's own cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[1]


def _schedule_sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("schedule_sim", BENCH / "schedule_sim.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SIM = _schedule_sim()
BEFORE_S: float = SIM.BEFORE_S
AFTER_S: float = SIM.AFTER_S

VLLM_TABLE = BENCH / "full-build" / "units-12.1a.json"
FLASHINFER_TABLE = BENCH / "flashinfer" / "units-model-12.1a.json"
RUNNER = "ubuntu-24.04-arm=4,16"
"""GitHub's arm64 runner for public repositories: 4 cores, 16 GB (schedule_sim's
``--machine`` form)."""
LIMIT_S = 6 * 3600
"""GitHub's limit on one job of a hosted runner."""
UNIT = "csrc/activation_kernels.cu"
UNIT_TARGET = "_C"


def _units(path: Path) -> list[dict[str, Any]]:
    units: list[dict[str, Any]] = SIM.load(path)
    return units


def unit_speed(record: Path) -> dict[str, Any]:
    """This machine's seconds for the table's unit against the table's."""
    text = (record / "time.txt").read_text()

    def field(name: str) -> str:
        found = re.search(rf"{re.escape(name)}: (.+)", text)
        if found is None:
            raise SystemExit(f"{record}/time.txt has no {name!r}")
        return found.group(1).strip()

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
    wall_s = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall)))
    cpu_s = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    (table_unit,) = [u for u in _units(VLLM_TABLE)
                     if u["path"] == UNIT and u["target"] == UNIT_TARGET]
    machine = dict(line.split(" ", 1) for line in
                   (record / "machine.txt").read_text().splitlines() if " " in line)
    return {"unit": UNIT, "target": UNIT_TARGET, "table_s": table_unit["seconds"],
            "table_peak_gib": table_unit.get("peak_rss_gib"),
            "here_wall_s": round(wall_s, 1), "here_cpu_s": round(cpu_s, 1),
            "here_peak_gib": round(int(field("Maximum resident set size (kbytes)")) / 2**20, 2),
            "cpu_ratio": round(cpu_s / table_unit["seconds"], 2),
            "wall_ratio": round(wall_s / table_unit["seconds"], 2), "machine": machine,
            "exit": field("Exit status")}


def _job(units: list[dict[str, Any]], scale: float) -> dict[str, Any]:
    _name, (cores, total) = SIM._machine(RUNNER)
    result: dict[str, Any] = SIM.plans(units, cores, total)
    rows: dict[str, Any] = {"usable_gib": result["usable_gib"]}
    for plan in ("pools", "first_build_rule"):
        row = dict(result[plan])
        compile_s = row["makespan_s"] * scale
        whole = compile_s + BEFORE_S + AFTER_S
        row.update(compile_s=round(compile_s, 1), whole_job_s=round(whole, 1),
                   whole_job_h=round(whole / 3600, 2), fits_6h=whole <= LIMIT_S,
                   margin_h=round((LIMIT_S - whole) / 3600, 2),
                   memory_holds=row["peak_gib"] <= result["usable_gib"])
        rows[plan] = row
    return rows


def project(speed: dict[str, Any] | None) -> dict[str, Any]:
    vllm, flashinfer = _units(VLLM_TABLE), _units(FLASHINFER_TABLE)
    cores = {"tables' cores": (1.0, 1.0)}
    if speed is not None:
        cores["this machine's cores"] = (speed["cpu_ratio"], 1.0)
    projections = {}
    for name, (vllm_scale, flashinfer_scale) in cores.items():
        jobs = {"vllm": _job(vllm, vllm_scale), "flashinfer": _job(flashinfer, flashinfer_scale)}
        scaled = [{**u, "seconds": u["seconds"] * vllm_scale} for u in vllm] + [
            {**u, "seconds": u["seconds"] * flashinfer_scale} for u in flashinfer]
        jobs["one job"] = _job(scaled, 1.0)
        projections[name] = jobs
    name, (cores_n, total) = SIM._machine(RUNNER)
    return {"runner": {"label": name, "cores": cores_n, "memory_bytes": total},
            "limit_s": LIMIT_S, "before_s": BEFORE_S, "after_s": AFTER_S,
            "tables": {"vllm": str(VLLM_TABLE.relative_to(BENCH.parent)),
                       "flashinfer": str(FLASHINFER_TABLE.relative_to(BENCH.parent))},
            "unit_speed": speed, "projections": projections}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit-speed", type=Path, metavar="DIR")
    parser.add_argument("--json", type=Path, metavar="OUT")
    args = parser.parse_args()
    result = project(unit_speed(args.unit_speed) if args.unit_speed else None)
    text = json.dumps(result, indent=1) + "\n"
    if args.json:
        args.json.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
