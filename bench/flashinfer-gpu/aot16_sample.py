"""Memory sampled beside a build: /proc/meminfo and the resident memory of one process tree.

    python3 aot16_sample.py --pid-file BUILD.pid --out SAMPLES.jsonl [--interval 2]
        [--stop-file DONE]
    python3 aot16_sample.py --show SAMPLES.jsonl     # the last sample and the peaks so far

Every INTERVAL seconds one JSON line: ``t`` (seconds since the sampler started), ``epoch``,
``mem_total``, ``mem_available`` and ``used`` (total less available: what the machine had
in use, in bytes), ``tree_rss`` (the sum of VmRSS over the process whose pid BUILD.pid holds
and every process below it, by parent) and ``procs`` (how many).  The first line waits for
the pid file; the sampler stops when DONE exists (or after a day).  Standard library only:
it runs under the machine's own python3.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def meminfo(root: Path = Path("/proc")) -> dict[str, int]:
    """MemTotal and MemAvailable in bytes."""
    values: dict[str, int] = {}
    for line in (root / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable"):
            values[name] = int(rest.split()[0]) * 1024
    return values


def processes(root: Path = Path("/proc")) -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, resident bytes), of every process still readable."""
    found: dict[int, tuple[int, int]] = {}
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        found[int(entry.name)] = (int(fields[1]), int(fields[21]) * PAGE)
    return found


def tree_rss(procs: dict[int, tuple[int, int]], top: int) -> tuple[int, int]:
    """The resident bytes of ``top`` and every process below it, and how many they are."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    total, count, todo = 0, 0, [top] if top in procs else []
    while todo:
        pid = todo.pop()
        total += procs[pid][1]
        count += 1
        todo += children.get(pid, [])
    return total, count


def show(path: Path) -> str:
    """One line: the last sample's memory in use and tree, and the peaks of both so far."""
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not samples:
        return "no sample yet"
    last, gib = samples[-1], 2**30
    return (f"used {last['used'] / gib:.1f} GiB (peak {max(s['used'] for s in samples) / gib:.1f}),"
            f" tree {last['tree_rss'] / gib:.1f} GiB (peak "
            f"{max(s['tree_rss'] for s in samples) / gib:.1f}), {last['procs']} procs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", type=Path, default=None)
    parser.add_argument("--pid-file", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--stop-file", type=Path, default=None)
    args = parser.parse_args()
    if args.show is not None:
        print(show(args.show))
        return 0
    if args.pid_file is None or args.out is None:
        parser.error("--pid-file and --out are needed to sample")
    started = time.monotonic()
    with args.out.open("a", encoding="utf-8") as out:
        while time.monotonic() - started < 86400:
            if args.stop_file is not None and args.stop_file.exists():
                break
            try:
                top = int(args.pid_file.read_text().strip())
            except (OSError, ValueError):
                top = -1
            mem = meminfo()
            rss, count = tree_rss(processes(), top) if top > 0 else (0, 0)
            out.write(json.dumps({
                "t": round(time.monotonic() - started, 1), "epoch": round(time.time(), 1),
                "mem_total": mem["MemTotal"], "mem_available": mem["MemAvailable"],
                "used": mem["MemTotal"] - mem["MemAvailable"], "tree_rss": rss,
                "procs": count}) + "\n")
            out.flush()
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
