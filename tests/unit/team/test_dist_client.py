"""The dist client: the scheduler's URL, the token, the probe (an in-process HTTP server that
answers as sccache-dist 0.16's scheduler does), the client's SCCACHE_CONF."""

from __future__ import annotations

import dataclasses
import http.server
import json
import stat
import threading
import tomllib
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from sparkbuild.errors import UsageError
from sparkbuild.jobplan.machine import GIB, BuildPlan, with_team_cores
from sparkbuild.team import dist_token
from sparkbuild.team.dist_client import (
    DistLink,
    client_config,
    connect,
    connect_for,
    scheduler_url,
    write_client_config,
)
from sparkbuild.team.dist_token import read_client_token
from sparkbuild.team.scheduler_status import SchedulerStatus, parse_dist_status
from sparkbuild.team.team_options import TeamOptions

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TOKEN = "right-token"


class FakeScheduler(http.server.BaseHTTPRequestHandler):
    """sccache-dist's routes as measured: status as JSON; alloc_job with no body -> 400 for
    the right token, 401 "Fixed token mismatch" for a wrong one."""

    status: ClassVar[dict[str, Any]] = {"num_servers": 2, "num_cpus": 40, "in_progress": 1}
    allocations: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path != "/api/v1/scheduler/status":
            self.send_error(404)
            return
        body = json.dumps(self.status).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.allocations.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(401, b"Fixed token mismatch")
        else:
            self._answer(400, b"the request didn't have a binary content type")

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def scheduler() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeScheduler)
    FakeScheduler.allocations = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_scheduler_url_is_checked_and_normalised() -> None:
    assert scheduler_url("http://10.0.0.1:10600") == "http://10.0.0.1:10600/"
    assert scheduler_url(" https://sched.lan/ ") == "https://sched.lan/"
    assert scheduler_url("http://[fe80::1]:10600") == "http://[fe80::1]:10600/"
    for bad in ("10.0.0.1:10600", "ftp://x:1", "http://:10600", "http://u:p@x:1",
                "http://x:1?token=a", "http://x:99999"):
        with pytest.raises(UsageError):
            scheduler_url(bad)


def test_a_scheduler_url_that_cannot_be_read_is_a_usage_error() -> None:
    for bad in ("http://[::1", "http://::1]:10600", "http://[::1:10600/", "http://x y:1",
                "http://x:1/\x1b[2J"):
        with pytest.raises(UsageError) as refused:
            scheduler_url(bad)
        assert "\x1b" not in refused.value.render()


