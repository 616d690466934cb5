"""A bundle carries every file its recipe names (``[model] config``, a ``[flashinfer]
jit_cache`` path), and ``wheel --bundle`` reads the bundle's copies: the round trip with the
originals gone, as on the air-gapped host."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.bundle.read import (
    bundled_recipe,
    bundles_dir,
    open_bundle,
    unpack_bundle,
    with_carried_files,
)
from sparkbuild.bundle.write import BundleResult, assemble, check_recipe_files
from sparkbuild.errors import RecipeError, VerifyError
from sparkbuild.flashinfer.model_config import resolve_model
from sparkbuild.recipe import DEFAULT_RECIPE, JIT_CACHE, MODEL_CONFIG, Recipe, load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.plan import VendorPlan
from support.bundles import rewrite_bundle

WHEEL = "flashinfer_jit_cache-0.6.18+cu130-cp39-abi3-manylinux_2_28_aarch64.whl"
CONFIG = {"architectures": ["DemoForCausalLM"], "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 128, "torch_dtype": "bfloat16"}


def _recipe(root: Path) -> Recipe:
    """A recipe beside its series, its model's config and a prebuilt jit-cache wheel."""
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("# empty\n")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text(json.dumps(CONFIG))
    (root / "wheels").mkdir()
    wheel = root / "wheels" / WHEEL
    wheel.write_bytes(b"a prebuilt jit-cache's bytes")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    path = root / "r.toml"
    path.write_text('[recipe]\nname = "r"\n[source]\nspec = "."\n[series]\n'
                    'path = "patches/series"\n[model]\nconfig = "model/config.json"\n'
                    f'[flashinfer]\naot = true\njit_cache = {{ path = "wheels/{WHEEL}", '
                    f'sha256 = "{digest}" }}\n')
    return load_recipe(path)


def _bundle(tmp_path: Path, recipe: Recipe) -> tuple[Path, BundleResult]:
    tree = tmp_path / "tree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "kernel.cu").write_text("__global__ void k() {}\n")
    out = tmp_path / "out" / "b.tar.xz"
    result = assemble(recipe=recipe, tree=tree, prepared={"patches": []},
                      plan=VendorPlan(tree, (), (), (), (), None),
                      cache=Cache(tmp_path / "cache"), out=out, with_wheels=False)
    return out, result


def test_the_recipe_knows_every_file_it_names(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path / "origin")
    assert {f.key: f.path.name for f in recipe.referenced_files()} == {
        MODEL_CONFIG: "config.json", JIT_CACHE: WHEEL}
    shipped = load_recipe(DEFAULT_RECIPE).referenced_files()
    assert [(f.key, f.path.name) for f in shipped] == [(MODEL_CONFIG, "qwen38next-model.json")]


def test_bundle_then_wheel_bundle_reads_the_carried_copies(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path / "origin")
    wheel_bytes = (tmp_path / "origin" / "wheels" / WHEEL).read_bytes()
    bundle, result = _bundle(tmp_path, recipe)
    assert set(result.recipe_files) == {MODEL_CONFIG, JIT_CACHE}
    assert any("the recipe's [model] config: recipe/files/model.config/config.json" in line
               for line in result.summary())
    shutil.rmtree(tmp_path / "origin")  # the build host has the bundle alone
    carried = bundled_recipe(open_bundle(bundle, tmp_path / "host-cache"))
    root = bundles_dir(tmp_path / "host-cache")
    assert carried.model is not None and carried.model.config is not None
    assert carried.model.config.is_relative_to(root)
    assert resolve_model(carried.model, str(carried.path)).architecture == "DemoForCausalLM"
    jit_cache = carried.flashinfer.jit_cache
    assert jit_cache is not None and jit_cache.path is not None
    assert jit_cache.path.name == WHEEL and jit_cache.path.read_bytes() == wheel_bytes
    assert jit_cache.sha256 == hashlib.sha256(wheel_bytes).hexdigest()


def test_the_default_recipe_s_model_travels(tmp_path: Path) -> None:
    bundle, _ = _bundle(tmp_path, load_recipe(DEFAULT_RECIPE))
    carried = bundled_recipe(open_bundle(bundle, tmp_path / "host-cache"))
    assert carried.model is not None and carried.model.config is not None
    assert carried.model.config.is_relative_to(bundles_dir(tmp_path / "host-cache"))
    facts = resolve_model(carried.model, str(carried.path))
    assert facts.architecture == "Qwen3NextForCausalLM" and facts.head_dim == 256


def test_a_copy_changed_in_the_kept_unpacked_bundle_is_refused(tmp_path: Path) -> None:
    bundle, _ = _bundle(tmp_path, _recipe(tmp_path / "origin"))
    unpacked = unpack_bundle(bundle, bundles_dir(tmp_path / "host-cache"))
    (unpacked.root / "recipe" / "files" / MODEL_CONFIG / "config.json").write_text("{}")
    with pytest.raises(VerifyError, match=r"copy of the recipe's \[model\] config"):
        bundled_recipe(open_bundle(bundle, tmp_path / "host-cache"))


def test_a_bundle_that_does_not_carry_the_file_is_refused_by_name(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path / "origin")
    bundle, _ = _bundle(tmp_path, recipe)
    unpacked = unpack_bundle(bundle, bundles_dir(tmp_path / "host-cache"))
    assert set(unpacked.plan["recipe_files"]) == {MODEL_CONFIG, JIT_CACHE}
    older = dataclasses.replace(unpacked, plan={k: v for k, v in unpacked.plan.items()
                                                if k != "recipe_files"})
    with pytest.raises(VerifyError, match=r"does not carry the recipe's \[model\] config "
                                          r"\(config.json\)"):
        with_carried_files(older, recipe)
    dropped = rewrite_bundle(bundle, tmp_path / "dropped.tar.xz",
                             drop="recipe/files/model.config/config.json")
    with pytest.raises(VerifyError, match=r"recipe/files/model\.config/config\.json: missing"):
        bundled_recipe(open_bundle(dropped, tmp_path / "other-cache"))


def test_bundle_refuses_a_recipe_file_it_cannot_carry_before_any_work(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path / "origin")
    (tmp_path / "origin" / "model" / "config.json").unlink()
    with pytest.raises(RecipeError, match=r"\[model\] config is not a file"):
        check_recipe_files(recipe)


def _result(sources: list[dict[str, Any]]) -> BundleResult:
    return BundleResult(Path("/b.tar.xz"), 1 << 20, "f" * 64, 2 << 20, 3, 0, sources, [], [],
                        [], 1.0, without_wheels=True)


def test_the_summary_names_no_none_for_a_url_source_or_a_git_one() -> None:
    url: dict[str, Any] = {
        "name": "dep", "kind": "url", "url": "https://example.com/dep.tar.gz", "ref": None,
        "commit": None, "cache_sha256": "a" * 64, "patched": None}
    git: dict[str, Any] = {
        "name": "fa", "kind": "git", "url": "https://example.com/fa.git", "ref": "v1",
        "commit": "c" * 40, "cache_sha256": "b" * 64, "patched": {"patches": [{"status": None}]}}
    lines = _result([url, git]).summary()
    assert not [line for line in lines if "None" in line], lines
    assert any(line.startswith("  source dep: https://example.com/dep.tar.gz (") for line in lines)
    assert "  wheels: none (--without-wheels)" in lines
