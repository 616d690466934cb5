"""The run's phase clock: own seconds per phase, nested phases, credited spans."""

from __future__ import annotations

import time

import pytest

from sparkbuild.store.phases import credit, phase, recording


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


def test_nested_phases_count_their_own_seconds(clock: list[float]) -> None:
    with recording() as run:
        with phase("bundle verify"):
            clock[0] += 3
            with phase("bundle unpack"):
                clock[0] += 5
            clock[0] += 1
        with phase("doctor"):
            clock[0] += 2
        with phase("bundle verify"):  # a second time adds up
            clock[0] += 4
    assert run.seconds == {"bundle unpack": 5.0, "bundle verify": 8.0, "doctor": 2.0}
    assert sum(run.seconds.values()) == clock[0] - 100.0  # no overlap, nothing lost


def test_credit_splits_the_open_phase(clock: list[float]) -> None:
    with recording() as run:
        with phase("build"):
            clock[0] += 10
            credit("configure", 4.0)
            credit("ignored", -1.0)
        credit("outside a phase", 2.0)
    assert run.seconds == {"configure": 4.0, "build": 6.0, "outside a phase": 2.0}


def test_outside_a_recording_nothing_is_kept(clock: list[float]) -> None:
    with phase("doctor"):
        clock[0] += 1
    credit("configure", 3.0)
    with recording() as run:
        pass
    assert run.seconds == {}


def test_recordings_nest_and_restore(clock: list[float]) -> None:
    with recording() as outer:
        with recording() as inner, phase("a"):
            clock[0] += 1
        with phase("b"):
            clock[0] += 2
    assert inner.seconds == {"a": 1.0} and outer.seconds == {"b": 2.0}
