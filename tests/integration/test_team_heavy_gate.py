"""The heavy units' gate on loopback: a full heavy pool, a build server killed, the host held.

One sccache-dist scheduler and two build servers (``sparkbuild team scheduler`` and ``team
server --cpus 1``) on 127.0.0.1.  The build host's side is sparkbuild's own: the build's
sccache servers (``shared_compile_cache``, as ``wheel --dist`` starts them) with the gate of
a local plan of 2 jobs and 1 heavy slot, and the compiler launcher in front of sccache.
The build is the test's own ``build.ninja``: four memory-hungry CUDA units (many template
instantiations: cicc takes a few hundred MB) in the heavy pool at the depth the servers'
memory gives (4, deeper than the 1 slot the build host holds), and two light ones.

Server 1 is killed (SIGKILL, by its PID) once the scheduler has given it a job: its steps,
and those the scheduler has no free slot for, compile here (sccache's local fallback).
The build must complete, the heavy units' sccache server must run on the heavy slot's
cpus and the others' on the light ones (``taskset``), and the build host's compiles,
sampled every 0.1 s from /proc, must stay within the plan's local budget: one heavy unit
and one light one at their measured peaks, x1.15 (the planner's headroom).  The steps
seen at once under each server are printed, not bounded: sccache's jobserver does not
hold nvcc's sub-steps to one at a time (one run counted a unit's ptxas beside another
unit's cicc under the one-cpu heavy server; the memory stayed at 328 of 576 MiB).

Every process the test starts is stopped by its PID, pass or fail.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.team_processes import (
    Started,
    _alive,
    _descendants,
    _free_port,
    _requirements,
    _wait,
    start_scheduler,
    start_server,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.nvcc, pytest.mark.slow]

Team = tuple[Path, str, dict[str, Started], str]
"""The fixture's root, the scheduler's URL, the processes started, server 1's address."""

HEAVY_UNITS = 4
INSTANTIATIONS = 150
"""cicc of one heavy unit: about 300 MB here (a trivial unit: about 190 MB)."""
POOL_DEPTH = 4
HEADROOM = 1.15
COMPILERS = {"nvcc", "cudafe++", "cicc", "ptxas", "fatbinary", "nvlink", "gcc", "g++", "cc",
             "c++", "cc1", "cc1plus", "as", "ld", "collect2"}
"""What a compile runs on the build host (sccache's own processes are not compiles)."""
GENCODE = "arch=compute_121a,code=sm_121a"


def _heavy_source(index: int) -> str:
    lines = ["template <int K> __global__ void k(float* a, int n) {",
             "  float x = a[threadIdx.x];", "  #pragma unroll",
             "  for (int i = 0; i < 48; ++i) x = x * (1.0f + K * 1e-6f) + "
             f"__sinf(x + i * K + {index}) * a[(i * K) % n];",
             "  a[threadIdx.x] = x;", "}"]
    lines += [f"template __global__ void k<{i}>(float*, int);"
              for i in range(1, INSTANTIATIONS + 1)]
    return "\n".join(lines) + "\n"


def _light_source(index: int) -> str:
    return (f"__global__ void light{index}(float* a) {{ a[threadIdx.x] *= {index + 2}.0f; }}\n")


def _rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class Sampler:
    """The build host's compiles every 0.1 s: the sum of their RSS under ``roots`` (the
    ninja run and the build's sccache servers), and how many run under each server."""

    roots: dict[str, int]
    peak_kib: int = 0
    most: dict[str, int] = field(default_factory=dict)
    seen: dict[str, list[str]] = field(default_factory=dict)
    """The steps running under each root when the most ran."""
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        total = 0
        for name, root in self.roots.items():
            compiles = [p for p in _descendants(root) if _name(p) in COMPILERS]
            total += sum(_rss_kib(p) for p in compiles)
            steps = _running_together(compiles)
            if len(steps) > self.most.get(name, 0):
                self.most[name] = len(steps)
                self.seen[name] = [f"{p} {_name(p)} {_state(p)}" for p in steps]
        self.peak_kib = max(self.peak_kib, total)

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.sample()


