"""Build times of the mini-vllm example: cold, then a warm rebuild after one patch changes.

    python bench/build_times.py [--out bench/BUILD_RESULTS.md]

1. Cold: an empty sparkbuild cache and an empty ccache directory; `sparkbuild wheel`
   online (vendor, build environment, configure, compile, wheelhouse).
2. Warm: the same cache and ccache, the series changed in one patch: the header that
   nvfp4-software-e2m1 copies into the tree (csrc/e2m1.cuh) gets one line of code, so the
   one translation unit that includes nvfp4_utils.cuh changes.  The work tree is prepared
   again from scratch, so every unit goes through the compiler launcher and ccache's
   misses are the units that really compiled.

Needs nvcc, the network for the cold run's vendor step, and ccache on PATH (Debian:
`apt-get install ccache`).  Writes a markdown section with the numbers, the machine's
load average before and after each run, and the date.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mini-vllm"
CHANGED_PATCH = "nvfp4-software-e2m1"
CHANGED_FILE = "csrc/e2m1.cuh"
"""The file of the changed patch: the header its structured edit copies into the tree."""
CHANGE_MARK = 'static_assert(sizeof(float) == 4, "benchmark: a changed patch");\n'
"""Code, not a comment: ccache would answer a comment-only change from its preprocessed
mode (the preprocessor drops comments), and nothing would recompile."""


def ccache_stats(env: dict[str, str]) -> dict[str, int]:
    output = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True,
                            text=True, check=True).stdout
    stats = {}
    for line in output.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            stats[key] = int(value)
    return stats


def copy_series(into: Path) -> Path:
    """patches/ and the header its structured edit copies, laid out as in the repo."""
    shutil.copytree(REPO / "patches", into / "patches")
    (into / "csrc").mkdir()
    shutil.copy2(REPO / "csrc" / "e2m1.cuh", into / "csrc" / "e2m1.cuh")
    return into / "patches" / "series"


def change_one_patch(series: Path) -> None:
    """One line more in the header nvfp4-software-e2m1 copies: one unit changes."""
    edit = (series.parent / f"{CHANGED_PATCH}.toml").read_text(encoding="utf-8")
    if '"../csrc/e2m1.cuh"' not in edit:
        raise SystemExit(f"{CHANGED_PATCH}.toml no longer copies ../csrc/e2m1.cuh; "
                         "update the bench")
    header = series.parent.parent / CHANGED_FILE
    old_sha = hashlib.sha256(header.read_bytes()).hexdigest()
    header.write_text(header.read_text(encoding="utf-8") + CHANGE_MARK, encoding="utf-8")
    # the series pins the header in the edit and the edit in the series: a reviewed change
    # moves both pins (patches/series says how)
    edit_path = series.parent / f"{CHANGED_PATCH}.toml"
    old_edit = hashlib.sha256(edit_path.read_bytes()).hexdigest()
    edit_path.write_text(edit.replace(old_sha, hashlib.sha256(header.read_bytes()).hexdigest()),
                         encoding="utf-8")
    series.write_text(series.read_text(encoding="utf-8").replace(
        old_edit, hashlib.sha256(edit_path.read_bytes()).hexdigest()), encoding="utf-8")


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def write_recipe(path: Path, series: Path) -> Path:
    path.write_text(
        f"""[recipe]
