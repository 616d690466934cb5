"""The sccache-dist scheduler's status, read typed and bounded.

Two places say it: the scheduler's ``GET /api/v1/scheduler/status`` (a JSON object) and the
build's own sccache server (``sccache --dist-status``, the same object inside
``{"SchedulerStatus": [URL, {...}]}``).  Both are read by :meth:`SchedulerStatus.from_json`:
``num_servers``, ``num_cpus`` and ``in_progress`` must be JSON integers (not ``true``, not
``40.0``, not ``Infinity``) between 0 and a bound no real team reaches, and a team has at
least one cpu per server.  Anything else is a :class:`StatusRefused` that says which field
and why, and the probe reads it as a scheduler that did not answer like one: the job plan
never counts cores a scheduler made up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparkbuild.console import shown
from sparkbuild.records import Record
from sparkbuild.store.user_files import parse_json

MAX_SERVERS = 4096
MAX_CPUS = 1 << 20
MAX_IN_PROGRESS = 1 << 24


class StatusRefused(ValueError):
    """A status that is not one: what is wrong with it, in words."""


def _no_constant(name: str) -> Any:
    raise StatusRefused(f"it holds {name}, which is no count")


def _kind(value: Any) -> str:
    """A JSON value that is no count, in words (never more than a short number of it)."""
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return shown(repr(value)[:40])
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _count(data: dict[str, Any], key: str, most: int, *, default: int | None = None) -> int:
    value = data.get(key, default)
    if value is None:
        raise StatusRefused(f"it has no {key}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise StatusRefused(f"{key} is {_kind(value)}, not a whole number")
    if not 0 <= value <= most:
        raise StatusRefused(f"{key} is {value}, not a count from 0 to {most}")
    return value


@dataclass(frozen=True)
class SchedulerStatus(Record):
    """What ``/api/v1/scheduler/status`` (and ``sccache --dist-status``) reports."""

    servers: int
    cpus: int
    in_progress: int

    @classmethod
    def from_json(cls, data: Any) -> SchedulerStatus:
        """The status in ``data`` (a parsed JSON object), or :class:`StatusRefused`."""
        if not isinstance(data, dict):
            raise StatusRefused("it is not a JSON object")
        status = cls(_count(data, "num_servers", MAX_SERVERS),
                     _count(data, "num_cpus", MAX_CPUS),
                     _count(data, "in_progress", MAX_IN_PROGRESS, default=0))
        if status.cpus < status.servers:
            raise StatusRefused(f"it counts {status.servers} server(s) but {status.cpus} "
                                "cpu(s): a server has at least one")
        return status

    @classmethod
    def from_text(cls, text: str) -> SchedulerStatus:
        """The status in the JSON ``text`` (the scheduler's answer), or :class:`StatusRefused`."""
        try:
            data = parse_json(text, parse_constant=_no_constant)
        except StatusRefused:
            raise
        except ValueError as exc:
            raise StatusRefused(f"it is not JSON ({exc})") from None
        return cls.from_json(data)


def parse_dist_status(text: str) -> tuple[SchedulerStatus | None, str]:
    """``sccache --dist-status``: the status, or what it said instead."""
    start = text.find("{")
    try:
        data = parse_json(text[start:], parse_constant=_no_constant) if start >= 0 else None
    except StatusRefused as refused:
        return None, f"a status that is not one: {refused}"
    except ValueError:
        data = None
    if isinstance(data, dict) and "SchedulerStatus" in data:
        said = data["SchedulerStatus"]
        try:
            return SchedulerStatus.from_json(said[1] if isinstance(said, list) and len(said) > 1
                                             else None), "connected"
        except StatusRefused as refused:
            return None, f"a status that is not one: {refused}"
    if isinstance(data, dict) and "NotConnected" in data:
        said = data["NotConnected"]
        return None, shown(f"not connected: {said[-1] if isinstance(said, list) and said else said}"
                           [:200])
    return None, shown((text.strip().splitlines() or ["no answer"])[-1][:200])
