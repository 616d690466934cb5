"""setuptools' bdist_wheel under sparkbuild's DIST_EXTRA_CONFIG stores the members, and the
wheelhouse's rewrite of that wheel is the very wheel it makes of the deflated one."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkbuild.compile.uncompressed_wheel import VARIABLE, stored_wheel_environment
from sparkbuild.wheelhouse.wheel_rewrite import normalize_wheel

SETUP = ('from setuptools import setup\nsetup(name="tiny", version="1.0", packages=["tiny"], '
         'package_data={"tiny": ["*.so"]})\n')


def _wheel(project: Path, out: Path, env: dict[str, str]) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "--no-index", "-w", str(out), str(project)],
                   check=True, env={**os.environ, **env}, cwd=project)
    return next(out.glob("*.whl"))


def test_the_stored_wheel_rewrites_to_the_same_bytes(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)  # a runner's own file would store both
    package = tmp_path / "project" / "tiny"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    (package / "_k.so").write_bytes(bytes(range(256)) * 4096 + Path(sys.executable).read_bytes())
    (tmp_path / "project" / "setup.py").write_text(SETUP)
    deflated = _wheel(tmp_path / "project", tmp_path / "a", {})
    stored = _wheel(tmp_path / "project", tmp_path / "b",
                    stored_wheel_environment(tmp_path / "work", {}))
    with zipfile.ZipFile(deflated) as a, zipfile.ZipFile(stored) as b:
        assert a.getinfo("tiny/_k.so").compress_type == zipfile.ZIP_DEFLATED
        assert b.getinfo("tiny/_k.so").compress_type == zipfile.ZIP_STORED
    assert stored.stat().st_size > deflated.stat().st_size
    one = normalize_wheel(deflated, tmp_path / "out-a", label="x")
    two = normalize_wheel(stored, tmp_path / "out-b", label="x")
    assert one.sha256 == two.sha256
