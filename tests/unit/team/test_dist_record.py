"""What sccache-dist did: each step's server read from the log (the lines sccache 0.16
writes, as measured on loopback), the counts, and the build's picture."""

from __future__ import annotations

import json
from pathlib import Path

from sparkbuild.jobplan.timeline import BuildTimeline, Unit
from sparkbuild.team.compile_cache import SccacheStats
from sparkbuild.team.dist_client import DistLink
from sparkbuild.team.dist_record import (
    FALLBACK,
    DistResult,
    DistStep,
    read_steps,
    step_kind,
    unit_servers,
    write_build_trace,
)
from sparkbuild.team.scheduler_status import SchedulerStatus

S1, S2 = "127.0.0.1:10501", "127.0.0.1:10502"


def stats_line(stamp: str, servers: dict[str, int], errors: int) -> str:
    shown = ", ".join(f'"{k}": {v}' for k, v in servers.items())
    return (f"[2026-12-05T01:34:{stamp}Z DEBUG sccache::server] stats after compile result: "
            "ServerStats { compile_requests: 7, requests_unsupported_compiler: 0, cache_misses: "
            "PerLanguageCount { counts: {\"PTX\": 1}, adv_counts: {} }, compile_fails: 0, "
            f"not_cached: {{}}, dist_compiles: {{{shown}}}, dist_errors: {errors}, "
            "multi_level: None }")


def line(stamp: str, module: str, text: str, level: str = "DEBUG") -> str:
    return f"[2026-12-05T01:34:{stamp}Z {level} {module}] {text}"


COMPILER = "sccache::compiler::compiler"
SERVER = "sccache::server"

LOG = [
    line("20.000", SERVER, "[CMakeCUDACompilerABI.cu.o]: compile result: cache miss"),
    stats_line("20.000", {}, 0),  # compiled here without asking: no step
    line("30.000", COMPILER, "[a.module_id]: Requesting allocation"),
    line("30.100", COMPILER, "[b.module_id]: Requesting allocation"),
    line("31.000", SERVER, "[a.module_id]: compile result: cache miss"),
    stats_line("31.000", {}, 0),
    line("31.500", COMPILER, "[b.module_id]: Could not perform distributed compile, falling "
         "back to local: Error 500: assign job failed", "WARN"),
    line("32.000", SERVER, "[b.module_id]: compile result: cache miss"),
    stats_line("32.000", {S1: 1}, 0),  # a went to server 1
    line("32.100", COMPILER, "[a.sm_121a.cubin]: Requesting allocation"),
    "garbage that is not a log line",
    line("33.000", SERVER, "[a.sm_121a.cubin]: compile result: cache miss"),
    stats_line("33.000", {S1: 1}, 1),  # b fell back
    line("33.100", COMPILER, "[a.cu.o]: Requesting allocation"),
    line("34.500", SERVER, "[a.cu.o]: compile result: cache miss"),
    stats_line("34.500", {S1: 1, S2: 1}, 1),  # the cubin on server 2
    line("35.000", COMPILER, "[c.module_id]: Requesting allocation"),
    line("35.200", COMPILER, "[c.module_id]: Could not perform distributed compile, falling "
         "back to local: Insufficient capacity across 2 available servers", "WARN"),
    line("36.000", SERVER, "[c.module_id]: compile result: cache miss"),
    stats_line("36.000", {S1: 2, S2: 1}, 1),  # a.cu.o on server 1
]


def test_each_steps_server_is_the_difference_of_two_stats_lines() -> None:
    final = SccacheStats(dist_compiles={S1: 2, S2: 1}, dist_errors=2)
    steps = read_steps(LOG, final)
    assert [(s.name, s.where) for s in steps] == [
        ("a.module_id", S1), ("b.module_id", FALLBACK), ("a.sm_121a.cubin", S2),
        ("a.cu.o", S1), ("c.module_id", FALLBACK)]
    assert steps[0].end - steps[0].start == 1.0
    assert steps[1].why == "Error 500: assign job failed"
    assert round(steps[3].end - steps[3].start, 3) == 1.4


def test_without_the_final_stats_the_last_step_is_left_out() -> None:
    steps = read_steps(LOG, None)
    assert [s.name for s in steps] == ["a.module_id", "b.module_id", "a.sm_121a.cubin",
                                       "a.cu.o"]


def test_a_jump_of_more_than_one_is_unknown_not_guessed() -> None:
    log = [line("30.000", COMPILER, "[a.ptx]: Requesting allocation"),
           line("31.000", SERVER, "[a.ptx]: compile result: cache miss"),
           stats_line("31.000", {}, 0)]
    steps = read_steps(log, SccacheStats(dist_compiles={S1: 1, S2: 1}))
    assert [s.where for s in steps] == ["unknown"]


