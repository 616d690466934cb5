"""--use-existing-torch: unpinning the tree, reading the running torch, doctor's comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from sparkbuild.compile import existing_torch, own_requirements
from sparkbuild.compile.doctor import Check
from sparkbuild.compile.existing_torch import (
    RunningTorch,
    existing_torch_checks,
    running_torch,
    strip_torch_pins,
    tree_cuda_pin,
)
from sparkbuild.toolchain.tools import Tool


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "requirements" / "build").mkdir(parents=True)
    (tmp_path / "requirements" / "build" / "cuda.txt").write_text(
        "cmake>=3.26.1\ntorch==2.11.0\ntorchaudio==2.11.0\n# torch is pinned\n")
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = [\n    "ninja",\n    "torch == 2.11.0",\n]\n')
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile").write_text("FROM x\nARG CUDA_VERSION=13.0.2\n")
    return tmp_path


def test_strip_torch_pins_removes_only_the_exact_pins(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    removed = strip_torch_pins(tree)
    assert removed == ["requirements/build/cuda.txt: torch==2.11.0",
                       "requirements/build/cuda.txt: torchaudio==2.11.0",
                       'pyproject.toml: "torch == 2.11.0",']
    assert (tree / "requirements/build/cuda.txt").read_text() == (
        "cmake>=3.26.1\n# torch is pinned\n")
    assert '"ninja"' in (tree / "pyproject.toml").read_text()
    assert strip_torch_pins(tree) == []


def test_the_tree_s_cuda_pin_is_its_release_image_s(tmp_path: Path) -> None:
    assert tree_cuda_pin(_tree(tmp_path)) == ("13.0.2", "docker/Dockerfile ARG CUDA_VERSION")
    assert tree_cuda_pin(tmp_path / "none") is None


def test_running_torch_reads_the_installed_files() -> None:
    torch = running_torch()
    assert torch is not None  # the test environment has torch 2.13.0 (CPU)
    assert Version(torch.version).public == "2.13.0"
    assert torch.cuda is None
    assert Path(torch.location, "version.py").is_file()


def _nvcc(version: str) -> Tool:
    return Tool("nvcc", Path("/usr/local/cuda/bin/nvcc"), Version(version), "test")


def test_doctor_prints_each_difference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)
    fake = RunningTorch("2.13.0+cu129", "12.9", "/opt/torch")
    monkeypatch.setattr(existing_torch, "running_torch", lambda: fake)
    checks = {c.name: c for c in existing_torch_checks(tree, _nvcc("13.0"))}
    assert not checks["torch (existing)"].ok
    assert "torch==2.11.0" in checks["torch (existing)"].reason
    assert not checks["torch CUDA"].ok and "different major" in checks["torch CUDA"].reason
    assert checks["CUDA toolkit"].ok
    assert not any(c.hard for c in checks.values() if c.name != "build requirements")


def test_doctor_agrees_when_everything_matches(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(existing_torch, "running_torch",
                      lambda: RunningTorch("2.11.0+cu130", "13.0", "/opt/torch"))
        checks = {c.name: c for c in existing_torch_checks(tree, _nvcc("13.0"))}
    assert checks["torch (existing)"].ok and checks["torch CUDA"].ok
    assert checks["CUDA toolkit"].ok
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(existing_torch, "running_torch", lambda: None)
        (missing,) = existing_torch_checks(tree, _nvcc("13.0"))
    assert missing.hard and not missing.ok


def _requiring(tmp_path: Path, *requirements: str) -> Path:
    listed = ", ".join(f'"{r}"' for r in requirements)
    (tmp_path / "pyproject.toml").write_text(f"[build-system]\nrequires = [{listed}]\n")
    return tmp_path


def _build_requirements(tree: Path) -> Check:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(existing_torch, "running_torch",
                      lambda: RunningTorch("2.11.0+cu130", "13.0", "/opt/torch"))
        checks = {c.name: c for c in existing_torch_checks(tree, _nvcc("13.0"))}
    return checks["build requirements"]


def test_a_build_requirement_not_installed_stops_the_build_before_it_runs(
        tmp_path: Path) -> None:
    # an image without setuptools-scm: vLLM's metadata step would fail after the bundle
    # is imported and the tree copied; doctor names it first
    check = _build_requirements(_requiring(tmp_path, "packaging", "no-such-dist-sparkbuild>=8"))
    assert check.hard and not check.ok
    assert "'no-such-dist-sparkbuild>=8'" in check.reason and "--no-index" in check.reason


def test_a_build_requirement_outside_the_range_is_a_warning(tmp_path: Path) -> None:
    check = _build_requirements(_requiring(tmp_path, "packaging<1"))
    assert not check.ok and not check.hard
    assert "packaging<1 (found " in check.reason


def test_build_requirements_met(tmp_path: Path) -> None:
    check = _build_requirements(_requiring(tmp_path, "packaging"))
    assert check.ok


def test_pip_is_a_build_requirement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a venv made without pip: the build (`python -m pip wheel`) failed after the bundle
    # import, the tree copy and doctor; now doctor names it
    real = own_requirements.installed

    def without_pip(requirement: Requirement) -> tuple[str | None, bool]:
        return (None, False) if requirement.name == "pip" else real(requirement)

    monkeypatch.setattr(own_requirements, "installed", without_pip)
    check = _build_requirements(_requiring(tmp_path, "packaging"))
    assert check.hard and not check.ok and "'pip'" in check.reason
