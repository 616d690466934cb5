"""The scheduler's status: typed, bounded, every refusal in words."""

from __future__ import annotations

import pytest

from sparkbuild.team.scheduler_status import (
    MAX_CPUS,
    SchedulerStatus,
    StatusRefused,
    parse_dist_status,
)


def test_a_status_as_sccache_dist_sends_it() -> None:
    text = '{"num_servers": 2, "num_cpus": 40, "in_progress": 3}'
    assert SchedulerStatus.from_text(text) == SchedulerStatus(2, 40, 3)
    assert SchedulerStatus.from_text('{"num_servers": 0, "num_cpus": 0}').in_progress == 0


@pytest.mark.parametrize(("text", "why"), [
    ('{"num_servers": 1, "num_cpus": Infinity}', "holds Infinity"),
    ('{"num_servers": 1, "num_cpus": -Infinity}', "holds -Infinity"),
    ('{"num_servers": NaN, "num_cpus": 1}', "holds NaN"),
    ('{"num_servers": 2, "num_cpus": -50}', "num_cpus is -50, not a count"),
    ('{"num_servers": 2, "num_cpus": 40.0}', "num_cpus is 40.0, not a whole number"),
    ('{"num_servers": 2, "num_cpus": 1e400}', "num_cpus is inf, not a whole number"),
    ('{"num_servers": 2, "num_cpus": "40"}', "num_cpus is a string"),
    ('{"num_servers": true, "num_cpus": 4}', "num_servers is true"),
    ('{"num_servers": [1], "num_cpus": 4}', "num_servers is a list"),
    ('{"num_servers": 2, "num_cpus": null}', "it has no num_cpus"),
    ('{"num_servers": 2}', "it has no num_cpus"),
    (f'{{"num_servers": 2, "num_cpus": {MAX_CPUS + 1}}}', f"not a count from 0 to {MAX_CPUS}"),
    ('{"num_servers": 2, "num_cpus": ' + "9" * 5000 + "}", "not JSON"),
    ('{"num_servers": 3, "num_cpus": 2}', "3 server(s) but 2 cpu(s)"),
    ('{"num_servers": 1, "num_cpus": 1, "in_progress": -1}', "in_progress is -1"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ("<html>", "not JSON"),
])
def test_a_status_that_is_not_one_is_refused_in_words(text: str, why: str) -> None:
    with pytest.raises(StatusRefused) as refused:
        SchedulerStatus.from_text(text)
    assert why in str(refused.value)


def test_dist_status_refuses_the_same() -> None:
    status, note = parse_dist_status(
        '{"SchedulerStatus":["http://s/",{"num_servers":1,"num_cpus":Infinity}]}')
    assert status is None and "holds Infinity" in note
    status, note = parse_dist_status('{"SchedulerStatus":["http://s/"]}')
    assert status is None and "not a JSON object" in note
    assert parse_dist_status("line one\nsaid \x1b[31mred\n")[1].startswith('"said \\u001b')