def test_steps_belong_to_their_unit_by_name() -> None:
    assert [step_kind(n) for n in ("a.module_id", "a.ptx", "a.sm_121a.cubin", "a.cu.o",
                                   "b.cpp.o")] == ["cudafe++", "cicc", "ptxas",
                                                   "host compile", "host compile"]
    steps = [DistStep(n, w, 0.0, 1.0) for n, w in (
        ("act.module_id", S1), ("act.ptx", S2), ("act.cubin", S2), ("act.cu.o", S2),
        ("bindings.cpp.o", S1), ("CMakeCUDACompilerABI.ptx", S1))]
    outputs = ["CMakeFiles/_C.dir/csrc/act.cu.o", "CMakeFiles/_C.dir/csrc/bindings.cpp.o"]
    assert unit_servers(steps, outputs) == {outputs[0]: S2, outputs[1]: S1}


def link(connected: bool = True) -> DistLink:
    return DistLink("http://127.0.0.1:10600/", "secret", "env",
                    SchedulerStatus(2, 2, 0) if connected else None,
                    None if connected else "cannot reach it")


def test_the_result_counts_from_the_stats_and_hides_the_token() -> None:
    result = DistResult(link(), SchedulerStatus(2, 2, 0),
                        stats=SccacheStats(dist_compiles={S2: 8, S1: 17}, dist_errors=3,
                                           compile_fails=0),
                        steps=read_steps(LOG, SccacheStats(dist_compiles={S1: 2, S2: 1},
                                                           dist_errors=2)))
    data = result.to_dict()
    assert data["status"] == "used" and list(data["dist_compiles"]) == [S1, S2]
    assert data["dist_compiles_total"] == 25 and data["local_fallbacks"] == 3
    assert data["fallbacks_for_capacity"] == 1
    assert "secret" not in json.dumps(data) and "secret" not in "\n".join(result.summary())
    assert DistResult(link(False)).to_dict()["status"] == "unreachable"
    assert DistResult(link(), stats=SccacheStats()).status == "local"


def test_the_trace_has_a_track_per_core_and_one_per_server(tmp_path: Path) -> None:
    units = [Unit("csrc/a.cu", "CMakeFiles/_C.dir/csrc/a.cu.o", "_C", 10.0, 0.0, "f",
                  2 * 1024**3),
             Unit("csrc/b.cpp", "CMakeFiles/_C.dir/csrc/b.cpp.o", "_C", 4.0, 1.0)]
    timeline = BuildTimeline({}, units, 11.0, 0.6, 2, [], origin=1000.0)
    steps = [DistStep("a.module_id", S1, 1000.5, 1003.0), DistStep("a.ptx", S1, 1003.0, 1005.0),
             DistStep("b.cpp.o", FALLBACK, 1001.5, 1004.0, "died")]
    result = DistResult(link(), stats=SccacheStats(dist_compiles={S1: 2}), steps=steps)
    trace = json.loads(write_build_trace(tmp_path / "t.json", timeline, result).read_text())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names[1].startswith("build host") and names[2] == f"build server {S1}"
    assert "fallback" in names[3]
    a = next(e for e in events if e.get("ph") == "X" and e["name"] == "a.cu")
    assert (a["pid"], a["ts"], a["dur"], a["args"]["server"]) == (1, 0, 10_000_000, S1)
    assert a["args"]["peak_gib"] == 2.0
    cicc = next(e for e in events if e.get("ph") == "X" and e["name"] == "a.ptx (cicc)")
    assert (cicc["pid"], cicc["ts"], cicc["dur"]) == (2, 3_000_000, 2_000_000)
    lanes = {e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 1}
    assert lanes == {"core 1", "core 2"}
    plain = json.loads(write_build_trace(tmp_path / "p.json", timeline, None).read_text())
    assert {e["pid"] for e in plain["traceEvents"]} == {1}


def test_the_trace_starts_at_the_first_step(tmp_path: Path) -> None:
    """CMake's compiler checks go through the servers before ninja's first unit."""
    units = [Unit("csrc/a.cu", "a.cu.o", "_C", 2.0, 0.0)]
    timeline = BuildTimeline({}, units, 2.0, 1.0, 2, [], origin=1000.0)
    early = DistResult(link(), steps=[DistStep("CMakeCUDACompilerABI.ptx", S1, 997.0, 998.0)])
    events = json.loads(write_build_trace(tmp_path / "t.json", timeline, early).read_text())
    starts = {e["name"]: e["ts"] for e in events["traceEvents"] if e["ph"] == "X"}
    assert starts == {"a.cu": 3_000_000, "CMakeCUDACompilerABI.ptx (cicc)": 0}
