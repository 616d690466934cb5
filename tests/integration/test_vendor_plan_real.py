"""The vendor plan of the prepared real vllm 0.33.0 tree, and of the 0.11.0 sdist.

The expected pins below were read from those releases' CMake files (the 0.33.0 sdist is
pinned by sha256 in recipes/vllm-0.33.0.toml, so they cannot drift); the test also checks,
independently of the recorder, that every 40-hex GIT_TAG written in the CUDA build's
external-project files appears in the plan.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.recipe import load_recipe
from sparkbuild.vendoring.plan import plan_tree

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.network]

REPO = Path(__file__).resolve().parents[2]

EXPECTED = {
    "cutlass": ("https://github.com/nvidia/cutlass.git", "v4.7.1"),
    "triton_kernels": ("https://github.com/triton-lang/triton.git", "v3.5.1"),
    "deepgemm": ("https://github.com/vllm-project/DeepGEMM.git",
                 "0820030756945b2daec208e8e8255268360f337d"),
    "deepselect": ("https://github.com/vllm-project/DeepSelect.git",
                   "d96d33afe1fab0d6066da49cdc91e64c2bee65ea"),
    "fmha_sm100": ("https://github.com/vllm-project/MSA.git",
                   "968061ab16cb14991a5c7d4c0e8eabf531be0dcf"),
    "flashmla": ("https://github.com/vllm-project/FlashMLA",
                 "e2afa5fd8c220fbd05fe03fc24c9d5e64c24641b"),
    "flashkda": ("https://github.com/vllm-project/FlashKDA.git",
                 "17a037d98da546deb4591e967cf961a43c034d8b"),
    "qutlass": ("https://github.com/IST-DASLab/qutlass.git",
                "e74319e3405ce6d71965732880f5dc1f52371f64"),
    "tml_fa4": ("https://github.com/vllm-project/tml-fa4.git",
                "75765e76a9c2c012c1f6ecd64577eb646eb4d303"),
    "vllm-flash-attn": ("https://github.com/vllm-project/flash-attention.git",
                        "b273a02621d3c94bc747df67204f591b67f38fae"),
}
OVERRIDES = {
    "cutlass": "VLLM_CUTLASS_SRC_DIR", "vllm-flash-attn": "VLLM_FLASH_ATTN_SRC_DIR",
    "flashmla": "FLASH_MLA_SRC_DIR", "qutlass": "QUTLASS_SRC_DIR",
    "deepgemm": "DEEPGEMM_SRC_DIR", "triton_kernels": "TRITON_KERNELS_SRC_DIR",
    "deepselect": "DEEPSELECT_SRC_DIR", "fmha_sm100": "FMHA_SM100_SRC_DIR",
    "flashkda": "FLASH_KDA_SRC_DIR", "tml_fa4": "TML_FA4_SRC_DIR",
}
EXPECTED_0_29_0 = {
    "cutlass": ("https://github.com/nvidia/cutlass.git", "v4.4.2"),
    "triton_kernels": ("https://github.com/triton-lang/triton.git", "v3.5.1"),
    "deepgemm": ("https://github.com/deepseek-ai/DeepGEMM.git",
                 "8b1392b978f5a03c828dd1711090d7fb50958b8a"),
    "fmha_sm100": ("https://github.com/vllm-project/MSA.git",
                   "087c161814d4d9c735b46c21212a09e5f8eb92fa"),
    "flashmla": ("https://github.com/vllm-project/FlashMLA",
                 "0397728d511c4e3d94ea3a01d8dda8654525a611"),
    "flashkda": ("https://github.com/vllm-project/FlashKDA.git",
                 "ee0be888cd0e972f9409bf53756f8c38c6652173"),
    "qutlass": ("https://github.com/IST-DASLab/qutlass.git",
                "e74319e3405ce6d71965732880f5dc1f52371f64"),
    "tml_fa4": ("https://github.com/vllm-project/tml-fa4.git",
                "b206834606ed5b5f21f8eed6b0683f528ea9cf7d"),
    "vllm-flash-attn": ("https://github.com/vllm-project/flash-attention.git",
                        "06bdd47c0d0383daf6a2ff0c418faff9c6da16e5"),
}
"""vllm 0.29.0 (the one-piece build's stack), read from its CMake files: the plan must name
all nine, although its torch 2.13 hotfix reads torch's headers before the first of them."""
EXPECTED_0_11_0 = {
    "cutlass": ("https://github.com/nvidia/cutlass.git", "v4.0.0"),
    "flashmla": ("https://github.com/vllm-project/FlashMLA",
                 "5f65b85703c7ed75fda01e06495077caad207c3f"),
    "vllm-flash-attn": ("https://github.com/vllm-project/flash-attention.git",
                        "ee4d25bd84e0cbc7e0b9b9685085fd5db2dcb62a"),
}


@pytest.fixture(scope="module")
def plan(vllm_sdist: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[Path, dict[str, Any]]:
    recipe = load_recipe(REPO / "recipes" / "vllm-0.33.0.toml")
    tree = tmp_path_factory.mktemp("vllm") / "tree"
    prepare_tree(f"{vllm_sdist('0.33.0')}#sha256={recipe.source.sha256}", tree, recipe)
    result = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "vendor", "--tree", str(tree), "--cache",
         str(tree.parent / "cache"), "--plan", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
        env={k: v for k, v in os.environ.items()
             if k != "CMAKE_ARGS" and not k.endswith("_SRC_DIR")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return tree, json.loads(result.stdout)


def test_plan_names_every_external_source_with_its_pinned_ref(
    plan: tuple[Path, dict[str, Any]],
) -> None:
    _tree, data = plan
    sources = data["sources"]
    assert isinstance(sources, list)
    found = {s["name"]: (s["url"], s["ref"]) for s in sources}
    assert found == EXPECTED
    overrides = {s["name"]: s.get("override") for s in sources}
    for name, variable in OVERRIDES.items():
        assert overrides[name] == variable
    assert all(s["certain"] for s in sources)
    assert data["notes"] == []
    wheres = {s["name"]: s["where"] for s in sources}
    assert wheres["cutlass"].startswith("CMakeLists.txt:")
    assert wheres["qutlass"].startswith("cmake/external_projects/qutlass.cmake:")
    triton = next(s for s in sources if s["name"] == "triton_kernels")
    assert "rocm" not in triton["url"].lower()
    # CPU-only sources are listed apart: a CUDA build does not fetch them.
    assert {"oneDNN", "arm_compute"} <= {s["name"] for s in data["unreached"]}


def test_every_pinned_commit_in_the_cuda_cmake_files_is_planned(
    plan: tuple[Path, dict[str, Any]],
) -> None:
    tree, data = plan
    refs = {s["ref"] for s in data["sources"]}
    written = set()
    for path in (tree / "cmake" / "external_projects").glob("*.cmake"):
        written |= set(re.findall(r"\b[0-9a-f]{40}\b", path.read_text(encoding="utf-8")))
    rocm_only = {"669b31acc1dd1b3fd93286afd5db67f65d9f7557"}  # triton's ROCm fork pin
    assert written - rocm_only <= refs


def test_plan_has_the_torch_pin_and_the_crates(plan: tuple[Path, dict[str, Any]]) -> None:
    _tree, data = plan
    assert data["torch"] == "2.14.0"
    requirements = [w["requirement"] for w in data["wheels"]]
    assert "torch==2.14.0" in requirements
    assert any(r.startswith("setuptools-rust") for r in requirements)
    assert isinstance(data["crates"], int) and data["crates"] > 100


@pytest.mark.parametrize(("version", "expected", "unreached"), [
    ("0.11.0", EXPECTED_0_11_0, ["oneDNN"]),
    ("0.29.0", EXPECTED_0_29_0, ["arm_compute", "oneDNN"]),
])
def test_plan_of_an_sdist(vllm_sdist: Callable[[str], Path], tmp_path: Path, version: str,
                          expected: dict[str, tuple[str, str]], unreached: list[str]) -> None:
    """A release read as it is shipped (no series needed to plan it): every source, and no
    note of a CMake run cut short (0.29.0's torch 2.13 hotfix reads torch's headers before
    its first declaration)."""
    with tarfile.open(vllm_sdist(version)) as sdist:
        sdist.extractall(tmp_path, filter="data")
    data = plan_tree(tmp_path / f"vllm-{version}", env={}).to_dict()
    found = {s["name"]: (s["url"], s["ref"]) for s in data["sources"]}
    assert found == expected
    assert sorted({s["name"] for s in data["unreached"]}) == unreached
    assert data["notes"] == []
