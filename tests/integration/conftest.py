"""Shared fixtures of the integration tests: real sdists, cached under ~/.cache."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.sources.index import fetch_sdist
from sparkbuild.store.cache import Cache, default_cache_root

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``integration`` on the tests under tests/integration/ only.

    This hook sees every collected item of the run, not only this directory's, so
    each item's path decides (``-m "not integration"`` must still select the unit tests).
    """
    for item in items:
        if item.path.resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The hostile corpus's counts: cases run, ok (the right error, or the right success),
    defects (anything else: a wrong code, a traceback, a missing fragment, a leftover)."""
    marker = "test_hostile_corpus.py::test_case["
    outcomes: dict[str, str] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if marker in nodeid and outcomes.get(nodeid) != "failed":
                outcomes[nodeid] = "failed" if outcome == "error" else outcome
    if not outcomes:
        return
    from corpus.runner import summary

    values = list(outcomes.values())
    terminalreporter.write_line("hostile corpus: " + summary(
        values.count("passed"), values.count("failed"), values.count("skipped")))


@pytest.fixture(scope="session")
def vllm_sdist() -> Callable[[str], Path]:
    """``vllm_sdist("0.33.0")``: the real vllm sdist, through sparkbuild's own index client.

    Downloaded once from the index pip is configured with (sha256 checked against the
    index's) into the user's cache (~/.cache/sparkbuild, or $SPARKBUILD_CACHE as it was when
    the test run started), so later runs need no network.  The path is the cache blob:
    its name is the sha256, not the sdist's file name.  Tests using it are ``network``.
    """
    cache = Cache(default_cache_root())
    fetched: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in fetched:
            fetched[version] = fetch_sdist(cache, "vllm", version)
        return fetched[version]

    return get


# -- a real Redis server (the shared compile cache's tests) -----------------------------------


@dataclass
class RedisServer:
    """A redis-server of the test's own on 127.0.0.1, with its own directory."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *words: str) -> bytes:
        """One command in Redis's inline form; the first line of the reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(" ".join(words).encode() + b"\r\n")
            return conn.recv(4096).split(b"\r\n", 1)[0]

    def dbsize(self) -> int:
        return int(self.command("DBSIZE").lstrip(b":"))

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Debian's redis-server (installed by .ci/run), stopped when the test ends."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is missing: .ci/run installs it (apt-get)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    directory = tmp_path_factory.mktemp("redis")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--save", "", "--appendonly", "no", "--daemonize", "no",
         "--logfile", str(directory / "redis.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = RedisServer(port, directory, process)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if server.command("PING") == b"+PONG":
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start: {directory / 'redis.log'}")
            time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
