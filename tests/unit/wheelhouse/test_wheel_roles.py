"""Which wheels verify judges as built, and at which archs: decided from the files of a
wheelhouse ``wheel`` wrote (the fake index of test_wheelhouse_layout), whatever its
manifest is edited to say; the target's types and the wheels' sizes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.errors import VerifyError
from sparkbuild.wheelhouse.manifest import load_manifest, target_shape_problem
from sparkbuild.wheelhouse.verify import verify_files
from sparkbuild.wheelhouse.wheel_roles import built_wheels, label_archs, label_form
from unit.wheelhouse.test_wheelhouse_layout import PIN_FILE, FakeOutside, build

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@pytest.fixture
def out(tmp_path: Path) -> Path:
    wheelhouse = tmp_path / "wheelhouse"
    build(tmp_path, wheelhouse, FakeOutside())
    return wheelhouse


def built_name(out: Path) -> str:
    (built,) = out.glob("demo-1.0+*.whl")
    return built.name


def edited(out: Path, change: Callable[[dict[str, Any]], None]) -> dict[str, str]:
    """The problems verify_files names once the manifest is changed (nothing resealed: the
    manifest is the root of the hashes)."""
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    return {m.file: m.problem for m in verify_files(out).mismatches}


def entry(manifest: dict[str, Any], file: str) -> dict[str, Any]:
    (found,) = [w for w in manifest["wheels"] if w["file"] == file]
    return found  # type: ignore[no-any-return]


@pytest.mark.parametrize(("version", "archs"), [
    ("1.0+sm121a.0123abcd", ("12.1a",)),
    ("0.6.18+cu130.sm121a.sm120f.89abcdef", ("12.1a", "12.0f")),
    ("0.11.0+sm90a.0123abcd", ("9.0a",)),
    ("2.9.0+cu130", ()),  # the pytorch index's label is not sparkbuild's
    ("1.0", ()),
    ("1.0+sm121a.xyz", ()),
])
def test_label_archs(version: str, archs: tuple[str, ...]) -> None:
    assert label_archs(version) == archs
    assert all(label_form(a) in version for a in archs)


def test_a_written_wheelhouse_judges_its_built_wheel_and_no_pin(out: Path) -> None:
    checked = verify_files(out)
    assert checked.mismatches == []
    assert checked.built == (built_name(out),)
    assert checked.targets == ("12.1a",)


@pytest.mark.parametrize("role", ["pin", "closure"])
def test_a_built_wheel_called_a_pin_is_named_and_still_built(out: Path, role: str) -> None:
    name = built_name(out)
    problems = edited(out, lambda m: entry(m, name).update(role=role))
    assert problems[name].startswith(f"manifest.json calls it a {role} wheel, but its version")
    assert "it holds sparkbuild's SBOM (sboms/sbom.cdx.json)" in problems[name]
    assert "it is the recipe's package demo" in problems[name]
    assert verify_files(out).built == (name,)


def test_every_fact_alone_says_built(out: Path, tmp_path: Path) -> None:
    """With the manifest stripped of the label, the libraries and the package, the SBOM in the
    wheel still says what it is; and the manifest's libraries alone say it of a pin."""
    name = built_name(out)

    def strip(manifest: dict[str, Any]) -> None:
        entry(manifest, name)["role"] = "pin"
        manifest.update(local_label="", recipe={"name": "demo", "package": "other"},
                        libraries=[])

    manifest = json.loads((out / "manifest.json").read_text())
    strip(manifest)
    facts = built_wheels(out, manifest, {name}, {name})
    # the version's label is read from the file name itself, whatever local_label says
    assert "carries the build's label" in facts.problems[0][1]
    assert "sparkbuild's SBOM" in facts.problems[0][1]
    assert "recipe's package" not in facts.problems[0][1]
    listed = {**manifest, "libraries": [{"wheel": PIN_FILE, "library": "x.so"}]}
    pinned = built_wheels(out, listed, {name, PIN_FILE}, set())
    assert PIN_FILE in pinned.files
    assert dict(pinned.problems)[PIN_FILE].endswith(
        "but manifest.json's libraries list its machine code: a wheel this build made, "
        "judged as built")


def test_a_wheel_without_a_role_is_judged_as_built(out: Path) -> None:
    problems = edited(out, lambda m: entry(m, PIN_FILE).pop("role"))
    assert problems[PIN_FILE] == ("manifest.json gives it the role None, not one of built, "
                                  "pin, closure: judged as built")
    assert PIN_FILE in verify_files(out).built


@pytest.mark.parametrize(("change", "said", "judged"), [
    (lambda m: m["target"].update(cuda_archs=[]), "its target names no CUDA arch", ("12.1a",)),
    (lambda m: m.pop("target"), "has no target", ("12.1a",)),
    (lambda m: m["target"].update(cuda_archs=["9.0a"]),
     "its target archs 9.0a are not the build's 12.1a (build.archs)", ("9.0a", "12.1a")),
])
def test_the_target_is_checked_against_the_build_and_the_label(
        out: Path, change: Callable[[dict[str, Any]], None], said: str,
        judged: tuple[str, ...]) -> None:
    problems = edited(out, change)
    assert said in problems["manifest.json"]
    assert verify_files(out).targets == judged


def test_a_target_other_than_the_label_is_named_on_the_wheel(out: Path) -> None:
    name = built_name(out)

    def change(manifest: dict[str, Any]) -> None:
        manifest["target"]["cuda_archs"] = manifest["build"]["archs"] = ["12.0f"]

    problems = edited(out, change)
    assert problems[name] == "its version's label names 12.1a, the manifest's target 12.0f"
    assert "manifest.json" not in problems


@pytest.mark.parametrize(("target", "said"), [
    ([1], "`target` must be an object, not a list"),
    ("12.1a", "`target` must be an object, not a string"),
    ({"cuda_archs": "12.1a"}, "target.cuda_archs must be a list of strings, not \"12.1a\""),
    ({"cuda_archs": [1]}, "target.cuda_archs must be a list of strings, not [1]"),
    ({"cuda_archs": ["12.1a"], "python": 3.12}, "target.python must be a str, not a number"),
    ({"cuda_archs": ["12.1a"], "allow_jit": "yes"},
     "target.allow_jit must be a bool, not a string"),
])
def test_a_target_of_the_wrong_shape_is_named(out: Path, target: object, said: str) -> None:
    assert target_shape_problem({"target": target}) == said
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["target"] = target
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match=r"manifest\.json: ") as refused:
        load_manifest(out)
    assert said in refused.value.what


def test_a_recorded_size_is_the_files(out: Path) -> None:
    name = built_name(out)
    actual = (out / name).stat().st_size
    problems = edited(out, lambda m: entry(m, name).update(size=actual + 1))
    assert problems[name] == f"its size is {actual} bytes, manifest.json records {actual + 1}"
    manifest = json.loads((out / "manifest.json").read_text())
    entry(manifest, name)["size"] = True
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match="gives its size as true, not a number of bytes"):
        load_manifest(out)
