"""flashinfer's measured build as a unit table for ``bench/schedule_sim.py``, and its summary.

    python bench/flashinfer_units.py AOT.json OUT.json [--label TEXT] [--markdown]

AOT.json: ``sparkbuild flashinfer-aot --json`` of a measured build (run with
``SPARKBUILD_FLASHINFER_LAUNCHER=ccache``, so every compile runs below sparkbuild's process
tree and its peak and CPU time are sampled).  OUT.json: ``{"source": ..., "units": [...]}``
with each unit's ``path`` (relative to the builder's work directory), ``module``,
``seconds`` (its CPU-seconds: the sum of user and system time of its processes, what a core
would spend on it without other work on the machine; ninja's wall seconds are kept as
``wall_seconds``), ``peak_rss_gib`` and ``pool``.  Prints per module: units, CPU-seconds,
the highest peak; then the totals and the wheel's size.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def table(report: dict[str, Any], label: str) -> dict[str, Any]:
    units = []
    for unit in report["units"]:
        cpu = unit.get("cpu_seconds")
        units.append({"path": unit["path"], "module": unit["module"],
                      "seconds": round(float(cpu if cpu is not None else unit["seconds"]), 2),
                      "wall_seconds": unit["seconds"], "start": unit.get("start"),
                      "peak_rss_gib": unit.get("peak_rss_gib"), "pool": unit.get("pool")})
    return {"source": label, "modules": report["modules"], "sources": report.get("sources"),
            "wheel_bytes": report.get("size"), "build_seconds": report.get("seconds"),
            "units": units}


def summary(data: dict[str, Any]) -> list[str]:
    by_module: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for unit in data["units"]:
        by_module[unit["module"]].append(unit)
    rows = ["| module | units | CPU-s | highest peak GiB |", "| --- | ---: | ---: | ---: |"]
    for module, units in sorted(by_module.items(), key=lambda kv: -sum(u["seconds"]
                                                                       for u in kv[1])):
        peak = max((u["peak_rss_gib"] or 0.0) for u in units)
        rows.append(f"| `{module}` | {len(units)} | {sum(u['seconds'] for u in units):.0f} | "
                    f"{peak:.2f} |")
    cpu = sum(u["seconds"] for u in data["units"])
    peak = max((u["peak_rss_gib"] or 0.0) for u in data["units"])
    rows.append(f"| **all {len(data['modules'])} modules** | {len(data['units'])} | "
                f"**{cpu:.0f}** | **{peak:.2f}** |")
    rows.append("")
    rows.append(f"wheel {data['wheel_bytes'] / 2**20:.1f} MiB; build "
                f"{data['build_seconds']:.0f} s wall here")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--label", default="sparkbuild flashinfer-aot, measured here")
    args = parser.parse_args(argv)
    data = table(json.loads(args.report.read_text(encoding="utf-8")), args.label)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print("\n".join(summary(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
