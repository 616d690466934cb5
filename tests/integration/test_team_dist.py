"""A team of Sparks on loopback: one sccache-dist scheduler, two build servers, `wheel --dist`.

The scheduler and build server 1 are started by ``sparkbuild team scheduler`` and ``team
server --cpus 1``; build server 2 is started by hand (``sccache-dist server`` with the test's
own TOML and a JWT made by ``sccache-dist auth``, on one core by ``taskset``), as a user who
never runs sparkbuild's commands would.  JWT HS256 server auth names each server by its
``ip:port``, so the two register as two on one loopback address (2 servers, 2 cpus).

With one core per server (capacity 2 each: sccache-dist gives a server cpus + 1 + cpus/8
jobs) and MAX_JOBS = 2 here + 2 of the team, the example's units spread over both.  Then:

* a wrong client token: refused before anything is prepared or compiled, the error names
  the scheduler (exit 2), and the scheduler allocated no job;
* a scheduler that is not there: a warning and a local build (through sccache, without
  dist): the reference for the bytes;
* the dist build: sccache's stats count compiles on both servers, ``build-trace.json`` has a
  process per server, the wheelhouse verifies and the wheel is the local build's, byte for
  byte (the example's units have no cudafe++ ``_INTERNAL_`` ids; see docs/team.md);
* server 1 killed (SIGKILL) while it runs a step of a dist build: its steps are compiled
  here (sccache's local fallback), server 2 keeps compiling, the wheelhouse verifies and
  the wheel is again the same bytes.

Every process the test starts is stopped by its PID when the module ends, pass or fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from support import INICONFIG_PIN, example_recipe
from support.team_processes import (
    SCCACHE_DIST,
    Started,
    _alive,
    _free_port,
    _requirements,
    _start,
    _wait,
    start_scheduler,
    start_server,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

RECIPE_NAME = "mini-vllm-dist"
TIMEOUT = 1200


@dataclass
class Team:
    root: Path
    recipe: Path
    stable: Path
    scheduler: str
    servers: tuple[str, str]
    token: str
    started: dict[str, Started]

    def scheduler_log(self) -> str:
        return self.started["scheduler"].log.read_text(errors="replace")

    def status(self) -> dict[str, int]:
        request = urllib.request.Request(self.scheduler + "/api/v1/scheduler/status",
                                         headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            data: dict[str, int] = json.loads(response.read())
        return data


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    _requirements()
    root = tmp_path_factory.mktemp("team-dist")
    recipe = root / "recipe.toml"
    recipe.write_text(example_recipe(RECIPE_NAME, tail=INICONFIG_PIN), encoding="utf-8")
    ports = [_free_port() for _ in range(3)]
    scheduler = f"127.0.0.1:{ports[0]}"
    servers = (f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}")
    started: dict[str, Started] = {}
    try:
        started["scheduler"] = start_scheduler(root, scheduler)
        started["server1"] = start_server("server1", root, scheduler, servers[0])
        started["server2"] = _start_by_hand(root, scheduler, servers[1])
        team = Team(root, recipe, root / "stable", f"http://{scheduler}", servers,
                    (root / "client.token").read_text().strip(), started)
        _wait(lambda: team.status()["num_servers"] == 2, *started.values())
        assert team.status()["num_cpus"] == 2
        yield team
    finally:
        for process in reversed(list(started.values())):
            process.stop()
        assert not [p for s in started.values() for p in [s.process.pid, *s.pids] if _alive(p)]


def _start_by_hand(root: Path, scheduler: str, address: str) -> Started:
    """A build server with the user's own TOML: no sparkbuild involved."""
    jwt = subprocess.run([SCCACHE_DIST, "auth", "generate-jwt-hs256-server-token", "--server",
                          address, "--config", root / "sched" / "scheduler.toml"],
                         capture_output=True, text=True, check=True).stdout.strip()
    own = root / "s2"
    own.mkdir()
    config = own / "my-server.toml"
    config.write_text(f"""cache_dir = "{own}/tc"
public_addr = "{address}"
scheduler_url = "http://{scheduler}"
[builder]
type = "overlay"
build_dir = "{own}/build"
bwrap_path = "{shutil.which('bwrap')}"
[scheduler_auth]
type = "jwt_token"
token = "{jwt}"
""", encoding="utf-8")
    config.chmod(0o600)
    return _start("server2", ["taskset", "--cpu-list", "1", str(SCCACHE_DIST), "server",
                              "--config", str(config)], root, {})


def _wheel(team: Team, name: str, dist: str, token: str) -> tuple[subprocess.Popen[str], Path]:
    home = team.root / name
    home.mkdir()
    # a fresh tree in the stable build root: every unit compiles again
    shutil.rmtree(team.stable / "work" / RECIPE_NAME / "tree", ignore_errors=True)
    env = {**os.environ, "SPARKBUILD_BUILD_ROOT": str(team.stable),
           "SPARKBUILD_DIST_TOKEN": token}
    env.pop("SCCACHE_LOG", None)
    command = [sys.executable, "-m", "sparkbuild", "wheel", "--recipe", str(team.recipe),
               "--cache", str(team.root / "cache"), "--out", str(home / "wheelhouse"),
               "--dist", dist, "--json"]
    with (home / "wheel.json").open("w") as out, (home / "wheel.err").open("w") as err:
        process = subprocess.Popen(command, cwd=home, env=env, stdout=out, stderr=err,
                                   text=True)
    return process, home


