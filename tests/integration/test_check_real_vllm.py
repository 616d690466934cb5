"""`sparkbuild check` on the real vllm 0.33.0 tree, prepared with the sm_121 series.

Needs torch (a CPU build has the headers and the CMake files: `pip install torch==2.13.0`),
cuobjdump and nvdisasm (the nvidia-cuda-cuobjdump/-nvdisasm wheels) and, where the CUDA
toolkit lacks cuBLAS's headers, the nvidia-cublas wheel of its major release.  CUTLASS is
cloned from GitHub by vLLM's CMake, which cannot happen here: a unit that needs it is
reported as skipped with the header named (and the check fails), and compiles once CUTLASS
headers are given through VLLM_CUTLASS_SRC_DIR (here: the nvidia-cutlass wheel from the
package index, 4.2.0, where vLLM pins v4.7.1).

The recipes are copies of recipes/vllm-0.33.0.toml at 12.1a (and at plain 12.1 with the
opt-in); vLLM 0.33.0's CMake refuses GCC < 13, so on a machine with an older GCC every
check also reports that stop and exits non-zero: the tests read the JSON either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.checks.check import check_tree
from sparkbuild.checks.check_plan import plan_check
from sparkbuild.errors import CommandFailed, ToolchainError
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.sources.index import find_file
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.download import fetch_to_cache

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

RECIPE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"
FP4 = "csrc/quantization/fp4"
TORCH_ONLY_UNITS = [
    "csrc/nvfp4_kv_cache_kernels.cu",
    f"{FP4}/activation_nvfp4_quant_fusion_kernels.cu",
    f"{FP4}/nvfp4_experts_quant.cu",
    f"{FP4}/nvfp4_quant_kernels.cu",
]
CUTLASS_UNIT = f"{FP4}/nvfp4_quant_entry.cu"
FP4_GEMM = f"{FP4}/nvfp4_scaled_mm_sm120_kernels.cu"
SM100_ONLY_UNITS = ["csrc/nvfp4_ds_mla_cache_kernels.cu", f"{FP4}/mxfp4_experts_quant.cu"]
SPARK = ["arch=compute_121a,code=sm_121a"]


def _recipe_copy(directory: Path, arch: str, *, plain_opt_in: bool = False) -> Path:
    text = RECIPE.read_text(encoding="utf-8")
    text = text.replace('path = "../patches/series"',
                        f'path = "{(REPO_ROOT / "patches" / "series").as_posix()}"')
    target = f'cuda_archs = ["{arch}"]'
    if plain_opt_in:
        target += "\nallow_plain_sm121 = true"
    text = "\n".join(target if line.startswith("cuda_archs") else line
                     for line in text.splitlines())
    path = directory / f"vllm-0.33.0-{arch}.toml"
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def recipes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("recipes")
    return {"spark": _recipe_copy(directory, "12.1a"),
            "plain": _recipe_copy(directory, "12.1", plain_opt_in=True)}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, vllm_sdist: Callable[[str], Path],
         recipes: dict[str, Path]) -> Path:
    vllm_sdist("0.33.0")
    recipe = load_recipe(recipes["spark"])
    dest = tmp_path_factory.mktemp("check") / "vllm-0.33.0"
    prepare_tree(recipe.source.spec, dest, recipe)
    return dest


@pytest.fixture(scope="module")
def cutlass(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CUTLASS headers from the nvidia-cutlass wheel on the package index."""
    dest = tmp_path_factory.mktemp("cutlass")
    wheel = find_file("nvidia-cutlass", "4.2.0.0", kind="wheel")
    blob = fetch_to_cache(Cache(default_cache_root()), wheel.url, wheel.sha256)
    prefix = "cutlass_library/source/"
    with zipfile.ZipFile(blob) as archive:
        for name in archive.namelist():
            if name.startswith((prefix + "include/", prefix + "tools/util/include/")):
                archive.extract(name, dest)
    return dest / prefix


def _check(tree: Path, recipe: Path, units: list[str], cutlass: Path | None
           ) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CUTLASS_SRC_DIR"}
    if cutlass is not None:
        env["VLLM_CUTLASS_SRC_DIR"] = str(cutlass)
    argv = [sys.executable, "-m", "sparkbuild", "check", "--tree", str(tree), "--recipe",
            str(recipe), "--json"]
    for unit in units:
        argv += ["--unit", unit]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3000,
                          check=False)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def test_the_series_selects_touched_units_and_units_whose_gencode_moved(
    tree: Path, recipes: dict[str, Path]
) -> None:
    plan = plan_check(tree, load_recipe(recipes["spark"]))
    assert f"{FP4}/nvfp4_utils.cuh" in plan.touched
    for unit in [*TORCH_ONLY_UNITS, CUTLASS_UNIT]:
        assert plan.units[unit] == "touched"
    assert sorted(plan.not_built) == sorted(SM100_ONLY_UNITS)
    # The arch edit moved CUDA_ARCHS and the SM12x lists: the FP4 GEMM and MoE units too.
    assert plan.units[FP4_GEMM] == "gencode"
    assert f"{FP4}/nvfp4_blockwise_moe_kernel.cu" in plan.gencode_changed
    # marlin's generate_kernels.py ran on the scratch copy: its units are known, not in tree
    assert any("marlin/sm80_kernel_" in unit for unit in plan.units)
    assert not list((tree / "csrc" / "quantization" / "marlin").glob("sm80_kernel_*.cu"))


