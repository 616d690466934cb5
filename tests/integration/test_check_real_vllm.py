"""`sparkbuild check` on the real vllm 0.33.0 tree, prepared with the sm_121 series.

Needs torch (a CPU build has the headers: `pip install torch==2.13.0`) and, where the CUDA
toolkit lacks cuBLAS's headers, the nvidia-cublas wheel of its major release.  CUTLASS is
cloned from GitHub by vLLM's CMake, which cannot happen here: the unit that needs it must
be reported as skipped with the header named, and must compile once CUTLASS headers are
given through VLLM_CUTLASS_SRC_DIR (the nvidia-cutlass wheel on the package index ships
them, though at 4.2.0 where vLLM pins v4.7.1).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from typing import TYPE_CHECKING

import pytest

from sparkbuild.build.check import check_tree
from sparkbuild.errors import CommandFailed
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
SM100_ONLY_UNITS = ["csrc/nvfp4_ds_mla_cache_kernels.cu", f"{FP4}/mxfp4_experts_quant.cu"]
NATIVE_121 = ["arch=compute_121a,code=sm_121a"]  # the recipe's target, 12.1a


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, vllm_sdist: Callable[[str], Path]) -> Path:
    vllm_sdist("0.33.0")
    recipe = load_recipe(RECIPE)
    dest = tmp_path_factory.mktemp("check") / "vllm-0.33.0"
    prepare_tree(recipe.source.spec, dest, recipe)
    return dest


def _env_without_cutlass() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "VLLM_CUTLASS_SRC_DIR"}


def test_check_compiles_the_patched_fp4_units_for_sm121(tree: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "check", "--tree", str(tree),
         "--recipe", str(RECIPE), "--json"],
        env=_env_without_cutlass(), capture_output=True, text=True, timeout=1800, check=False,
    )
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    units = {unit["path"]: unit for unit in result["units"]}
    assert {*TORCH_ONLY_UNITS, CUTLASS_UNIT, *SM100_ONLY_UNITS} == set(units)
    for path in TORCH_ONLY_UNITS:
        assert units[path]["status"] == "ok", units[path]["reason"]
        assert units[path]["gencode"] == NATIVE_121
    skipped = units[CUTLASS_UNIT]
    assert skipped["status"] == "skipped-missing-headers"
    assert skipped["missing_headers"] == ["cutlass/cutlass.h"]
    assert "v4.7.1" in skipped["reason"]
    for path in SM100_ONLY_UNITS:
        assert units[path]["status"] == "not-built"
    assert f"{FP4}/nvfp4_utils.cuh" in result["touched"]


def _cutlass_from_the_index(dest: Path) -> Path:
    wheel = find_file("nvidia-cutlass", "4.2.0.0", kind="wheel")
    blob = fetch_to_cache(Cache(default_cache_root()), wheel.url, wheel.sha256)
    prefix = "cutlass_library/source/"
    with zipfile.ZipFile(blob) as archive:
        for name in archive.namelist():
            if name.startswith((prefix + "include/", prefix + "tools/util/include/")):
                archive.extract(name, dest)
    return dest / prefix


def test_check_takes_cutlass_from_vllm_cutlass_src_dir(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_CUTLASS_SRC_DIR", str(_cutlass_from_the_index(tmp_path)))
    result = check_tree(tree, load_recipe(RECIPE), only=[CUTLASS_UNIT])
    [unit] = result.units
    assert unit.status == "ok", unit.reason
    assert list(unit.gencode) == NATIVE_121
    assert result.error is None


def test_check_fails_fast_on_the_unpatched_header(
    tree: Path, vllm_sdist: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upstream header, with the raw E2M1 convert, put back: ptxas refuses plain sm_121
    (a copy of the recipe at plain 12.1, opted in: sm_121a has the instruction)."""
    header = tree / FP4 / "nvfp4_utils.cuh"
    patched = header.read_bytes()
    with tarfile.open(vllm_sdist("0.33.0")) as sdist:
        member = sdist.extractfile(f"vllm-0.33.0/{FP4}/nvfp4_utils.cuh")
        assert member is not None
        header.write_bytes(member.read())
    monkeypatch.delenv("VLLM_CUTLASS_SRC_DIR", raising=False)
    try:
        recipe = load_recipe(RECIPE)
        plain = dataclasses.replace(recipe, target=dataclasses.replace(
            recipe.target, cuda_archs=("12.1",), allow_plain_sm121=True))
        result = check_tree(tree, plain, only=[f"{FP4}/nvfp4_quant_kernels.cu"])
    finally:
        header.write_bytes(patched)
    [unit] = result.units
    assert unit.status == "failed"
    assert "e2m1" in unit.reason and "sm_121" in unit.reason
    assert isinstance(result.error, CommandFailed)
    assert unit.log is not None and unit.log.is_file()
