"""Lock files: platforms, the hashed format, requirements of a tree, pins (no processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import (
    HashMismatchError,
    PinRefusedError,
    RecipeError,
    ToolchainError,
    UsageError,
    VerifyError,
)
from sparkbuild.recipe import BuildSettings, Pin, Recipe, SourcePin, Target, TreeRequirements
from sparkbuild.sources.declared import declared_requirements
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
    uv_platform,
)

if TYPE_CHECKING:
    from pathlib import Path

def tree_requirements(tree: Path) -> list[str]:
    """What lock resolves for a tree: the requirement lines it declares."""
    return [line.text for line in declared_requirements(tree)]


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
    merged = apply_pins(["torch==2.14.0", "flashinfer_python==0.7.2.post1"], [PIN])
    assert merged == ["torch==2.14.0", "flashinfer-python==0.6.18"]
    with pytest.raises(PinRefusedError, match="NVFP4 MoE fallback"):
        apply_pins([], [Pin("flashinfer-python", "0.6.17")])


def test_a_hashed_pin_allows_its_one_file() -> None:
    resolved = [LockedRequirement("flashinfer-python", "0.6.18", ("e" * 64, "d" * 64))]
    assert restrict_to_pins(resolved, [PIN])[0].hashes == ("d" * 64,)
    with pytest.raises(HashMismatchError, match="pinned sha256"):
        restrict_to_pins([LockedRequirement("flashinfer-python", "0.6.18", ("e" * 64,))], [PIN])


def _tree_and_fake_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                           ) -> dict[str, object]:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "requirements.txt").write_text(
        "flashinfer-python==0.7.2.post1\nsix\n")
    seen: dict[str, object] = {}

    def fake_resolve(requirements: list[str], overrides: list[str], *,
                     target: ClosureTarget, index: str) -> list[LockedRequirement]:
        seen.update(requirements=requirements, overrides=overrides, target=target)
        return [LockedRequirement("six", "1.17.0", ("f" * 64,)),
                LockedRequirement("flashinfer-python", "0.6.18", ("e" * 64, "d" * 64))]

    monkeypatch.setattr(lockfile, "resolve_closure", fake_resolve)
    return seen


def _recipe(tmp_path: Path, *pins: Pin) -> Recipe:
    return Recipe(path=tmp_path / "r.toml", name="r", source=SourcePin("."),
                  series=tmp_path / "s", target=Target(), build=BuildSettings(), pins=pins)


def test_a_pin_contradicting_the_tree_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _tree_and_fake_resolve(tmp_path, monkeypatch)
    with pytest.raises(PinRefusedError) as refused:
        lock_closure(_recipe(tmp_path, PIN), platform="manylinux_2_39_aarch64",
                     python="3.12", out=tmp_path / "out", tree=tmp_path / "tree")
    what = refused.value.what
    assert "flashinfer-python==0.6.18" in what and "flashinfer-python==0.7.2.post1" in what
    assert "requirements.txt:1" in what and 'override = "REASON"' in str(refused.value.hint)
    assert seen == {} and not (tmp_path / "out").exists()  # refused before resolving


def test_an_override_pin_locks_and_the_header_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _tree_and_fake_resolve(tmp_path, monkeypatch)
    pin = Pin("flashinfer-python", "0.6.18", "d" * 64, override="GB10 runs 0.6.18")
    agreeing = Pin("six", "1.17.0")  # agrees with the tree: an ordinary requirement
    result = lock_closure(_recipe(tmp_path, pin, agreeing), platform="manylinux_2_39_aarch64",
                          python="3.12", out=tmp_path / "out", tree=tmp_path / "tree")
    assert seen["requirements"] == ["flashinfer-python==0.6.18", "six==1.17.0"]
    assert seen["overrides"] == ["flashinfer-python==0.6.18"]  # only the override pin
    assert seen["target"] == ClosureTarget("manylinux_2_39_aarch64", "3.12")
    text = (tmp_path / "out" / "requirements.lock").read_text()
    locked = parse_lock(text, where="x")
    assert [(r.name, r.hashes) for r in locked] == [("flashinfer-python", ("d" * 64,)),
                                                    ("six", ("f" * 64,))]
    assert "# override: flashinfer-python==0.6.18 (reason: GB10 runs 0.6.18)\n" in text
    assert "#   replaces: vllm (requirements.txt:1) requires flashinfer-python==0.7.2.post1" in text
    (override,) = result.to_dict()["overrides"]
    assert override["pin"] == "flashinfer-python==0.6.18"
    assert override["replaced"][0]["requirement"] == "flashinfer-python==0.7.2.post1"
    assert any("OVERRIDE flashinfer-python==0.6.18" in line for line in result.summary())
    with pytest.raises(UsageError, match=r"3\.12\.1"):
        lock_closure(_recipe(tmp_path, pin), platform="manylinux_2_39_aarch64",
                     python="3.12.1", out=tmp_path, tree=tmp_path / "tree")


def test_a_requirement_for_another_machine_does_not_contradict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Markers are the Spark's (aarch64, 3.12), not this machine's."""
    seen = _tree_and_fake_resolve(tmp_path, monkeypatch)
    (tmp_path / "tree" / "requirements.txt").write_text(
        "flashinfer-python==0.7.2.post1; platform_machine == 'x86_64'\n"
        "flashinfer-python==0.6.18; python_version >= '3.12'\nsix\n")
    result = lock_closure(_recipe(tmp_path, PIN), platform="manylinux_2_39_aarch64",
                          python="3.12", out=tmp_path / "out", tree=tmp_path / "tree")
    assert result.overrides == [] and seen["overrides"] == []
    with pytest.raises(PinRefusedError, match=r"0\.7\.2\.post1"):
        lock_closure(_recipe(tmp_path, PIN), platform="manylinux_2_39_x86_64",
                     python="3.12", out=tmp_path / "out", tree=tmp_path / "tree")


