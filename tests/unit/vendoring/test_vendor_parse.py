"""The vendor plan assembled from recorded CMake runs, and the build environment.

Records here are written as the recorder's TSV lines; nothing spawns a process (the runs
of real cmake are in tests/integration/test_vendor_plan.py and test_vendor_plan_real.py).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from corpus.builders import write_tree
from sparkbuild.compile.tree_build import BuildRequest, NinjaProgress, build_environment
from sparkbuild.errors import HashMismatchError, UsageError
from sparkbuild.recipe import load_recipe
from sparkbuild.sources.fetch import fetch_source
from sparkbuild.toolchain.cmake_recorder import (
    call_line,
    called_commands,
    cmake_files,
    parse_record,
)
from sparkbuild.vendoring.fetch_log import read_fetch_log, unplanned_sources
from sparkbuild.vendoring.materialize import Materialized
from sparkbuild.vendoring.plan import SourcePlan, VendorPlan, plan_sources_from, recorder_notes
from sparkbuild.vendoring.sources import (
    Assumption,
    Recorded,
    cmake_defines,
    fetch_options,
    override_names,
)

# -- the plan, from recorded runs ------------------------------------------------------------

TREE = Path("/t")


def _run(name: str, lines: list[str], *, device: str = "cuda", overrides: bool = False,
         markers: dict[str, str] | None = None) -> Recorded:
    assumption = Assumption(name, device=device, overrides=overrides)
    return Recorded(assumption, parse_record("\n".join([*lines, "done\t.\t.\t."])),
                    markers or {})


def _declare(name: str, args: str, where: str = "/t/CMakeLists.txt", method: str = "declare"
             ) -> str:
    return f"declare\t{name}\t{method}@{where}\t{args}"


GIT = "GIT_REPOSITORY;https://example.invalid/lib.git;GIT_TAG;v1;GIT_SUBMODULES;a;b"


def test_plan_from_records_takes_cuda_runs_overrides_and_other_devices() -> None:
    marker = "/w/overrides/LIB_SRC_DIR"
    runs = [
        _run("cuda-12.9", [_declare("lib", GIT)]),
        _run("cuda-13.0", [_declare("lib", GIT),
                           _declare("new", "URL;https://x.invalid/a.tgz;https://m.invalid/a.tgz;"
                                    "URL_HASH;SHA256=00")]),
        _run("cuda-overrides", [_declare("lib", f"SOURCE_DIR;{marker}")], overrides=True,
             markers={"LIB_SRC_DIR": marker}),
        _run("cpu-x86_64", [_declare("onednn", "GIT_REPOSITORY;https://o.invalid;GIT_TAG;v3",
                                     "/t/cmake/cpu.cmake:7"), _declare("lib", GIT)],
             device="cpu"),
    ]
    sources, unreached = plan_sources_from(runs, TREE)
    by_name = {s.name: s for s in sources}
    assert set(by_name) == {"lib", "new"}
    assert by_name["lib"].certain and not by_name["new"].certain
    assert by_name["lib"].override == "LIB_SRC_DIR"
    assert by_name["lib"].submodules == ("a", "b")
    assert by_name["lib"].override_subdir is None
    assert (by_name["new"].kind, by_name["new"].mirrors) == ("url", ("https://m.invalid/a.tgz",))
    assert by_name["new"].sha256 == "00"
    assert [(s.name, s.where) for s in unreached] == [("onednn", "cmake/cpu.cmake:7")]


def test_an_override_that_sets_the_source_dir_variable_is_found() -> None:
    """deepgemm-style: the override branch sets <name>_SOURCE_DIR, no FetchContent call."""
    marker = "/w/overrides/DEEP_SRC_DIR"
    runs = [_run("cuda-13.0", [_declare("deep", GIT, method="populate")]),
            _run("cuda-overrides", [f"variable\tdeep_SOURCE_DIR\tvalue\t{marker}"],
                 overrides=True, markers={"DEEP_SRC_DIR": marker})]
    (deep,), _ = plan_sources_from(runs, TREE)
    assert (deep.method, deep.override) == ("populate", "DEEP_SRC_DIR")


def test_a_local_copy_without_source_subdir_points_the_override_at_the_subdirectory() -> None:
    marker = "/w/overrides/K_SRC_DIR"
    runs = [_run("cuda-13.0", [_declare("k", GIT + ";SOURCE_SUBDIR;python/k")]),
            _run("cuda-overrides", [_declare("k", f"SOURCE_DIR;{marker}")], overrides=True,
                 markers={"K_SRC_DIR": marker})]
    (k,), _ = plan_sources_from(runs, TREE)
    assert (k.override, k.override_subdir) == ("K_SRC_DIR", "python/k")


def test_a_run_cut_short_is_named_in_the_notes() -> None:
    cut = Recorded(Assumption("cuda-12.9"), parse_record(_declare("lib", GIT)), {})
    assert cut.record.complete is False
    assert recorder_notes([cut]) == [
        "cuda-12.9: the tree's CMake stopped with an error in script mode; declarations "
        "after it are not in the plan"]


def test_fetch_options_split_keywords_and_values() -> None:
    options = fetch_options(("lib", "URL", "a", "b", "URL_HASH", "SHA256=0", "GIT_SHALLOW",
                             "TRUE", "SOURCE_SUBDIR", "x"))
    assert options == {"URL": ("a", "b"), "URL_HASH": ("SHA256=0",),
                       "GIT_SHALLOW": ("TRUE",), "SOURCE_SUBDIR": ("x",)}


def test_the_line_of_a_call_is_found_in_the_text(tmp_path: Path) -> None:
    cmake = tmp_path / "deps.cmake"
    cmake.write_text("if(X_SRC_DIR)\n  FetchContent_Declare(x SOURCE_DIR ${X_SRC_DIR})\n"
                     "else()\n  FetchContent_Declare(\n    x  # the (real) one\n"
                     "    GIT_REPOSITORY https://x.invalid)\nendif()\n", encoding="utf-8")
    assert call_line(cmake, "FetchContent_Declare", "x", ("GIT_REPOSITORY", "u")) == 4
    assert call_line(cmake, "FetchContent_Declare", "x", ("SOURCE_DIR", "/s")) == 2
    assert call_line(cmake, "FetchContent_Declare", "y", ()) is None


def test_override_names_are_read_from_the_trees_cmake_files(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {
        "CMakeLists.txt": "if(DEFINED ENV{A_SRC_DIR})\nendif()\ninclude(cmake/b.cmake)\n",
        "cmake/b.cmake": "set(x ${B_SRC_DIR})\n",
        "tests/c.cmake": "set(x ${C_SRC_DIR})\n",
    })
    assert override_names(tree) == ["A_SRC_DIR", "B_SRC_DIR"]


def test_cmake_args_defines_are_read_like_setup_py_passes_them() -> None:
    env = {"CMAKE_ARGS": "-DA=1 -DB:STRING=two -Wno-dev -DC="}
    assert cmake_defines(env) == {"A": "1", "B": "two", "C": ""}


# -- the build environment -------------------------------------------------------------------


def _request(tmp_path: Path, *, offline: bool, recipe_env: dict[str, str]) -> BuildRequest:
    deps = Materialized(
        env={"LIB_SRC_DIR": "/cache/lib"},
        cmake_defines={"FETCHCONTENT_SOURCE_DIR_LIB": "/cache/lib"},
        wheel_dir=tmp_path / "wheels",
    )
    return BuildRequest(tree=tmp_path / "tree", work=tmp_path, archs="12.1", jobs=3,
                        nvcc_threads=2, offline=offline, deps=deps, recipe_env=recipe_env,
                        launcher="/usr/bin/ccache")


def test_offline_build_environment(tmp_path: Path) -> None:
    env = build_environment(_request(tmp_path, offline=True,
                                     recipe_env={"CMAKE_ARGS": "-DUSER=1"}), tmp_path / "f.tsv")
    args = env["CMAKE_ARGS"].split()
    assert args[0] == "-DUSER=1"
    assert "-DFETCHCONTENT_FULLY_DISCONNECTED=ON" in args
    assert "-DFETCHCONTENT_SOURCE_DIR_LIB=/cache/lib" in args
    assert "-DCMAKE_CUDA_COMPILER_LAUNCHER=/usr/bin/ccache" in args
    assert env["LIB_SRC_DIR"] == "/cache/lib"
    assert (env["TORCH_CUDA_ARCH_LIST"], env["MAX_JOBS"], env["NVCC_THREADS"]) == ("12.1", "3", "2")
    assert env["CMAKE_GENERATOR"] == "Ninja"
    assert env["CARGO_NET_OFFLINE"] == "true" and env["SPARKBUILD_OFFLINE"] == "1"
    assert env["PIP_NO_INDEX"] == "1"
    online = build_environment(_request(tmp_path, offline=False, recipe_env={}), tmp_path / "f")
    assert "FETCHCONTENT_FULLY_DISCONNECTED" not in online["CMAKE_ARGS"]
    assert "SPARKBUILD_OFFLINE" not in online


def test_paths_with_spaces_are_refused(tmp_path: Path) -> None:
    request = _request(tmp_path, offline=True, recipe_env={})
    request.deps.cmake_defines["FETCHCONTENT_SOURCE_DIR_X"] = "/a b"
    with pytest.raises(UsageError):
        build_environment(request, tmp_path / "f.tsv")


def test_ninja_progress_counts_steps_and_compiled_units() -> None:
    seen: list[tuple[int, int]] = []
    progress = NinjaProgress(lambda done, total: seen.append((done, total)))
    for line in [
        "  -- Configuring done",
        "  [1/3] Building CUDA object CMakeFiles/_C.dir/csrc/a.cu.o",
        "  [2/3] Building CXX object CMakeFiles/_C.dir/csrc/b.cpp.o",
        "  [3/3] Linking CXX shared module _C.so",
    ]:
        progress(line)
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert progress.units == ["CMakeFiles/_C.dir/csrc/a.cu.o", "CMakeFiles/_C.dir/csrc/b.cpp.o"]


def test_fetch_log_of_the_provider_is_read(tmp_path: Path) -> None:
    log = tmp_path / "fetch.tsv"
    log.write_text("dep\tSOURCE_DIR\t/b/_deps/dep-src\tURL\thttps://a/x.tgz\thttps://b/x.tgz\t"
                   "URL_HASH\tSHA256=00\n", encoding="utf-8")
    assert read_fetch_log(log) == {"dep": {
        "SOURCE_DIR": ("/b/_deps/dep-src",), "URL": ("https://a/x.tgz", "https://b/x.tgz"),
        "URL_HASH": ("SHA256=00",)}}


def test_what_cmake_fetched_beyond_the_plan_becomes_sources_to_vendor(tmp_path: Path) -> None:
    planned = SourcePlan(name="CUTLASS", kind="git", url="https://g/cutlass", ref="v4.2.0")
    plan = VendorPlan(tmp_path, (planned,), (), (), (), None)
    recorded: dict[str, dict[str, tuple[str, ...]]] = {
        "cutlass": {"GIT_REPOSITORY": ("https://g/cutlass",)},  # planned (any case)
        "dep": {"URL": ("https://a/x.tgz", "https://b/x.tgz"), "URL_HASH": ("SHA256=00",)},
        "lib": {"GIT_REPOSITORY": ("https://g/lib",)},
        "local": {"SOURCE_DIR": ("/b/_deps/local-src",)}}  # neither git nor a URL
    assert unplanned_sources(recorded, plan) == [
        SourcePlan(name="dep", kind="url", url="https://a/x.tgz", ref=None,
                   url_hash="SHA256=00", mirrors=("https://b/x.tgz",),
                   where="recorded by CMake"),
        SourcePlan(name="lib", kind="git", url="https://g/lib", ref="HEAD",
                   where="recorded by CMake")]


def test_relative_source_of_a_recipe_is_taken_from_the_recipe_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe_file = tmp_path / "sub" / "recipe.toml"
    recipe_file.parent.mkdir()
    recipe_file.write_text('[source]\nspec = "."\n[series]\npath = "series"\n', encoding="utf-8")
    recipe = load_recipe(recipe_file)
    monkeypatch.chdir(tmp_path)  # not the recipe's directory
    result = fetch_source(recipe.source.spec, tmp_path / "work", recipe=recipe)
    assert result.url == str(recipe_file.parent.resolve())
    assert (result.tree / "recipe.toml").is_file()


def test_a_relative_sdist_of_a_recipe_keeps_its_sha256_pin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # wheel and bundle pass the recipe's spec as written: had they made the path absolute
    # first, it would no longer be the recipe's own source and its pin would not apply.
    recipe_dir = tmp_path / "r"
    (recipe_dir / "pkg-1.0").mkdir(parents=True)
    (recipe_dir / "pkg-1.0" / "setup.py").write_text("x\n")
    with tarfile.open(recipe_dir / "pkg-1.0.tar.gz", "w:gz") as tar:
        tar.add(recipe_dir / "pkg-1.0", arcname="pkg-1.0")
    (recipe_dir / "recipe.toml").write_text(
        f'[source]\nspec = "pkg-1.0.tar.gz"\nsha256 = "{"0" * 64}"\n[series]\npath = "s"\n',
        encoding="utf-8")
    recipe = load_recipe(recipe_dir / "recipe.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HashMismatchError, match=r"expected 0{64}"):
        fetch_source(recipe.source.spec, tmp_path / "work", recipe=recipe)


def test_cmake_files_follow_linked_directories_once(tmp_path: Path) -> None:
    # check's unpatched copy links whole directories into the scratch tree.
    real = tmp_path / "scratch" / "cmake"
    real.mkdir(parents=True)
    (real / "dep.cmake").write_text("dep_command()\n")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "CMakeLists.txt").write_text("include(cmake/dep.cmake)\n")
    (mirror / "cmake").symlink_to(real)
    (real / "loop").symlink_to(mirror)  # a cycle is walked once
    assert sorted(p.relative_to(mirror).as_posix() for p in cmake_files(mirror)) == [
        "CMakeLists.txt", "cmake/dep.cmake"]
    assert "dep_command" in called_commands(mirror)