def _finished(process: subprocess.Popen[str], home: Path) -> tuple[dict[str, Any], str]:
    try:
        code = process.wait(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
    err = (home / "wheel.err").read_text()
    assert code == 0, err[-4000:]
    return json.loads((home / "wheel.json").read_text()), err


def _wheel_bytes(home: Path) -> bytes:
    (wheel,) = sorted((home / "wheelhouse").glob("mini_vllm-*.whl"))
    return wheel.read_bytes()


def _verify(home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "sparkbuild", "verify",
                           str(home / "wheelhouse")], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def _no_sccache_left(stable: Path) -> None:
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "exe").readlink().name != "sccache":
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        assert str(stable).encode() not in environ or not _alive(int(entry.name)), entry


def test_doctor_reports_the_team_and_a_wrong_token_is_refused_before_anything(
        team: Team) -> None:
    env = {**os.environ, "SPARKBUILD_DIST_TOKEN": team.token}
    doctor = subprocess.run([sys.executable, "-m", "sparkbuild", "doctor", "--dist",
                             team.scheduler, "--json"], capture_output=True, text=True,
                            env=env, timeout=300, check=False)
    assert doctor.returncode == 0, doctor.stderr[-3000:]
    report = json.loads(doctor.stdout)
    assert (report["dist"]["servers"], report["dist"]["cpus"]) == (2, 2)
    assert report["dist"]["checks"]["dist token"]["ok"]
    assert report["plan"]["max_jobs"] == (os.cpu_count() or 1) + 2

    process, home = _wheel(team, "wrong-token", team.scheduler, "not-the-token")
    code = process.wait(timeout=300)
    error = json.loads((home / "wheel.json").read_text())["error"]
    assert code == 2 and error["error"] == "UsageError", error
    assert team.scheduler in error["what"] and "refused the client token" in error["what"]
    assert not (team.stable / "work" / RECIPE_NAME / "tree").exists()  # nothing prepared
    assert "created and will be assigned" not in team.scheduler_log()  # nothing allocated


def test_a_scheduler_that_is_not_there_is_a_local_build(team: Team) -> None:
    process, home = _wheel(team, "no-scheduler", f"http://127.0.0.1:{_free_port()}",
                           team.token)
    report, err = _finished(process, home)
    dist = report["dist"]
    assert "dist: cannot reach" in err and "compiles here" in err
    assert (dist["status"], dist["connected"], dist["dist_compiles"]) == ("unreachable", False,
                                                                          {})
    assert report["build_plan"]["launcher"].endswith("sccache")  # through sccache, locally
    assert report["compile_cache"] is None
    _verify(home)
    _no_sccache_left(team.stable)


def test_dist_build_spreads_over_both_servers_and_gives_the_same_bytes(team: Team) -> None:
    process, home = _wheel(team, "dist", team.scheduler, team.token)
    report, _ = _finished(process, home)
    dist = report["dist"]
    assert dist["status"] == "used" and dist["compile_fails"] == 0, dist
    assert all(dist["dist_compiles"].get(s, 0) > 0 for s in team.servers), dist
    assert report["build_plan"]["max_jobs"] == (os.cpu_count() or 1) + 2
    manifest = json.loads((home / "wheelhouse" / "manifest.json").read_text())
    assert manifest["build"]["dist"]["dist_compiles"] == dist["dist_compiles"]
    trace = json.loads(Path(report["build_trace"]).read_text())
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert {f"build server {s}" for s in team.servers} <= processes, processes
    units = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert len(units) == len(report["units"]) and all("seconds" in e["args"] for e in units)
    _verify(home)
    assert _wheel_bytes(home) == _wheel_bytes(team.root / "no-scheduler")
    _no_sccache_left(team.stable)


def test_a_server_killed_mid_build_costs_only_its_steps(team: Team) -> None:
    known = len(re.findall(r"Job \d+ created", team.scheduler_log()))
    process, home = _wheel(team, "killed", team.scheduler, team.token)
    victim = team.started["server1"]
    pid = victim.dist_pid()

    def running_on_victim() -> bool:
        log = team.scheduler_log()
        jobs = re.findall(rf"Job (\d+) created and will be assigned to server "
                          rf"ServerId\({re.escape(team.servers[0])}\)", log)
        started = set(re.findall(r"Job (\d+) updated state to Started", log))
        return any(int(j) >= known and j in started for j in jobs)

    _wait(running_on_victim, team.started["scheduler"], timeout=TIMEOUT)
    os.kill(pid, signal.SIGKILL)
    report, err = _finished(process, home)
    dist = report["dist"]
    assert dist["local_fallbacks"] >= 1 and dist["compile_fails"] == 0, dist
    assert dist["dist_compiles"].get(team.servers[1], 0) > 0, dist
    assert "falling back" in Path(report["build"]["log"]).with_name("sccache.log").read_text()
    assert "compiled here instead" in err
    _verify(home)
    assert _wheel_bytes(home) == _wheel_bytes(team.root / "no-scheduler")
    _no_sccache_left(team.stable)
