"""Build times of the mini-vllm example: cold, then a warm rebuild after one patch changes.

    python bench/build_times.py [--out bench/BUILD_RESULTS.md]

1. Cold: an empty sparkbuild cache and an empty ccache directory; `sparkbuild wheel`
   online (vendor, build environment, configure, compile, wheelhouse).
2. Warm: the same cache and ccache, the series changed in one patch (a comment added to
   what moe-shuffle-rows-bounds-guard writes, so one translation unit changes); the work
   tree is prepared again from scratch, so every unit goes through the compiler launcher
   and ccache's misses are the units that really compiled.

Needs nvcc, the network for the cold run's vendor step, and ccache on PATH (Debian:
`apt-get install ccache`).  Writes a markdown section with the numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mini-vllm"
CHANGED_PATCH = "moe-shuffle-rows-bounds-guard.diff"


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
    """Add one comment line to the code the guard patch writes: one unit changes."""
    patch = series.parent / CHANGED_PATCH
    lines = patch.read_text(encoding="utf-8").splitlines(keepends=True)
    target = "+    // dst2src_map holds num_dst_rows entries: read it only for a row in range.\n"
    if target not in lines:
        raise SystemExit(f"{patch}: the line this benchmark extends is gone; update the bench")
    at = lines.index(target)
    lines.insert(at + 1, "+    // (benchmark: a changed patch)\n")
    # Fix the hunk headers: the enclosing hunk grew by one line, later ones moved by one.
    hunks = [i for i, line in enumerate(lines) if line.startswith("@@ ")]
    enclosing = max(i for i in hunks if i < at)
    for index in hunks:
        match = re.match(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@(.*)", lines[index], re.S)
        assert match, lines[index]
        old_start, old_count, new_start, new_count, rest = match.groups()
        if index == enclosing:
            new_count = str(int(new_count) + 1)
        elif index > enclosing:
            new_start = str(int(new_start) + 1)
        lines[index] = f"@@ -{old_start},{old_count} +{new_start},{new_count} @@{rest}"
    patch.write_text("".join(lines), encoding="utf-8")
    repin(series, patch)


def repin(series: Path, patch: Path) -> None:
    """Put the changed patch's new sha256 on its series line (the series pins each file)."""
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()
    text = series.read_text(encoding="utf-8")
    pattern = re.compile(rf"^({re.escape(patch.name)}\s+sha256=)[0-9a-f]{{64}}", re.M)
    if pattern.search(text):
        series.write_text(pattern.sub(rf"\g<1>{digest}", text), encoding="utf-8")


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
cuda_archs = ["12.1"]
[build]
job_memory_gib = 2.0
""",
        encoding="utf-8",
    )
    return path


def run_wheel(recipe: Path, cache: Path, out: Path, env: dict[str, str]) -> tuple[float, dict]:
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
    return seconds, json.loads(result.stdout)


def measure(root: Path) -> dict[str, object]:
    env = {**os.environ, "CCACHE_DIR": str(root / "ccache"), "SPARKBUILD_QUIET": "1"}
    cache = root / "cache"
    series_cold = copy_series(root / "cold")
    series_warm = copy_series(root / "warm")
    change_one_patch(series_warm)
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    cold_s, cold = run_wheel(write_recipe(root / "cold.toml", series_cold), cache,
                             root / "out-cold", env)
    cold_stats = ccache_stats(env)
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    warm_s, warm = run_wheel(write_recipe(root / "warm.toml", series_warm), cache,
                             root / "out-warm", env)
    warm_stats = ccache_stats(env)
    return {"cold_s": cold_s, "cold": cold, "cold_ccache": cold_stats,
            "warm_s": warm_s, "warm": warm, "warm_ccache": warm_stats}


def _misses(stats: dict[str, int]) -> int:
    return stats.get("cache_miss", 0)


def _hits(stats: dict[str, int]) -> int:
    return stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)


def report(numbers: dict[str, object]) -> str:
    cold, warm = numbers["cold"], numbers["warm"]
    assert isinstance(cold, dict) and isinstance(warm, dict)
    cold_stats, warm_stats = numbers["cold_ccache"], numbers["warm_ccache"]
    assert isinstance(cold_stats, dict) and isinstance(warm_stats, dict)
    rows = [
        ("cold: `sparkbuild wheel` online, empty caches", numbers["cold_s"], cold),
        ("warm: one patch changed, same caches", numbers["warm_s"], warm),
    ]
    lines = [
        "## mini-vllm build times (`bench/build_times.py`)",
        "",
        f"Machine: {os.cpu_count()} cores; nvcc for TORCH_CUDA_ARCH_LIST=12.1; "
        "ccache as the compiler launcher (chosen by doctor).",
        "",
        "| run | total s | prepare s | vendor s | build s (venv + compile) | compile s | "
        "units through the compiler | ccache misses (compiled) | ccache hits |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (label, total, data), stats in zip(rows, (cold_stats, warm_stats), strict=True):
        seconds = data["seconds"]
        lines.append(
            f"| {label} | {total:.0f} | {seconds.get('prepare', 0):.0f} | "
            f"{seconds.get('vendor', 0):.0f} | {seconds.get('build', 0):.0f} | "
            f"{data['build']['seconds']:.0f} | {data['build']['compiled_units']} | "
            f"{_misses(stats)} | {_hits(stats)} |"
        )
    lines += [
        "",
        f"The changed patch was `{CHANGED_PATCH}` (one comment line added to the code it "
        "writes into `csrc/moe/moe_permute_unpermute_op.cu`). The warm run prepares the tree "
        "again from scratch, so ninja sends every unit to the compiler; ccache answers the "
        "unchanged ones, and its misses count the units that really recompiled. ccache also "
        "sees CMake's try_compile probes (pybind11 checks compiler flags), which is why the "
        "cold run has more misses than units.",
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
