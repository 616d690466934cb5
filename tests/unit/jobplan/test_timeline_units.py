"""The build timeline and unit table from a recorded .ninja_log and build.ninja."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.jobplan.ninja_graph import Edge, lines_added, read_log_lines
from sparkbuild.jobplan.timeline import (
    BuildMarks,
    NinjaRun,
    build_timeline,
    critical_path,
    read_runs,
    run_timeline,
    timeline_lines,
)
from support.ninja_build import OBJ, recorded_build

GIB = 1024**3
SCALED = OBJ + "quantization/scaled_mm/scaled_mm_sm120.cu.o"
LIB = "_C.cpython-311-x86_64-linux-gnu.so"


def test_phases_units_and_critical_path_of_one_run(tmp_path: Path) -> None:
    build = recorded_build(tmp_path)
    marks = BuildMarks(started=990.0, wheel_started=995.0, ended=1050.0)
    runs = [NinjaRun(build, 1000.0, 1046.0, 0, log=_logged(build))]
    timeline = build_timeline(runs, marks, Path("/TREE"),
                              peaks={OBJ + "bindings.cpp.o": 3 * GIB}, cores=4)
    assert timeline.phases == pytest.approx({
        "metadata": 5.0, "configure": 5.0, "compile": 31.487, "link": 14.513,
        "install and package": 4.0})
    assert sum(timeline.phases.values()) == pytest.approx(60.0)
    units = {u.source: u for u in timeline.units}
    assert set(units) == {"csrc/bindings.cpp", "csrc/activation_kernels.cu",
                          "csrc/moe/moe_permute_unpermute_op.cu",
                          "csrc/quantization/scaled_mm/scaled_mm_sm120.cu",
                          "csrc/quantization/fp4/nvfp4_quant_kernels.cu",
                          "csrc/quantization/fp4/nvfp4_block_scaled_mma.cu"}
    bindings = units["csrc/bindings.cpp"]
    assert (bindings.seconds, bindings.start, bindings.target) == (23.309, 0.001, "_C")
    assert bindings.peak_rss_bytes == 3 * GIB and bindings.pool is None
    assert units["csrc/activation_kernels.cu"].peak_rss_bytes is None
    assert [u.source for u in timeline.units][:2] == ["csrc/bindings.cpp",
                                                      "csrc/activation_kernels.cu"]
    # every entry's seconds (the link's too) over compile wall x cores
    assert timeline.busy == pytest.approx(75.758 / (31.487 * 4), abs=1e-3)
    assert timeline.critical_path == [(OBJ + "bindings.cpp.o", 23.309), (LIB, 13.346)]
    table = timeline.units_table()
    assert table[0]["path"] == "csrc/bindings.cpp" and table[0]["peak_rss_gib"] == 3.0
    assert "peak_rss_gib" not in table[1] and len(table[0]["flags"]) == 16
    summary = "\n".join(timeline.summary())
    assert "6 units; compile wall 31 s" in summary and "critical path 37 s (2 edges)" in summary


def test_a_retried_run_counts_the_units_once_with_their_last_try(tmp_path: Path) -> None:
    build = recorded_build(tmp_path)
    first = _logged(build)
    with (build / ".ninja_log").open("a", encoding="utf-8") as log:
        log.write(f"0\t9000\t1\t{SCALED}\th\n9000\t20000\t1\t{LIB}\th\n")
    runs = [NinjaRun(build, 1000.0, 1046.0, 1, retried=(SCALED,), log=first),
            NinjaRun(build, 1050.0, 1071.0, 0,
                     log=tuple(lines_added(list(first), read_log_lines(build / ".ninja_log"))))]
    timeline = build_timeline(runs, BuildMarks(started=1000.0, ended=1072.0), Path("/TREE"),
                              cores=2)
    assert timeline.phases["compile"] == pytest.approx(31.487 + 9.0)
    assert timeline.phases["link"] == pytest.approx(14.513 + 12.0)
    scaled = next(u for u in timeline.units if u.output == SCALED)
    assert (scaled.seconds, scaled.start) == (9.0, 50.0)
    assert len(timeline.units) == 6
    assert timeline.retried == [SCALED]
    assert timeline.killed_sources == ["csrc/quantization/scaled_mm/scaled_mm_sm120.cu"]


def _logged(build: Path) -> tuple[str, ...]:
    """The lines a run that wrote the whole recorded log added to it."""
    return tuple(read_log_lines(build / ".ninja_log"))


def test_a_rebuild_that_compiled_nothing_has_no_unit_of_the_build_before(tmp_path: Path
                                                                         ) -> None:
    # The log still holds the last build's lines; this run added none ("no work to do").
    build = recorded_build(tmp_path)
    runs = [NinjaRun(build, 1000.0, 1001.0, 0, log=())]
    timeline = build_timeline(runs, BuildMarks(started=999.0, ended=1002.0), Path("/TREE"),
                              cores=2)
    assert timeline.units == [] and timeline.units_table() == []
    assert timeline.phases["compile"] == 0.0 and timeline.critical_path == []
    assert timeline.summary()[0].startswith("  0 units; compile wall 0 s")


def test_a_rebuild_counts_only_the_units_it_compiled(tmp_path: Path) -> None:
    build = recorded_build(tmp_path)
    before = read_log_lines(build / ".ninja_log")
    with (build / ".ninja_log").open("a", encoding="utf-8") as log:
        log.write(f"0\t4000\t7\t{SCALED}\th2\n")
    runs = [NinjaRun(build, 2000.0, 2005.0, 0,
                     log=tuple(lines_added(before, read_log_lines(build / ".ninja_log"))))]
    timeline = build_timeline(runs, BuildMarks(started=1999.0, ended=2006.0), Path("/TREE"),
                              cores=2)
    assert [(u.output, u.seconds) for u in timeline.units] == [(SCALED, 4.0)]


def test_read_runs_skips_broken_lines(tmp_path: Path) -> None:
    record = tmp_path / "runs.jsonl"
    record.write_text(json.dumps({"dir": "/b", "start": 1, "end": 2.5, "rc": 0,
                                  "retried": ["x.o"], "heavy": ["y.o"],
                                  "log": ["0\t10\t1\tx.o\th"]}) + "\n{broken\n"
                      + json.dumps({"dir": "/b"}) + "\n", encoding="utf-8")
    assert read_runs(record) == [NinjaRun(Path("/b"), 1.0, 2.5, 0, ("x.o",), ("y.o",),
                                          log=("0\t10\t1\tx.o\th",))]
    assert read_runs(tmp_path / "none") == []


def test_critical_path_takes_the_heaviest_chain() -> None:
    edges = [Edge(["a.o"], "CXX_COMPILER__t", ["a.c"]), Edge(["b.o"], "CXX_COMPILER__t", ["b.c"]),
             Edge(["gen.h"], "CUSTOM_COMMAND", []),
             Edge(["c.o"], "CXX_COMPILER__t", ["c.c"], order_only=["gen.h"]),
             Edge(["lib.so"], "CXX_SHARED_LIBRARY_LINKER__t", ["a.o", "b.o", "c.o"])]
    seconds = {"a.o": 5.0, "b.o": 7.0, "gen.h": 4.0, "c.o": 4.0, "lib.so": 2.0}
    assert critical_path(edges, seconds) == [("gen.h", 4.0), ("c.o", 4.0), ("lib.so", 2.0)]
    seconds["b.o"] = 9.0
    assert critical_path(edges, seconds) == [("b.o", 9.0), ("lib.so", 2.0)]
    assert critical_path([], {}) == []


def test_run_timeline_orders_phases_and_covers_the_wall() -> None:
    timeline = run_timeline({"compile": 50.0, "doctor": 5.0, "custom": 1.0,
                             "bundle verify": 10.0}, 80.0, None)
    assert list(timeline["phases"]) == ["bundle verify", "doctor", "compile", "custom"]
    assert timeline["covered"] == 0.825 and timeline["build"] is None
    assert "timeline (80 s): bundle verify 10 s" in timeline_lines(timeline, None)[0]
    assert timeline_lines({}, None) == []
