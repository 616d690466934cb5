"""A kept tree's CMake cache, configured with another CUDA compiler, is removed first."""

from __future__ import annotations

from pathlib import Path

from sparkbuild.compile.stale_cmake import cuda_compiler_for, drop_stale_caches, stale_caches


def _nvcc(root: Path) -> Path:
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return nvcc


def _configured(tree: Path, compiler: Path | str) -> Path:
    build = tree / "build" / "temp.linux-x86_64-cpython-312"
    (build / "CMakeFiles").mkdir(parents=True)
    (build / "build.ninja").write_text("# objects stay\n")
    cache = build / "CMakeCache.txt"
    cache.write_text(f"CMAKE_BUILD_TYPE:STRING=RelWithDebInfo\n"
                     f"CMAKE_CUDA_COMPILER:FILEPATH={compiler}\n")
    return cache


def test_a_cache_of_another_compiler_is_removed_with_its_cmakefiles(tmp_path: Path) -> None:
    old, new = _nvcc(tmp_path / "cudaroot"), _nvcc(tmp_path / "cuda")
    cache = _configured(tmp_path / "tree", old)
    assert drop_stale_caches(tmp_path / "tree", new) == [(cache, str(old))]
    assert not cache.exists() and not (cache.parent / "CMakeFiles").exists()
    assert (cache.parent / "build.ninja").is_file()


def test_a_cache_of_this_compiler_is_kept(tmp_path: Path) -> None:
    nvcc = _nvcc(tmp_path / "cuda")
    link = tmp_path / "cuda-13"
    link.symlink_to(tmp_path / "cuda")
    _configured(tmp_path / "tree", link / "bin" / "nvcc")  # the same file by another path
    assert stale_caches(tmp_path / "tree", nvcc) == []


def test_a_cache_of_a_compiler_that_is_gone_is_stale(tmp_path: Path) -> None:
    cache = _configured(tmp_path / "tree", tmp_path / "gone" / "bin" / "nvcc")
    gone = str(tmp_path / "gone" / "bin" / "nvcc")
    assert stale_caches(tmp_path / "tree", _nvcc(tmp_path / "cuda")) == [(cache, gone)]


def test_the_compiler_is_cuda_home_s_then_the_path_s(tmp_path: Path) -> None:
    nvcc = _nvcc(tmp_path / "cuda")
    assert cuda_compiler_for({"CUDA_HOME": "/opt/cuda"}) == Path("/opt/cuda/bin/nvcc")
    assert cuda_compiler_for({"PATH": str(nvcc.parent)}) == nvcc
    assert cuda_compiler_for({"CUDACXX": "/opt/other/nvcc", "PATH": str(nvcc.parent)}) == nvcc
    assert cuda_compiler_for({"PATH": str(tmp_path / "none")}) == Path("/usr/local/cuda/bin/nvcc")