name = "mini-vllm-bench"
package = "mini-vllm"
[source]
spec = "{EXAMPLE}"
[series]
path = "{series}"
[target]
cuda_archs = ["12.1a"]
[build]
job_memory_gib = 2.0
""",
        encoding="utf-8",
    )
    return path


def run_wheel(recipe: Path, cache: Path, out: Path, env: dict[str, str]
              ) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "wheel", "--recipe", str(recipe), "--cache",
         str(cache), "--out", str(out), "--json"],
        env=env, capture_output=True, text=True, check=False,
    )
    seconds = time.monotonic() - started
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-5000:])
        raise SystemExit(f"sparkbuild wheel failed ({result.returncode})")
    report: dict[str, Any] = json.loads(result.stdout)
    return seconds, report


def measure(root: Path) -> dict[str, Any]:
    env = {**os.environ, "CCACHE_DIR": str(root / "ccache"), "SPARKBUILD_QUIET": "1"}
    cache = root / "cache"
    series_cold = copy_series(root / "cold")
    series_warm = copy_series(root / "warm")
    change_one_patch(series_warm)
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    loads = [load_average()]
    cold_s, cold = run_wheel(write_recipe(root / "cold.toml", series_cold), cache,
                             root / "out-cold", env)
    cold_stats = ccache_stats(env)
    loads.append(load_average())
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    warm_s, warm = run_wheel(write_recipe(root / "warm.toml", series_warm), cache,
                             root / "out-warm", env)
    warm_stats = ccache_stats(env)
    loads.append(load_average())
    return {"cold_s": cold_s, "cold": cold, "cold_ccache": cold_stats,
            "warm_s": warm_s, "warm": warm, "warm_ccache": warm_stats, "loads": loads,
            "ccache": _ccache_version(env)}


def _ccache_version(env: dict[str, str]) -> str:
    output = subprocess.run(["ccache", "--version"], env=env, capture_output=True, text=True,
                            check=True).stdout
    return output.splitlines()[0]


def _misses(stats: dict[str, int]) -> int:
    return stats.get("cache_miss", 0)


def _hits(stats: dict[str, int]) -> int:
    return stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)


def report(numbers: dict[str, Any]) -> str:
    cold: dict[str, Any] = numbers["cold"]
    warm: dict[str, Any] = numbers["warm"]
    cold_stats: dict[str, int] = numbers["cold_ccache"]
    warm_stats: dict[str, int] = numbers["warm_ccache"]
    loads: list[str] = numbers["loads"]
    rows = [
        ("cold: `sparkbuild wheel` online, empty caches", numbers["cold_s"], cold),
        ("warm: one patch changed, same caches", numbers["warm_s"], warm),
    ]
    lines = [
        "## mini-vllm build times (`bench/build_times.py`)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')}. Machine: {os.cpu_count()} cores; nvcc for "
        f"TORCH_CUDA_ARCH_LIST=12.1a; {numbers['ccache']} as the compiler launcher (chosen "
        "by doctor).",
        f"Load average (1, 5, 15 min) before the cold run: {loads[0]}; after it: {loads[1]}; "
        f"after the warm run: {loads[2]}.",
        "",
        "| run | total s | prepare s | vendor s | build s (venv + compile) | configure s | "
        "compile s | units through the compiler | ccache misses (compiled) | ccache hits |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (label, total, data), stats in zip(rows, (cold_stats, warm_stats), strict=True):
        seconds = data["seconds"]
        lines.append(
            f"| {label} | {total:.0f} | {seconds.get('prepare', 0):.0f} | "
            f"{seconds.get('vendor', 0):.0f} | {seconds.get('build', 0):.0f} | "
            f"{data['timeline']['phases'].get('configure', 0):.1f} | "
            f"{data['build']['seconds']:.0f} | {data['build']['compiled_units']} | "
            f"{_misses(stats)} | {_hits(stats)} |"
        )
    lines += [
        "",
        f"The changed patch was `{CHANGED_PATCH}` (one `static_assert` line added to "
        f"`{CHANGED_FILE}`, "
        "the header its structured edit copies beside `nvfp4_utils.cuh`, which one unit "
        "includes: `csrc/quantization/fp4/nvfp4_quant_kernels.cu`). The warm run prepares the tree "
        "anew and brings the work tree up to it file by file (`store/tree_sync.py`): the "
        "build directory inside it stays and only the changed header gets a new mtime, so "
        "ninja sends only the unit that includes it to the compiler; sparkbuild's cmake "
        "(`compile/cmake_shim.py`) skips the configure, whose arguments, environment and "
        "non-code tree files are those of the cold run (the configure column is then the "
        "setup.py's own time up to ninja). ccache's misses count the units that really "
        "recompiled; it also sees CMake's try_compile probes (pybind11 checks compiler "
        "flags), which is why the cold run has more misses than units.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "BUILD_RESULTS.md")
    args = parser.parse_args()
    if shutil.which("ccache") is None:
        raise SystemExit("ccache is not on PATH (apt-get install ccache)")
    with tempfile.TemporaryDirectory(prefix="sparkbuild-bench-") as scratch:
        numbers = measure(Path(scratch))
    text = report(numbers)
    args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
