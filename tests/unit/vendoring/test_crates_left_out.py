"""``[vendor] crates = false``: a build host without crates.io leaves a tree's Cargo crates
out (vLLM 0.29.0's 625, for its optional Rust frontend), said in the plan, never silent."""

from __future__ import annotations

from pathlib import Path

from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.build_deps import CratePlan
from sparkbuild.vendoring.materialize import missing_entries
from sparkbuild.vendoring.plan import VendorPlan, VendorResult, adjust_plan

RUST = CratePlan("rust/src/cmd/Cargo.lock", "0" * 64, 625)


def _plan(tmp_path: Path) -> VendorPlan:
    return VendorPlan(tmp_path, sources=(), unreached=(), wheels=(), crates=(RUST,), torch=None)


def test_the_crates_stay_in_the_plan_unless_the_recipe_leaves_them_out(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert adjust_plan(plan).crates == (RUST,)
    left = adjust_plan(plan, crates=False)
    assert left.crates == () and left.crate_count == 0
    assert left.crates_left_out == (RUST,)
    assert left.to_dict()["crates"] == 0
    assert left.to_dict()["crates_left_out"] == [
        {"lockfile": "rust/src/cmd/Cargo.lock", "crates": 625, "toolchain": None}]
    lines = VendorResult(left, tmp_path / "cache", plan_only=True).summary()
    assert "crates left out by the recipe (no Rust extensions built): 625 of " \
           "rust/src/cmd/Cargo.lock" in lines


def test_an_offline_build_needs_the_crates_only_when_the_plan_keeps_them(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    plan = _plan(tmp_path)
    assert [m.kind for m in missing_entries(plan, cache)] == ["crates"]
    assert missing_entries(adjust_plan(plan, crates=False), cache) == []


def test_the_recipe_says_it(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    base = '[source]\nspec = "."\n[series]\npath = "s"\n'
    path.write_text(base)
    assert load_recipe(path).vendor.crates is True
    path.write_text(base + "[vendor]\ncrates = false\n")
    assert load_recipe(path).vendor.crates is False