def test_check_compiles_the_patched_fp4_units_for_sm121a(
    tree: Path, recipes: dict[str, Path]
) -> None:
    code, result = _check(tree, recipes["spark"],
                          [*TORCH_ONLY_UNITS, CUTLASS_UNIT, *SM100_ONLY_UNITS], None)
    units = {unit["path"]: unit for unit in result["units"]}
    assert {*TORCH_ONLY_UNITS, CUTLASS_UNIT, *SM100_ONLY_UNITS} == set(units)
    for path in TORCH_ONLY_UNITS:
        assert units[path]["status"] == "ok", units[path]["reason"]
        assert units[path]["gencode"] == SPARK
        assert units[path]["sass"]["arch"] == "sm_121a"
        assert units[path]["sass"]["trap_only_kernels"] == []
    skipped = units[CUTLASS_UNIT]
    assert skipped["status"] == "skipped-missing-headers"
    assert skipped["missing_headers"] == ["cutlass/cutlass.h"]
    assert "v4.7.1" in skipped["reason"]
    for path in SM100_ONLY_UNITS:
        assert units[path]["status"] == "not-built"
    # A unit skipped for its headers is not a pass: the error says how to get them.
    assert code == ToolchainError.exit_code
    assert "VLLM_CUTLASS_SRC_DIR" in result["error"]["hint"]


def test_the_fp4_gemm_gets_block_scaled_mma_at_12_1a(
    tree: Path, recipes: dict[str, Path], cutlass: Path
) -> None:
    code, result = _check(tree, recipes["spark"], [FP4_GEMM], cutlass)
    [unit] = result["units"]
    assert unit["status"] == "ok", unit["reason"]
    assert unit["gencode"] == SPARK
    assert unit["sass"]["arch"] == "sm_121a"
    assert unit["sass"]["block_scaled_mma"] > 0
    assert unit["sass"]["trap_only_kernels"] == []
    assert unit["sass"]["guard_stub_kernels"] == []
    # Exit 0, unless this machine's GCC is older than the release's CMake accepts.
    assert code == (ToolchainError.exit_code if result["configure_stops"] else 0)


def test_the_fp4_gemm_is_a_trap_at_plain_12_1(
    tree: Path, recipes: dict[str, Path], cutlass: Path
) -> None:
    code, result = _check(tree, recipes["plain"], [FP4_GEMM], cutlass)
    [unit] = result["units"]
    assert code == CommandFailed.exit_code
    assert unit["status"] == "failed"
    assert unit["gencode"] == ["arch=compute_121,code=sm_121"]
    assert unit["sass"]["block_scaled_mma"] == 0
    # CUTLASS's guard leaves printf + trap (v4.7, vLLM's pin) or printf + exit (the 4.2.0
    # wheel): either way the kernel does nothing, and check names it.
    kernels = unit["sass"]["guard_stub_kernels"]
    assert len(kernels) == unit["sass"]["functions"] > 0
    assert all("cutlass" in kernel for kernel in kernels)
    assert set(unit["sass"]["trap_only_kernels"]) <= set(kernels)
    assert kernels[0][:96] in result["error"]["what"]


def test_check_fails_fast_on_the_unpatched_header_for_plain_sm121(
    tree: Path, recipes: dict[str, Path], vllm_sdist: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upstream header, with the raw E2M1 convert, put back: ptxas refuses plain
    sm_121 (12.1a has the instruction; the software path serves plain targets)."""
    header = tree / FP4 / "nvfp4_utils.cuh"
    patched = header.read_bytes()
    with tarfile.open(vllm_sdist("0.33.0")) as sdist:
        member = sdist.extractfile(f"vllm-0.33.0/{FP4}/nvfp4_utils.cuh")
        assert member is not None
        header.write_bytes(member.read())
    monkeypatch.delenv("VLLM_CUTLASS_SRC_DIR", raising=False)
    try:
        result = check_tree(tree, load_recipe(recipes["plain"]),
                            only=[f"{FP4}/nvfp4_quant_kernels.cu"])
    finally:
        header.write_bytes(patched)
    [unit] = result.units
    assert unit.status == "failed"
    assert "e2m1" in unit.reason and "sm_121" in unit.reason
    assert isinstance(result.error, CommandFailed)
    assert unit.log is not None and unit.log.is_file()
