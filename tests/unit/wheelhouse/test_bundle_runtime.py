"""What a bundle carries for the wheelhouse, judged without the network: which pins and
closure wheels an offline wheelhouse would lack (named before anything compiles), and the
bundled closure placed in place of a resolution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.errors import CacheMissError
from sparkbuild.recipe import Pin
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.plan import SourcePlan
from sparkbuild.wheelhouse.closure import bundle_lacks, place_bundled, runtime_gaps
from sparkbuild.wheelhouse.lock import ClosureTarget

if TYPE_CHECKING:
    from pathlib import Path

TARGET = ClosureTarget("manylinux_2_39_aarch64", "3.12")


def _wheel(cache: Cache, tmp_path: Path, filename: str) -> dict[str, Any]:
    path = tmp_path / filename
    path.write_bytes(filename.encode())
    digest = cache.put_file(path)
    name, version = filename.split("-")[:2]
    return {"file": filename, "name": name, "version": version, "sha256": digest}


def test_markers_are_judged_for_the_target() -> None:
    requirements = ["numpy>=2", "pywin32; sys_platform == 'win32'",
                    "uvloop; platform_machine == 'aarch64'", "tomli; python_version < '3.11'"]
    assert bundle_lacks(requirements, {"numpy"}, TARGET) == [
        "uvloop; platform_machine == 'aarch64'"]


def test_a_pin_not_in_the_cache_is_a_gap(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    pin = Pin("iniconfig", "2.3.0", "ab" * 32)
    gaps = runtime_gaps([pin], cache, {"closure": "included", "files": [], "platform": None,
                                       "python": None}, [], closure=True, skip=set())
    assert gaps == ["pin iniconfig==2.3.0: not in the cache nor in the bundle"]
    item = _wheel(cache, tmp_path, "iniconfig-2.3.0-py3-none-any.whl")
    cache.record("pins", "iniconfig==2.3.0", {"url": "u", "filename": item["file"],
                                              "sha256": item["sha256"]})
    assert runtime_gaps([Pin("iniconfig", "2.3.0")], cache, None, [], closure=True,
                        skip=set()) == []
    # A cached file of another hash than the pinned one does not count.
    assert runtime_gaps([pin], cache, None, [], closure=True, skip=set())


def test_the_closure_must_cover_the_trees_requirements(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    runtime = {"closure": "included", "platform": TARGET.platform, "python": TARGET.python,
               "files": [_wheel(cache, tmp_path, "numpy-2.0.0-cp312-none-any.whl")]}
    requirements = ["numpy", "regex", "mini-vllm"]
    gaps = runtime_gaps([], cache, runtime, requirements, closure=True, skip={"mini-vllm"})
    assert gaps == ["closure regex: the bundle carries no wheel of it"]
    assert runtime_gaps([], cache, runtime, requirements, closure=False, skip=set()) == []
    left_out = {**runtime, "closure": "left out (--no-closure)"}
    assert runtime_gaps([], cache, left_out, requirements, closure=True, skip=set()) == []


def test_place_bundled_copies_the_closure_and_names_what_it_lacks(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    bundled = [_wheel(cache, tmp_path, "numpy-2.0.0-cp312-none-any.whl"),
               _wheel(cache, tmp_path, "iniconfig-2.3.0-py3-none-any.whl")]
    staging = tmp_path / "staging"
    staging.mkdir()
    placed = place_bundled(bundled, ["numpy"], {"iniconfig"}, cache, staging, TARGET)
    assert [(f.file, f.role) for f in placed] == [("numpy-2.0.0-cp312-none-any.whl", "closure")]
    assert (staging / "numpy-2.0.0-cp312-none-any.whl").is_file()
    with pytest.raises(CacheMissError, match="lacks regex"):
        place_bundled(bundled, ["numpy", "regex"], set(), cache, staging, TARGET)


def test_a_patched_source_has_its_own_cache_key() -> None:
    source = SourcePlan(name="fa", kind="git", url="https://x/fa.git", ref="v1")
    patched = SourcePlan(name="fa", kind="git", url="https://x/fa.git", ref="v1",
                         patched="0123abcd")
    assert source.key == patched.upstream_key == "git:https://x/fa.git@v1"
    assert patched.key == "git:https://x/fa.git@v1#series:0123abcd"
    assert patched.to_dict()["patched"] == "0123abcd"
