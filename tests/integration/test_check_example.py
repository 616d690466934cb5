"""``check`` on the mini-vllm example's prepared tree: the tree ``wheel`` builds is checked,
not stopped by a configure error that only the CMake recorder sees.

The example reads CMAKE_CUDA_COMPILER_VERSION right after ``project(... CUDA)`` and makes
its Python module with ``pybind11_add_module``; the recorder once knew neither, and said
"configure would stop (8.08.68.99.0)".  The SASS of each unit is read, as always.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.nvcc, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "mini-vllm" / "recipe.toml"


def _sparkbuild(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbuild", *args], capture_output=True,
                          text=True, timeout=900, check=False, cwd=cwd)


def test_check_compiles_the_example_tree_that_wheel_builds(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    prepared = _sparkbuild("prepare", "--recipe", str(RECIPE), "--dest", str(tree),
                           "--cache", str(tmp_path / "cache"), cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr
    result = _sparkbuild("check", "--recipe", str(RECIPE), "--tree", str(tree), "--json",
                         cwd=tmp_path)
    both = result.stdout + result.stderr
    assert "configure would stop" not in both
    assert result.returncode == 0, both
    units = {u["path"]: u for u in json.loads(result.stdout)["units"]}
    assert "csrc/quantization/fp4/nvfp4_block_scaled_mma.cu" in units
    for path, unit in units.items():
        assert unit["status"] == "ok", (path, unit)
        assert unit["sass"]["arch"] == "sm_121a", (path, unit)
    assert units["csrc/quantization/fp4/nvfp4_block_scaled_mma.cu"]["sass"][
        "block_scaled_mma"] > 0
