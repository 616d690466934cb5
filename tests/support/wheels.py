"""The one-wheel ``demo`` wheelhouse that the verify tests build: a wheel holding the given
libraries, its recipe (target 12.1a), and an outside with no index (nothing to fetch: the
wheel has no requirements and the recipe no pins).  Shared by tests/unit/test_verify.py
(fake library bytes, fake readers) and tests/integration/test_kernel_coverage.py (libraries
compiled by nvcc, read by cuobjdump).
"""

from __future__ import annotations

import base64
import hashlib
import io
import platform
import sys
import zipfile
from typing import TYPE_CHECKING

from sparkbuild.recipe import BuildSettings, Recipe, SourcePin, Target
from sparkbuild.wheelhouse.closure import RealOutside

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


class NoNetwork(RealOutside):
    """The built wheel has no requirements and the recipe no pins: nothing to fetch."""

    def index_url(self) -> str:
        return "https://index.invalid/simple"


def demo_wheel(directory: Path, libraries: Mapping[str, bytes]) -> Path:
    """``demo-1.0-cpXY-cpXY-linux_ARCH.whl`` (this interpreter's and machine's, as a build
    here tags it) in ``directory``: ``demo/__init__.py`` and each library (path in the wheel
    -> bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        for name, data in libraries.items():
            archive.writestr(name, data)
        archive.writestr("demo-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        archive.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    path = directory / f"demo-1.0-{python}-{python}-linux_{platform.machine()}.whl"
    path.write_bytes(buffer.getvalue())
    return path


def record_row(name: str, data: bytes) -> str:
    """``name,sha256=...,size``: the RECORD row of a member."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def zipped_wheel(members: Mapping[str, bytes | str]) -> bytes:
    """A wheel's bytes: ``members`` (name -> bytes or text), then a RECORD listing each with
    its hash, under the one ``.dist-info`` among them."""
    data = {name: value.encode() if isinstance(value, str) else value
            for name, value in members.items()}
    (dist_info,) = {name.split("/", 1)[0] for name in data if ".dist-info/" in name}
    record = "".join(record_row(name, value) for name, value in data.items())
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, value in data.items():
            archive.writestr(name, value)
        archive.writestr(f"{dist_info}/RECORD", record + f"{dist_info}/RECORD,,\n")
    return buffer.getvalue()


def demo_recipe(tmp_path: Path, *, allow_jit: bool) -> Recipe:
    """The recipe of ``demo``: target 12.1a, no pins."""
    return Recipe(path=tmp_path / "r.toml", name="demo", source=SourcePin("."),
                  series=tmp_path / "series",
                  target=Target(cuda_archs=("12.1a",), allow_jit=allow_jit),
                  build=BuildSettings(), pins=(), package="demo")
