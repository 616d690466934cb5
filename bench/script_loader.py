"""A bench script loaded as a module by its path, for the bench scripts and tests that call
into another (bench/schedule_sim.py's plans above all).

A script in a folder under bench/ puts the repository on its path and imports this one:

    sys.path.insert(0, str(Path(__file__).resolve().parents[N]))  # the repository
    from bench.script_loader import schedule_sim
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent


def load_script(path: Path) -> ModuleType:
    """A fresh load of the Python file ``path``, as the module named by its stem."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schedule_sim() -> ModuleType:
    """bench/schedule_sim.py (``load``, ``plans``, ``simulate``, ``main``)."""
    return load_script(BENCH / "schedule_sim.py")
