"""The build as trace-event JSON: each unit on the lowest track free when it starts."""

from __future__ import annotations

from sparkbuild.jobplan.build_trace import Span, Track, lanes, trace_document


def test_a_unit_takes_the_lowest_free_track() -> None:
    spans = [Span("a", 0.0, 10.0), Span("b", 0.0, 2.0), Span("c", 2.0, 3.0),
             Span("d", 5.0, 1.0), Span("e", 1.0, 1.0)]
    assert lanes(spans) == [0, 1, 1, 1, 2]
    assert lanes([]) == []


def test_the_document_is_trace_event_json() -> None:
    host = Track("build host", [Span("a.cu", 1.5, 2.25, {"seconds": 2.25})], "core")
    other = Track("build server 10.0.0.2:10501", [Span("a.ptx (cicc)", 2.0, 1.0)], "job")
    document = trace_document(host, [other], {"units": 1})
    events = document["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert [(e["pid"], e["tid"], e["ts"], e["dur"]) for e in complete] == [
        (1, 1, 1_500_000, 2_250_000), (2, 1, 2_000_000, 1_000_000)]
    meta = {(e["pid"], e["name"]): e["args"] for e in events if e["ph"] == "M"}
    assert meta[(1, "process_name")] == {"name": "build host"}
    assert meta[(2, "thread_name")] == {"name": "job 1"}
    assert document["displayTimeUnit"] == "ms" and document["otherData"]["units"] == 1
