"""The CMake reader, the vendor plan, cache completeness and the build environment.

Every tree here is written by the test; nothing spawns a process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the corpus package

from corpus.builders import write_tree
from sparkbuild.build.cmake_reader.conditions import Condition, Token, Unknown
from sparkbuild.build.cmake_reader.scan import parse_cmake, scan_tree
from sparkbuild.build.compile import BuildRequest, NinjaProgress, build_environment, read_fetch_log
from sparkbuild.build.materialize import Materialized, missing_entries, require_complete
from sparkbuild.build.vendor import cmake_defines, plan_tree
from sparkbuild.errors import CacheMissError, UsageError
from sparkbuild.pipeline import resolve_spec
from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache

SHA = "ab" * 20


# -- the lexer -------------------------------------------------------------------------------


def test_lexer_reads_quoted_bracket_and_unquoted_arguments() -> None:
    text = (
        '#[[ a bracket\ncomment ]] set(A "x y" [=[raw ${NOT}]=] plain) # trailing\n'
        'message(STATUS "line one \\\ncontinued")\n'
        "if((A AND B) OR C)\n"
    )
    commands = parse_cmake(text)
    assert [c.name for c in commands] == ["set", "message", "if"]
    first = commands[0]
    assert [a.text for a in first.args] == ["A", "x y", "raw ${NOT}", "plain"]
    assert [a.quoted for a in first.args] == [False, True, True, False]
    assert first.args[2].bracket
    assert commands[1].args[1].text == "line one continued"
    assert commands[2].line == 5  # the bracket comment and the continuation span lines
    assert [a.text for a in commands[2].args] == ["(", "A", "AND", "B", ")", "OR", "C"]


def test_lexer_keeps_variable_references_with_spaces_inside_one_argument() -> None:
    (command,) = parse_cmake('set(X ${CMAKE_CURRENT_LIST_DIR}/a$ENV{HOME}b)')
    assert [a.text for a in command.args] == ["X", "${CMAKE_CURRENT_LIST_DIR}/a$ENV{HOME}b"]


# -- conditions ------------------------------------------------------------------------------


class _Vars:
    def __init__(self, values: dict[str, str], env: dict[str, str] | None = None) -> None:
        self.values = values
        self.environment = env or {}
        self.tree = Path("/nonexistent-tree")

    def value(self, name: str) -> str | None:
        if name in self.values:
            return self.values[name]
        if name.endswith("_SRC_DIR"):
            return None
        raise Unknown(name)

    def env(self, name: str) -> str | None:
        return self.environment.get(name)


def _decide(words: str, values: dict[str, str], env: dict[str, str] | None = None) -> bool | None:
    tokens = [Token(w.strip('"'), w.startswith('"')) for w in words.split()]
    return Condition(tokens, _Vars(values, env)).evaluate()


@pytest.mark.parametrize(
    ("words", "values", "expected"),
    [
        ('LANG STREQUAL "CUDA"', {"LANG": "CUDA"}, True),
        ('LANG STREQUAL "CUDA"', {"LANG": "HIP"}, False),
        ('LANG STREQUAL "CUDA"', {}, None),  # not known here: both branches stay possible
        ("V VERSION_GREATER_EQUAL 12.8", {"V": "13.0"}, True),
        ("V VERSION_GREATER_EQUAL 12.8", {"V": "12.4.1"}, False),
        ("NOT FOO_SRC_DIR", {}, True),  # an override sparkbuild has not set
        ("UNKNOWN AND FALSE", {}, False),  # Kleene logic: decided without UNKNOWN
        ("UNKNOWN OR ON", {}, True),
        ("NOT UNKNOWN", {}, None),
        ("DEFINED ENV{X_SRC_DIR}", {}, False),
        ("A IN_LIST L", {"A": "b", "L": "a;b;c"}, True),
        ('"x86_64" MATCHES "x86|amd64"', {}, True),
    ],
)
def test_conditions_are_three_valued(
    words: str, values: dict[str, str], expected: bool | None
) -> None:
    assert _decide(words, values) is expected


def test_defined_env_reads_the_given_environment() -> None:
    assert _decide("DEFINED ENV{X_SRC_DIR}", {}, {"X_SRC_DIR": "/src"}) is True


# -- the evaluator ---------------------------------------------------------------------------

VLLM_LIKE = {
    "CMakeLists.txt": """
cmake_minimum_required(VERSION 3.26)
project(demo LANGUAGES CXX)
set(TARGET_DEVICE "cuda" CACHE STRING "target")
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
include(FetchContent)
if (NOT HIP_FOUND AND CUDA_FOUND)
  set(GPU_LANG "CUDA")
elseif(HIP_FOUND)
  set(GPU_LANG "HIP")
