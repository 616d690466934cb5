"""The manifest's torch is the one installed in the build environment, not a requirement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbuild.build.compile import BuildOutcome
from sparkbuild.pipeline import _build_torch

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
    assert _build_torch(outcome(venv)) is None
    dist_info = venv / "lib" / "python3.12" / "site-packages" / "torch-2.14.0+cu130.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\n"
                                        "Version: 2.14.0+cu130\n")
    assert _build_torch(outcome(venv)) == "2.14.0+cu130"
