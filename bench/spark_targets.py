"""What each Spark target gives, read from the machine code: 12.1, 12.1a, 12.1f and 12.0f.

For each target this compiles, with nvcc, and reads with cuobjdump (no GPU needed):

* the real FP4 GEMM unit of a prepared vllm 0.33.0 tree
  (``csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu``), with the command line
  ``check`` derives from the tree's CMake for a recipe with that target (so the gencode is
  the tree's own arithmetic's), against CUTLASS headers (--cutlass);
* the example's FP4 block-scaled MMA kernel (examples/mini-vllm);
* sparkbuild's E2M1 packing (``csrc/e2m1.cuh``, kernel ``pack8_sparkbuild`` of
  ``bench/e2m1_sass_kernels.cu``): hardware ``F2FP...E2M1`` or the software path;

and prints, per target, the SASS arch of the cubin (as cuobjdump's fatbin header names it),
the kernels, instructions, block-scaled MMA (``OMMA.SF``) and trap-only kernels.

    python bench/spark_targets.py --tree PREPARED_TREE --cutlass CUTLASS_DIR \\
        [--out bench/SPARK_TARGETS_RESULTS.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparkbuild.checks.check_plan import plan_check
from sparkbuild.proc import format_command, run
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.toolchain import sass, tools

RECIPE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"
GEMM = "csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu"
MMA = REPO_ROOT / "examples" / "mini-vllm" / "csrc" / "quantization" / "fp4" / (
    "nvfp4_block_scaled_mma.cu")
E2M1 = REPO_ROOT / "bench" / "e2m1_sass_kernels.cu"
TARGETS = ("12.1", "12.1a", "12.1f", "12.0f")


@dataclass(frozen=True)
class Reading:
    what: str
    target: str
    gencode: str
    sass_arch: str
    kernels: int
    instructions: int
    block_scaled_mma: int
    trap_only: int
    e2m1: int
    seconds: float


def _gencode(target: str) -> str:
    number = target.replace(".", "")
    return f"arch=compute_{number},code=sm_{number}"


def read(what: str, target: str, obj: Path, gencode: str, seconds: float,
         kernel: str | None = None) -> Reading:
    functions = sass.read_sass(obj)
    archs = sorted({f.arch for f in functions if f.arch})
    assert len(archs) == 1, archs
    chosen = [f for f in functions if kernel is None or kernel in f.name]
    summary = sass.summarize(chosen, archs[0])
    return Reading(what, target, gencode, archs[0], summary.functions, summary.instructions,
                   summary.block_scaled_mma, len(summary.trap_only_kernels),
                   sum(conversions(f) for f in chosen if f.arch == archs[0]), seconds)


def conversions(function: sass.SassFunction) -> int:
    """Hardware E2M1 conversions (``F2FP...E2M1``), not the block-scaled MMAs whose
    modifiers also name E2M1."""
    return len(function.e2m1_instructions())


def gemm(tree: Path, target: str, work: Path, commands: list[str]) -> Reading:
    recipe = load_recipe(RECIPE)
    recipe = dataclasses.replace(recipe, target=dataclasses.replace(
        recipe.target, cuda_archs=(target,), allow_plain_sm121=True))
    plan = plan_check(tree, recipe)
    obj = work / f"gemm.{target}.o"
    command = plan.command(GEMM, obj)
    commands.append(f"{target}: {format_command(command.argv)}")
    result = run(command.argv, cwd=plan.tree, echo=False, timeout=3600)
    return read("vllm 0.33.0 FP4 GEMM unit", target, obj, " ".join(command.gencode),
                result.seconds)


def small(what: str, source: Path, target: str, work: Path, kernel: str | None,
          includes: list[Path]) -> Reading:
    nvcc = tools.find_nvcc().path
    obj = work / f"{source.stem}.{target}.o"
    gencode = _gencode(target)
    result = run([nvcc, "-std=c++17", "-O3", "-c", "-gencode", gencode,
                  *[f"-I{d}" for d in includes], "-o", obj, source], echo=False, timeout=600)
    return read(what, target, obj, gencode, result.seconds, kernel)


def report(readings: list[Reading], commands: list[str], cutlass: str) -> str:
    nvcc = tools.find_nvcc().version
    lines = ["# What each Spark target gives, from the SASS (bench/spark_targets.py)", "",
             f"nvcc {nvcc}; cuobjdump from the nvidia-cuda-cuobjdump wheel; CUTLASS headers: "
             f"{cutlass}.  No GPU: everything below is read from the machine code.", "",
             "| unit | target | gencode | SASS arch (fatbin header) | kernels | instructions "
             "| OMMA.SF | trap-only kernels | E2M1 hw converts | compile s |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.what} | {r.target} | {r.gencode} | {r.sass_arch} | {r.kernels} | "
              f"{r.instructions} | {r.block_scaled_mma} | {r.trap_only} | {r.e2m1} | "
              f"{r.seconds:.1f} |" for r in readings]
    lines += ["", "FP4 GEMM commands (check's, per target):", ""]
    lines += [f"    {command}" for command in commands]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="prepared vllm 0.33.0 tree")
    parser.add_argument("--cutlass", type=Path, required=True, help="CUTLASS checkout")
    parser.add_argument("--out", type=Path,
                        default=REPO_ROOT / "bench" / "SPARK_TARGETS_RESULTS.md")
    args = parser.parse_args()
    os.environ["VLLM_CUTLASS_SRC_DIR"] = str(args.cutlass)
    readings: list[Reading] = []
    commands: list[str] = []
    with tempfile.TemporaryDirectory(prefix="spark-targets-") as scratch:
        work = Path(scratch)
        for target in TARGETS:
            readings.append(small("example FP4 block-scaled MMA kernel", MMA, target, work,
                                  None, [MMA.parents[2]]))
            readings.append(small("e2m1.cuh pack8 (8 values)", E2M1, target, work,
                                  "pack8_sparkbuild", [REPO_ROOT / "csrc"]))
            readings.append(gemm(args.tree.resolve(), target, work, commands))
            for reading in readings[-3:]:
                print(reading, flush=True)
    text = report(readings, commands, str(args.cutlass))
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
