"""A ``wheel`` that fails after its build keeps the timeline and the units on the error.

A build refused by verify at 891 s (bench/first-start/2026-12-03-refused-ptx-only) keeps
its hour's timeline beside the error in its ``--json``.  ``_build_wheel`` is replaced: no
process runs."""

from __future__ import annotations

import json

import pytest

from sparkbuild import cli, pipeline
from sparkbuild.errors import VerifyError
from sparkbuild.jobplan.timeline import BuildTimeline, Unit
from sparkbuild.store.phases import phase

UNIT = Unit("csrc/marlin.cu", "CMakeFiles/_C.dir/csrc/marlin.cu.o", "_C", 40.0, 1.0)


def _refused_after_the_build(options: pipeline.WheelOptions, built: list[BuildTimeline]
                             ) -> pipeline.WheelResult:
    with phase("doctor"):
        pass
    built.append(BuildTimeline({"compile": 40.0}, [UNIT], 40.0, 0.5, 2, []))
    with phase("verify"):
        raise VerifyError("the wheelhouse fails verify, so it was not written")


def test_the_error_carries_the_timeline_and_the_units(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pipeline, "_build_wheel", _refused_after_the_build)
    with pytest.raises(VerifyError) as raised:
        pipeline.build_wheel(pipeline.WheelOptions(recipe=None))  # type: ignore[arg-type]
    progress = raised.value.progress
    timeline = progress["timeline"]
    assert isinstance(timeline, dict)
    assert list(timeline["phases"]) == ["doctor", "verify"]
    assert timeline["build"]["compile_wall_seconds"] == 40.0
    assert progress["units"] == [UNIT.to_dict()]
    cli._print_error(raised.value, as_json=True)
    printed = json.loads(capsys.readouterr().out)
    assert printed["error"]["error"] == "VerifyError"
    assert printed["units"][0]["path"] == "csrc/marlin.cu"
    assert "verify" in printed["timeline"]["phases"]
