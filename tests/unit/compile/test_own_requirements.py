"""doctor's check of sparkbuild's own requirements (compile/own_requirements.py): on the
device, cyclonedx-python-lib was missing and ``wheel`` failed 685 s in, after the build."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.compile import own_requirements
from sparkbuild.compile.own_requirements import check_own_requirements, unmet_requirements


def test_a_missing_requirement_stops_the_build_before_it_compiles() -> None:
    check = check_own_requirements(["packaging>=20", "no-such-dist-sparkbuild>=11,<12"])
    assert check.hard and not check.ok
    assert check.value == "1 unmet"
    assert "no-such-dist-sparkbuild<12,>=11 (not installed)" in check.reason
    assert "pip install 'no-such-dist-sparkbuild<12,>=11'" in check.reason


def test_a_requirement_out_of_range_is_unmet() -> None:
    assert unmet_requirements(["packaging<1"]) == [
        f"packaging<1 (found {__import__('packaging').__version__})"]


def test_extras_and_other_platforms_are_not_asked_for() -> None:
    assert unmet_requirements(['no-such-dist-sparkbuild; extra == "test"',
                               "no-such-dist-sparkbuild; sys_platform == 'win32'"]) == []


def test_a_tool_wheel_is_met_by_the_tool_found_elsewhere(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(own_requirements.TOOL_WHEELS, "no-such-tool-wheel",
                        lambda: tmp_path / "tool")
    assert unmet_requirements(["no-such-tool-wheel"]) == []
    monkeypatch.setitem(own_requirements.TOOL_WHEELS, "no-such-tool-wheel", lambda: None)
    assert unmet_requirements(["no-such-tool-wheel"]) == ["no-such-tool-wheel (not installed)"]


def test_the_installed_sparkbuild_meets_its_own_requirements() -> None:
    check = check_own_requirements()
    assert check.ok, check.reason
