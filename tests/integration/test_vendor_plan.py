"""The vendor plan of trees written here, from their own CMake run by real cmake.

The recorder runs each tree under the assumption sets of
:mod:`sparkbuild.vendoring.sources` (CUDA 12.x and 13.x, every ``*_SRC_DIR`` override,
CPU builds); these tests pin what the plan must say for a vLLM-shaped tree and for the
example project, and that a cache missing any planned entry is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus.builders import write_tree
from sparkbuild.errors import CacheMissError
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.materialize import missing_entries, require_complete
from sparkbuild.vendoring.plan import plan_tree
from sparkbuild.vendoring.sources import fetch_options, record_assumptions

SHA = "ab" * 20
REPO = Path(__file__).resolve().parents[2]

VLLM_LIKE = {
    "CMakeLists.txt": """
cmake_minimum_required(VERSION 3.26)
project(demo LANGUAGES CXX)
set(VLLM_TARGET_DEVICE "cuda" CACHE STRING "target")
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
include(FetchContent)
find_package(Torch REQUIRED)
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
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  FetchContent_Declare(maybe URL https://example.invalid/maybe.tar.gz URL_HASH SHA256=@HASH@)
endif()
if(GPU_LANG STREQUAL "CUDA" OR GPU_LANG STREQUAL "HIP")
  include(cmake/external/kernels.cmake)
endif()
if(VLLM_TARGET_DEVICE STREQUAL "cpu")
  include(cmake/cpu.cmake)
endif()
""".replace("@HASH@", "cd" * 32),
    "cmake/utils.cmake": "function(helper)\n  set(IGNORED 1)\nendfunction()\n",
    "cmake/external/kernels.cmake": """
if (DEFINED ENV{KERNELS_SRC_DIR})
  FetchContent_Declare(kernels SOURCE_DIR $ENV{KERNELS_SRC_DIR})
else()
  if (VLLM_TARGET_DEVICE STREQUAL "rocm")
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


def test_recorded_runs_resolve_variables_and_take_the_cuda_branches(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    plan = plan_tree(tree, env={})
    fetching = {s.name: s for s in plan.sources}
    assert fetching["lib"].ref == "v4.7.1"
    assert fetching["lib"].certain
    assert fetching["kernels"].url == "https://example.invalid/kernels.git"
    assert fetching["deep"].method == "populate"
    assert fetching["deep"].submodules == ("third-party/a", "third-party/b")
    # Declared under the CUDA 13.x toolkit only: planned, but not certain.
    assert not fetching["maybe"].certain
    assert fetching["lib"].where == "CMakeLists.txt:21"
    assert "onednn" in {s.name for s in plan.unreached}
    runs = record_assumptions(tree, {}, None)
    assert all("lib" in run.record.fetches for run in runs if run.assumption.device == "cuda")


def test_command_line_defines_win_over_cache_defaults(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    plan = plan_tree(tree, env={"CMAKE_ARGS": "-DLIB_REVISION=v9.9.9"})
    (lib,) = [s for s in plan.sources if s.name == "lib"]
    assert lib.ref == "v9.9.9"


def test_environment_override_switches_to_the_local_copy(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    env = {"KERNELS_SRC_DIR": "/somewhere"}
    assert "kernels" not in {s.name for s in plan_tree(tree, env=env).sources}
    runs = record_assumptions(tree, env, None)
    cuda = next(run for run in runs if run.assumption.name.startswith("cuda-1"))
    kernels = [d for d in cuda.record.declarations if d.name == "kernels"]
    assert [fetch_options(d.args).get("SOURCE_DIR") for d in kernels] == [("/somewhere",)]


def test_plan_names_sources_wheels_torch_and_crates(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, VLLM_LIKE)
    plan = plan_tree(tree, env={})
    data = plan.to_dict()
    json.dumps(data)  # the --json output must serialise
    assert data["discovery"] == "cmake-recorder"
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
    assert data["notes"] == []


def test_a_tree_that_reads_torch_s_headers_is_planned_without_torch(tmp_path: Path) -> None:
    """vLLM 0.29.0's torch 2.13 hotfix takes the first of TORCH_INCLUDE_DIRS and reads a
    header from it before any FetchContent declaration: the plan has no torch (it is made
    on a build host without one) and still records every source (it recorded none)."""
    tree = write_tree(tmp_path, {"CMakeLists.txt": """
cmake_minimum_required(VERSION 3.26)
project(demo LANGUAGES CXX)
include(FetchContent)
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_GREATER_EQUAL "2.13" AND Torch_VERSION VERSION_LESS "2.14")
  list(GET TORCH_INCLUDE_DIRS 0 TORCH_INCLUDE_DIR)
  file(READ "${TORCH_INCLUDE_DIR}/torch/csrc/stable/stableivalue_conversions.h" CONTENTS)
  if(CONTENTS MATCHES "auto strptr = new std::string")
    message(FATAL_ERROR "read a header that is not there")
  endif()
endif()
FetchContent_Declare(lib GIT_REPOSITORY https://example.invalid/lib.git GIT_TAG v1.0)
FetchContent_MakeAvailable(lib)
""", "pyproject.toml": '[build-system]\nrequires = ["torch == 2.13.0"]\n'})
    plan = plan_tree(tree, env={})
    assert [(s.name, s.ref) for s in plan.sources] == [("lib", "v1.0")]
    assert plan.torch == "2.13.0" and plan.notes == ()


def test_example_project_plan() -> None:
    example = REPO / "examples" / "mini-vllm"
    plan = plan_tree(example, env={})
    (source,) = plan.sources
    assert source.name == "pybind11" and source.kind == "url"
    assert source.sha256 is not None and source.url.endswith("pybind11-3.1.0.tar.gz")
    assert "torch==2.13.0" in plan.requirements
    git = plan_tree(example, env={"CMAKE_ARGS": "-DMINI_VLLM_PYBIND11_GIT_REPOSITORY="
                                  "file:///srv/pybind11.git -DMINI_VLLM_PYBIND11_GIT_TAG=v3.1.0"})
    (source,) = git.sources
    assert (source.kind, source.url, source.ref) == ("git", "file:///srv/pybind11.git", "v3.1.0")


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
