"""Headers and the link without a driver: where each header and libcuda come from, and a
missing one named before anything compiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.errors import ToolchainError
from sparkbuild.flashinfer import build_env
from sparkbuild.flashinfer.build_env import (
    choose_libcuda,
    driver_symbols,
    find_headers,
    include_roots,
    link_environment,
    missing_headers_error,
    stub_source,
    toolkit_root,
)
from support.flashinfer_toolkit import make_toolkit

CUDA_H = """
#define cuMemAlloc                          cuMemAlloc_v2
#define cuCtxCreate                         cuCtxCreate_v4
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI
  cuGetErrorString(CUresult error, const char **pStr);
"""


def test_the_stub_defines_every_driver_function_under_every_name() -> None:
    symbols = driver_symbols(CUDA_H)
    assert symbols == ["cuCtxCreate_v4", "cuGetErrorString", "cuInit", "cuMemAlloc",
                       "cuMemAlloc_v2"]
    assert "void cuMemAlloc_v2(void) {}" in stub_source(symbols)


def test_headers_come_from_the_first_place_that_has_them(tmp_path: Path) -> None:
    toolkit = make_toolkit(tmp_path / "cuda", headers=("cublasLt.h",))
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "include").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "include" / "curand_kernel.h").write_text("")
    (site / "nvidia" / "cu13" / "include" / "cublasLt.h").write_text("")
    roots = include_roots(toolkit, [site], tmp_path / "builder")
    dirs, found, missing = find_headers(("cublas", "curand"), roots)
    assert missing == [] and dirs == [toolkit / "include", site / "nvidia/cu13/include"]
    assert found["cublasLt.h"].startswith("the toolkit")
    assert found["curand_kernel.h"].startswith("the build environment's NVIDIA wheels")


def test_a_missing_header_is_named_with_where_it_was_looked_for(tmp_path: Path) -> None:
    toolkit = make_toolkit(tmp_path / "cuda", headers=())
    roots = include_roots(toolkit, [], tmp_path / "builder")
    _, _, missing = find_headers(("curand",), roots)
    error = missing_headers_error(missing, roots)
    assert "curand_kernel.h" in error.what and "nothing was compiled" in error.what
    assert str(toolkit / "include") in (error.where or "")
    assert "nvidia-curand==" in (error.hint or "")


def test_libcuda_is_the_toolkits_stub_then_a_drivers(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    toolkit = make_toolkit(tmp_path / "cuda")
    found = choose_libcuda(toolkit, tmp_path / "stub")
    assert found is not None and found.kind == "toolkit stub"
    bare = make_toolkit(tmp_path / "bare", stub=False)
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_bytes(b"\x7fELF")
    assert build_env.driver_library((str(driver),)) == driver / "libcuda.so.1"
    monkeypatch.setattr(build_env, "driver_library", lambda: driver / "libcuda.so.1")
    found = choose_libcuda(bare, tmp_path / "stub")
    assert found is not None and found.kind == "driver"
    monkeypatch.setattr(build_env, "driver_library", lambda: None)
    assert choose_libcuda(bare, tmp_path / "stub", make=False) is None


def test_without_cuda_h_no_stub_can_be_made(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_env, "driver_library", lambda: None)
    bare = tmp_path / "bare"
    (bare / "include").mkdir(parents=True)
    with pytest.raises(ToolchainError, match=r"no cuda\.h to make one"):
        choose_libcuda(bare, tmp_path / "stub")


def test_the_link_directory_holds_libcuda_and_the_unversioned_libraries(
        tmp_path: Path) -> None:
    toolkit = make_toolkit(tmp_path / "cuda")
    link = link_environment(cuda_home=toolkit, python=tmp_path / "venv" / "bin" / "python",
                            builder_site=tmp_path / "site", work=tmp_path / "work",
                            needed_headers=("cublas", "curand"),
                            needed_libraries=("nvrtc",))
    names = sorted(p.name for p in link.link_dir.iterdir())
    assert names == ["libcublas.so", "libcublasLt.so", "libcuda.so", "libnvrtc.so"]
    assert (link.link_dir / "libnvrtc.so").resolve() == toolkit / "lib64" / "libnvrtc.so.13"
    env = link.env()
    assert env["FLASHINFER_EXTRA_LDFLAGS"].endswith(f"-L{link.link_dir}")
    assert str(toolkit / "include") in env["CPATH"]
    assert link.libcuda.kind == "toolkit stub" and any("libcuda" in x for x in link.lines())


def test_a_library_the_set_links_is_named_when_nowhere(tmp_path: Path) -> None:
    toolkit = make_toolkit(tmp_path / "cuda")
    (toolkit / "lib64" / "libnvrtc.so.13").unlink()
    with pytest.raises(ToolchainError, match=r"libnvrtc\.so"):
        link_environment(cuda_home=toolkit, python=tmp_path / "python",
                         builder_site=tmp_path / "site", work=tmp_path / "work",
                         needed_headers=(), needed_libraries=("nvrtc",))


def test_the_toolkit_is_found_without_running_anything(tmp_path: Path) -> None:
    assert toolkit_root({"CUDA_HOME": str(tmp_path)}) == tmp_path.resolve()
    assert toolkit_root({"CUDA_HOME": str(tmp_path / "absent"),
                         "CUDA_PATH": str(tmp_path)}) == tmp_path.resolve()
