"""Longest first: the start order of a build's compile units, and a unit's expected seconds."""

from __future__ import annotations

from sparkbuild.jobplan.unit_order import expected_seconds, longest_first, max_by_source


def test_longest_first_counts_an_untimed_unit_as_the_longest_and_keeps_ties() -> None:
    assert longest_first([3.0, None, 5.0, 1.0, 5.0]) == [1, 2, 4, 0, 3]
    assert longest_first([2.0, 2.0, 2.0]) == [0, 1, 2]
    assert longest_first([None, None, None]) == [0, 1, 2]  # nothing timed: as given
    assert longest_first([]) == []


def test_expected_seconds_by_flags_then_by_source() -> None:
    plan: dict[str, object] = {"seconds": {"csrc/a.cu|f1": 40.0, "csrc/a.cu|f2": 60.0},
                               "by_source_seconds": {"csrc/a.cu": 60.0}}
    assert expected_seconds("csrc/a.cu", "f1", plan) == 40.0
    assert expected_seconds("csrc/a.cu", "f3", plan) == 60.0  # other flags: the most it took
    assert expected_seconds("csrc/b.cu", "f1", plan) is None
    assert expected_seconds("csrc/a.cu", "f1", {}) is None  # a plan file before timing


def test_max_by_source() -> None:
    assert max_by_source({"a.cu|x": 3, "a.cu|y": 7, "b.cu|x": 2.5}) == {"a.cu": 7, "b.cu": 2.5}
    assert max_by_source({}) == {}