def _running_together(pids: list[int]) -> list[int]:
    """The steps among ``pids`` that ran at one same moment.  Reading /proc is no snapshot:
    the walk over a server's threads' children and the reads after it take milliseconds,
    in which one step can end, be reaped and the server spawn the next (its jobserver
    token passed on), so two steps read one after the other may never have overlapped.
    Each is read twice, every first read before any second: a step running (not ended:
    Z) at both reads, and the same process (its start time), ran through the moment
    between the two passes, so all those counted ran together then."""
    first = {p: _started(p) for p in pids if _is_step(p)}
    return [p for p, started in first.items()
            if started is not None and _is_step(p) and _started(p) == started]


def _is_step(pid: int) -> bool:
    return _name(pid) in ("cicc", "ptxas", "cudafe++") and _state(pid) not in ("Z", "?")


def _started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot): a PID used again differs."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _peak_alone(source: Path, out: Path) -> int:
    """One unit compiled here by plain nvcc: the peak of its compiles' RSS (KiB)."""
    process = subprocess.Popen(["nvcc", "-gencode", GENCODE, "-c", str(source), "-o", str(out)])
    sampler = Sampler({"alone": process.pid})
    while process.poll() is None:
        sampler.sample()
        time.sleep(0.05)
    assert process.returncode == 0
    return sampler.peak_kib


