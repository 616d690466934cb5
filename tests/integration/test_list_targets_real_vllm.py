"""`sparkbuild check --list-targets` on the real vllm 0.29.0 sdist, for
recipes/vllm-0.29.0.toml (Qwen3-Next with MTP, FlashInfer attention, at 12.1a).

The sdist comes from the package index once (the ``vllm_sdist`` fixture caches it under
~/.cache/sparkbuild); the command prepares it with the series in the cache and reads its
CMake with the recorder (cmake, and nvcc for the CUDA version the tree's arch lists see).
GitHub is not needed: without vllm-flash-attn's source the recorder cannot read the project
that defines ``_vllm_fa2_C`` and ``_vllm_fa3_C``, and FA3 is left out because FA2 serves the
"one of" refusal of ``vllm/vllm_flash_attn/__init__.py``.

With vllm-flash-attn's source at hand (a bare git snapshot of
vllm-project/flash-attention, ``$SPARKBUILD_FLASH_ATTN_MIRROR``, by default the one the
bench's mirrors are linked from, at the commit bench/first-start/recipe-0.29.0.toml's
``[[vendor.stand_in]]`` builds), the recorder follows the fetched project, and FA3 is left
out because the tree's arch lists give none of its units a ``-gencode`` for 12.1a.  That test
is skipped, with the reason, where the snapshot is absent.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.cli import main
from sparkbuild.compile.extension_set import extension_set_for
from sparkbuild.node.profile import declared_env
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.recipe import REPO_ROOT, load_recipe

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

RECIPE = REPO_ROOT / "recipes" / "vllm-0.29.0.toml"
STAND_IN_RECIPE = REPO_ROOT / "bench" / "first-start" / "recipe-0.29.0.toml"
FA_MIRROR = Path(os.environ.get("SPARKBUILD_FLASH_ATTN_MIRROR",
                                "/work/.mirror/vllm-project+flash-attention/repo"))
BUILT = ("_vllm_fa2_C", "_C_stable_libtorch", "_moe_C_stable_libtorch")
LEFT_OUT = ("_vllm_fa3_C", "_flashmla_C", "_flashmla_extension_C")


@pytest.fixture(scope="module")
def listed(vllm_sdist: Callable[[str], Path]) -> dict[str, Any]:
    vllm_sdist("0.29.0")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", "--list-targets", "--recipe", str(RECIPE), "--json"])
    text = out.getvalue()
    assert code == 0, text[-4000:]
    data = json.loads(text)  # exactly one object
    assert isinstance(data, dict)
    return data


def _by_target(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["target"]: entry for entry in data["extensions"]}


def test_the_model_set_at_12_1a_builds_fa2_and_the_stable_extensions(
        listed: dict[str, Any]) -> None:
    assert listed["archs"] == ["12.1a"]
    assert listed["model"]["architecture"] == "Qwen3NextForCausalLM"
    assert "vllm.model_executor.models.qwen3_next_mtp" in listed["model"]["modules"]
    for name in BUILT:
        assert name in listed["targets"], name
    entries = _by_target(listed)
    assert "vllm/platforms/cuda.py" in entries["_C_stable_libtorch"]["reason"]
    assert "needs one of _vllm_fa2_C, _vllm_fa3_C" in entries["_vllm_fa2_C"]["reason"]


def test_fa3_and_flashmla_are_left_out_at_12_1a(listed: dict[str, Any]) -> None:
    entries = _by_target(listed)
    for name in LEFT_OUT:
        assert name not in listed["targets"], name
        assert entries[name]["built"] is False, entries[name]
    assert entries["_vllm_fa3_C"]["reason"].endswith("and _vllm_fa2_C serves it")
    assert entries["_flashmla_extension_C"]["arch"] == "empty"
    left = {source["name"]: source for source in listed["left_out_sources"]}
    assert set(left["flashmla"]["extensions"]) == {"_flashmla_C", "_flashmla_extension_C"}
    assert "vllm-flash-attn" not in left  # FA2 is built from it


def _flash_attention_at(commit: str, dest: Path) -> Path:
    """The snapshot's files at ``commit``, but the top-level entries it holds no blobs of
    (the snapshot leaves out a large PDF under assets/; no build reads it)."""
    git = ["git", f"--git-dir={FA_MIRROR}"]
    names = subprocess.run([*git, "ls-tree", "--name-only", commit], check=True,
                           capture_output=True, text=True).stdout.split()
    archive = subprocess.run([*git, "archive", "--format=tar", commit, "--",
                              *[n for n in names if n != "assets"]],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="module")
def flash_attention(tmp_path_factory: pytest.TempPathFactory) -> Path:
    (stand_in,) = load_recipe(STAND_IN_RECIPE).vendor.stand_ins
    if not (FA_MIRROR / "objects").is_dir():
        pytest.skip(f"no vllm-project/flash-attention snapshot at {FA_MIRROR} (set "
                    "SPARKBUILD_FLASH_ATTN_MIRROR to a bare clone): its CMake defines FA3")
    found = subprocess.run(["git", f"--git-dir={FA_MIRROR}", "cat-file", "-e",
                            f"{stand_in.used}^{{commit}}"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"the snapshot at {FA_MIRROR} lacks {stand_in.used}, the commit "
                    f"{STAND_IN_RECIPE.name} builds")
    return _flash_attention_at(stand_in.used, tmp_path_factory.mktemp("fa") / "src")


def test_with_flash_attentions_source_fa3_compiles_no_code_at_12_1a(
        flash_attention: Path, vllm_sdist: Callable[[str], Path],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    vllm_sdist("0.29.0")
    recipe = load_recipe(RECIPE)
    root = tmp_path_factory.mktemp("list-targets")
    prepared = prepare_tree(recipe.source.spec, root / "tree", recipe)
    assert prepared.error is None, prepared.error
    chosen = extension_set_for(prepared.tree, recipe, root / "work",
                               profile=declared_env(recipe),
                               sources={"vllm-flash-attn": flash_attention})
    entries = {choice.target: choice for choice in chosen.choices}
    fa3, fa2 = entries["_vllm_fa3_C"], entries["_vllm_fa2_C"]
    assert (fa3.built, fa3.arch) == (False, "no_code"), fa3
    assert fa3.units > 0 and fa3.native_units == 0
    assert f"none of its {fa3.units} CUDA unit(s) a -gencode for 12.1a" in fa3.reason
    assert fa2.built and fa2.arch in ("native", "partial") and fa2.units > 0, fa2
    assert "first that compiles something at the target" in fa2.reason
    for name in BUILT:
        assert name in chosen.targets, name
    for name in LEFT_OUT:
        assert name not in chosen.targets, name
