"""Peak memory of one nvcc job on the patched real fp4 units, and the MAX_JOBS doctor
picks from it for a 128 GB / 20-core DGX Spark and for this machine.

Each unit ``check`` would compile is compiled again here, one at a time, with the exact
command ``check`` derives from the tree's CMake, while a thread sums the resident memory
of every process below this one (nvcc runs cudafe++, cicc, ptxas and gcc as children;
with --threads some run at once) every 20 ms.  ``getrusage(RUSAGE_CHILDREN)`` gives the
largest single process as a cross-check.

    python bench/nvcc_memory.py [--tree PREPARED_TREE] [--out bench/NVCC_MEMORY_RESULTS.md]

Without --tree the real vllm 0.33.0 sdist is prepared into a temporary directory (from
the cache; the index once).  CUTLASS headers come from $VLLM_CUTLASS_SRC_DIR, else from
the nvidia-cutlass wheel on the index (4.2.0; vLLM pins v4.7.1), so that every touched
unit can be measured.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sparkbuild.build.check import plan_check
from sparkbuild.build.doctor import GIB, plan_build, read_memory
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.proc import run
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.sources.index import find_file
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.download import fetch_to_cache

RECIPE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"
PAGE = os.sysconf("SC_PAGE_SIZE")
SPARK = {"total": 128 * GIB, "available": 119 * GIB, "cores": 20}
TIME = Path("/usr/bin/time")
SAFETY = 1.25
"""Budget per job = measured peak x 1.25: other units and headers grow."""


def _descendants_rss(root: int) -> int:
    """Resident bytes of every process below ``root``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    below = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in below and pid not in below:
                below.add(pid)
                changed = True
    total = 0
    for pid in below - {root}:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text(encoding="ascii").split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


class PeakSampler:
    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _descendants_rss(os.getpid()))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Measurement:
    unit: str
    gencode: str
    seconds: float
    tree_peak: int
    largest_process: int
    returncode: int


def measure(argv: tuple[str, ...], cwd: Path) -> tuple[float, int, int, int]:
    """(seconds, peak RSS of the whole process tree, largest single process, returncode).

    GNU time, when present, reports nvcc's own rusage: the largest process it waited for.
    """
    timed = ("/usr/bin/time", "-f", "maxrss_kb=%M", *argv) if TIME.is_file() else argv
    with PeakSampler() as sampler:
        result = run(timed, cwd=cwd, echo=False, check=False, timeout=3600)
    found = re.findall(r"maxrss_kb=(\d+)", result.output)
    largest = int(found[-1]) * 1024 if found else 0
    return result.seconds, sampler.peak, largest, result.returncode


def _cutlass(work: Path) -> tuple[Path, str]:
    """A CUTLASS source directory, and how to name it in the results."""
    if os.environ.get("VLLM_CUTLASS_SRC_DIR"):
        path = Path(os.environ["VLLM_CUTLASS_SRC_DIR"])
        return path, f"VLLM_CUTLASS_SRC_DIR={path}"
    wheel = find_file("nvidia-cutlass", "4.2.0.0", kind="wheel")
    blob = fetch_to_cache(Cache(default_cache_root()), wheel.url, wheel.sha256)
    prefix = "cutlass_library/source/"
    with zipfile.ZipFile(blob) as archive:
        for name in archive.namelist():
            if name.startswith((prefix + "include/", prefix + "tools/util/include/")):
                archive.extract(name, work)
    return work / prefix, f"{wheel.filename} from the index (vLLM 0.33.0 pins CUTLASS v4.7.1)"


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _plans(budget_gib: float) -> list[str]:
    total, available = read_memory()
    rows = []
    for name, machine in (("DGX Spark 128 GB, 20 cores", SPARK),
                          (f"this machine {total / 1e9:.0f} GB, {os.cpu_count()} cores",
                           {"total": total, "available": available, "cores": os.cpu_count() or 1})):
        plan = plan_build(total_memory_bytes=machine["total"],
                          available_memory_bytes=machine["available"],
                          cores=machine["cores"], job_memory_gib=budget_gib)
        rows.append(f"| {name} | {budget_gib:g} GiB | {plan.max_jobs} | "
                    f"{'; '.join(plan.reasons[:2])} |")
    return rows


def _budget(results: list[Measurement]) -> float:
    peak = max(m.tree_peak for m in results)
    return math.ceil(peak * SAFETY / GIB * 10) / 10


def report(results: list[Measurement], extras: list[Measurement], tree: Path, cutlass: str) -> str:
    budget = _budget(results)
    lines = [
        "# nvcc memory per job (bench/nvcc_memory.py)", "",
        f"Tree: prepared vllm 0.33.0 ({tree}); CUTLASS headers: {cutlass}.",
        f"Machine: {os.cpu_count()} cores, {read_memory()[0] / GIB:.1f} GiB, shared with other "
        "work (seconds are noisy, memory is not); units compiled one at a time with check's "
        "command line (RelWithDebInfo, -std=c++20, one gencode).",
        "", "| unit | touched by the series | gencode | seconds | peak RSS, whole nvcc tree "
        "| largest process | rc |", "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {m.unit} | {'no' if m in extras else 'yes'} | {m.gencode} | {m.seconds:.1f} | "
              f"{_gib(m.tree_peak)} | {_gib(m.largest_process)} | {m.returncode} |"
              for m in [*results, *extras]]
    lines += ["", f"Touched units: largest peak {_gib(max(m.tree_peak for m in results))}; "
              f"budget with x{SAFETY} margin: {budget} GiB."]
    budgets = [budget, 6.0]
    if extras:
        budgets.insert(1, _budget(extras))
        lines.append(f"Extra units: largest peak {_gib(max(m.tree_peak for m in extras))}; "
                     f"budget {budgets[1]} GiB.")
    lines += ["", "| machine | per-job budget | MAX_JOBS | why |", "| --- | --- | ---: | --- |"]
    for value in budgets:
        lines += _plans(value)
    lines += ["", "6 GiB is the recipes' default budget (job_memory_gib): the issue reports "
              "3-8 GiB per nvcc job on CUTLASS FP4 kernels (several archs per job, newer "
              "CUTLASS); the extra rows measure two of them for one arch with the CUTLASS "
              "named above."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path)
    parser.add_argument("--extra-unit", action="append", default=[], metavar="PATH",
                        help="also measure this unit of the build (e.g. a CUTLASS FP4 GEMM)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "NVCC_MEMORY_RESULTS.md")
    args = parser.parse_args()
    recipe = load_recipe(RECIPE)
    with tempfile.TemporaryDirectory(prefix="nvcc-memory-") as scratch:
        work = Path(scratch)
        tree = args.tree
        if tree is None:
            tree = work / "vllm-0.33.0"
            prepare_tree(recipe.source.spec, tree, recipe)
        cutlass, cutlass_label = _cutlass(work)
        os.environ["VLLM_CUTLASS_SRC_DIR"] = str(cutlass)
        plan = plan_check(tree, recipe)
        results: list[Measurement] = []
        extras: list[Measurement] = []
        for unit in [*plan.units, *args.extra_unit]:
            command = plan.command(unit, work / (unit.replace("/", "__") + ".o"))
            seconds, peak, largest, rc = measure(command.argv, plan.tree)
            found = Measurement(unit, " ".join(command.gencode), seconds, peak, largest, rc)
            (results if unit in plan.units else extras).append(found)
            print(f"{unit}: {seconds:.1f} s, peak {_gib(peak)} (largest process {_gib(largest)})")
        text = report(results, extras, tree, cutlass_label)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
