"""The build's timeline, its unit table and the heavy units' pool, from real builds.

A tiny CMake project (three C++ units, one of them named like a GEMM kernel) is built
with sparkbuild's top-level include and its ninja wrapper: ``.ninja_log`` gives the
units, build.ninja puts the GEMM unit into the pool, and a compiler launcher that kills
itself the first time it compiles that unit (as the kernel's OOM killer would) is retried
in the pool.  Then the example (mini-vllm) is built by ``wheel --json``: its timeline
covers the run, its unit table has each compiled unit, and its build.ninja pools the
CUTLASS-like units, as doctor says.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbuild.compile.tree_build import PROVIDER
from sparkbuild.jobplan.ninja_graph import read_graph
from sparkbuild.jobplan.ninja_shim import write_wrapper
from sparkbuild.jobplan.pools import HEAVY_POOL, plan_pools, write_plan_file
from sparkbuild.jobplan.schedule import KnownUnit
from sparkbuild.jobplan.timeline import BuildMarks, build_timeline, read_runs
from support import example_recipe, pybind11_bare_repo

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = """#!/bin/sh
case "$*" in *gemm_kernel*) if [ ! -f "$KILL_MARK" ]; then touch "$KILL_MARK"; kill -9 $$; fi;; esac
exec "$@"
"""


def _tools() -> tuple[str, str]:
    bin_dir = Path(sys.executable).parent
    cmake = shutil.which("cmake", path=str(bin_dir)) or shutil.which("cmake")
    ninja = shutil.which("ninja", path=str(bin_dir)) or shutil.which("ninja")
    if not cmake or not ninja or not shutil.which("c++"):
        pytest.skip("needs cmake, ninja and c++")
    return cmake, ninja


def _project(root: Path) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX)\n"
        "add_library(k SHARED a.cpp b.cpp gemm_kernel.cpp)\n", encoding="utf-8")
    for name, body in (("a", "int a() { return 1; }"), ("b", "int b() { return 2; }"),
                       ("gemm_kernel", "int g() { return 3; }")):
        (src / f"{name}.cpp").write_text(body + "\n", encoding="utf-8")
    return src


def _build(root: Path, *, kill: bool, known: list[KnownUnit] | None = None, jobs: int = 2
           ) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    cmake, ninja = _tools()
    src = _project(root)
    build = root / "build"
    plan = plan_pools(cores=2, usable_bytes=8 * 1024**3, job_memory_gib=4.0, known=known)
    plan_file = write_plan_file(plan, root / "plan.json", src)
    wrapper = write_wrapper(root / "bin" / "ninja", sys.executable, REPO / "src")
    launcher = root / "launcher.sh"
    launcher.write_text(LAUNCHER if kill else "#!/bin/sh\nexec \"$@\"\n", encoding="utf-8")
    launcher.chmod(0o755)
    record = root / "runs.jsonl"
    env = {**os.environ, "SPARKBUILD_REAL_NINJA": ninja, "SPARKBUILD_POOL_PLAN": str(plan_file),
           "SPARKBUILD_NINJA_RECORD": str(record), "SPARKBUILD_HEAVY_POOL_DEPTH": str(plan.depth),
           "KILL_MARK": str(root / "killed-once")}
    subprocess.run([cmake, "-S", src, "-B", build, "-G", "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={wrapper}",
                    f"-DCMAKE_PROJECT_TOP_LEVEL_INCLUDES={PROVIDER}",
                    "-DCMAKE_JOB_POOL_COMPILE:STRING=compile", "-DCMAKE_JOB_POOLS:STRING=compile=2",
                    f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"],
                   check=True, env=env, capture_output=True, text=True, timeout=300)
    built = subprocess.run([cmake, "--build", build, f"-j{jobs}"], env=env, capture_output=True,
                           text=True, timeout=300, check=False)
    return built, build, record


def test_timeline_and_unit_table_from_a_real_ninja_build(tmp_path: Path) -> None:
    marks = BuildMarks()
    built, build, record = _build(tmp_path, kill=False)
    assert built.returncode == 0, built.stdout + built.stderr
    timeline = build_timeline(read_runs(record), marks, tmp_path / "src", cores=2)
    units = {u.source: u for u in timeline.units}
    assert sorted(units) == ["a.cpp", "b.cpp", "gemm_kernel.cpp"]
    assert all(u.target == "k" and u.seconds > 0 for u in units.values())
    log = (build / ".ninja_log").read_text(encoding="utf-8")
    assert all(u.output in log for u in units.values())
    assert timeline.phases["compile"] > 0 and timeline.compile_wall > 0
    assert timeline.critical_path and timeline.critical_path[-1][0] == "libk.so"
    assert units["gemm_kernel.cpp"].pool == HEAVY_POOL
    assert units["a.cpp"].pool is None


def test_heavy_unit_goes_into_the_pool_declared_by_the_include(tmp_path: Path) -> None:
    built, build, _ = _build(tmp_path, kill=False)
    assert built.returncode == 0, built.stdout + built.stderr
    edges, pools = read_graph(build)
    assert HEAVY_POOL in pools and pools["compile"] == 2
    pooled = {Path(e.source).name: e.variables.get("pool") for e in edges if e.is_compile}
    assert pooled == {"a.cpp": "compile", "b.cpp": "compile", "gemm_kernel.cpp": HEAVY_POOL}


def test_ninja_starts_the_units_longest_first_by_their_measured_seconds(tmp_path: Path) -> None:
    known = [KnownUnit("a.cpp", "", 1.0, 2**28, 0.0), KnownUnit("b.cpp", "", 9.0, 2**28, 1.0),
             KnownUnit("gemm_kernel.cpp", "", 3.0, 2**28, 2.0)]
    built, build, _ = _build(tmp_path, kill=False, known=known, jobs=1)
    assert built.returncode == 0, built.stdout + built.stderr
    log = [line.split("\t") for line in
           (build / ".ninja_log").read_text(encoding="utf-8").splitlines()[1:]]
    started = [Path(out).name for _, _, _, out, _ in sorted(
        (entry for entry in log if entry[3].endswith(".o")), key=lambda e: int(e[0]))]
    assert started == ["b.cpp.o", "gemm_kernel.cpp.o", "a.cpp.o"]  # CMake lists a, b, gemm


def test_a_unit_killed_for_memory_is_retried_in_the_pool(tmp_path: Path) -> None:
    built, build, record = _build(tmp_path, kill=True)
    assert (tmp_path / "killed-once").is_file()  # the launcher did kill the first try
    assert built.returncode == 0, built.stdout + built.stderr
    assert "retrying in pool" in built.stdout
    runs = read_runs(record)
    assert [r.rc != 0 for r in runs] == [True, False]
    assert runs[0].retried == ("CMakeFiles/k.dir/gemm_kernel.cpp.o",)
    plan = json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    assert plan["killed"] == ["gemm_kernel.cpp"]
    timeline = build_timeline(runs, BuildMarks(), tmp_path / "src", cores=2)
    assert timeline.retried == ["CMakeFiles/k.dir/gemm_kernel.cpp.o"]
    assert timeline.killed_sources == ["gemm_kernel.cpp"]
    assert len(timeline.units) == 3
    assert (build / "libk.so").is_file()


@pytest.mark.network
@pytest.mark.nvcc
@pytest.mark.slow
def test_example_wheel_timeline_units_and_pool(tmp_path: Path) -> None:
    repo = pybind11_bare_repo(tmp_path / "pb", tmp_path / "pybind11.git")
    assert repo
    cmake_args = (f"-DMINI_VLLM_PYBIND11_GIT_REPOSITORY=file://{tmp_path / 'pybind11.git'} "
                  "-DMINI_VLLM_PYBIND11_GIT_TAG=v3.1.0")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(example_recipe("mini-vllm-timeline",
                                     tail=f'[build.env]\nCMAKE_ARGS = "{cmake_args}"\n'),
                      encoding="utf-8")
    cache = tmp_path / "cache"
    # an empty ccache: a warm one (a ccache on PATH is the launcher) answers every unit in
    # milliseconds, and there would be no compiler's memory to measure
    result = subprocess.run([sys.executable, "-m", "sparkbuild", "wheel", "--recipe", recipe,
                             "--cache", cache, "--out", tmp_path / "out", "--json"],
                            capture_output=True, text=True, timeout=1800, check=False,
                            env={**os.environ, "CCACHE_DIR": str(tmp_path / "ccache")})
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    timeline = report["timeline"]
    assert sum(timeline["phases"].values()) >= 0.9 * timeline["wall_seconds"], timeline
    assert {"configure", "compile", "link", "wheel rewrite", "machine code",
            "verify"} <= set(timeline["phases"])
    units = report["units"]
    compiled = [u for u in units if u["path"].endswith((".cu", ".cpp"))]
    assert len(compiled) == len(units) >= 5
    assert all(u["seconds"] > 0 for u in units)
    assert len({u["path"] for u in units}) == len(units)
    # doctor said what it planned; the example's build.ninja says the same
    assert "pool sparkbuild_heavy of depth" in result.stderr
    pool = report["build_plan"]["pool"]
    assert pool["basis"] == "rule" and pool["depth"] >= 1
    (build_dir,) = {Path(r) for r in [json.loads(line)["dir"] for line in (
        cache / "work" / "mini-vllm-timeline" / "logs" / "ninja-runs.jsonl").read_text(
        ).splitlines()]}
    edges, pools = read_graph(build_dir)
    assert pools[HEAVY_POOL] == pool["depth"]
    pooled = {Path(e.source).name for e in edges if e.variables.get("pool") == HEAVY_POOL}
    assert {"scaled_mm_sm120.cu", "nvfp4_block_scaled_mma.cu"} <= pooled
    assert "activation_kernels.cu" not in pooled
    assert {Path(u["path"]).name for u in units if u.get("pool")} == pooled
    # the manifest keeps the unit table; the cache keeps the measured peaks
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert len(manifest["build"]["units"]) == len(units)
    memory = json.loads((cache / "units" / "memory.json").read_text(encoding="utf-8"))
    assert any(v.get("peak_rss_bytes") for v in memory.values())
