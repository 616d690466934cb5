"""Derive a unit table (seconds and peak memory per unit) from the earlier vLLM run's logs.

Honest about what the logs hold (bench/real-build/, vllm 0.20.0, 12.1a, nvidia-h200-x2,
MAX_JOBS=32, 129 ninja steps):
  * names and finish order: build-log-excerpt.txt's ``[n/129] Building ... object`` lines;
  * finish times: progress.txt sampled the log every 15 s, but the log was block-buffered
    (issue 18), so only three points are known -- 53 steps at 301 s, 107 at 527 s, 129 at
    1110 s -- and compiling began after the configure (``configuring`` until 286 s).
    Finish times are interpolated linearly between them;
  * seconds: with all 32 slots busy, unit i started when unit i-32 finished (list
    scheduling), so seconds = finish(i) - finish(i-32), the first 32 from the start;
  * peaks: nvcc-memory.json's 20 largest cicc processes, given to the 20 longest units
    matching the pool rule (an assumption: the sampler saw processes, not units); every
    other unit 2.9 GiB (cc1plus/cudafe++ peak in the same file).
The device run (bench/full-build/pools.sh) replaces this with a measured table.
"""

from __future__ import annotations

import json
import re
import sys
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
from sparkbuild.jobplan.pools import HEAVY_PATTERNS  # noqa: E402

POINTS = [(286.0, 0), (301.0, 53), (527.0, 107), (1110.0, 129)]
JOBS = 32


def finish_time(step: int) -> float:
    for (t0, n0), (t1, n1) in pairwise(POINTS):
        if n0 <= step <= n1:
            return t0 + (t1 - t0) * (step - n0) / max(1, n1 - n0)
    return POINTS[-1][0]


def main() -> None:
    steps = re.findall(r"\[(\d+)/129\] Building (?:CUDA|CXX|C) object (\S+)",
                       (HERE / "build-log-excerpt.txt").read_text(encoding="utf-8"))
    finishes = {int(n): finish_time(int(n)) for n, _ in steps}
    units = []
    for n, output in steps:
        step = int(n)
        begin = finishes.get(step - JOBS, POINTS[0][0]) if step > JOBS else POINTS[0][0]
        source = re.sub(r"^CMakeFiles/[^/]+\.dir/", "", output).removesuffix(".o")
        units.append({"path": source, "output": output, "target": output.split("/")[1][:-4],
                      "seconds": round(max(1.0, finishes[step] - begin), 1)})
    memory = json.loads((HERE / "nvcc-memory.json").read_text(encoding="utf-8"))
    peaks = sorted((gib for tool, gib in memory["top_processes_gib"] if tool == "cicc"),
                   reverse=True)
    heavy = sorted((u for u in units if any(re.search(p, u["path"], re.I)
                                            for p in HEAVY_PATTERNS)),
                   key=lambda u: -u["seconds"])
    light = memory["peak_rss_by_tool_gib"]["cc1plus"]
    for unit in units:
        unit["peak_rss_gib"] = light
    for unit, peak in zip(heavy, peaks, strict=False):
        unit["peak_rss_gib"] = peak
    table = {"source": "derived by bench/real-build/derive_units.py from the logs of the "
                       "earlier vllm 0.20.0 device run (see its docstring)",
             "units": units}
    out = HERE / "units-derived.json"
    out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(units)} units -> {out}")


if __name__ == "__main__":
    main()