def _sccache_servers(ports: tuple[int, ...]) -> dict[int, int]:
    """port -> the PID of the sccache server (daemon) listening for it."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or _name(int(entry.name)) != "sccache":
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if _name(parent) == "sccache":
            continue  # a process of a server, not the server
        for port in ports:
            if f"SCCACHE_SERVER_PORT={port}".encode() in environ and port not in found:
                found[port] = int(entry.name)
    return found


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    _requirements()
    if shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the gate splits two cpus at least with taskset")
    root = tmp_path_factory.mktemp("heavy-gate")
    scheduler = f"127.0.0.1:{_free_port()}"
    started: dict[str, Started] = {}
    try:
        started["scheduler"] = start_scheduler(root, scheduler)
        addresses = {name: f"127.0.0.1:{_free_port()}" for name in ("server1", "server2")}
        for name, address in addresses.items():
            started[name] = start_server(name, root, scheduler, address)
        url = f"http://{scheduler}"

        def servers() -> int:
            import json
            import urllib.request

            request = urllib.request.Request(url + "/api/v1/scheduler/status",
                                             headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return int(json.loads(answer.read())["num_servers"])

        _wait(lambda: servers() == 2, *started.values())
        yield root, url, started, addresses["server1"]
    finally:
        for process in reversed(list(started.values())):
            process.stop()
        assert not [p for s in started.values() for p in [s.process.pid, *s.pids] if _alive(p)]


def test_a_killed_server_under_a_full_heavy_pool_never_overcommits_the_build_host(
        team: Team, tmp_path: Path) -> None:
    from sparkbuild.jobplan.heavy_units import write_heavy_outputs
    from sparkbuild.team.compile_cache import CacheSpec
    from sparkbuild.team.dist_client import connect
    from sparkbuild.team.gate_server import GateSlots
    from sparkbuild.team.sccache_server import DistClient, shared_compile_cache
    from sparkbuild.toolchain.tools import find_sccache

    root, url, started, address = team
    build = tmp_path / "build"
    build.mkdir()
    heavy = [build / f"heavy{i}.cu" for i in range(HEAVY_UNITS)]
    light = [build / f"light{i}.cu" for i in range(2)]
    for index, path in enumerate(heavy):
        path.write_text(_heavy_source(index))
    for index, path in enumerate(light):
        path.write_text(_light_source(index))
    heavy_kib = _peak_alone(heavy[0], tmp_path / "alone-heavy.o")
    light_kib = _peak_alone(light[0], tmp_path / "alone-light.o")
    budget_kib = HEADROOM * (heavy_kib + light_kib)  # 1 heavy slot + 1 light slot
    assert 2 * heavy_kib > budget_kib  # two heavy units at once would be over: it can fail

    sccache = find_sccache()
    assert sccache is not None
    link = connect(url, root / "client.token")
    assert link.connected and link.status is not None and link.status.servers == 2
    own = tmp_path / "cache"
    spec = CacheSpec("local", str(own), {}, {}, str(own))
    client = DistClient(link, tmp_path / "toolchains", GateSlots(1, 2))
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    victim = started["server1"]
    with shared_compile_cache(spec, namespace="test", sccache=sccache.path, work=work,
                              build_root=tmp_path, basedirs=[], dist=client,
                              private=True) as shared:
        assert shared.dist is not None and shared.dist.local_slots is not None, (
            "the gate did not open")
        slots = shared.dist.local_slots
        assert slots["heavy_cpus"] != slots["light_cpus"]
        env = {**os.environ, **shared.build_env}
        gate_outputs = Path(env["SPARKBUILD_HEAVY_OUTPUTS"])
        write_heavy_outputs(gate_outputs, build, "test", [p.with_suffix(".o").name
                                                          for p in heavy])
        launcher = shared.launcher
        assert launcher is not None and launcher != str(sccache.path)
        rules = [f"pool sparkbuild_heavy\n  depth = {POOL_DEPTH}\n",
                 f"rule cu\n  command = {launcher} nvcc -gencode {GENCODE} -c $in -o $out\n"]
        rules += [f"build {p.with_suffix('.o').name}: cu {p.name}\n  pool = sparkbuild_heavy\n"
                  for p in heavy]
        rules += [f"build {p.with_suffix('.o').name}: cu {p.name}\n" for p in light]
        (build / "build.ninja").write_text("\n".join(rules))
        servers = _sccache_servers((int(env["SCCACHE_SERVER_PORT"]), slots["heavy_port"]))
        assert len(servers) == 2, servers
        ninja = subprocess.Popen([shutil.which("ninja") or "ninja", "-j",
                                  str(POOL_DEPTH + len(light))], cwd=build, env=env,
                                 stdout=(tmp_path / "ninja.log").open("w"),
                                 stderr=subprocess.STDOUT)
        affinity = {port: sorted(os.sched_getaffinity(pid)) for port, pid in servers.items()}
        sampler = Sampler({"ninja": ninja.pid,
                           "light": servers[int(env["SCCACHE_SERVER_PORT"])],
                           "heavy": servers[slots["heavy_port"]]})
        watch = threading.Thread(target=sampler.run, daemon=True)
        watch.start()
        try:
            pid = victim.dist_pid()
            _wait(lambda: _assigned(started["scheduler"], address), started["scheduler"],
                  timeout=600)
            os.kill(pid, signal.SIGKILL)
            code = ninja.wait(timeout=1500)
        finally:
            if ninja.poll() is None:
                ninja.kill()
                ninja.wait()
            sampler.stop.set()
            watch.join()
        assert code == 0, (tmp_path / "ninja.log").read_text()[-3000:]
    assert all((build / p.with_suffix(".o").name).is_file() for p in [*heavy, *light])
    stats = shared.dist.stats
    assert stats is not None and stats.dist_errors >= 2, stats  # steps fell back here
    print(f"heavy unit alone {heavy_kib} KiB, light {light_kib} KiB, budget {budget_kib:.0f} "
          f"KiB; build host's compiles peaked at {sampler.peak_kib} KiB; most steps at once "
          f"{sampler.most} ({sampler.seen}); fallbacks {stats.dist_errors}, on servers "
          f"{stats.dist_compiles}; affinity {affinity}")
    assert affinity[slots["heavy_port"]] == sorted(slots["heavy_cpus"]), affinity
    assert affinity[int(env["SCCACHE_SERVER_PORT"])] == sorted(slots["light_cpus"]), affinity
    assert sampler.peak_kib <= budget_kib, (sampler.peak_kib, heavy_kib, light_kib)
    left = [p for p in servers.values() if _alive(p)]
    for pid in left:  # shared_compile_cache stopped them; any left is stopped by its PID
        os.kill(pid, signal.SIGKILL)
    assert not left


def _assigned(scheduler: Started, address: str) -> bool:
    """The scheduler has given the server at ``address`` a job."""
    return f"will be assigned to server ServerId({address})" in scheduler.log.read_text(
        errors="replace")