def _redirecting(code: int, route: str, target: str) -> type[FakeScheduler]:
    class Redirecting(FakeScheduler):
        allocations: ClassVar[list[str]] = []  # its own: FakeScheduler's is the other host's

        def do_GET(self) -> None:
            if self.path == route:
                self._moved()
            else:
                super().do_GET()

        def do_POST(self) -> None:
            self.allocations.append(self.headers.get("Authorization", ""))
            if self.path == route:
                self._moved()
            else:
                super().do_POST()

        def _moved(self) -> None:
            self.send_response(code)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Redirecting


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("route", ["/api/v1/scheduler/status", "/api/v1/scheduler/alloc_job"])
def test_a_redirect_is_refused_and_the_token_goes_nowhere_else(
        scheduler: str, monkeypatch: pytest.MonkeyPatch, code: int, route: str) -> None:
    """``scheduler`` is the other host: it notes every Authorization it gets."""
    monkeypatch.setenv(dist_token.TOKEN_ENV, TOKEN)
    moving = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), _redirecting(code, route, scheduler + "/api/v1/scheduler/alloc_job"))
    threading.Thread(target=moving.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{moving.server_address[1]}"
    try:
        with pytest.raises(UsageError, match="follows no redirect") as refused:
            connect(url, None)
    finally:
        moving.shutdown()
        moving.server_close()
    assert f"(HTTP {code}) to {scheduler}/api/v1/scheduler/alloc_job" in refused.value.what
    assert TOKEN not in refused.value.render()
    assert FakeScheduler.allocations == []  # the other host never saw the token


def test_the_token_the_scheduler_says_back_is_not_shown(scheduler: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    class Echoing(FakeScheduler):
        def do_POST(self) -> None:
            self._answer(401, f"mismatch: {self.headers.get('Authorization')}".encode())

    monkeypatch.setenv(dist_token.TOKEN_ENV, "secret-xyz")
    echoing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echoing)
    threading.Thread(target=echoing.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UsageError, match=r"mismatch: Bearer \*\*\*") as refused:
            connect(f"http://127.0.0.1:{echoing.server_address[1]}", None)
    finally:
        echoing.shutdown()
        echoing.server_close()
    assert "secret-xyz" not in refused.value.render()


def test_a_status_that_is_not_one_is_a_warning_and_a_local_build(
        scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dist_token.TOKEN_ENV, TOKEN)
    monkeypatch.setattr(FakeScheduler, "status", {"num_servers": 2, "num_cpus": -50})
    link = connect(scheduler, None)
    assert not link.connected and link.cpus == 0 and "num_cpus is -50" in str(link.reason)
    assert FakeScheduler.allocations == []  # no token sent to a scheduler that is not one


def test_the_token_comes_from_a_file_or_the_environment(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    monkeypatch.delenv(dist_token.TOKEN_ENV, raising=False)
    with pytest.raises(UsageError, match="client token"):
        read_client_token(None)
    monkeypatch.setenv(dist_token.TOKEN_ENV, " from-env\n")
    assert read_client_token(None) == ("from-env", "$SPARKBUILD_DIST_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    token_file.chmod(0o644)
    assert read_client_token(token_file) == ("from-file", f"file {token_file}")
    assert "readable by others" in capsys.readouterr().err
    token_file.write_text("  \n")
    with pytest.raises(UsageError, match="empty"):
        read_client_token(token_file)
    with pytest.raises(UsageError, match="cannot read"):
        read_client_token(tmp_path / "missing")


def test_a_right_token_connects_with_the_teams_cores(scheduler: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dist_token.TOKEN_ENV, TOKEN)
    link = connect(scheduler, None)
    assert link.connected and link.status == SchedulerStatus(2, 40, 1)
    assert link.cpus == 40 and link.scheduler == scheduler + "/"
    assert FakeScheduler.allocations == [f"Bearer {TOKEN}"]  # one probe, no job
    assert TOKEN not in json.dumps(link.to_dict()) and TOKEN not in repr(link)


def test_a_wrong_token_is_refused_naming_the_scheduler(scheduler: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dist_token.TOKEN_ENV, "secret-xyz")
    with pytest.raises(UsageError) as refused:
        connect(scheduler, None)
    assert scheduler in refused.value.what and "Fixed token mismatch" in refused.value.what
    assert refused.value.where == scheduler + "/" and "secret-xyz" not in refused.value.render()


def test_a_scheduler_not_there_is_a_warning_and_a_local_build(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(dist_token.TOKEN_ENV, TOKEN)
    url = closed_port()
    link = connect(url, None)
    assert not link.connected and link.cpus == 0 and "cannot reach" in str(link.reason)
    assert "compiles here" in capsys.readouterr().err


def test_a_scheduler_without_servers_builds_here(scheduler: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dist_token.TOKEN_ENV, TOKEN)
    monkeypatch.setattr(FakeScheduler, "status",
                        {"num_servers": 0, "num_cpus": 0, "in_progress": 0})
    link = connect(scheduler, None)
    assert not link.connected and link.reason == "the scheduler has no build server"


def test_no_dist_without_a_url() -> None:
    assert connect_for(TeamOptions()) is None


def test_the_client_config_is_private_and_reads_as_sccache_reads_it(tmp_path: Path) -> None:
    link = DistLink("http://10.0.0.1:10600/", 'to"ken\\x', "env", SchedulerStatus(1, 20, 0))
    path = write_client_config(tmp_path / "c.toml", link, tmp_path / "tc")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = tomllib.loads(path.read_text())
    assert data["dist"]["scheduler_url"] == "http://10.0.0.1:10600"
    assert data["dist"]["rewrite_includes_only"] is True  # the same bytes as a local compile
    assert data["dist"]["auth"] == {"type": "token", "token": 'to"ken\\x'}
    assert data["dist"]["toolchains"] == [] and data["dist"]["cache_dir"] == str(tmp_path / "tc")
    assert client_config(link, tmp_path / "tc") == path.read_text()
    write_client_config(path, link, tmp_path / "tc")  # written again, still private
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_dist_status_as_sccache_prints_it() -> None:
    status, note = parse_dist_status(
        '{"SchedulerStatus":["http://127.0.0.1:10600/",{"num_servers":2,"num_cpus":4,'
        '"in_progress":0}]}\n')
    assert status == SchedulerStatus(2, 4, 0) and note == "connected"
    status, note = parse_dist_status(
        '{"NotConnected":["http://127.0.0.1:10699/","enabled, not connected, will retry"]}')
    assert status is None and note == "not connected: enabled, not connected, will retry"
    assert parse_dist_status("") == (None, "no answer")


def test_max_jobs_counts_the_teams_cores_and_the_pool_the_servers_memory() -> None:
    from sparkbuild.jobplan.pools import plan_pools
    from sparkbuild.jobplan.team_pool import ServerMemory

    pool = plan_pools(cores=20, usable_bytes=115 * GIB, job_memory_gib=8.7)
    assert pool.depth == 13  # the rule: never fewer heavy slots than the single plan's 13
    plan = BuildPlan(20, 1, "sccache", ("MAX_JOBS=20: every core",), pool)
    team = with_team_cores(plan, team_cpus=60, servers=3, scheduler="http://s:1/",
                           usable_bytes=115 * GIB)
    assert team.max_jobs == 80 and team.pool is not None and team.pool.jobs == 80
    # three servers like this host: 345 GiB hold 28 units at 8.7 GiB beside 32 at 3 GiB
    assert (team.pool.depth, team.pool.local_depth, team.pool.local_jobs) == (28, 13, 20)
    assert team.pool.to_dict()["local_depth"] == 13 and pool.to_dict()["local_depth"] == 13
    assert any("the team's 60 cpus" in r for r in team.reasons)
    assert any("servers taken as alike" in r for r in team.pool.reasons)
    assert any("one of 13 slot(s)" in r for r in team.pool.reasons)
    small = with_team_cores(plan, team_cpus=60, servers=3, scheduler="http://s:1/",
                            usable_bytes=20 * GIB)
    assert small.max_jobs == 40 and "bounded by memory" in small.reasons[-1]
    tight = dataclasses.replace(pool, depth=1, heavy_budget_bytes=10 * GIB)
    held = with_team_cores(BuildPlan(20, 1, "sccache", (), tight), team_cpus=60, servers=3,
                           scheduler="http://s:1/", usable_bytes=115 * GIB)
    # 345 GiB: 23 x 10 GiB beside 37 x 3 GiB; the build host keeps its one slot
    assert held.pool is not None and (held.pool.depth, held.pool.local_depth) == (23, 1)
    little = with_team_cores(plan, team_cpus=60, servers=3, scheduler="http://s:1/",
                             usable_bytes=115 * GIB,
                             server_memory=ServerMemory(16 * GIB, "--dist-server-memory"))
    # 3 x 14.4 GiB do not hold 60 light units: the local plan's depth is the floor
    assert little.pool is not None and little.pool.depth == 13
    asked = with_team_cores(plan, team_cpus=60, servers=3, scheduler="http://s:1/",
                            usable_bytes=115 * GIB, requested_jobs=20)
    assert asked.max_jobs == 20
    assert with_team_cores(plan, team_cpus=0, servers=0, scheduler="x",
                           usable_bytes=GIB) is plan


def test_flashinfers_builder_gets_the_builds_launcher_environment() -> None:
    from sparkbuild.team.compile_cache import CacheSpec, CompileCacheResult
    from sparkbuild.team.sccache_server import SharedCache, launcher_environment

    result = CompileCacheResult(CacheSpec("local", "/c", {}, {}, "/c"), "ns")
    assert launcher_environment(None) == {}
    assert launcher_environment(SharedCache(result)) == {}  # no server running
    shared = SharedCache(result, "/venv/bin/sccache", {"SCCACHE_SERVER_PORT": "4242"})
    assert launcher_environment(shared) == {
        "FLASHINFER_NVCC_LAUNCHER": "/venv/bin/sccache",
        "FLASHINFER_CXX_LAUNCHER": "/venv/bin/sccache", "SCCACHE_SERVER_PORT": "4242"}
