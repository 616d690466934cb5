"""Samples the compilers' memory during a build (device side): peak RSS per process.

    python3 monitor.py OUT.json STOPFILE

Every second it reads /proc/*/status of nvcc's stages (cicc, ptxas, nvcc, cudafe++,
fatbinary, nvlink) and of the host compiler (cc1plus), keeps each process's peak RSS, the
largest total of all of them at one moment, and the lowest MemAvailable; every 10 s, and
when STOPFILE appears, it writes the summary to OUT.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

WATCHED = {"cicc", "ptxas", "nvcc", "cudafe++", "fatbinary", "nvlink", "cc1plus"}


def sample() -> dict[int, tuple[str, int]]:
    found: dict[int, tuple[str, int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        name = fields.get("Name", "").strip()
        if name in WATCHED and "VmRSS" in fields:
            found[int(status.parent.name)] = (name, int(fields["VmRSS"].split()[0]) * 1024)
    return found


def main() -> None:
    out, stop = Path(sys.argv[1]), Path(sys.argv[2])
    peaks: dict[int, tuple[str, int]] = {}
    worst_total, worst_jobs, min_available = 0, 0, None
    started = time.time()
    last_write = 0.0
    while True:
        current = sample()
        for pid, (name, rss) in current.items():
            if rss > peaks.get(pid, (name, 0))[1]:
                peaks[pid] = (name, rss)
        worst_total = max(worst_total, sum(rss for _n, rss in current.values()))
        worst_jobs = max(worst_jobs, sum(1 for n, _r in current.values() if n == "cicc"))
        meminfo = dict(line.split(":", 1)
                       for line in Path("/proc/meminfo").read_text().splitlines())
        available = int(meminfo["MemAvailable"].split()[0]) * 1024
        min_available = available if min_available is None else min(min_available, available)
        done = stop.exists()
        if done or time.time() - last_write > 10:
            by_name: dict[str, int] = {}
            for name, rss in peaks.values():
                by_name[name] = max(by_name.get(name, 0), rss)
            top = sorted(peaks.values(), key=lambda item: -item[1])[:20]
            out.write_text(json.dumps({
                "seconds": round(time.time() - started), "processes_seen": len(peaks),
                "peak_rss_by_tool_gib": {k: round(v / 2**30, 2) for k, v in by_name.items()},
                "top_processes_gib": [[n, round(r / 2**30, 2)] for n, r in top],
                "peak_total_rss_gib": round(worst_total / 2**30, 1),
                "peak_concurrent_cicc": worst_jobs,
                "min_mem_available_gib": round((min_available or 0) / 2**30, 1),
            }, indent=1))
            last_write = time.time()
        if done:
            return
        time.sleep(1)


if __name__ == "__main__":
    main()
