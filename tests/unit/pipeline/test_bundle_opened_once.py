"""``wheel --bundle`` reads and hashes the bundle's bytes once per run: for its recipe, its
tree and cache entries, and the runtime it carries.  The run is stopped at the pins, after
every step that reads the bundle; no process runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild import cli
from sparkbuild.bundle import read
from sparkbuild.bundle.write import assemble
from sparkbuild.errors import SparkbuildError
from sparkbuild.patches.prepare import PrepareResult
from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.store.hashing import sha256_file
from sparkbuild.vendoring.plan import VendorPlan

if TYPE_CHECKING:
    from pathlib import Path


class StoppedAtThePins(SparkbuildError):
    exit_code = 9


def _bundle(tmp_path: Path) -> Path:
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "series").write_text("# empty\n")
    recipe = origin / "r.toml"
    recipe.write_text('[recipe]\nname = "r"\n[source]\nspec = "."\n[series]\npath = "series"\n')
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "setup.py").write_text("")
    out = tmp_path / "b.tar.xz"
    assemble(recipe=load_recipe(recipe), tree=tree, prepared={"patches": []},
             plan=VendorPlan(tree, (), (), (), (), None), cache=Cache(tmp_path / "made"),
             out=out, with_wheels=False)
    return out


def test_wheel_bundle_hashes_the_bundle_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = _bundle(tmp_path)
    hashed: list[Path] = []

    def counting(path: Path, **kwargs: bool) -> str:
        if path == bundle:
            hashed.append(path)
        return sha256_file(path, **kwargs)

    def prepared(unpacked: read.UnpackedBundle, recipe: object, dest: Path) -> PrepareResult:
        return PrepareResult(dest, None, None, 0.0)  # type: ignore[arg-type]

    reached: list[str] = []

    def stop(*args: object) -> None:
        reached.append("pins")
        raise StoppedAtThePins("stopped at the pins")

    monkeypatch.setattr(read, "sha256_file", counting)
    monkeypatch.setattr(read, "prepared_from_bundle", prepared)
    monkeypatch.setattr("sparkbuild.checks.start_imports.refuse_left_out_at_start",
                        lambda *args, **kwargs: None)
    monkeypatch.setattr("sparkbuild.wheelhouse.lock.refuse_contradicted_pins", stop)
    code = cli.main(["wheel", "--bundle", str(bundle), "--cache", str(tmp_path / "cache"),
                     "--out", str(tmp_path / "wheelhouse")])
    assert (code, reached) == (StoppedAtThePins.exit_code, ["pins"])
    assert hashed == [bundle]
