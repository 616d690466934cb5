"""The one-wheel ``demo`` wheelhouse that the verify tests build: a wheel holding the given
libraries, its recipe (target 12.1a), and an outside with no index (nothing to fetch: the
wheel has no requirements and the recipe no pins).  Shared by tests/unit/test_verify.py
(fake library bytes, fake readers) and tests/integration/test_kernel_coverage.py (libraries
compiled by nvcc, read by cuobjdump).
"""

from __future__ import annotations

import io
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
    """``demo-1.0-cp311-cp311-linux_x86_64.whl`` in ``directory``: ``demo/__init__.py`` and
    each library (path in the wheel -> bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        for name, data in libraries.items():
            archive.writestr(name, data)
        archive.writestr("demo-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        archive.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    path = directory / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    path.write_bytes(buffer.getvalue())
    return path


def demo_recipe(tmp_path: Path, *, allow_jit: bool) -> Recipe:
    """The recipe of ``demo``: target 12.1a, no pins."""
    return Recipe(path=tmp_path / "r.toml", name="demo", source=SourcePin("."),
                  series=tmp_path / "series",
                  target=Target(cuda_archs=("12.1a",), allow_jit=allow_jit),
                  build=BuildSettings(), pins=(), package="demo")
