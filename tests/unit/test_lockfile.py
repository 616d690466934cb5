"""Lock files: platforms, the hashed format, requirements of a tree, pins (no processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import (
    HashMismatchError,
    PinRefusedError,
    RecipeError,
    UsageError,
    VerifyError,
)
from sparkbuild.recipe import BuildSettings, Pin, Recipe, SourcePin, Target
from sparkbuild.wheelhouse import lock as lockfile
from sparkbuild.wheelhouse.lock import (
    ClosureTarget,
    LockedRequirement,
    apply_pins,
    lock_closure,
    parse_lock,
    pip_platforms,
    render_lock,
    restrict_to_pins,
    tree_requirements,
    uv_platform,
)

if TYPE_CHECKING:
    from pathlib import Path

PIN = Pin("flashinfer-python", "0.6.18", "d" * 64)


def test_platform_expansions() -> None:
    tags = pip_platforms("manylinux_2_39_aarch64")
    assert tags[0] == "manylinux_2_39_aarch64" and "manylinux_2_17_aarch64" in tags
    assert tags[-1] == "manylinux2014_aarch64" and not any("manylinux1" in t for t in tags)
    x86 = pip_platforms("manylinux2014_x86_64")
    assert x86[-3:] == ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]
    assert uv_platform("manylinux_2_39_aarch64") == "aarch64-manylinux_2_39"
    assert uv_platform("manylinux_2_30_x86_64") == "x86_64-manylinux_2_28"
    with pytest.raises(UsageError, match="win_amd64"):
        pip_platforms("win_amd64")
    with pytest.raises(UsageError):
        uv_platform("manylinux_2_12_x86_64")


def test_lock_round_trip_and_every_line_hashed() -> None:
    locked = [LockedRequirement("torch", "2.14.0", ("a" * 64, "b" * 64)), pin_locked()]
    text = render_lock(locked, ["a comment"])
    assert text.startswith("# a comment\nflashinfer-python==0.6.18 \\\n")
    assert parse_lock(text, where="x") == sorted(locked, key=lambda r: r.key)
    with pytest.raises(VerifyError, match="lock:2"):
        parse_lock("six==1.17.0 --hash=sha256:" + "c" * 64 + "\nnumpy==2.0\n", where="lock")


def pin_locked() -> LockedRequirement:
    return LockedRequirement("flashinfer-python", "0.6.18", ("d" * 64,))


def test_tree_requirements_follow_includes_and_keep_markers(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements"
    requirements.mkdir()
    (requirements / "common.txt").write_text(
        "regex # fast\n\nsix>=1.16.0; python_version > '3.11'\n--extra-index-url https://x\n")
    (requirements / "cuda.txt").write_text(
        "-r common.txt\ntorch==2.14.0 \\\n  ; platform_system == 'Linux'\n"
        "flashinfer-python==0.7.2.post1\n")
    assert tree_requirements(tmp_path) == [
        "regex", "six>=1.16.0; python_version > '3.11'",
        "torch==2.14.0    ; platform_system == 'Linux'", "flashinfer-python==0.7.2.post1"]
    (requirements / "common.txt").write_text("not a requirement!!\n")
    with pytest.raises(RecipeError, match=r"common.txt:1"):
        tree_requirements(tmp_path)


def test_tree_requirements_from_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname="x"\ndependencies=["six"]\n')
    assert tree_requirements(tmp_path) == ["six"]
    (tmp_path / "pyproject.toml").write_text('[project]\nname="x"\ndynamic=["dependencies"]\n')
    with pytest.raises(RecipeError, match="dynamic"):
        tree_requirements(tmp_path)
    (tmp_path / "pyproject.toml").unlink()
    with pytest.raises(RecipeError, match="no runtime requirements"):
        tree_requirements(tmp_path)


def test_pins_replace_the_trees_requirement_and_bad_pins_are_refused() -> None:
    merged, replaced = apply_pins(["torch==2.14.0", "flashinfer_python==0.7.2.post1"], [PIN])
    assert merged == ["torch==2.14.0", "flashinfer-python==0.6.18"]
    assert replaced == ["flashinfer_python==0.7.2.post1"]
    with pytest.raises(PinRefusedError, match="NVFP4 MoE fallback"):
        apply_pins([], [Pin("flashinfer-python", "0.6.17")])


def test_a_hashed_pin_allows_its_one_file() -> None:
    resolved = [LockedRequirement("flashinfer-python", "0.6.18", ("e" * 64, "d" * 64))]
    assert restrict_to_pins(resolved, [PIN])[0].hashes == ("d" * 64,)
    with pytest.raises(HashMismatchError, match="pinned sha256"):
        restrict_to_pins([LockedRequirement("flashinfer-python", "0.6.18", ("e" * 64,))], [PIN])


def test_lock_closure_from_a_tree_writes_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "requirements.txt").write_text("flashinfer-python==0.7.2.post1\nsix\n")
    seen: dict[str, object] = {}

    def fake_resolve(requirements: list[str], overrides: list[str], *,
                     target: ClosureTarget, index: str) -> list[LockedRequirement]:
        seen.update(requirements=requirements, overrides=overrides, target=target)
        return [LockedRequirement("six", "1.17.0", ("f" * 64,)),
                LockedRequirement("flashinfer-python", "0.6.18", ("e" * 64, "d" * 64))]

    monkeypatch.setattr(lockfile, "resolve_closure", fake_resolve)
    recipe = Recipe(path=tmp_path / "r.toml", name="r", source=SourcePin("."),
                    series=tmp_path / "s", target=Target(), build=BuildSettings(), pins=(PIN,))
    result = lock_closure(recipe, platform="manylinux_2_39_aarch64", python="3.12",
                          out=tmp_path / "out", tree=tmp_path / "tree")
    assert seen["requirements"] == ["six", "flashinfer-python==0.6.18"]
    assert seen["overrides"] == ["flashinfer-python==0.6.18"]
    assert seen["target"] == ClosureTarget("manylinux_2_39_aarch64", "3.12")
    locked = parse_lock((tmp_path / "out" / "requirements.lock").read_text(), where="x")
    assert [(r.name, r.hashes) for r in locked] == [("flashinfer-python", ("d" * 64,)),
                                                    ("six", ("f" * 64,))]
    assert "recipe pin replaced: flashinfer-python==0.7.2.post1" in result.summary()[-1]
    with pytest.raises(UsageError, match=r"3\.12\.1"):
        lock_closure(recipe, platform="manylinux_2_39_aarch64", python="3.12.1",
                     out=tmp_path, tree=tmp_path / "tree")
