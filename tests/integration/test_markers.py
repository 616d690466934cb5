"""Markers say what a test is: ``integration`` is exactly the tests under tests/integration/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def collected(marker_expression: str) -> list[str]:
    """Node ids ``pytest -m EXPR --collect-only`` selects, as CI would run it."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         "-m", marker_expression, "tests"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_not_integration_selects_the_unit_tests_only() -> None:
    units = collected("not integration")
    assert len(units) > 100, units[-5:]
    assert all(node.startswith("tests/unit/") for node in units), [
        n for n in units if not n.startswith("tests/unit/")][:5]
    every_unit_file = {p.relative_to(REPO).as_posix()
                       for p in (REPO / "tests" / "unit").rglob("test_*.py")}
    assert {node.split("::", 1)[0] for node in units} == every_unit_file


def test_integration_selects_everything_under_tests_integration() -> None:
    integration = collected("integration")
    assert integration and all(n.startswith("tests/integration/") for n in integration)
    assert any(n.startswith("tests/integration/test_markers.py::") for n in integration)
