"""The gate in front of sccache: the build host's slots split, a compile routed by its output."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from sparkbuild.jobplan.heavy_units import output_key, write_heavy_outputs
from sparkbuild.jobplan.pools import GIB, plan_pools
from sparkbuild.settings import HEAVY_GATE, HEAVY_OUTPUTS
from sparkbuild.team.gate_server import (
    HEAVY_LOG,
    GateSlots,
    gate_slots,
    heavy_environment,
    plan_gate,
)
from sparkbuild.team.heavy_gate import (
    GateCpus,
    cpu_list,
    heavy_outputs,
    output_of,
    route,
    split_cpus,
)


def test_the_heavy_slots_take_the_last_cpus_and_the_light_ones_the_rest() -> None:
    # a Spark: 20 cores, the local plan 2 heavy of 20 jobs
    cpus = split_cpus(range(20), 2, 20)
    assert cpus == GateCpus((18, 19), tuple(range(18)))
    # the local plan's jobs below the cores (memory-bound): the light server gets jobs - slots
    assert split_cpus(range(16), 1, 4) == GateCpus((15,), (0, 1, 2))
    # an affinity that is not 0..n-1
    assert split_cpus({3, 1, 7, 5}, 1, 4) == GateCpus((7,), (1, 3, 5))
    assert cpu_list((18, 19)) == "18,19" and cpu_list([2, 0]) == "0,2"
    # nothing to split: every job may be heavy here, or the slots take every cpu
    assert split_cpus(range(20), 20, 20) is None
    assert split_cpus(range(2), 2, 4) is None
    assert split_cpus([0], 1, 1) is None
    assert split_cpus(range(2), 1, 2) == GateCpus((1,), (0,))
    assert split_cpus(range(4), 0, 4) == GateCpus((3,), (0, 1, 2))  # at least one slot


@pytest.mark.parametrize(("argv", "out"), [
    (["nvcc", "-x", "cu", "-c", "a.cu", "-o", "CMakeFiles/a.o"], "CMakeFiles/a.o"),
    (["c++", "-oobj/b.o", "-c", "b.cpp"], "obj/b.o"),
    (["nvcc", "--output-file", "c.o", "c.cu"], "c.o"),
    (["nvcc", "--output-file=d.o", "d.cu"], "d.o"),
    (["nvcc", "-c", "e.cu"], None),
    (["nvcc", "-c", "e.cu", "-o"], None),
])
def test_a_compiles_output_is_read_as_nvcc_and_gcc_write_it(argv: list[str],
                                                            out: str | None) -> None:
    assert output_of(argv) == out


def test_a_compile_goes_to_the_heavy_slots_when_ninja_pooled_its_output(
        tmp_path: Path) -> None:
    build = tmp_path / "build"
    listed = tmp_path / "heavy-outputs"
    write_heavy_outputs(listed, build, "vllm", ["CMakeFiles/_C.dir/csrc/gemm.cu.o"])
    write_heavy_outputs(listed, build, "fi", ["fused_moe_120/cutlass_group6.cuda.o"])
    heavy = heavy_outputs(listed)
    assert heavy == {str(build / "CMakeFiles/_C.dir/csrc/gemm.cu.o"),
                     str(build / "fused_moe_120/cutlass_group6.cuda.o")}
    # a list is replaced whole: a rerun of one manifest
    write_heavy_outputs(listed, build, "fi", [])
    assert heavy_outputs(listed) == {str(build / "CMakeFiles/_C.dir/csrc/gemm.cu.o")}
    (listed / "torn.json").write_text("[")  # unreadable: skipped, not fatal
    gate = {"heavy_port": 4243, "heavy_cpus": [18, 19], "light_cpus": list(range(18))}
    pooled = route(["nvcc", "-c", "g.cu", "-o", "CMakeFiles/_C.dir/csrc/gemm.cu.o"],
                   str(build), gate, heavy_outputs(listed))
    assert (pooled.port, pooled.cpus, pooled.heavy) == (4243, (18, 19), True)
    # the same object named from elsewhere: keyed absolute and normalised
    assert route(["nvcc", "-o", "../CMakeFiles/_C.dir/./csrc/gemm.cu.o"],
                 str(build / "sub"), gate, heavy_outputs(listed)).heavy
    light = route(["nvcc", "-c", "l.cu", "-o", "CMakeFiles/_C.dir/csrc/l.cu.o"],
                  str(build), gate, heavy_outputs(listed))
    assert (light.port, light.cpus, light.heavy) == (None, tuple(range(18)), False)
    # no gate file: sccache as it is, on the environment's server
    plain = route(["nvcc", "-o", "x.o"], str(build), {}, set())
    assert (plain.port, plain.cpus) == (None, ())
    assert heavy_outputs(tmp_path / "none") == set()
    assert output_key("a/../b.o", "/w/build") == "/w/build/b.o"


def test_the_gate_opens_only_where_the_servers_hold_more_than_the_host() -> None:
    pool = plan_pools(cores=20, usable_bytes=115 * GIB, job_memory_gib=8.7)
    assert gate_slots(pool) is None  # no dist
    dist = dataclasses.replace(pool, depth=28, local_depth=13, local_jobs=20, jobs=80)
    assert gate_slots(dist) == GateSlots(13, 20)
    same = dataclasses.replace(dist, depth=13)
    assert gate_slots(same) is None  # the servers hold no more: ninja's pool bounds it
    assert gate_slots(None) is None


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) missing")
def test_the_gates_files_and_the_heavy_servers_environment(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sccache-gate" / "heavy-outputs").mkdir(parents=True)
    (work / "sccache-gate" / "heavy-outputs" / "old.json").write_text("[]")
    gate = plan_gate(GateSlots(2, 20), sccache=Path("/venv/bin/sccache"), heavy_port=4243,
                     work=work, allowed=set(range(20)))
    assert gate is not None and gate.cpus == GateCpus((18, 19), tuple(range(18)))
    assert not gate.outputs.exists()  # an earlier build's lists are gone
    assert gate.launcher.name == "sccache"  # vLLM's setup.py finds it on PATH by that name
    assert "sparkbuild.team.heavy_gate" in gate.launcher.read_text()
    written = json.loads(gate.gate_file.read_text())
    assert written == {"sccache": "/venv/bin/sccache", "heavy_port": 4243,
                       "heavy_cpus": [18, 19], "light_cpus": list(range(18)),
                       "outputs": str(gate.outputs)}
    assert gate.client_env() == {HEAVY_GATE.name: str(gate.gate_file),
                                 HEAVY_OUTPUTS.name: str(gate.outputs)}
    assert "cpus 18,19 (2 local slot(s))" in gate.describe()
    assert plan_gate(GateSlots(20, 20), sccache=Path("s"), heavy_port=1, work=work,
                     allowed=set(range(20))) is None
    assert plan_gate(None, sccache=Path("s"), heavy_port=1, work=work) is None
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / HEAVY_LOG).write_text("an earlier build's lines\n")
    server_env = {"SCCACHE_SERVER_PORT": "4242", "SCCACHE_DIR": "/c/sparkbuild/ns/",
                  "SCCACHE_CONF": "/w/sccache-dist.toml"}
    env = heavy_environment(server_env, gate, logs)
    assert env["SCCACHE_SERVER_PORT"] == "4243" and env["SCCACHE_DIR"] == "/c/sparkbuild/ns-heavy"
    assert env["SCCACHE_ERROR_LOG"] == str(logs / HEAVY_LOG) and not (logs / HEAVY_LOG).exists()
    assert env["SCCACHE_CONF"] == "/w/sccache-dist.toml"  # a dist client too
    redis = heavy_environment({"SCCACHE_REDIS_ENDPOINT": "redis://c"}, gate, logs)
    assert "SCCACHE_DIR" not in redis


def test_sparkbuilds_ninja_lists_the_pooled_outputs_only_with_dist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbuild.jobplan import ninja_shim

    build = tmp_path / "build"
    monkeypatch.delenv(HEAVY_OUTPUTS.name, raising=False)
    ninja_shim._list_heavy(build, None, ["a.o"])  # no dist: nothing written anywhere
    assert not list(tmp_path.rglob("*.json"))
    monkeypatch.setenv(HEAVY_OUTPUTS.name, str(tmp_path / "listed"))
    ninja_shim._list_heavy(build, None, ["CMakeFiles/a.cu.o"])
    ninja_shim._list_heavy(build, build / "fi.ninja", ["fi/b.cuda.o"])
    assert heavy_outputs(tmp_path / "listed") == {str(build / "CMakeFiles/a.cu.o"),
                                                  str(build / "fi/b.cuda.o")}
