"""ninja_graph: build.ninja's edges and pools, .ninja_log's times (recorded from the example)."""

from __future__ import annotations

from pathlib import Path

from sparkbuild.jobplan.ninja_graph import (
    last_run,
    lines_added,
    log_entries,
    logical_lines,
    object_target,
    parse_build_line,
    read_graph,
    read_log_lines,
    read_ninja_file,
)
from support.ninja_build import DATA, OBJ, recorded_build


def test_continuations_are_joined_and_escaped_dollars_are_not() -> None:
    text = "build a.o: CXX_COMPILER__x a.cpp $\n    b.h\n  FLAGS = -DX=$$HOME\nlast"
    assert logical_lines(text) == ["build a.o: CXX_COMPILER__x a.cpp b.h",
                                   "  FLAGS = -DX=$$HOME", "last"]


def test_build_line_sections_and_escapes() -> None:
    outs, rule, ins, implicit, order = parse_build_line(
        "build out$ 1.o | out.d: RULE a$:b.c c.c | h.h || order $|@ v")
    assert outs == ["out 1.o", "out.d"]
    assert (rule, ins, implicit, order) == ("RULE", ["a:b.c", "c.c"], ["h.h"], ["order"])


def test_recorded_build_ninja_has_six_compile_edges_one_link_and_the_include(
        tmp_path: Path) -> None:
    build = recorded_build(tmp_path)
    parsed = read_ninja_file(build / "build.ninja")
    assert parsed.includes == ["CMakeFiles/rules.ninja"]
    compiles = [e for e in parsed.edges if e.is_compile]
    assert len(compiles) == 6 and all(e.variables["pool"] == "compile" for e in compiles)
    bindings = next(e for e in compiles if e.outputs[0].endswith("bindings.cpp.o"))
    assert bindings.source == "/TREE/csrc/bindings.cpp"
    assert bindings.order_only == ["cmake_object_order_depends_target__C"]
    assert "-flto=auto" in bindings.variables["FLAGS"]
    links = [e for e in parsed.edges if e.is_link]
    assert [e.outputs for e in links] == [["_C.cpython-311-x86_64-linux-gnu.so"]]
    assert len(links[0].inputs) == 6
    # the pool CMake declared lives in the included rules.ninja
    edges, pools = read_graph(build)
    assert pools == {"compile": 2}
    assert len(edges) == len(parsed.edges)


def test_flags_key_follows_flags_and_defines(tmp_path: Path) -> None:
    build = recorded_build(tmp_path)
    cuda = [e for e in read_ninja_file(build / "build.ninja").edges
            if e.rule.startswith("CUDA_COMPILER")]
    assert len({e.flags_key() for e in cuda}) == 1
    cuda[0].variables["FLAGS"] += " -G"
    assert cuda[0].flags_key() != cuda[1].flags_key()


def test_recorded_ninja_log_one_run_in_finish_order() -> None:
    entries = log_entries(read_log_lines(DATA / "ninja_log"))
    assert len(entries) == 7 and {e.run for e in entries} == {0}
    bindings = next(e for e in entries if e.output.endswith("bindings.cpp.o"))
    assert (bindings.start_ms, bindings.end_ms, bindings.seconds) == (1, 23310, 23.309)
    assert entries[-1].output == "_C.cpython-311-x86_64-linux-gnu.so"


def test_last_run_keeps_each_output_s_latest_entry(tmp_path: Path) -> None:
    lines = ["# ninja log v5", "0\t900\t1\ta.o\th", "10\t5000\t1\tb.o\th", "not a line"]
    entries = log_entries(lines) + log_entries(["0\t700\t2\tb.o\th"], run=1)
    assert [e.run for e in entries] == [0, 0, 1]
    latest = {e.output: e for e in last_run(entries)}
    assert latest["b.o"].seconds == 0.7 and latest["a.o"].run == 0
    assert read_log_lines(tmp_path / "missing") == []


def test_the_lines_a_run_added_whether_ninja_appended_or_recompacted() -> None:
    old = ["# ninja log v7", "0\t9\t1\ta.o\th", "0\t8\t1\tb.o\th", "0\t7\t2\ta.o\th"]
    appended = [*old, "0\t6\t3\tb.o\th"]
    assert lines_added(old, appended) == ["0\t6\t3\tb.o\th"]
    assert lines_added(old, old) == []  # nothing to do: no line of its own
    # recompacted first (each output's latest line), then this run's line after them
    recompacted = ["# ninja log v7", "0\t8\t1\tb.o\th", "0\t7\t2\ta.o\th",
                   "0\t6\t3\tb.o\th"]
    assert lines_added(old, recompacted) == ["0\t6\t3\tb.o\th"]
    assert lines_added([], old) == old  # the first run


def test_object_target() -> None:
    assert object_target(OBJ + "moe/x.cu.o") == "_C"
    assert object_target("sub/CMakeFiles/_moe_C.dir/a.cu.o") == "_moe_C"
    assert object_target("_C.so") == ""
