"""The torch of the manifest and of the shared cache's namespace: the one installed in the
build environment (or the running one, --use-existing-torch), not a requirement."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.compile import existing_torch
from sparkbuild.compile.build_record import build_torch
from sparkbuild.compile.tree_build import BuildOutcome

if TYPE_CHECKING:
    from pathlib import Path


def outcome(venv: Path) -> BuildOutcome:
    return BuildOutcome(wheels=[], log=venv / "log", seconds=0.0, compiled_units=[],
                        env={"PIP_FIND_LINKS": str(venv / "wheels")},
                        fetch_log=venv / "fetch.tsv", python=venv / "bin" / "python")


def test_the_build_envs_installed_torch_is_recorded(tmp_path: Path) -> None:
    venv = tmp_path / "buildenv"
    # a torch wheel of another version lying in the find-links directory does not count
    (venv / "wheels").mkdir(parents=True)
    (venv / "wheels" / "torch-2.99.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    assert build_torch(outcome(venv).python, existing_torch=False).version is None
    dist_info = venv / "lib" / "python3.12" / "site-packages" / "torch-2.14.0+cu130.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\n"
                                        "Version: 2.14.0+cu130\n")
    found = build_torch(outcome(venv).python, existing_torch=False)
    assert found.version == "2.14.0+cu130"
    assert found.site == venv / "lib" / "python3.12" / "site-packages"
    assert found.toolchain() == {"torch": "2.14.0+cu130"}


def test_with_the_existing_torch_it_is_the_running_one(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # NVIDIA's container: the shared cache must not file every such build under one
    # "torch unknown" namespace.
    monkeypatch.setattr(existing_torch, "running_torch", lambda: existing_torch.RunningTorch(
        "2.11.0+cu130", "13.0", "/usr/lib/python3/dist-packages/torch"))
    found = build_torch(tmp_path / "bin" / "python", existing_torch=True)
    assert found.version == "2.11.0+cu130" and found.site is None
    assert found.toolchain() == {"torch": "2.11.0+cu130", "torch_cuda": "13.0",
                                 "torch_from": "existing: /usr/lib/python3/dist-packages/torch"}
    monkeypatch.setattr(existing_torch, "running_torch", lambda: None)
    none = build_torch(tmp_path / "bin" / "python", existing_torch=True)
    assert none.version is None
    assert none.toolchain() == {"torch": None, "torch_cuda": None, "torch_from": None}
