"""Benchmark: ``sparkbuild prepare`` of the vllm 0.33.0 sdist against ``tar xzf`` + ``git apply``.

The acceptance bar: prepare takes at most 2.5x the time of extracting the same sdist with
``tar xzf`` and applying the same diffs with ``git apply`` (medians of at least 5 runs;
prepare extracts with the standard library's tarfile and its ``data`` filter, in one
thread, where tar runs gzip in a second process).  "The same diffs" are the ones
the patching engine recorded as applied (``TREE/.sparkbuild/applied/NAME/NNN.diff``) in a
first, untimed prepare.  Then, in one run and side by side, each repetition times (in an
order that rotates, so neither side always runs on a warmer machine):

* baseline: ``tar xzf SDIST -C DIR`` then ``git apply`` of each recorded diff, in order;
* ``python -m sparkbuild prepare --source pypi:vllm==0.33.0`` (the recipe's own spec, served
  from the cache), the whole process, interpreter start-up included;
* the same with ``--source PATH#sha256=HEX`` (a local sdist);

and, in this process, where prepare's time goes: ``extract_archive`` and ``apply_series``.
Medians, the spread (min-max) and the 1-minute load average before each repetition are
written as a markdown section to ``bench/PREPARE_RESULTS.md``: on a shared machine the load
says how far to trust the numbers.

Usage: ``.venv/bin/python bench/prepare_vs_tar.py [--reps N] [--version 0.33.0]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.patches.engine import apply_series
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.sources.archive import extract_archive
from sparkbuild.sources.index import fetch_sdist
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.hashing import sha256_file

if TYPE_CHECKING:
    from collections.abc import Callable

VERSION = "0.33.0"
SPEC = f"pypi:vllm=={VERSION}"
RECIPE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"
RESULTS = REPO_ROOT / "bench" / "PREPARE_RESULTS.md"
LIMIT = 2.5
MIN_REPS = 5
QUIET_ENV = {**os.environ, "SPARKBUILD_QUIET": "1"}


@dataclass
class Timings:
    """Wall-clock and CPU seconds per measurement, one sample per repetition."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)
    """The 1-minute load average before each repetition."""

    def add(self, name: str, seconds: float, cpu: float) -> None:
        self.samples.setdefault(name, []).append(seconds)
        self.cpu.setdefault(name, []).append(cpu)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def cpu_median(self, name: str) -> float:
        return statistics.median(self.cpu[name])


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its finished children.

    On a machine shared with other work, wall-clock time measures the neighbours as much
    as the code; CPU time is the steadier second opinion.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _run(cmd: list[str], *, cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=QUIET_ENV, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(cmd)}\n{done.stdout}{done.stderr}")


def prepare_cmd(spec: str, dest: Path) -> list[str]:
    return [sys.executable, "-m", "sparkbuild", "prepare", "--source", spec,
            "--dest", str(dest), "--recipe", str(RECIPE), "--json"]


def recorded_diffs(tree: Path, order: list[str]) -> list[Path]:
    """The diffs the engine applied, in series order, as ``git apply`` will replay them."""
    applied = tree / ".sparkbuild" / "applied"
    return [diff for name in order for diff in sorted((applied / name).glob("*.diff"))]


def reference_run(spec: str, scratch: Path) -> list[Path]:
    """One untimed prepare: the diffs to replay (copied out of its tree) and a warm cache."""
    dest = scratch / "reference"
    done = subprocess.run(prepare_cmd(spec, dest), env=QUIET_ENV, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"reference prepare failed:\n{done.stderr}")
    patches = json.loads(done.stdout)["patches"]
    order = [p["name"] for p in patches if p["status"] == "applied"]
    kept = scratch / "diffs"
    kept.mkdir()
    diffs = []
    for number, diff in enumerate(recorded_diffs(dest, order), start=1):
        diffs.append(kept / f"{number:02d}-{diff.parent.name}.diff")
        shutil.copyfile(diff, diffs[-1])
    shutil.rmtree(dest)
    return diffs


def timed(timings: Timings, name: str, action: Callable[[], object]) -> None:
    started, cpu = time.perf_counter(), cpu_seconds()
    action()
    timings.add(name, time.perf_counter() - started, cpu_seconds() - cpu)


def baseline(sdist: Path, diffs: list[Path], dest: Path) -> None:
    dest.mkdir()
    _run(["tar", "xzf", str(sdist), "-C", str(dest)])
    (tree,) = dest.iterdir()
    for diff in diffs:
        _run(["git", "apply", "--whitespace=nowarn", str(diff)], cwd=tree)


