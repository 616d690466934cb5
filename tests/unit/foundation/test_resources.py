"""sparkbuild.resources: the checkout's tree in a checkout, the wheel's copy when installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkbuild import resources
from sparkbuild.checks.selftest import find_csrc
from sparkbuild.compile.tree_build import PROVIDER
from sparkbuild.patches.edits.e2m1_routing import E2m1RoutingEdit
from sparkbuild.patches.series import EditPatch, load_series
from sparkbuild.recipe import DEFAULT_RECIPE, REPO_ROOT, load_recipe
from sparkbuild.toolchain.archs import ARCH_EVAL_SCRIPT

CHECKOUT = Path(__file__).resolve().parents[3]


def test_running_from_the_checkout_uses_the_checkout() -> None:
    assert resources.resource_root() == CHECKOUT
    assert resources.checkout_root() == CHECKOUT
    assert resources.recipes_dir() == CHECKOUT / "recipes"
    assert resources.patches_dir() == CHECKOUT / "patches"
    assert resources.build_tools_dir() == CHECKOUT / "build_tools"
    assert resources.csrc_dir() == CHECKOUT / "csrc"


def test_module_lookups_resolve_to_the_checkout_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKBUILD_CSRC", raising=False)
    assert REPO_ROOT == CHECKOUT
    assert DEFAULT_RECIPE == CHECKOUT / "recipes" / "qwen38next.toml"
    assert ARCH_EVAL_SCRIPT == CHECKOUT / "build_tools" / "arch_eval.cmake"
    assert PROVIDER == CHECKOUT / "build_tools" / "sparkbuild_provider.cmake"
    assert find_csrc() == CHECKOUT / "csrc"
    for path in (DEFAULT_RECIPE, ARCH_EVAL_SCRIPT, PROVIDER, find_csrc() / "e2m1.cuh"):
        assert path.is_file(), path


def _package(root: Path, *parts: str) -> Path:
    package = root.joinpath(*parts, "sparkbuild")
    package.mkdir(parents=True)
    return package


def test_a_checkout_is_src_beside_a_patch_series(tmp_path: Path) -> None:
    package = _package(tmp_path, "src")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# empty\n", encoding="utf-8")
    assert resources.find_resource_root(package) == tmp_path


def test_an_installed_package_uses_its_resources_dir(tmp_path: Path) -> None:
    package = _package(tmp_path, "lib", "python3.11", "site-packages")
    # A patches/series higher up must not count: the package is not under src/.
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# empty\n", encoding="utf-8")
    assert resources.checkout_root(package) is None
    assert resources.find_resource_root(package) == package / "_resources"


def test_src_without_a_patch_series_is_not_a_checkout(tmp_path: Path) -> None:
    package = _package(tmp_path, "src")
    assert resources.checkout_root(package) is None
    assert resources.find_resource_root(package) == package / "_resources"


def test_the_mirrored_tree_keeps_the_relative_references(tmp_path: Path) -> None:
    """recipe -> ../patches/series and patch -> ../csrc/e2m1.cuh hold inside _resources."""
    package = _package(tmp_path, "site-packages")
    root = resources.find_resource_root(package)
    for name in ("recipes", "patches", "csrc"):
        shutil.copytree(CHECKOUT / name, root / name)
    recipe = load_recipe(root / "recipes" / DEFAULT_RECIPE.name)
    assert recipe.series == (root / "patches" / "series").resolve()
    headers = [
        patch.edit.header
        for patch in load_series(recipe.series).patches
        if isinstance(patch, EditPatch) and isinstance(patch.edit, E2m1RoutingEdit)
    ]
    assert headers == [(root / "csrc" / "e2m1.cuh").resolve()]
    assert headers[0].is_file()