endif()
set(LIB_REVISION "v4.7.1" CACHE STRING "pinned")
if(GPU_LANG STREQUAL "CUDA")
  if (DEFINED ENV{LIB_SRC_DIR})
    set(LIB_SRC_DIR $ENV{LIB_SRC_DIR})
  endif()
  if(LIB_SRC_DIR)
    FetchContent_Declare(lib SOURCE_DIR ${LIB_SRC_DIR})
  else()
    FetchContent_Declare(
        lib
        GIT_REPOSITORY https://example.invalid/lib.git
        # a comment between arguments
        GIT_TAG ${LIB_REVISION}
        GIT_SHALLOW TRUE)
  endif()
  FetchContent_MakeAvailable(lib)
endif()
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  FetchContent_Declare(maybe URL https://example.invalid/maybe.tar.gz URL_HASH SHA256=@HASH@)
endif()
if(GPU_LANG STREQUAL "CUDA" OR GPU_LANG STREQUAL "HIP")
  include(cmake/external/kernels.cmake)
endif()
if(TARGET_DEVICE STREQUAL "cpu")
  include(cmake/cpu.cmake)
endif()
""".replace("@HASH@", "cd" * 32),
    "cmake/utils.cmake": "function(helper)\n  set(IGNORED 1)\nendfunction()\n",
    "cmake/external/kernels.cmake": """
if (DEFINED ENV{KERNELS_SRC_DIR})
  FetchContent_Declare(kernels SOURCE_DIR $ENV{KERNELS_SRC_DIR})
else()
  if (TARGET_DEVICE STREQUAL "rocm")
    set(KERNELS_GIT "https://example.invalid/rocm-fork.git")
  else()
    set(KERNELS_GIT "https://example.invalid/kernels.git")
  endif()
  FetchContent_Declare(kernels GIT_REPOSITORY ${KERNELS_GIT} GIT_TAG v3.5.1
                       SOURCE_SUBDIR python/kernels/kernels)
endif()
FetchContent_MakeAvailable(kernels)
set(_root "${FETCHCONTENT_BASE_DIR}")
if(DEEP_SRC_DIR)
  set(deep_SOURCE_DIR "${DEEP_SRC_DIR}")
else()
  FetchContent_Populate(deep SOURCE_DIR "${_root}/deep-src"
    GIT_REPOSITORY "https://example.invalid/deep.git" GIT_TAG "@SHA@"
    GIT_SUBMODULES "third-party/a" "third-party/b")
endif()
""".replace("@SHA@", SHA),
    "cmake/cpu.cmake": (
        "FetchContent_Declare(onednn GIT_REPOSITORY https://example.invalid/onednn.git"
        " GIT_TAG v3.9)\n"
    ),
    "pyproject.toml": """
[build-system]
requires = ["cmake>=3.26.1", "ninja", "torch == 2.14.0", "setuptools>=77,<81"]
build-backend = "setuptools.build_meta"
""",
    "requirements/build/cuda.txt": (
        "# comment\ncmake>=3.26.1\ntorch==2.14.0\njinja2>=3.1.6  # why\n"
        "windows-only; sys_platform == 'win32'\n"
    ),
    "requirements/build/rocm.txt": "torch==2.12.0+rocm7.14.0\n",
    "rust/Cargo.lock": """
version = 4
[[package]]
name = "local"
version = "0.1.0"
[[package]]
name = "serde"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "00"
[[package]]
name = "anyhow"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
""",
    "rust-toolchain.toml": '[toolchain]\nchannel = "1.95"\n',
}


def test_scan_resolves_variables_and_takes_the_cuda_branches(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    state = scan_tree(tree, defines={"CUDA_FOUND": "TRUE", "HIP_FOUND": "FALSE"})
    fetching = {d.name: d for d in state.declarations if d.reached and (
        d.first("GIT_REPOSITORY") or d.first("URL"))}
    assert fetching["lib"].first("GIT_TAG") == "v4.7.1"
    assert fetching["lib"].certain
    assert fetching["kernels"].first("GIT_REPOSITORY") == "https://example.invalid/kernels.git"
    assert fetching["deep"].method == "populate"
    assert fetching["deep"].options["GIT_SUBMODULES"] == ("third-party/a", "third-party/b")
    # The compiler version is not known to a reader: the branch may or may not run.
    assert not fetching["maybe"].certain
    unreached = {d.name for d in state.declarations if not d.reached}
    assert "onednn" in unreached
    assert "lib" in state.made_available


def test_command_line_defines_win_over_cache_defaults(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    state = scan_tree(tree, defines={"CUDA_FOUND": "TRUE", "HIP_FOUND": "FALSE",
                                     "LIB_REVISION": "v9.9.9"})
    (lib,) = [d for d in state.declarations if d.name == "lib" and d.first("GIT_TAG")]
    assert lib.first("GIT_TAG") == "v9.9.9"


def test_environment_override_switches_to_the_local_copy(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    state = scan_tree(tree, defines={"CUDA_FOUND": "TRUE", "HIP_FOUND": "FALSE"},
                      env={"KERNELS_SRC_DIR": "/somewhere"})
    kernels = [d for d in state.declarations if d.name == "kernels" and d.reached]
    assert [d.first("SOURCE_DIR") for d in kernels] == ["/somewhere"]


# -- the plan --------------------------------------------------------------------------------


def test_plan_names_sources_wheels_torch_and_crates(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    plan = plan_tree(tree, env={})
    data = plan.to_dict()
    json.dumps(data)  # the --json output must serialise
    by_name = {s["name"]: s for s in data["sources"]}
    assert (by_name["lib"]["url"], by_name["lib"]["ref"]) == (
        "https://example.invalid/lib.git", "v4.7.1")
    assert by_name["lib"]["override"] == "LIB_SRC_DIR"
    assert by_name["deep"]["override"] == "DEEP_SRC_DIR"
    assert by_name["deep"]["submodules"] == ["third-party/a", "third-party/b"]
    assert by_name["kernels"]["override"] == "KERNELS_SRC_DIR"
    assert by_name["maybe"]["url_hash"] == "SHA256=" + "cd" * 32
    assert "https://example.invalid/rocm-fork.git" not in json.dumps(data["sources"])
    kernels = next(s for s in plan.sources if s.name == "kernels")
    # The local-copy declaration has no SOURCE_SUBDIR: the override names the subdirectory.
    assert kernels.override_subdir == "python/kernels/kernels"
    requirements = [w["requirement"] for w in data["wheels"]]
    assert "torch==2.14.0" in requirements
    assert "jinja2>=3.1.6" in requirements
    assert not any("rocm" in r or "windows" in r for r in requirements)
    assert data["torch"] == "2.14.0"
    assert data["crates"] == 2
    assert data["cargo"][0]["toolchain"] == "1.95"
    assert [s["name"] for s in data["unreached"]] == ["onednn"]


def test_cmake_args_defines_are_read_like_setup_py_passes_them() -> None:
    env = {"CMAKE_ARGS": "-DA=1 -DB:STRING=two -Wno-dev -DC="}
    assert cmake_defines(env) == {"A": "1", "B": "two", "C": ""}


def test_example_project_plan(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "mini-vllm"
    plan = plan_tree(example, env={})
    (source,) = plan.sources
    assert source.name == "pybind11" and source.kind == "url"
    assert source.sha256 is not None and source.url.endswith("pybind11-3.1.0.tar.gz")
    assert "torch==2.13.0" in plan.requirements
    git = plan_tree(example, env={"CMAKE_ARGS": "-DMINI_VLLM_PYBIND11_GIT_REPOSITORY="
                                  "file:///srv/pybind11.git -DMINI_VLLM_PYBIND11_GIT_TAG=v3.1.0"})
    (source,) = git.sources
    assert (source.kind, source.url, source.ref) == ("git", "file:///srv/pybind11.git", "v3.1.0")


# -- completeness of the cache ---------------------------------------------------------------


def test_missing_entries_are_each_named(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", VLLM_LIKE)
    plan = plan_tree(tree, env={})
    cache = Cache(tmp_path / "cache")
    missing = missing_entries(plan, cache)
    names = {(m.kind, m.name) for m in missing}
    assert ("source", "lib") in names and ("source", "kernels") in names
    assert ("wheels", "build requirements") in names
    assert ("crates", "rust/Cargo.lock") in names
    with pytest.raises(CacheMissError) as caught:
        require_complete(plan, cache)
    assert "lib" in caught.value.what and "v4.7.1" in caught.value.what

    lib = next(s for s in plan.sources if s.name == "lib")
    digest = cache.put_bytes(b"not really a tarball")
    cache.record("sources", lib.key, {"sha256": digest, "kind": "git"})
    assert ("source", "lib") not in {(m.kind, m.name) for m in missing_entries(plan, cache)}
    cache.remove(digest)  # the index entry alone does not count
    assert ("source", "lib") in {(m.kind, m.name) for m in missing_entries(plan, cache)}


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


def test_relative_source_of_a_recipe_is_taken_from_the_recipe_directory(tmp_path: Path) -> None:
    recipe_file = tmp_path / "sub" / "recipe.toml"
    recipe_file.parent.mkdir()
    recipe_file.write_text('[source]\nspec = "."\n[series]\npath = "series"\n', encoding="utf-8")
    recipe = load_recipe(recipe_file)
    assert resolve_spec(".", recipe) == str(recipe_file.parent.resolve())
    assert resolve_spec("pypi:vllm==0.33.0", recipe) == "pypi:vllm==0.33.0"
    assert resolve_spec("/abs/x.tar.gz#sha256=00", recipe) == "/abs/x.tar.gz#sha256=00"
