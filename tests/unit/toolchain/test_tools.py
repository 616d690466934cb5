"""Version parsing and nvcc lookup order, without running any tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from sparkbuild.errors import ToolchainError
from sparkbuild.toolchain import tools

NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NVCC_13, "13.0.88"),
        ("Cuda compilation tools, release 12.8, V12.8.93", "12.8.93"),
        ("Cuda compilation tools, release 12.9", "12.9"),
        ("Cuda compilation tools, release 11.8, V11.8.89\n", "11.8.89"),
    ],
)
def test_nvcc_version_is_read_from_the_release_line(text: str, expected: str) -> None:
    assert tools.parse_nvcc_version(text) == Version(expected)


def test_unrecognised_nvcc_output_has_no_version() -> None:
    assert tools.parse_nvcc_version("command not found") is None


def test_cmake_and_plain_versions() -> None:
    assert tools.parse_cmake_version("cmake version 4.4.5\n\nCMake suite") == Version("4.4.5")
    assert tools.parse_cmake_version("cmake version 3.25.1") == Version("3.25.1")
    assert tools.parse_plain_version("1.13.2\n") == Version("1.13.2")
    assert tools.parse_plain_version("12.2.0") == Version("12.2.0")
    assert tools.parse_plain_version("ccache version 4.8.3\nFeatures") == Version("4.8.3")


@pytest.mark.parametrize(("version", "ok"), [("12.8.93", False), ("12.9", True), ("13.0.88", True)])
def test_sm121_needs_cuda_12_9(tmp_path: Path, version: str, ok: bool) -> None:
    tool = tools.Tool("nvcc", tmp_path / "nvcc", Version(version), "PATH")
    if ok:
        tools.require_sm121(tool)
    else:
        with pytest.raises(ToolchainError, match=f"nvcc {version} is too old for sm_121"):
            tools.require_sm121(tool)


def _fake_nvcc(directory: Path) -> Path:
    directory.mkdir(parents=True)
    nvcc = directory / "nvcc"
    nvcc.write_text("#!/bin/sh\n", encoding="utf-8")
    nvcc.chmod(0o755)
    return nvcc


def test_nvcc_lookup_order_follows_cmake_and_torch(tmp_path: Path) -> None:
    on_path = _fake_nvcc(tmp_path / "path-bin")
    env = {
        "CUDACXX": str(tmp_path / "cudacxx" / "nvcc"),
        "CUDA_HOME": str(tmp_path / "home"),
        "PATH": str(on_path.parent),
    }
    sources = [source for _path, source in tools.nvcc_candidates(env)]
    assert sources == ["CUDACXX", "CUDA_HOME", "PATH", "/usr/local/cuda"]
    assert tools.nvcc_candidates(env)[2][0] == on_path


def test_a_variable_pointing_nowhere_is_an_error(tmp_path: Path) -> None:
    env = {"CUDA_HOME": str(tmp_path / "no-cuda"), "PATH": ""}
    with pytest.raises(ToolchainError, match="CUDA_HOME points to a missing nvcc"):
        tools.find_nvcc(env)


def test_no_nvcc_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "DEFAULT_CUDA_ROOT", tmp_path / "no-cuda")
    with pytest.raises(ToolchainError, match="nvcc not found") as caught:
        tools.find_nvcc({"PATH": str(tmp_path)})
    assert "CUDA_HOME" in (caught.value.hint or "")


def test_cuda_root_is_where_nvcc_says_it_lives() -> None:
    dryrun = ("#$ _HERE_=/usr/local/cuda-13.0/bin\n#$ TOP=/usr/local/cuda-13.0/bin/..\n"
              '#$ INCLUDES="-I/usr/local/cuda-13.0/bin/../targets/x86_64-linux/include"\n')
    assert tools.parse_nvcc_top(dryrun) == Path("/usr/local/cuda-13.0")
    assert tools.parse_nvcc_top("nvcc fatal: no input") is None
