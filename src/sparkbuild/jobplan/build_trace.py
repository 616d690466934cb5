"""The build as a picture: Chrome's trace-event JSON (``build-trace.json``).

chrome://tracing and Perfetto open it; ninjatracing writes the same form from
``.ninja_log``.  Each unit of the build's timeline (:mod:`sparkbuild.jobplan.timeline`) is
one complete event (``"ph": "X"``) on the build host's process, its tracks one per core:
a unit takes the lowest track free when it starts (with more jobs in flight than cores, as
with sccache-dist, the tracks are job slots).  Its ``args`` hold its seconds and its
measured peak.  Other machines' work (the build servers of a dist build) comes as
:class:`Track` lists, one process each, laid out the same way.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.store.files import write_text_atomic

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.jobplan.timeline import BuildTimeline

GIB = 1024**3
HOST_PID = 1


@dataclass(frozen=True)
class Span:
    """One piece of work: seconds after the build's origin."""

    name: str
    start: float
    seconds: float
    args: dict[str, Any] = field(default_factory=dict)
    category: str = "unit"


@dataclass(frozen=True)
class Track:
    """One machine's process in the trace: its name and its spans."""

    name: str
    spans: list[Span]
    lane: str = "slot"
    """What a track of it is called (``core``, ``slot``, ``job``)."""


def lanes(spans: Sequence[Span]) -> list[int]:
    """Each span's track: the lowest one free at its start (spans in any order)."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start, -spans[i].seconds))
    free: list[int] = []
    busy: list[tuple[float, int]] = []
    found = [0] * len(spans)
    used = 0
    for index in order:
        span = spans[index]
        while busy and busy[0][0] <= span.start + 1e-6:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, used = used, used + 1
        found[index] = lane
        heapq.heappush(busy, (span.start + max(0.0, span.seconds), lane))
    return found


def unit_spans(timeline: BuildTimeline, servers: dict[str, str] | None = None,
               offset: float = 0.0) -> list[Span]:
    """The timeline's units, ``offset`` seconds later than their ``start``; ``servers``:
    output -> the build server that compiled most of the unit's steps (dist)."""
    spans = []
    for unit in timeline.units:
        args: dict[str, Any] = {"source": unit.source, "output": unit.output,
                                "target": unit.target, "seconds": round(unit.seconds, 2),
                                "peak_gib": (round(unit.peak_rss_bytes / GIB, 3)
                                             if unit.peak_rss_bytes else None)}
        if unit.pool:
            args["pool"] = unit.pool
        if servers and unit.output in servers:
            args["server"] = servers[unit.output]
        spans.append(Span(Path(unit.source).name, unit.start + offset, unit.seconds, args,
                          "unit,pool" if unit.pool else "unit"))
    return spans


def _events(pid: int, track: Track) -> list[dict[str, Any]]:
    found = lanes(track.spans)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": track.name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
         "args": {"sort_index": pid}}]
    for lane in sorted(set(found)):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane + 1,
                       "args": {"name": f"{track.lane} {lane + 1}"}})
    for span, lane in zip(track.spans, found, strict=True):
        events.append({"name": span.name, "cat": span.category, "ph": "X", "pid": pid,
                       "tid": lane + 1, "ts": round(span.start * 1e6),
                       "dur": max(1, round(span.seconds * 1e6)), "args": span.args})
    return events


def trace_document(host: Track, others: Sequence[Track] = (),
                   about: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace-event JSON object: the build host first, then each other machine."""
    events = _events(HOST_PID, host)
    for offset, track in enumerate(others, start=HOST_PID + 1):
        events += _events(offset, track)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"written_by": "sparkbuild", **(about or {})}}


def host_track(timeline: BuildTimeline, servers: dict[str, str] | None = None,
               offset: float = 0.0) -> Track:
    spans = unit_spans(timeline, servers, offset)
    width = max(lanes(spans), default=-1) + 1
    lane = "core" if width <= timeline.cores else "job"
    return Track(f"build host: {len(spans)} units, {timeline.cores} cores", spans, lane)


def write_trace(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(document, indent=None, separators=(",", ":")) + "\n")
    return path
