"""sparkbuild's cmake skips a configure that would repeat the last one
(sparkbuild.compile.cmake_shim): the decision, read from files the test writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.compile.cmake_shim import (
    STAMP,
    build_dir,
    configure_key,
    is_configure,
    source_dir,
    why_configure,
)
from sparkbuild.jobplan.ninja_shim import DEPTH_VARIABLE

ARGS = ["/tree", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "csrc").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("project(x)\n")
    (root / "csrc" / "k.cu").write_text("k1\n")
    (root / "csrc" / "generate.py").write_text("print('kernels')\n")
    build = root / "build" / "temp"
    build.mkdir(parents=True)
    return root


def _configured(build: Path, key: dict[str, object]) -> None:
    (build / "CMakeCache.txt").write_text("")
    (build / "build.ninja").write_text("")
    (build / STAMP).write_text(json.dumps(key))


def _key(tree: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    return configure_key([str(tree), *ARGS[1:]], tree / "build" / "temp", "/usr/bin/cmake",
                         env or {"TORCH_CUDA_ARCH_LIST": "12.1a", "PWD": "/here"})


def test_only_a_configure_is_judged() -> None:
    assert is_configure(ARGS) and is_configure(["-S", "/t", "-B", "/b"])
    for other in (["--build", "."], ["--install", ".", "--component", "_C"],
                  ["-E", "copy", "a", "b"], ["-P", "x.cmake"], ["--version"], []):
        assert not is_configure(other)


def test_the_source_directory(tmp_path: Path) -> None:
    assert source_dir(["-S", "src", "-B", "b"], tmp_path) == tmp_path / "src"
    assert source_dir(["-Ssrc"], tmp_path) == tmp_path / "src"
    assert source_dir(["/abs/tree", "-G", "Ninja"], tmp_path) == Path("/abs/tree")
    assert source_dir(["-DX=1"], tmp_path) is None
    assert source_dir(["-G", "Ninja", "-B", "b", "/abs/tree"], tmp_path) == Path("/abs/tree")
    # vLLM runs `cmake SOURCE` in its build directory; the example passes -S and -B
    assert build_dir(["/abs/tree", "-G", "Ninja"], tmp_path) == tmp_path
    assert build_dir(["-S", "/t", "-B", "b"], tmp_path) == tmp_path / "b"


def test_the_same_configure_again_is_skipped(tree: Path) -> None:
    build = tree / "build" / "temp"
    assert why_configure(build, _key(tree)) == "no earlier configure here"
    _configured(build, _key(tree))
    (tree / "build" / "temp" / "objects.o").write_text("the build's own files do not count")
    # another shell, another terminal: the same configure
    assert why_configure(build, _key(tree, {"TORCH_CUDA_ARCH_LIST": "12.1a",
                                            "PWD": "/elsewhere", "SSH_CLIENT": "10.0.0.2",
                                            "TERM": "screen"})) is None


def test_a_changed_cuda_file_leaves_the_configure_as_it_was(tree: Path) -> None:
    build = tree / "build" / "temp"
    _configured(build, _key(tree))
    (tree / "csrc" / "k.cu").write_text("k2\n")  # ninja rebuilds it; CMake read nothing of it
    assert why_configure(build, _key(tree)) is None


@pytest.mark.parametrize(("change", "says"), [
    ("generator", "a file of the source tree that is not compiled code changed"),
    ("env", "the environment changed: TORCH_CUDA_ARCH_LIST"),
    ("args", "its args changed"),
    ("stamp", "no record of the earlier configure"),
])
def test_anything_else_configures_again(tree: Path, change: str, says: str) -> None:
    build = tree / "build" / "temp"
    _configured(build, _key(tree))
    key = _key(tree)
    if change == "generator":  # vLLM's CMake runs kernel generators (execute_process)
        (tree / "csrc" / "generate.py").write_text("print('other kernels')\n")
        key = _key(tree)
    elif change == "env":
        key = _key(tree, {"TORCH_CUDA_ARCH_LIST": "9.0a", "PWD": "/here"})
    elif change == "args":
        key = {**key, "args": [*ARGS, "-DVERBOSE=ON"]}
    else:
        (build / STAMP).write_text("not json")
    assert why_configure(build, key) == says


def test_a_search_path_listing_an_entry_again_leaves_the_configure(tree: Path) -> None:
    build = tree / "build" / "temp"
    _configured(build, _key(tree, {"PATH": "/site/bin:/usr/bin"}))
    assert why_configure(build, _key(tree, {"PATH": "/site/bin:/site/bin:/usr/bin"})) is None
    assert why_configure(build, _key(tree, {"PATH": "/usr/bin:/site/bin"})) == (
        "the environment changed: PATH")


def test_the_pool_depth_counts_by_presence_only(tree: Path) -> None:
    # doctor's depth after a measured build (13 by the rule, then 16): the ninja shim writes
    # the plan's depth into the manifest on every build, so the configure stands
    build = tree / "build" / "temp"
    _configured(build, _key(tree, {DEPTH_VARIABLE: "13"}))
    assert why_configure(build, _key(tree, {DEPTH_VARIABLE: "16"})) is None
    assert why_configure(build, _key(tree, {"PWD": "/here"})) == (
        f"the environment changed: {DEPTH_VARIABLE}")
