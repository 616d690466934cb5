"""Count the SASS instructions that FP32 -> E2M1 packing costs (issue 3).

Builds bench/e2m1_sass_kernels.cu for plain sm_121 (no E2M1 instruction: the software
path), sm_121a (the hardware instruction) and sm_90 (an H100/H200: the software path),
reads the machine code with cuobjdump (sparkbuild.toolchain.sass) and prints, per kernel that packs
8 floats per thread, its instruction count, its FP64 instructions, and what it adds per
converted value over the same kernel built for sm_121a.  Needs nvcc, and cuobjdump with
nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm); no GPU.

    python bench/e2m1_sass_count.py [--json] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from sparkbuild.proc import run
from sparkbuild.toolchain import sass, tools

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "e2m1_sass_kernels.cu"
ARCHS = ("sm_121", "sm_121a", "sm_90")
HARDWARE_BASELINE = ("pack8_sparkbuild", "sm_121a")
KERNELS = ("pack8_sparkbuild", "pack8_cuda_fp4", "pack8_thresholds", "pack8_none")
VALUES_PER_THREAD = 8


def build_cubin(nvcc: Path, arch: str, build_dir: Path) -> Path:
    number = arch.removeprefix("sm_")
    cubin = build_dir / f"e2m1_sass_kernels.{arch}.cubin"
    gencode = f"-gencode=arch=compute_{number},code=sm_{number}"
    run([nvcc, "-std=c++17", "-O3", gencode, "-cubin", "-o", cubin, SOURCE], echo=False)
    return cubin


def measure(build_dir: Path) -> dict[str, dict[str, dict[str, int]]]:
    """{arch: {kernel: {"instructions", "fp64", "e2m1"}}}"""
    nvcc = tools.find_nvcc().path
    table: dict[str, dict[str, dict[str, int]]] = {}
    for arch in ARCHS:
        functions = sass.read_sass(build_cubin(nvcc, arch, build_dir))
        table[arch] = {
            f.name: {
                "instructions": f.count,
                "fp64": len(f.fp64_instructions()),
                "e2m1": len(f.e2m1_instructions()),
            }
            for f in functions
            if f.name in KERNELS
        }
    return table


def added_per_value(table: dict[str, dict[str, dict[str, int]]], kernel: str, arch: str) -> float:
    base_kernel, base_arch = HARDWARE_BASELINE
    base = table[base_arch][base_kernel]["instructions"]
    return (table[arch][kernel]["instructions"] - base) / VALUES_PER_THREAD


def markdown(table: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    lines = [
        "| kernel (8 floats per thread) | target | SASS instructions | FP64 | E2M1 "
        "| added per value over sm_121a hardware |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for kernel in KERNELS:
        for arch in ARCHS:
            row = table[arch][kernel]
            added = added_per_value(table, kernel, arch)
            lines.append(
                f"| {kernel} | {arch} | {row['instructions']} | {row['fp64']} | {row['e2m1']} "
                f"| {added:+.2f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--build-dir", type=Path, help="keep the cubins here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="e2m1-sass-") as scratch:
        build_dir = args.build_dir or Path(scratch)
        build_dir.mkdir(parents=True, exist_ok=True)
        table = measure(build_dir)
    software = added_per_value(table, "pack8_sparkbuild", "sm_121")
    if args.json:
        print(json.dumps({"counts": table, "software_added_per_value_sm_121": software}))
    else:
        print("\n".join(markdown(table)))
        print(f"\nsoftware path on plain sm_121: {software:+.3f} instructions per value")
    return 0 if software <= 12 else 1


if __name__ == "__main__":
    sys.exit(main())
