"""Bench: ``sparkbuild check --all`` on real vLLM releases, with the series, at 12.1a.

For each release named on the command line (``VERSION`` or ``VERSION=CUTLASS_DIR``), the
sdist comes from the package index (cached), is prepared with the series at the Spark's
target (a copy of recipes/vllm-0.33.0.toml pointed at that release, cuda_archs 12.1a), and
every CUDA unit the build compiles for the target is compiled and its SASS read.  The
torch whose headers and CMake serve the check is the one installed with the Python that
runs this script: run it from a venv holding the torch the release pins.
CUTLASS_DIR (a CUTLASS checkout at the release's pinned tag) is passed as
VLLM_CUTLASS_SRC_DIR; without it the CUTLASS units are skipped for their headers.

Releases run one after another (each takes over an hour on 2 cores).  Prints one JSON
object per release and writes bench/CHECK_ALL_RESULTS.md: units compiled, failed (with the
reason), skipped, trap-only kernels, block-scaled MMA, units per minute, and the coverage
per kernel at 12.1a of every compiled unit (native, PTX only, none), with the units whose
recorded gencode gives 12.1a no SASS (known before anything compiles).

    python bench/check_all.py 0.33.0=/scratch/cutlass-4.7 0.11.0=/scratch/cutlass-4.0

``--unit PATH`` (repeatable) checks only those units of each release: a proof run, whose
JSON is printed and not recorded in the results files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkbuild.checks.check import check_tree
from sparkbuild.checks.check_result import CheckResult
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.sources.index import fetch_sdist
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain import tools

RESULTS = REPO_ROOT / "bench" / "CHECK_ALL_RESULTS.md"
ROWS = REPO_ROOT / "bench" / "CHECK_ALL_RESULTS.json"
"""Every release's row; a run replaces the rows of the releases it ran."""


