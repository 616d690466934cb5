"""The series' arch edit on vendored dependencies: a generated project and a generated
dependency, served over ``file://``.

The dependency ``org/flashlike`` is shaped like vllm-flash-attn: its own, older
``cmake/utils.cmake`` (no suffix rules), ``CUDA_SUPPORTED_ARCHS`` grown by ``list(APPEND)``
per CUDA branch (cut to ``12.0`` at 12.1a) and ``FA2_ARCHS "8.0+PTX"`` (PTX only at 12.1a).
``org/plainlib`` has no CUDA list at all.  The project fetches both with FetchContent at
upstream-looking URLs; a mirror rule brings them from local bare repositories.
Vendoring with the recipe (the real arch edit, patches/cmake-sm121-archs.toml) stores the
dependency patched, under a key that says so; an unpatched copy of the same commit in the
cache is not served in its place; the materialized source, ``patch status --cache --json``
and the record carry the lists before and after.  Nothing names flash-attention: the
mechanism is the arch edit's.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from sparkbuild.cli import main
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.fetch import fetch_plan, vendor_for_recipe
from sparkbuild.vendoring.index import source_entry
from sparkbuild.vendoring.materialize import materialize, missing_entries
from sparkbuild.vendoring.plan import VendorResult
from support import git
from support.flashlike import DEPENDENCY, OLD_HELPER

MIRROR_RULE = "https://github.com/=file://{root}/git/"
PROJECT = """\
cmake_minimum_required(VERSION 3.20)
project(genproj LANGUAGES CXX)
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0;12.0")
cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(MARLIN_ARCHS "8.0+PTX" "${CUDA_ARCHS}")
include(FetchContent)
FetchContent_Declare(flashlike GIT_REPOSITORY https://github.com/org/flashlike.git GIT_TAG v1)
FetchContent_Declare(plainlib GIT_REPOSITORY https://github.com/org/plainlib.git GIT_TAG v1)
FetchContent_MakeAvailable(flashlike plainlib)
"""


def _publish(work: Path, files: dict[str, str], bare: Path) -> str:
    work.mkdir(parents=True)
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "v1", cwd=work)
    git("tag", "v1", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=work.parent)
    return git("rev-parse", "v1^{commit}", cwd=work)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deps")
    _publish(root / "w" / "flashlike", {"CMakeLists.txt": DEPENDENCY,
                                        "cmake/utils.cmake": OLD_HELPER,
                                        "csrc/fa2.cu": "// kernels\n"},
             root / "git" / "org" / "flashlike.git")
    _publish(root / "w" / "plainlib", {"CMakeLists.txt": "project(plainlib)\n",
                                       "include/p.h": "// p\n"},
             root / "git" / "org" / "plainlib.git")
    tree = root / "tree"
    (tree / "cmake").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(PROJECT)
    (tree / "cmake" / "utils.cmake").write_text(
        (REPO_ROOT / "examples" / "mini-vllm" / "cmake" / "utils.cmake").read_text())
    # The real arch edit alone (the other patches of the series need vLLM's sources).
    series = root / "series"
    series.mkdir()
    edit = (REPO_ROOT / "patches" / "cmake-sm121-archs.toml").read_bytes()
    (series / "cmake-sm121-archs.toml").write_bytes(edit)
    (series / "series").write_text(
        f"cmake-sm121-archs.toml sha256={hashlib.sha256(edit).hexdigest()}\n")
    (root / "recipe.toml").write_text(f"""[recipe]
name = "genproj"
package = "genproj"
[source]
spec = "{tree}"
[series]
path = "{series / 'series'}"
[target]
cuda_archs = ["12.1a"]
""")
    return root


def _vendor(root: Path, cache: Path, *, offline: bool = False) -> VendorResult:
    recipe = load_recipe(root / "recipe.toml")
    return vendor_for_recipe(root / "tree", Cache(cache), recipe,
                             mirrors=[MIRROR_RULE.format(root=root)], offline=offline,
                             wheels=False)


def _file(cache: Cache, entry: dict[str, object], name: str) -> str:
    with tarfile.open(cache.path_of(str(entry["sha256"]))) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


def test_the_dependency_is_vendored_patched_under_a_key_that_says_so(made: Path) -> None:
    cache_dir = made / "cache"
    vendored = _vendor(made, cache_dir)
    sources = {s.name: s for s in vendored.plan.sources}
    assert set(sources) == {"flashlike", "plainlib"}
    flash = sources["flashlike"]
    assert flash.key.startswith("git:https://github.com/org/flashlike.git@v1#series:")
    cache = Cache(cache_dir)
    entry = source_entry(cache, flash)
    assert entry is not None and entry["url"] == "https://github.com/org/flashlike.git"
    (outcome,) = entry["patched"]["patches"]
    assert (outcome["patch"], outcome["status"]) == ("cmake-sm121-archs", "applied")
    assert outcome["files"] == ["CMakeLists.txt"]
    rows = {row["variable"]: row for row in outcome["details"]["lists"]}
    assert (rows["FA2_ARCHS"]["before"], rows["FA2_ARCHS"]["after"]) == (["8.0+PTX"], ["12.1a"])
    assert [r["before"] for r in outcome["details"]["cuda_archs"]] == [["12.0"]]
    assert [r["after"] for r in outcome["details"]["cuda_archs"]] == [["12.1"]]
    cmake = _file(cache, entry, "CMakeLists.txt")
    assert 'FA2_ARCHS "8.0+PTX;12.1a"' in cmake
    assert '"10.0" "11.0" "12.0;12.1")' in cmake
    assert 'FA3_ARCHS "9.0a;"' in cmake  # gives the target nothing: left alone
    plain = source_entry(cache, sources["plainlib"])
    assert plain is not None
    assert [p["status"] for p in plain["patched"]["patches"]] == ["unchanged"]


def test_an_unpatched_copy_is_never_served_for_the_patched_one(made: Path) -> None:
    cache_dir = made / "cache-unpatched-first"
    recipe_plan = _vendor(made, cache_dir, offline=True).plan
    # `sparkbuild vendor --tree` (no recipe, no series) fills the cache first: upstream keys.
    from dataclasses import replace

    unpatched = replace(recipe_plan, sources=tuple(replace(s, patched=None)
                                                   for s in recipe_plan.sources))
    from sparkbuild.sources.mirrors import Mirrors

    fetch_plan(unpatched, cache_dir, wheels=False,
               mirrors=Mirrors.parse([MIRROR_RULE.format(root=made)]))
    missing = missing_entries(recipe_plan, Cache(cache_dir))
    assert [m.name for m in missing] == ["flashlike", "plainlib"]
    assert "with the series' arch edit" in missing[0].detail
    vendored = _vendor(made, cache_dir)
    assert {e.name: e.status for e in vendored.entries} == {"flashlike": "fetched",
                                                            "plainlib": "fetched"}
    deps = materialize(vendored.plan, Cache(cache_dir), made / "work")
    assert 'FA2_ARCHS "8.0+PTX;12.1a"' in (deps.sources["flashlike"] / "CMakeLists.txt").read_text()
    define = deps.cmake_defines["FETCHCONTENT_SOURCE_DIR_FLASHLIKE"]
    assert Path(define) == deps.sources["flashlike"]


def test_patch_status_reports_each_dependency_before_and_after(
        made: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _vendor(made, made / "cache")
    code = main(["patch", "status", str(made / "tree"), "--recipe", str(made / "recipe.toml"),
                 "--cache", str(made / "cache"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    deps = {d["name"]: d for d in report["dependencies"]}
    assert deps["flashlike"]["status"] == "applied"
    assert deps["plainlib"]["status"] == "unchanged"
    rows = deps["flashlike"]["patched"]["patches"][0]["details"]["lists"]
    fa2 = next(r for r in rows if r["variable"] == "FA2_ARCHS")
    assert (fa2["source"], fa2["source_after"]) == ("8.0+PTX", "8.0+PTX;12.1a")
    # The tree itself: its PTX-only Marlin list is what the series gives 12.1a.
    lists = report["patches"][0]["details"]["lists"]
    marlin = next(r for r in lists if r["variable"] == "MARLIN_ARCHS")
    assert (marlin["before"], marlin["after"]) == (["8.0+PTX"], ["12.1a"])
