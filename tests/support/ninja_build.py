"""The recorded build directory of the mini-vllm example (tests/unit/data/ninja-mini-vllm:
its build.ninja, CMakeFiles/rules.ninja and .ninja_log, the log stored as ``ninja_log``),
shared by the unit tests of ninja_graph, the timeline and the ninja wrapper.
"""

from __future__ import annotations

import shutil
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "unit" / "data" / "ninja-mini-vllm"
OBJ = "CMakeFiles/_C.dir/csrc/"
"""The object directory of the ``_C`` target in that build.ninja."""


def recorded_build(tmp_path: Path) -> Path:
    """A copy of the recorded build directory under ``tmp_path``, its log as ``.ninja_log``."""
    build = tmp_path / "build"
    shutil.copytree(DATA, build)
    (build / "ninja_log").rename(build / ".ninja_log")
    return build
