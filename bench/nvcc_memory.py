"""Peak memory of one nvcc job on the heaviest FP4 and MoE units, at the Spark's target.

Each unit is compiled, one at a time, with the exact command ``check`` derives from the
tree's CMake for the recipe's target (sm_121a), while a thread sums the resident memory
of every process below this one (nvcc runs cudafe++, cicc, ptxas and gcc as children;
with --threads some run at once) every 20 ms.  ``getrusage(RUSAGE_CHILDREN)`` (GNU time)
gives the largest single process as a cross-check.  ``--plain`` measures the same units
for plain sm_121 too, to show what the old budget (measured on the plain target, where
CUTLASS compiles each FP4 kernel to printf + trap) missed.

    python bench/nvcc_memory.py --tree PREPARED_TREE --cutlass CUTLASS_DIR [--plain]
                                [--unit PATH ...] [--out bench/NVCC_MEMORY_RESULTS.md]

Without --tree the real vllm 0.33.0 sdist is prepared into a temporary directory.  CUTLASS
headers: --cutlass or $VLLM_CUTLASS_SRC_DIR (a checkout of the tree's pinned tag), else the
nvidia-cutlass wheel from the index.  The result sets the recipes' ``job_memory_gib``:
the largest peak times SAFETY, rounded up to a tenth of a GiB.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from sparkbuild.checks.check_plan import plan_check
from sparkbuild.jobplan.machine import GIB, MachineFacts, plan_build, read_memory
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.proc import run
from sparkbuild.recipe import REPO_ROOT, Recipe, load_recipe
from sparkbuild.sources.index import find_file
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.download import fetch_to_cache

RECIPE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"
PAGE = os.sysconf("SC_PAGE_SIZE")
SPARK = {"total": 128 * GIB, "available": 119 * GIB, "cores": 20}
TIME = Path("/usr/bin/time")
SAFETY = 1.25
"""Budget per job = measured peak x 1.25: other units and headers grow."""
HEAVIEST = (
    "csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu",  # the FP4 GEMM (CUTLASS)
    "csrc/quantization/fp4/nvfp4_blockwise_moe_kernel.cu",  # the FP4 grouped MoE GEMM
)


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

    @property
    def plain(self) -> bool:
        return "code=sm_121 " in self.gencode + " " and "sm_121a" not in self.gencode


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


def _cutlass(work: Path, given: Path | None) -> tuple[Path, str]:
    """A CUTLASS source directory, and how to name it in the results."""
    if given is not None:
        version = _cutlass_version(given)
        return given, f"{given} (CUTLASS {version})"
    if os.environ.get("VLLM_CUTLASS_SRC_DIR"):
        path = Path(os.environ["VLLM_CUTLASS_SRC_DIR"])
        return path, f"VLLM_CUTLASS_SRC_DIR={path} (CUTLASS {_cutlass_version(path)})"
    wheel = find_file("nvidia-cutlass", "4.2.0.0", kind="wheel")
    blob = fetch_to_cache(Cache(default_cache_root()), wheel.url, wheel.sha256)
    prefix = "cutlass_library/source/"
    with zipfile.ZipFile(blob) as archive:
        for name in archive.namelist():
            if name.startswith((prefix + "include/", prefix + "tools/util/include/")):
                archive.extract(name, work)
    return work / prefix, f"{wheel.filename} from the index"


def _cutlass_version(root: Path) -> str:
    header = root / "include" / "cutlass" / "version.h"
    found = dict(re.findall(r"#define CUTLASS_(MAJOR|MINOR|PATCH) (\d+)",
                            header.read_text(encoding="utf-8"))) if header.is_file() else {}
    return ".".join(found.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _plans(budget_gib: float) -> list[str]:
    total, available = read_memory()
    rows = []
    for name, machine in (("DGX Spark 128 GB, 20 cores", SPARK),
                          (f"this machine {total / 1e9:.0f} GB, {os.cpu_count()} cores",
                           {"total": total, "available": available, "cores": os.cpu_count() or 1})):
        plan = plan_build(
            MachineFacts(total_memory_bytes=machine["total"],
                         available_memory_bytes=machine["available"], cores=machine["cores"]),
            job_memory_gib=budget_gib)
        rows.append(f"| {name} | {budget_gib:g} GiB | {plan.max_jobs} | "
                    f"{'; '.join(plan.reasons[:2])} |")
    return rows


def budget_gib(results: list[Measurement]) -> float:
    """The per-job budget: the largest peak x SAFETY, rounded up to 0.1 GiB."""
    peak = max(m.tree_peak for m in results)
    return math.ceil(peak * SAFETY / GIB * 10) / 10


def report(results: list[Measurement], tree: Path, cutlass: str, nvcc: str) -> str:
    target = [m for m in results if not m.plain]
    plain = [m for m in results if m.plain]
    budget = budget_gib(target)
    lines = [
        "# nvcc memory per job at the Spark target (bench/nvcc_memory.py)", "",
        f"Tree: prepared vllm 0.33.0 ({tree}); CUTLASS headers: {cutlass}; nvcc {nvcc}.",
        f"Machine: {os.cpu_count()} cores, {read_memory()[0] / GIB:.1f} GiB, shared with other "
        "work (seconds are noisy, memory is not); units compiled one at a time with check's "
        "command line (RelWithDebInfo, -std=c++20, one gencode).",
        "", "| unit | gencode | seconds | peak RSS, whole nvcc tree | largest process | rc |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {m.unit} | {m.gencode} | {m.seconds:.1f} | {_gib(m.tree_peak)} | "
              f"{_gib(m.largest_process)} | {m.returncode} |" for m in [*target, *plain]]
    lines += ["", f"Largest peak at the target: {_gib(max(m.tree_peak for m in target))}; "
              f"budget with x{SAFETY} margin: **{budget} GiB** per job (the recipes' "
              "job_memory_gib)."]
    if plain:
        lines.append(f"Plain sm_121 (FP4 kernels compiled to printf + trap): largest peak "
                     f"{_gib(max(m.tree_peak for m in plain))}; a budget taken from it would "
                     "run a Spark out of memory.")
    lines += ["", "| machine | per-job budget | MAX_JOBS | why |", "| --- | --- | ---: | --- |"]
    lines += _plans(budget)
    return "\n".join(lines) + "\n"


def _plain_copy(recipe: Recipe) -> Recipe:
    target = dataclasses.replace(recipe.target, cuda_archs=("12.1",), allow_plain_sm121=True)
    return dataclasses.replace(recipe, target=target)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", type=Path)
    parser.add_argument("--cutlass", type=Path, help="a CUTLASS checkout (include/, tools/)")
    parser.add_argument("--unit", action="append", default=[], metavar="PATH",
                        help=f"a unit to measure (default: {', '.join(HEAVIEST)})")
    parser.add_argument("--plain", action="store_true", help="also measure plain sm_121")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "NVCC_MEMORY_RESULTS.md")
    args = parser.parse_args()
    recipe = load_recipe(RECIPE)
    units = args.unit or list(HEAVIEST)
    with tempfile.TemporaryDirectory(prefix="nvcc-memory-") as scratch:
        work = Path(scratch)
        tree = args.tree
        if tree is None:
            tree = work / "vllm-0.33.0"
            prepare_tree(recipe.source.spec, tree, recipe)
        cutlass, cutlass_label = _cutlass(work, args.cutlass)
        os.environ["VLLM_CUTLASS_SRC_DIR"] = str(cutlass)
        results: list[Measurement] = []
        recipes = [recipe, _plain_copy(recipe)] if args.plain else [recipe]
        nvcc = "?"
        for chosen in recipes:
            plan = plan_check(tree, chosen)
            nvcc = str(plan.nvcc.version)
            for unit in units:
                command = plan.command(unit, work / (unit.replace("/", "__") + ".o"))
                seconds, peak, largest, rc = measure(command.argv, plan.tree)
                found = Measurement(unit, " ".join(command.gencode), seconds, peak, largest, rc)
                results.append(found)
                print(f"{unit} [{found.gencode}]: {seconds:.1f} s, peak {_gib(peak)} "
                      f"(largest process {_gib(largest)}), rc {rc}", flush=True)
        text = report(results, tree, cutlass_label, nvcc)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