def release_recipe(version: str, directory: Path) -> Path:
    sdist = fetch_sdist(Cache(default_cache_root()), "vllm", version)
    lines: list[str] = []
    for line in (REPO_ROOT / "recipes" / "vllm-0.33.0.toml").read_text().splitlines():
        if line.startswith("name ="):
            line = f'name = "vllm-{version}-12.1a"'
        elif line.startswith("spec ="):
            line = f'spec = "pypi:vllm=={version}"'
        elif line.startswith("sha256 =") and lines and lines[-1].startswith("spec ="):
            line = f'sha256 = "{sha256_file(sdist)}"'
        elif line.startswith("path ="):
            line = f'path = "{(REPO_ROOT / "patches" / "series").as_posix()}"'
        elif line.startswith("cuda_archs"):
            line = 'cuda_archs = ["12.1a"]'
        lines.append(line)
    path = directory / f"vllm-{version}-12.1a.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def summarize(version: str, cutlass: str | None, result: CheckResult, seconds: float
              ) -> dict[str, Any]:
    compiled = [u for u in result.units if u.status in ("ok", "failed") and u.seconds]
    traps = {u.path: list(u.sass.trap_only_kernels) for u in result.units
             if u.sass and u.sass.trap_only_kernels}
    stubs = {u.path: list(u.guard_stubs) for u in result.units if u.guard_stubs}
    return {
        "release": version, "cutlass": cutlass, "archs": list(result.archs),
        "torch": str(tools.torch_version()),
        "nvcc": result.nvcc, "jobs": result.plan.max_jobs, "seconds": round(seconds),
        "counts": result.to_dict()["counts"], "units": len(result.units),
        "units_per_minute": round(len(compiled) / (seconds / 60), 2) if seconds else None,
        "trap_only": traps, "guard_stubs": stubs,
        "block_scaled_mma": sum(u.sass.block_scaled_mma for u in result.units if u.sass),
        "failed": {u.path: u.reason for u in result.units if u.status == "failed"},
        "skipped": {u.path: u.reason for u in result.units if u.status.startswith("skipped")},
        "configure_stops": result.configure_stops,
        "coverage": result.coverage_counts(),
        "unit_coverage": {u.path: [c.to_dict() for c in u.coverage] for u in result.units
                          if u.coverage},
        "no_target_sass": [g.to_dict() for g in result.no_target_sass],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["# check --all on real vLLM releases (series applied, cuda_archs 12.1a)", "",
           f"Machine: {platform.machine()}, {os.cpu_count()} cores; written by "
           "bench/check_all.py.", "",
           "| release | torch | CUTLASS | units | ok | failed | skipped | not built | trap-only "
           "kernels | guard stubs | block-scaled MMA | kernels native / PTX only / none | "
           "units without SASS (gencode) | jobs | minutes | units/min |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["counts"]
        skipped = c["skipped-missing-headers"] + c["skipped-missing-sources"]
        traps = sum(len(k) for k in r["trap_only"].values())
        stubs = sum(len(k) for k in r.get("guard_stubs", {}).values())
        out.append(f"| {r['release']} | {r.get('torch')} | {r['cutlass'] or 'none'} | "
                   f"{r['units']} | {c['ok']} | "
                   f"{c['failed']} | {skipped} | {c['not-built']} | {traps} | {stubs} | "
                   f"{r['block_scaled_mma']} | {_kernel_counts(r)} | "
                   f"{len(r.get('no_target_sass', []))} | {r['jobs']} | "
                   f"{r['seconds'] / 60:.0f} | {r['units_per_minute']} |")
    for r in rows:
        out += ["", f"## {r['release']}", ""]
        out += [f"- configure would stop: {stop}" for stop in r["configure_stops"]]
        out += [f"- failed `{path}`: {reason[:300]}" for path, reason in r["failed"].items()]
        out += [f"- skipped `{path}`: {reason[:300]}" for path, reason in r["skipped"].items()]
        out += [f"- trap-only in `{path}`: {len(k)} kernel(s)" for path, k in
                r["trap_only"].items()]
        out += [f"- gencode gives {g['target']} no SASS: `{g['unit']}` ({g['coverage']}"
                f"{' ' + g['ptx_arch'] if g['ptx_arch'] else ''})"
                for g in r.get("no_target_sass", [])]
        out += [f"- not native in `{path}` at {c['target']}: {c['ptx']} PTX only, "
                f"{c['none']} none (of {c['kernels']})"
                for path, found in r.get("unit_coverage", {}).items() for c in found
                if c["ptx"] or c["none"]]
    return "\n".join(out) + "\n"


def _kernel_counts(row: dict[str, Any]) -> str:
    found = row.get("coverage", {}).get("12.1a")
    return f"{found['native']} / {found['ptx']} / {found['none']}" if found else "not read"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+", metavar="VERSION[=CUTLASS_DIR]")
    parser.add_argument("--unit", action="append", default=[], metavar="PATH",
                        help="check only this unit (repeatable); the results files are "
                        "left as they are")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = (json.loads(ROWS.read_text(encoding="utf-8"))
                                  if ROWS.is_file() else [])
    with tempfile.TemporaryDirectory(prefix="check-all-") as scratch:
        for item in args.releases:
            version, _, cutlass = item.partition("=")
            recipe = load_recipe(release_recipe(version, Path(scratch)))
            tree = Path(scratch) / f"vllm-{version}"
            prepare_tree(recipe.source.spec, tree, recipe)
            if cutlass:
                os.environ["VLLM_CUTLASS_SRC_DIR"] = cutlass
            else:
                os.environ.pop("VLLM_CUTLASS_SRC_DIR", None)
            started = time.monotonic()
            result = check_tree(tree, recipe, only=args.unit or None, all_units=not args.unit)
            row = summarize(version, cutlass or None, result, time.monotonic() - started)
            print(json.dumps(row, indent=1), flush=True)
            if args.unit:
                continue
            rows = [r for r in rows if r["release"] != version] + [row]
            ROWS.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
            RESULTS.write_text(markdown(rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
