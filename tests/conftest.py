"""Puts ``tests/`` on the import path, for the shared ``support`` and ``corpus`` packages."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
