"""After the device build: read the machine code, install, import, run ops and tests.

    python3 prove.py WHEELHOUSE TREE OUT

Device side.  Writes OUT/sass.json (per extension: archs; for sm_121a the kernels,
block-scaled MMA count, trap-only kernels), installs the built wheel with --no-deps into
this environment, imports vllm._C and vllm._moe_C, runs op_test.py and vLLM's own kernel
tests from the tree's tests/kernels/ that need no model, and prints a table last.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from sparkbuild.toolchain.sass import find_cuobjdump, list_cuda_archs, parse_sass, summarize

HERE = Path(__file__).resolve().parent
TESTS = [
    "tests/kernels/test_shuffle_rows.py",
    "tests/kernels/core/test_uva.py",
    "tests/kernels/test_cache_kernels.py",
    "tests/kernels/core/test_activation.py",
    "tests/kernels/core/test_layernorm.py",
    "tests/kernels/core/test_permute_cols.py",
    "tests/kernels/moe/test_moe_permute_unpermute.py",
]


def sass_report(wheel: Path, scratch: Path) -> dict[str, dict[str, object]]:
    report: dict[str, dict[str, object]] = {}
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.endswith(".so")]
        archive.extractall(scratch, members)
    for name in members:
        path = scratch / name
        started = time.time()
        archs = list_cuda_archs(path)
        entry: dict[str, object] = {"archs": archs, "bytes": path.stat().st_size}
        if "sm_121a" in archs:
            dump = subprocess.run([str(find_cuobjdump()), "-sass", "-arch", "sm_121a", str(path)],
                                  capture_output=True, text=True, check=False)
            functions = parse_sass(dump.stdout)
            summary = summarize(functions, "sm_121a").to_dict()
            entry["sm_121a"] = summary
            summary["kernels_with_block_scaled_mma"] = sorted(
                {f.name[:120] for f in functions
                 if f.arch == "sm_121a" and f.block_scaled_mma()})[:20]
        entry["seconds"] = round(time.time() - started, 1)
        report[name] = entry
    return report


def run(argv: list[str], cwd: Path, timeout: int) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              check=False)
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        return 124, f"timed out after {timeout} s: {exc}"


def main() -> None:
    wheelhouse, tree, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    (wheel,) = sorted(wheelhouse.glob("vllm-*.whl"))
    table = [f"wheel: {wheel.name} ({wheel.stat().st_size / 2**20:.0f} MiB)"]
    scratch = Path("/tmp/prove-so")
    shutil.rmtree(scratch, ignore_errors=True)
    sass = sass_report(wheel, scratch)
    (out / "sass.json").write_text(json.dumps(sass, indent=1))
    for name, entry in sass.items():
        sm = entry.get("sm_121a")
        line = f"{name}: {entry['archs']}"
        if isinstance(sm, dict):
            line += (f"; sm_121a: {sm['functions']} functions, block_scaled_mma "
                     f"{sm['block_scaled_mma']}, trap-only {len(sm['trap_only_kernels'])}")
        table.append(line)
    code, output = run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--force-reinstall", str(wheel)], Path("/tmp"), 600)
    table.append(f"pip install --no-deps: rc={code} {output.strip()[-300:]}")
    code, output = run([sys.executable, "-c", "import vllm._C, vllm._moe_C, torch; "
                        "print('imported', vllm._C.__file__, vllm._moe_C.__file__)"],
                       Path("/tmp"), 300)
    table.append(f"import vllm._C, vllm._moe_C: rc={code} {output.strip()[-400:]}")
    code, output = run([sys.executable, str(HERE / "op_test.py"), str(out / "op_test.json")],
                       Path("/tmp"), 300)
    table.append(f"op test: rc={code} {output.strip()[-400:]}")
    work = Path("/tmp/vllm-tests")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(tree / "tests", work / "tests")
    results = {}
    for test in TESTS:
        code, output = run([sys.executable, "-m", "pytest", "--noconftest", "-q",
                            "-p", "no:cacheprovider", test], work, 240)
        last = [line for line in output.strip().splitlines() if line.strip()][-1:] or [""]
        results[test] = {"rc": code, "summary": last[0], "tail": output[-3000:]}
        table.append(f"{test}: rc={code} {last[0]}")
    (out / "vllm_tests.json").write_text(json.dumps(results, indent=1))
    (out / "prove.txt").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