def test_a_locked_known_bad_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "requirements.txt").write_text("flashinfer-python>=0.6\n")

    def resolves_to_the_bad_one(requirements: list[str], overrides: list[str], *,
                                target: ClosureTarget, index: str) -> list[LockedRequirement]:
        return [LockedRequirement("flashinfer_python", "0.6.17", ("a" * 64,))]

    monkeypatch.setattr(lockfile, "resolve_closure", resolves_to_the_bad_one)
    with pytest.raises(PinRefusedError, match=r"locked requirement flashinfer_python==0\.6\.17: "
                       "crashes the NVFP4 MoE fallback kernel"):
        lock_closure(_recipe(tmp_path), platform="manylinux_2_39_aarch64", python="3.12",
                     out=tmp_path / "out", tree=tmp_path / "tree")
    assert not (tmp_path / "out" / "requirements.lock").exists()


def test_what_the_branch_recorded_is_compared_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe's lock file says what the fetched branch asked for: a pin must agree."""
    _tree_and_fake_resolve(tmp_path, monkeypatch)
    (tmp_path / "tree" / "requirements.txt").write_text("six\n")
    recipe = _recipe(tmp_path, PIN)
    recipe.record_commit("c" * 40)
    recipe.record_tree_requirements(TreeRequirements(
        "c" * 40, "requirements/cuda.txt", {"flashinfer-python": ("flashinfer-python==0.7.0",)}))
    with pytest.raises(PinRefusedError, match=r"vllm at cccccccccccc \(requirements/cuda.txt\) "
                       r"requires flashinfer-python==0\.7\.0"):
        lock_closure(recipe, platform="manylinux_2_39_aarch64", python="3.12",
                     out=tmp_path / "out", tree=tmp_path / "tree")
    recipe.record_commit("d" * 40)  # the branch moved: the old record no longer applies
    assert recipe.tree_requirements() is None
    lock_closure(recipe, platform="manylinux_2_39_aarch64", python="3.12",
                 out=tmp_path / "out", tree=tmp_path / "tree")


@pytest.mark.parametrize(("printed", "refused"), [
    ("uv 0.13.9 (x86_64-unknown-linux-gnu)\n", False),
    ("uv 0.14.0 (x86_64-unknown-linux-gnu)\n", True),
    ("not uv at all\n", True),
])
def test_uv_is_the_pinned_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  printed: str, refused: bool) -> None:
    from sparkbuild.proc import ProcResult

    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n")
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setattr(lockfile, "run", lambda cmd, **_: ProcResult(0, printed, None, 0.0))
    lockfile.uv_version.cache_clear()
    try:
        if refused:
            with pytest.raises(ToolchainError, match=r"sparkbuild runs uv 0\.13\.9"):
                lockfile.find_uv()
        else:
            assert lockfile.find_uv() == uv
    finally:
        lockfile.uv_version.cache_clear()
