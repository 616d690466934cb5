"""A main job in parts: each part written and read back, the refusals, and the join."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.errors import DestinationError, HashMismatchError, UsageError, VerifyError
from sparkbuild.recipe import BuildSettings, FlashinferSettings, Recipe, SourcePin, Target
from sparkbuild.wheelhouse.manifest import MANIFEST_NAME
from sparkbuild.wheelhouse.parts import (
    PART_FILE,
    JoinOptions,
    check_part_name,
    check_parts,
    join_parts,
    new_part,
    read_part,
    write_part,
)
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse
from support.wheels import zipped_wheel

if TYPE_CHECKING:
    from pathlib import Path

SOURCE = {"kind": "git", "url": "file:///src/demo.git", "ref": "main", "commit": "c" * 40}
PATCHES = [{"name": "cmake-sm121-archs", "sha256": "a" * 64, "status": "applied"}]
TOOLCHAIN: dict[str, str | None] = {"nvcc": "13.0.48", "cmake": "3.31.1", "gcc": "14.2.0",
                                    "torch": "2.13.0", "python": "3.11.7"}
AOT = {"version": "0.6.18", "modules": ["silu_and_mul"], "size": 10, "sources": 1,
       "seconds": 30.0, "wheel": "/w/one.whl", "log": "/w/log", "units": [{"s": 1}]}
SETTINGS: dict[str, Any] = {
    "archs": ["12.1a"], "jobs": 4, "pool": None, "units": [{"path": "a.cu"}],
    "environment": {"TORCH_CUDA_ARCH_LIST": "12.1a", "MAX_JOBS": "4"}, "flashinfer_aot": None}


def wheel_bytes(name: str, version: str) -> bytes:
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    return zipped_wheel({f"{name.replace('-', '_')}/__init__.py": f"# {name}\n",
                         f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                         f"Version: {version}\n",
                         f"{dist}/WHEEL": "Wheel-Version: 1.0\nTag: py3-none-any\n"})


def _recipe(tmp_path: Path, text: str = "name = 'demo'\n", aot: bool = True) -> Recipe:
    (tmp_path / "demo.toml").write_text(text)
    return Recipe(path=tmp_path / "demo.toml", name="demo", source=SourcePin("."),
                  series=tmp_path / "series", target=Target(), build=BuildSettings(), pins=(),
                  package="demo", flashinfer=FlashinferSettings(aot=aot))


def _wheels(tmp_path: Path) -> dict[str, Path]:
    built = tmp_path / "built"
    built.mkdir(parents=True, exist_ok=True)
    found = {}
    for part, name in (("vllm", "demo"), ("flashinfer", "flashinfer-jit-cache")):
        path = built / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
        path.write_bytes(wheel_bytes(name, "1.0"))
        found[part] = path
    return found


def _facts(settings: dict[str, Any]) -> dict[str, Any]:
    return {"source": SOURCE, "patches": PATCHES, "build_settings": settings, "vendored": [],
            "offline": False, "closure": False, "platform": None}


def _parts(tmp_path: Path, recipe: Recipe) -> list[Path]:
    wheels = _wheels(tmp_path)
    vllm = write_part(tmp_path / "part-vllm", new_part("vllm", recipe, None, TOOLCHAIN,
                                                       _facts(SETTINGS)), [wheels["vllm"]])
    flashinfer = write_part(tmp_path / "part-fi", new_part(
        "flashinfer", recipe, None, TOOLCHAIN, {"flashinfer_aot": AOT}), [wheels["flashinfer"]])
    return [vllm.part.directory, flashinfer.part.directory]


def test_a_part_is_read_back_with_its_wheels_rehashed(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    directory = _parts(tmp_path, recipe)[0]
    part = read_part(directory)
    assert part.name == "vllm" and part.facts["build_settings"] == SETTINGS
    assert [w["file"] for w in part.wheels] == ["demo-1.0-py3-none-any.whl"]
    assert sorted(p.name for p in directory.iterdir()) == ["demo-1.0-py3-none-any.whl", PART_FILE]
    (directory / "demo-1.0-py3-none-any.whl").write_bytes(b"other bytes")
    with pytest.raises(HashMismatchError, match="not the one built"):
        read_part(directory)


def test_a_part_json_that_is_missing_or_not_a_parts_is_refused(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    directory = _parts(tmp_path, recipe)[0]
    data = json.loads((directory / PART_FILE).read_text())
    for change, words in (({"part": "torch"}, "not one of"), ({"schema": 9}, "schema"),
                          ({"wheels": [{"file": "../x.whl", "sha256": "0"}]}, "names no wheel"),
                          ({"facts": {}}, "facts lack source")):
        (directory / PART_FILE).write_text(json.dumps({**data, **change}))
        with pytest.raises(VerifyError, match=words):
            read_part(directory)
    (directory / PART_FILE).unlink()
    with pytest.raises(VerifyError, match=r"part\.json is missing"):
        read_part(directory)


def test_a_part_is_not_written_over_what_is_no_part(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(DestinationError, match="not a part"):
        write_part(tmp_path / "busy", new_part("vllm", recipe, None, TOOLCHAIN, _facts({})),
                   [_wheels(tmp_path)["vllm"]])
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_missing_twice_another_recipe_bundle_or_toolchain_are_refused_by_name(
        tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    vllm, flashinfer = (read_part(d) for d in _parts(tmp_path, recipe))
    assert set(check_parts([vllm, flashinfer], recipe, None)) == {"vllm", "flashinfer"}
    with pytest.raises(UsageError, match="the part flashinfer is missing"):
        check_parts([vllm], recipe, None)
    with pytest.raises(UsageError, match="the part vllm is given twice"):
        check_parts([vllm, vllm, flashinfer], recipe, None)
    (tmp_path / "other").mkdir()
    other = _recipe(tmp_path / "other", text="name = 'demo'\n# changed\n")
    with pytest.raises(UsageError, match="built from another recipe"):
        check_parts([vllm, flashinfer], other, None)
    with pytest.raises(UsageError, match="the join's is " + "b" * 16):
        check_parts([vllm, flashinfer], recipe, "b" * 64)
    changed = dataclasses.replace(flashinfer, toolchain={**TOOLCHAIN, "nvcc": "12.9.1"})
    with pytest.raises(UsageError, match=r"different toolchains: nvcc 13\.0\.48 and 12\.9\.1"):
        check_parts([vllm, changed], recipe, None)


def test_a_part_the_recipe_has_not_is_refused(tmp_path: Path) -> None:
    check_part_name("vllm", _recipe(tmp_path, aot=False))
    with pytest.raises(UsageError, match="no part 'flashinfer'"):
        check_part_name("flashinfer", _recipe(tmp_path, aot=False))
    with pytest.raises(UsageError, match="the parts are vllm, flashinfer"):
        check_part_name("torch", _recipe(tmp_path))


def test_the_joined_wheelhouse_has_the_one_job_fingerprint(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    joined = join_parts(JoinOptions(parts=tuple(_parts(tmp_path, recipe)),
                                    out=tmp_path / "joined", recipe=recipe,
                                    cache=tmp_path / "cache"))
    assert joined.error is None, joined.summary()
    manifest = json.loads((tmp_path / "joined" / MANIFEST_NAME).read_text())
    assert manifest["build"]["flashinfer_aot"] == AOT
    assert sorted(w["name"] for w in manifest["wheels"]) == ["demo", "flashinfer-jit-cache"]
    # the one job: other measures and another plan, the same wheels and records
    wheels = _wheels(tmp_path / "one")
    one_settings = copy.deepcopy(SETTINGS)
    one_settings.update(jobs=2, units=[{"path": "a.cu", "seconds": 9.0}],
                        flashinfer_aot={**AOT, "seconds": 99.0, "wheel": "/x/y.whl"})
    one_settings["environment"]["MAX_JOBS"] = "2"
    write_wheelhouse(tmp_path / "one-job", WheelhouseInputs(
        recipe=recipe, source=SOURCE, patches=PATCHES,
        built_wheels=[wheels["vllm"], wheels["flashinfer"]], build_settings=one_settings,
        cache_root=tmp_path / "cache", offline=False, platform=None, toolchain=TOOLCHAIN,
        closure=False))
    one = verify_wheelhouse(tmp_path / "one-job", target_tags=False)
    assert (tmp_path / "one-job" / MANIFEST_NAME).read_bytes() != \
        (tmp_path / "joined" / MANIFEST_NAME).read_bytes()
    assert one.fingerprint == joined.fingerprint != ""
    assert f"  wheelhouse fingerprint: {joined.fingerprint}" in joined.summary()


def test_a_join_without_a_part_writes_nothing(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    first = _parts(tmp_path, recipe)[0]
    with pytest.raises(UsageError, match="missing"):
        join_parts(JoinOptions(parts=(first,), out=tmp_path / "joined", recipe=recipe,
                               cache=tmp_path / "cache"))
    assert not (tmp_path / "joined").exists()
