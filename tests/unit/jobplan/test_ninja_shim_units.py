"""The ninja wrapper's pure parts: which units are heavy, the pool edit, killed units."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sparkbuild.jobplan import ninja_shim
from sparkbuild.jobplan.ninja_graph import Edge, read_graph
from sparkbuild.jobplan.ninja_shim import (
    _not_a_build,
    assign_pool,
    failed_units,
    heavy_edge,
    relative_source,
)
from sparkbuild.jobplan.pools import HEAVY_PATTERNS, HEAVY_POOL
from sparkbuild.jobplan.timeline import read_runs
from support.ninja_build import DATA, OBJ


def _plan(**extra: object) -> dict[str, object]:
    return {"pool": HEAVY_POOL, "depth": 3, "tree": "/TREE", "threshold": 4e9,
            "patterns": list(HEAVY_PATTERNS), "measured": {}, "by_source": {}, "killed": [],
            **extra}


def test_failed_units_tells_killed_from_broken() -> None:
    output = [
        "[1/7] Building CUDA object CMakeFiles/_C.dir/csrc/a.cu.o",
        f"FAILED: {OBJ}x.cu.o ",
        "/usr/local/cuda/bin/nvcc -o x.cu.o -c x.cu",
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
        "[2/7] Building CUDA object CMakeFiles/_C.dir/csrc/b.cu.o",
        f"FAILED: [code=137] {OBJ}y.cu.o ",
        f"FAILED: {OBJ}z.cu.o ",
        "z.cu(3): error: expected a \";\"",
        "ninja: build stopped: subcommand failed.",
        "Killed",
    ]
    assert failed_units(output) == {f"{OBJ}x.cu.o": True, f"{OBJ}y.cu.o": True,
                                    f"{OBJ}z.cu.o": False}
    assert failed_units(["[1/1] Linking", "ninja: no work to do."]) == {}


def test_heavy_edge_killed_then_measured_then_source_then_rule() -> None:
    edge = Edge([OBJ + "q.cu.o"], "CUDA_COMPILER__C", ["/TREE/csrc/gemm_q.cu"],
                variables={"FLAGS": "-O3"})
    key = f"csrc/gemm_q.cu|{edge.flags_key()}"
    assert heavy_edge(edge, _plan())  # the rule: "gemm"
    assert not heavy_edge(edge, _plan(patterns=[]))
    assert not heavy_edge(edge, _plan(measured={key: 3e9}))  # measured light beats the rule
    assert heavy_edge(edge, _plan(measured={key: 5e9}, patterns=[]))
    assert not heavy_edge(edge, _plan(by_source={"csrc/gemm_q.cu": 1e9}))
    assert heavy_edge(edge, _plan(measured={key: 1e9}, killed=["csrc/gemm_q.cu"]))
    light = Edge([OBJ + "a.cu.o"], "CUDA_COMPILER__C", ["/TREE/csrc/act.cu"])
    assert not heavy_edge(light, _plan())


def test_assign_pool_puts_the_heavy_units_into_the_declared_pool(tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(DATA, build)
    heavy = assign_pool(build, _plan(depth=2))
    assert heavy == [OBJ + "quantization/fp4/nvfp4_block_scaled_mma.cu.o",
                     OBJ + "quantization/fp4/nvfp4_quant_kernels.cu.o",
                     OBJ + "quantization/scaled_mm/scaled_mm_sm120.cu.o"]
    edges, pools = read_graph(build)
    assert pools == {"compile": 2, HEAVY_POOL: 2}
    pooled = {e.outputs[0] for e in edges if e.variables.get("pool") == HEAVY_POOL}
    assert sorted(pooled) == heavy
    assert {e.variables.get("pool") for e in edges if e.is_compile} == {"compile", HEAVY_POOL}
    # run again (a retry) with another depth: the declaration changes, nothing is doubled
    assert assign_pool(build, _plan(depth=1)) == heavy
    text = (build / "build.ninja").read_text(encoding="utf-8")
    assert text.count(f"pool {HEAVY_POOL}\n") == 1 and read_graph(build)[1][HEAVY_POOL] == 1
    assert text.count(f"  pool = {HEAVY_POOL}") == 3


def test_sources_and_what_is_not_a_build(tmp_path: Path) -> None:
    assert relative_source("/TREE/csrc/a.cu", "/TREE/") == "csrc/a.cu"
    assert relative_source("/OTHER/a.cu", "/TREE") == "/OTHER/a.cu"
    assert _not_a_build(["--version"]) and _not_a_build(["-t", "restat"])
    assert _not_a_build(["-C", str(tmp_path / "CMakeFiles" / "CMakeScratch" / "x")])
    assert not _not_a_build(["-C", str(tmp_path), "-j", "4"])


def test_a_pool_declared_by_the_include_gets_its_depth_there(tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(DATA, build)
    rules = build / "CMakeFiles" / "rules.ninja"
    rules.write_text(rules.read_text(encoding="utf-8") + f"\npool {HEAVY_POOL}\n  depth = 4\n",
                     encoding="utf-8")
    assign_pool(build, _plan(depth=2))
    assert f"pool {HEAVY_POOL}" not in (build / "build.ninja").read_text(encoding="utf-8")
    assert read_graph(build)[1][HEAVY_POOL] == 2


def test_the_wrapper_imports_the_standard_library_and_three_jobplan_modules_alone() -> None:
    """CMake runs the wrapper in the build's environment: nothing of sparkbuild's console
    (rich) or store, only heavy_units, ninja_graph and unit_order, and the settings (its
    variables' names and readers), which import the standard library alone (the settings
    the errors and the docs' table writer too, which import it alone)."""
    import ast
    import sys

    from sparkbuild import doc_tables, errors, settings
    from sparkbuild.jobplan import heavy_units, ninja_graph, ninja_shim, unit_order

    def imported(module: object) -> set[str]:
        tree = ast.parse(Path(str(getattr(module, "__file__", ""))).read_text(encoding="utf-8"))
        names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        return {name for name in names if name.split(".")[0] not in sys.stdlib_module_names}

    assert imported(ninja_shim) == {"sparkbuild.jobplan.heavy_units",
                                    "sparkbuild.jobplan.ninja_graph",
                                    "sparkbuild.jobplan.unit_order", "sparkbuild.settings"}
    assert imported(settings) == {"sparkbuild.errors", "sparkbuild.doc_tables"}
    assert imported(errors) == set()
    assert imported(doc_tables) == set()
    assert imported(heavy_units) == set()
    assert imported(unit_order) == set()
    assert imported(ninja_graph) == set()


def test_assign_pool_replaces_build_ninja_whole_or_not_at_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = tmp_path / "build"
    shutil.copytree(DATA, build)
    before = (build / "build.ninja").read_bytes()

    def interrupted(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError):
        assign_pool(build, _plan(depth=2))
    assert (build / "build.ninja").read_bytes() == before  # the manifest ninja reads is whole
    assert sorted(p.name for p in build.iterdir()) == sorted(p.name for p in DATA.iterdir())
    monkeypatch.undo()
    assert assign_pool(build, _plan(depth=2))
    assert not [p for p in build.iterdir() if ".sparkbuild-" in p.name]


def _edges_as_written(build: Path) -> list[tuple[str, str, tuple[str, ...], tuple[object, ...]]]:
    edges, _ = read_graph(build)
    return [(e.outputs[0], e.rule, tuple(e.inputs),
             tuple(sorted((k, v) for k, v in e.variables.items() if k != "pool")))
            for e in sorted(edges, key=lambda e: e.line)]


def test_assign_pool_lists_the_compile_edges_longest_first(tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(DATA, build)
    before = _edges_as_written(build)
    seconds = {"csrc/activation_kernels.cu": 20.0, "csrc/bindings.cpp": 5.0,
               "csrc/quantization/fp4/nvfp4_block_scaled_mma.cu": 300.0,
               "csrc/quantization/scaled_mm/scaled_mm_sm120.cu": 90.0,
               "csrc/quantization/fp4/nvfp4_quant_kernels.cu": 45.0}
    plan = _plan(depth=2, by_source_seconds=seconds)
    heavy = assign_pool(build, plan)
    after = _edges_as_written(build)
    compiles = [edge for edge in after if "_COMPILER_" in edge[1]]
    # moe_permute_unpermute_op.cu is untimed: it counts as the longest, ties keep CMake's order
    assert [Path(edge[2][0]).name for edge in compiles] == [
        "moe_permute_unpermute_op.cu", "nvfp4_block_scaled_mma.cu", "scaled_mm_sm120.cu",
        "nvfp4_quant_kernels.cu", "activation_kernels.cu", "bindings.cpp"]
    assert sorted(after) == sorted(before)  # the same edges, each as CMake wrote it
    assert [e for e in after if "_COMPILER_" not in e[1]] == [
        e for e in before if "_COMPILER_" not in e[1]]  # the rest stays in place
    edges, _ = read_graph(build)
    assert sorted(e.outputs[0] for e in edges if e.variables.get("pool") == HEAVY_POOL) == heavy
    text = (build / "build.ninja").read_text(encoding="utf-8")
    assert assign_pool(build, plan) == heavy  # a retry: the same manifest
    assert (build / "build.ninja").read_text(encoding="utf-8") == text


def test_assign_pool_keeps_cmakes_order_when_nothing_is_timed(tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(DATA, build)
    before = _edges_as_written(build)
    assign_pool(build, _plan(depth=2))
    assert _edges_as_written(build) == before


def test_each_run_records_the_log_lines_it_added_and_none_when_it_had_nothing_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    build = tmp_path / "build"
    build.mkdir()
    log = build / ".ninja_log"
    log.write_text("# ninja log v7\n0\t900\t1\tCMakeFiles/k.dir/a.cpp.o\th\n")
    written = ["0\t500\t2\tCMakeFiles/k.dir/b.cpp.o\th\n", ""]  # then: no work to do

    def ninja(_real: str, _args: list[str]) -> tuple[int, list[str]]:
        with log.open("a", encoding="utf-8") as lines:
            lines.write(written.pop(0))
        return 0, []

    record = tmp_path / "runs.jsonl"
    monkeypatch.setattr(ninja_shim, "_run_ninja", ninja)
    monkeypatch.setenv(ninja_shim.RECORD_VARIABLE, str(record))
    monkeypatch.delenv(ninja_shim.PLAN_VARIABLE, raising=False)
    assert ninja_shim.main(["-C", str(build)]) == 0
    assert ninja_shim.main(["-C", str(build)]) == 0
    runs = read_runs(record)
    assert [run.log for run in runs] == [("0\t500\t2\tCMakeFiles/k.dir/b.cpp.o\th",), ()]
    assert capsys.readouterr().out.count(ninja_shim.ANNOUNCE) == 2
