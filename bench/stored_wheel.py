"""The tree's wheel deflated by setuptools and then rewritten, against stored and then
rewritten (sparkbuild.compile.uncompressed_wheel): the seconds of each step and whether the two
rewritten wheels are the same bytes.

    python bench/stored_wheel.py [--payload FILE ...] [--out bench/STORED_WHEEL_RESULTS.md]

The payload defaults to CUDA's ``libnvvm.so`` four times and ``libnvperf_host.so`` twice
(317 MB of machine code, as a vLLM wheel's libraries are); the raw section goes to
``--out``, copied into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from sparkbuild.compile.uncompressed_wheel import stored_wheel_environment
from sparkbuild.wheelhouse.wheel_rewrite import normalize_wheel

REPO = Path(__file__).resolve().parents[1]
CUDA_LIB = Path("/usr/local/cuda/lib64")
DEFAULT_PAYLOAD = [CUDA_LIB / "libnvvm.so"] * 4 + [CUDA_LIB / "libnvperf_host.so"] * 2
SETUP = ('from setuptools import setup\nsetup(name="payload", version="1.0", '
         'packages=["payload"], package_data={"payload": ["*.so"]})\n')


def make_project(root: Path, payload: list[Path]) -> Path:
    package = root / "project" / "payload"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for index, source in enumerate(payload):
        shutil.copyfile(source, package / f"_lib{index}.so")
    (root / "project" / "setup.py").write_text(SETUP)
    return root / "project"


def backend_wheel(project: Path, out: Path, env: dict[str, str]) -> tuple[Path, float]:
    shutil.rmtree(project / "build", ignore_errors=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "--no-index", "-w", str(out), str(project)],
                   check=True, env={**os.environ, **env})
    return next(out.glob("*.whl")), time.perf_counter() - started


def report(result: dict[str, Any]) -> str:
    lines = ["## The tree's wheel stored, then rewritten (`bench/stored_wheel.py`)", "",
             f"Run {time.strftime('%Y-%m-%d %H:%M')}: {result['payload_bytes'] / 1e6:.0f} MB "
             f"of machine code in a setuptools project, {result['cores']} cores; load average "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after.", "",
             "| backend's compression | backend's wheel s | its bytes | rewrite s | total s |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for mode, row in result["modes"].items():
        lines.append(f"| {mode} | {row['backend_s']} | {row['backend_wheel_bytes']:,} | "
                     f"{row['rewrite_s']} | {row['total_s']} |")
    same = "the same bytes" if result["same_rewritten_wheel"] else "DIFFERENT bytes"
    lines += ["", f"The two rewritten wheels are {same}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payload", type=Path, nargs="*", default=DEFAULT_PAYLOAD)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "STORED_WHEEL_RESULTS.md")
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        project = make_project(root, args.payload)
        payload = sum(f.stat().st_size for f in (project / "payload").glob("*.so"))
        for mode in ("deflated", "stored"):
            env = (stored_wheel_environment(root / "work", {}) if mode == "stored" else {})
            wheel, backend = backend_wheel(project, root / f"dist-{mode}", env)
            with zipfile.ZipFile(wheel) as archive:
                kinds = {i.compress_type for i in archive.infolist() if i.filename.endswith(".so")}
            started = time.perf_counter()
            rewritten_sha = normalize_wheel(wheel, root / f"out-{mode}", label="bench").sha256
            rewrite = time.perf_counter() - started
            rows[mode] = {"backend_s": round(backend, 1), "rewrite_s": round(rewrite, 1),
                          "total_s": round(backend + rewrite, 1),
                          "backend_wheel_bytes": wheel.stat().st_size,
                          "members_stored": kinds == {zipfile.ZIP_STORED},
                          "rewritten_sha256": rewritten_sha}
    result = {"payload_bytes": payload, "cores": os.cpu_count(), "modes": rows,
              "same_rewritten_wheel": rows["deflated"]["rewritten_sha256"]
              == rows["stored"]["rewritten_sha256"]}
    print(json.dumps(result, indent=2))
    args.out.write_text(report(result))
    return 0 if result["same_rewritten_wheel"] else 1


if __name__ == "__main__":
    sys.exit(main())
