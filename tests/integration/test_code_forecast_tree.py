"""The code forecast through the tree's own CMake (cmake script mode), on the example.

The prepared mini-vllm tree gives every CUDA unit native sm_121a code: clear.  The same tree
with its common kernels cut by an ``8.0+PTX`` list (as vLLM's MARLIN_ARCHS) gives them PTX
only at 12.1a: named, per extension, and refused before anything compiles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkbuild.checks.code_forecast import ForecastInputs, forecast_code, judge_forecast
from sparkbuild.errors import VerifyError
from sparkbuild.recipe import load_recipe

pytestmark = [pytest.mark.nvcc, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "mini-vllm" / "recipe.toml"
COMMON = 'set_gencode_flags_for_srcs(SRCS "${COMMON_SRCS}" CUDA_ARCHS "${CUDA_ARCHS}")'
PTX_ONLY = ('cuda_archs_loose_intersection(COMMON_ARCHS "8.0+PTX" "${CUDA_ARCHS}")\n'
            'set_gencode_flags_for_srcs(SRCS "${COMMON_SRCS}" CUDA_ARCHS "${COMMON_ARCHS}")')


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("forecast")
    prepared = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "prepare", "--recipe", str(RECIPE), "--dest",
         str(work / "tree"), "--cache", str(work / "cache")],
        capture_output=True, text=True, timeout=600, check=False, cwd=work)
    assert prepared.returncode == 0, prepared.stderr
    return work / "tree"


def test_the_example_tree_forecasts_native_code_for_every_unit(tree: Path,
                                                               tmp_path: Path) -> None:
    forecast = forecast_code(ForecastInputs(tree=tree, work=tmp_path / "f", python=Path(
        sys.executable), site=None), load_recipe(RECIPE))
    assert forecast.status == "clear", forecast.to_dict()
    assert forecast.units >= 4  # the example's kernels, each read from its gencode
    assert not (tmp_path / "f" / "src").exists()  # the scratch copy is gone


def test_a_ptx_only_list_is_refused_before_the_build(tree: Path, tmp_path: Path) -> None:
    ptx_tree = tmp_path / "tree"
    subprocess.run(["cp", "-a", str(tree), str(ptx_tree)], check=True)
    cmake = ptx_tree / "CMakeLists.txt"
    text = cmake.read_text(encoding="utf-8")
    assert COMMON in text
    cmake.write_text(text.replace(COMMON, PTX_ONLY), encoding="utf-8")
    recipe = load_recipe(RECIPE)
    forecast = forecast_code(ForecastInputs(tree=ptx_tree, work=tmp_path / "f",
                                            python=Path(sys.executable), site=None), recipe)
    assert forecast.status == "lacking", forecast.to_dict()
    ((target, lacking),) = forecast.lacking.items()
    assert sorted(c.unit for c in lacking) == ["csrc/activation_kernels.cu",
                                               "csrc/moe/moe_permute_unpermute_op.cu"]
    assert {(c.kind, c.code, c.target) for c in lacking} == {("ptx", "compute_80", "12.1a")}
    with pytest.raises(VerifyError, match="nothing was compiled"):
        judge_forecast(forecast, recipe)
    # narrowed to an extension the example does not have: nothing of the build is read
    other = forecast_code(ForecastInputs(tree=ptx_tree, work=tmp_path / "g",
                                         python=Path(sys.executable), site=None,
                                         targets=("no_such_ext",)), recipe)
    assert other.status == "unknown" and "no CUDA unit" in other.reason
    assert target == "_C"