def in_process_breakdown(sdist: Path, dest: Path, timings: Timings) -> None:
    """Where prepare's time goes: extraction, then the series (its git and cmake runs)."""
    os.environ["SPARKBUILD_QUIET"] = "1"
    timed(timings, "in-process extract_archive", lambda: extract_archive(sdist, dest))
    (tree,) = dest.iterdir()
    recipe = load_recipe(RECIPE)
    timed(timings, "in-process apply_series", lambda: apply_series(tree, recipe))


def one_repetition(
    number: int, sdist: Path, pin: str, diffs: list[Path], scratch: Path, timings: Timings
) -> None:
    rep = scratch / f"rep{number}"
    rep.mkdir()
    timings.loads.append(os.getloadavg()[0])
    steps: list[tuple[str, Callable[[], object]]] = [
        ("tar xzf + git apply", lambda: baseline(sdist, diffs, rep / "tar")),
        (f"prepare {SPEC}", lambda: _run(prepare_cmd(SPEC, rep / "prep-pypi"))),
        ("prepare PATH#sha256", lambda: _run(prepare_cmd(pin, rep / "prep-path"))),
    ]
    shift = number % len(steps)
    for name, action in steps[shift:] + steps[:shift]:
        timed(timings, name, action)
    in_process_breakdown(sdist, rep / "inproc", timings)
    shutil.rmtree(rep)


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    tar = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    gitv = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{tar.splitlines()[0]}, {gitv.strip()}, load average {load}")


def spread(samples: list[float]) -> str:
    return f"{min(samples):.2f}-{max(samples):.2f}"


def report(timings: Timings, sdist: Path, diffs: list[Path], reps: int, before: str,
           after: str) -> str:
    base = timings.median("tar xzf + git apply")
    loads = timings.loads
    lines = [
        "## prepare vs tar xzf + git apply",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')} by `bench/prepare_vs_tar.py --reps {reps}`: "
        f"vllm {VERSION} sdist ({sdist.stat().st_size / 1e6:.1f} MB), "
        f"{len(diffs)} recorded diffs replayed by `git apply`.",
        f"Machine at start: {before}.",
        f"Machine at end: {after}.",
        f"1-minute load average before each repetition: "
        f"{', '.join(f'{x:.2f}' for x in loads)} (median {statistics.median(loads):.2f}, "
        f"on {os.cpu_count()} cores).",
        "",
        "| measurement | wall median s | wall spread s | wall ratio | CPU median s | CPU ratio "
        "| wall samples s |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    base_cpu = timings.cpu_median("tar xzf + git apply")
    for name, samples in timings.samples.items():
        wall, cpu = timings.median(name), timings.cpu_median(name)
        shown = ", ".join(f"{s:.2f}" for s in samples)
        lines.append(f"| {name} | {wall:.2f} | {spread(samples)} | {wall / base:.2f}x | "
                     f"{cpu:.2f} | {cpu / base_cpu:.2f}x | {shown} |")
    prepares = [n for n in timings.samples if n.startswith("prepare")]
    worst = max(timings.median(n) for n in prepares) / base
    worst_cpu = max(timings.cpu_median(n) for n in prepares) / base_cpu
    verdict = "meets" if worst <= LIMIT else "misses"
    lines += ["", f"Slowest prepare / baseline, medians of {reps}: wall {worst:.2f}x ({verdict} "
              f"the {LIMIT}x bar), CPU {worst_cpu:.2f}x.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=MIN_REPS, help=f"at least {MIN_REPS}")
    args = parser.parse_args()
    if args.reps < MIN_REPS:
        parser.error(f"--reps must be at least {MIN_REPS}: the bar is on medians of {MIN_REPS}")
    sdist = fetch_sdist(Cache(default_cache_root()), "vllm", VERSION)
    pin = f"{sdist}#sha256={sha256_file(sdist)}"
    before = machine()
    timings = Timings()
    with tempfile.TemporaryDirectory(prefix="sparkbuild-bench-") as tmp:
        scratch = Path(tmp)
        diffs = reference_run(SPEC, scratch)
        for number in range(args.reps):
            one_repetition(number, sdist, pin, diffs, scratch, timings)
    section = report(timings, sdist, diffs, args.reps, before, machine())
    RESULTS.write_text("# Benchmark results: prepare\n\n" + section, encoding="utf-8")
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
