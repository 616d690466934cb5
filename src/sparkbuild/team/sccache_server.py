"""The sccache server of one build: started on the shared cache, watched, read and stopped.

With ``wheel --dist`` the same server is sccache-dist's client: its ``SCCACHE_CONF`` holds
the ``[dist]`` settings (sparkbuild.team.dist_client), its log the lines that say which
build server compiled each step (sparkbuild.team.dist_record); without a shared cache it
runs on a cache of the build's own, removed at the end.

Each build starts its own sccache server on a free port (SCCACHE_SERVER_PORT), with the
shared cache's settings and secrets in the server's environment only, and stops it at the
end; the stats are read before and after (on a fresh server, "before" is zero).

The build's own processes get a different environment: the port, the base directories and
a throw-away local directory (SCCACHE_DIR), but no shared-cache settings.  That matters when
the shared cache dies during the build: sccache then waits about 30 s on every read and
write (a full vLLM build would take days), so a watchdog notices (Redis: a PING every two
seconds; any backend: a rising error count in the stats), stops the server, and the units
still to compile go through a server that the next compile starts with the build's
environment -- a local directory, removed at the end.  Compiles that were in flight are
compiled locally by the sccache client itself (SCCACHE_IGNORE_SERVER_IO_ERROR).  The build
goes on, uncached, with a warning; the wheel is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.console import info, step, warn
from sparkbuild.jobplan.team_pool import ServerMemory
from sparkbuild.proc import run
from sparkbuild.team.compile_cache import (
    PASSTHROUGH,
    CacheSpec,
    CompileCacheResult,
    SccacheStats,
    namespace,
)
from sparkbuild.team.dist_client import write_client_config
from sparkbuild.team.dist_record import LOG_MODULES, DistResult, read_steps
from sparkbuild.team.gate_server import (
    HEAVY_LOG,
    GatePlan,
    GateSlots,
    heavy_environment,
    plan_gate,
)
from sparkbuild.team.heavy_gate import cpu_list
from sparkbuild.team.scheduler_status import parse_dist_status
from sparkbuild.toolchain.tools import describe_toolchain, find_sccache

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sparkbuild.team.dist_client import DistLink

IDLE_TIMEOUT_S = 1800
"""A server left behind by a killed run exits after this long without work."""
WATCH_INTERVAL_S = 2.0
STATS_EVERY = 5
"""The watchdog reads sccache's error counts every STATS_EVERY intervals."""
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def redis_alive(endpoint: str, timeout: float = 2.0) -> str | None:
    """None when the Redis server at ``endpoint`` answers a PING; else why not."""
    parts = urllib.parse.urlsplit(endpoint)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 6379),
                                      timeout=timeout) as conn:
            if parts.scheme == "rediss":
                return None  # a TLS server that accepts connections: sccache does the rest
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError as exc:
        return f"cannot reach {endpoint}: {exc.strerror or exc}"
    if reply[:1] not in (b"+", b"-"):
        return f"{endpoint} did not answer like a Redis server"
    return None


@dataclass
class SccacheServer:
    """One sccache server on one port."""

    sccache: Path
    port: int
    server_env: dict[str, str]
    client_env: dict[str, str]
    cpus: str | None = None
    """``taskset --cpu-list`` of the server (sparkbuild.team.gate_server); None: every cpu."""

    def _command(self, *args: str, env: dict[str, str]) -> tuple[int, str]:
        # Variables sccache would read that sparkbuild did not set are unset (`env -u`), so
        # that neither a stray SCCACHE_BUCKET nor a SCCACHE_SERVER_UDS changes what runs.
        dropped = sorted(k for k in os.environ if k.startswith("SCCACHE_")
                         and k not in PASSTHROUGH and k not in env)
        unset = [part for key in dropped for part in ("-u", key)]
        pinned = ["taskset", "--cpu-list", self.cpus] if self.cpus else []
        result = run([*pinned, "env", *unset, str(self.sccache), *args], env=env, echo=False,
                     check=False, timeout=START_TIMEOUT_S)
        return result.returncode, result.output

    def start(self) -> str | None:
        """Start the server; None on success, else what sccache said."""
        code, output = self._command("--start-server", env=self.server_env)
        if code == 0:
            return None
        self.stop()
        lines = [line for line in output.splitlines() if line.strip()]
        return "; ".join(lines[-3:]) or f"sccache --start-server exited with {code}"

    def stats(self) -> SccacheStats | None:
        code, output = self._command("--show-stats", "--stats-format=json",
                                     env=self.client_env)
        start = output.find("{")
        if code != 0 or start < 0:
            return None
        try:
            return SccacheStats.from_json(json.loads(output[start:]))
        except (ValueError, TypeError, AttributeError):
            return None

    def stop(self) -> None:
        """Stop the server and wait (up to 20 s) until its port is closed."""
        self._command("--stop-server", env=self.client_env)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                return
            time.sleep(0.1)


@dataclass
class Watchdog:
    """Notices a shared cache that stopped answering, and takes its server down."""

    server: SccacheServer
    spec: CacheSpec
    others: tuple[SccacheServer, ...] = ()
    """The heavy units' server of a dist build: stopped with it."""
    failed: str | None = None
    snapshot: SccacheStats | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._watch, name="sccache-watchdog",
                                       daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()

    def _problem(self, tick: int, errors: int) -> tuple[str | None, int]:
        endpoint = self.spec.settings.get("SCCACHE_REDIS_ENDPOINT")
        if endpoint:
            why = redis_alive(endpoint)
            if why:
                return why, errors
        if tick % STATS_EVERY:
            return None, errors
        stats = self.server.stats()
        if stats is None:
            return "the sccache server stopped answering", errors
        if stats.failures > errors:
            return (f"{stats.failures - errors} cache read/write error(s) "
                    f"(read {stats.read_errors}, write {stats.write_errors}, "
                    f"timeouts {stats.timeouts})"), stats.failures
        return None, stats.failures

    def _watch(self) -> None:
        tick, errors = 0, 0
        while not self.stopped.wait(WATCH_INTERVAL_S):
            tick += 1
            why, errors = self._problem(tick, errors)
            if why is None:
                continue
            self.failed = why
            warn(f"the shared compile cache {self.spec.location} failed during the build: "
                 f"{why}; stopping its sccache server, the build goes on uncached")
            self.snapshot = self.server.stats()
            self.server.stop()
            for other in self.others:
                other.stop()
            return


@dataclass
class SharedCache:
    """What the build needs from its sccache server: the launcher and the variables."""

    result: CompileCacheResult
    launcher: str | None = None
    build_env: dict[str, str] = field(default_factory=dict)
    private: bool = False
    """The server's cache is the build's own, thrown away at the end: a dist build
    without a shared compile cache (``result`` is then not reported)."""
    dist: DistResult | None = None

    @property
    def role(self) -> str:
        """What the server is for: ``shared cache redis ...``, ``dist client of URL``."""
        parts = [] if self.private else [f"shared cache {self.result.spec.backend} "
                                         f"{self.result.spec.location}"]
        if self.dist is not None and self.dist.link.connected:
            parts.append(f"dist client of {self.dist.link.scheduler}")
        return ", ".join(parts) or "the build's own cache"

    @property
    def compile_cache(self) -> CompileCacheResult | None:
        """What the shared compile cache did; None for the build's private one."""
        return None if self.private else self.result


def launcher_environment(shared: SharedCache | None) -> dict[str, str]:
    """The variables a builder other than vLLM's (flashinfer's) needs to compile through
    this build's sccache server -- shared cache and dist alike: its own launcher variables
    and the server's port and settings.  Empty without a server."""
    if shared is None or not shared.launcher:
        return {}
    return {"FLASHINFER_NVCC_LAUNCHER": shared.launcher,
            "FLASHINFER_CXX_LAUNCHER": shared.launcher, **shared.build_env}


def _environments(spec: CacheSpec, namespace: str, port: int, work: Path,
                  basedirs: list[str], dist_conf: Path | None = None
                  ) -> tuple[dict[str, str], dict[str, str]]:
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    client = {
        "SCCACHE_SERVER_PORT": str(port),
        **({"SCCACHE_BASEDIRS": os.pathsep.join(basedirs)} if basedirs else {}),
        "SCCACHE_IDLE_TIMEOUT": str(IDLE_TIMEOUT_S),
        "SCCACHE_ERROR_LOG": str(logs / "sccache.log"),
        "SCCACHE_DIR": str(work / "sccache-fallback"),
        "SCCACHE_IGNORE_SERVER_IO_ERROR": "1",
        # dist: the [dist] settings, for a server the next compile may start too
        **({"SCCACHE_CONF": str(dist_conf)} if dist_conf else {}),
    }
    level = os.environ.get("SCCACHE_LOG") or "warn"
    level = f"{level},{LOG_MODULES}" if dist_conf else level
    server = {**client, **spec.scoped(namespace), **spec.secrets, "SCCACHE_LOG": level,
              **({"SCCACHE_LOG_MILLIS": "1"} if dist_conf else {})}
    return server, client


@dataclass(frozen=True)
class DistClient:
    """The build's server as sccache-dist's client: the probed scheduler, and where the
    client keeps its packaged toolchains (kept from build to build)."""

    link: DistLink
    toolchains: Path
    gate: GateSlots | None = None
    """The local plan's slots when the dist pool is deeper than the build host holds
    (sparkbuild.team.gate_server): the heavy units get a server of their own."""
    server_memory: ServerMemory | None = None
    """Each server's memory, for a builder alongside (flashinfer's) to plan with."""


def _dist_start(server: SccacheServer, dist: DistResult) -> None:
    """The client's own view once its server runs (``sccache --dist-status``)."""
    code, output = server._command("--dist-status", env=server.client_env)
    dist.at_start, dist.start_note = parse_dist_status(output if code == 0 else "")
    if dist.at_start is None:
        dist.warnings.append(f"the build's sccache server is {dist.start_note} to "
                             f"{dist.link.scheduler}: its units compile here until it is")
        warn(f"dist: {dist.warnings[-1]}")
    else:
        info(f"dist: {dist.link.scheduler}: {dist.at_start.servers} build server(s), "
             f"{dist.at_start.cpus} cpus")


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def _dist_finish(dist: DistResult, result: CompileCacheResult, log: Path, offset: int) -> None:
    """The build's numbers; its steps from its own part of the log (sccache appends)."""
    dist.stats = result.delta
    already = len(dist.warnings)  # _dist_start said its own
    try:
        with log.open(encoding="utf-8", errors="replace") as lines:
            lines.seek(offset)
            dist.steps = read_steps(lines, result.after)
    except OSError:
        dist.steps = []
    if dist.local_slots is not None:  # the heavy units' server's log: this build's alone
        try:
            with log.with_name(HEAVY_LOG).open(encoding="utf-8", errors="replace") as lines:
                dist.steps += read_steps(lines, None)
        except OSError:
            pass
    stats = dist.stats
    faults = stats.dist_errors - dist.capacity_fallbacks
    if faults > 0:
        dist.warnings.append(f"{faults} step(s) sent to a build server were compiled here "
                             "instead (sccache's local fallback: a server failed or died)")
    if stats.compile_fails:
        dist.warnings.append(f"{stats.compile_fails} compile(s) failed")
    for message in dist.warnings[already:]:
        warn(f"dist: {message}")
    servers = ", ".join(f"{k} {v}" for k, v in sorted(stats.dist_compiles.items()))
    info(f"dist: steps compiled on build servers: {servers or 'none'}; local fallbacks "
         f"{stats.dist_errors} ({dist.capacity_fallbacks} for want of a free server core)")


@contextlib.contextmanager
def shared_compile_cache(spec: CacheSpec, *, namespace: str, sccache: Path | None,
                         work: Path, build_root: Path, basedirs: list[str],
                         dist: DistClient | None = None, private: bool = False
                         ) -> Iterator[SharedCache]:
    """Run one build's sccache server for ``spec`` (with ``dist``: also sccache-dist's
    client); stopped when the block ends.  ``private``: ``spec`` is the build's own cache."""
    result = CompileCacheResult(spec, namespace, sccache=str(sccache) if sccache else None,
                                build_root=str(build_root), basedirs=basedirs)
    shared = SharedCache(result, private=private,
                         dist=DistResult(dist.link, server_memory=dist.server_memory)
                         if dist else None)
    if sccache is None:
        result.status = "unreachable"
        result.warnings.append("sccache is not installed (pip install sccache, or the "
                               "`build` extra): building without the shared compile cache")
        warn(result.warnings[-1])
        yield shared
        return
    port = free_port()
    conf = (write_client_config(work / "sccache-dist.toml", dist.link, dist.toolchains)
            if dist and dist.link.connected else None)
    server_env, client_env = _environments(spec, namespace, port, work, basedirs, conf)
    gate = (plan_gate(dist.gate, sccache=sccache, heavy_port=free_port(), work=work)
            if conf is not None and dist is not None else None)
    server = SccacheServer(sccache, port, server_env, client_env,
                           cpu_list(gate.cpus.light) if gate else None)
    log = Path(client_env["SCCACHE_ERROR_LOG"])
    offset = _log_size(log)
    step(f"starting sccache on 127.0.0.1:{port}: {spec.backend} {spec.location}"
         + ("" if private else f", namespace {namespace}")
         + (f", dist client of {dist.link.scheduler}" if conf and dist else ""))
    endpoint = spec.settings.get("SCCACHE_REDIS_ENDPOINT")
    why = (redis_alive(endpoint) if endpoint else None) or server.start()
    result.before = None if why else server.stats()
    if why or result.before is None:
        server.stop()
        result.status = "unreachable"
        result.warnings.append(f"the shared compile cache {spec.location} is unreachable "
                               f"({why or 'no stats from sccache'}): building without it")
        warn(result.warnings[-1])
        if conf is not None:
            conf.unlink(missing_ok=True)
        yield shared
        return
    shared.launcher = str(sccache)
    shared.build_env = client_env
    heavy = _start_heavy(gate, server, shared) if gate is not None else None
    if conf is not None and shared.dist is not None:
        _dist_start(server, shared.dist)
    watchdog = Watchdog(server, spec, (heavy,) if heavy else ())
    watchdog.start()
    try:
        yield shared
    finally:
        watchdog.finish()
        _finish(result, server, watchdog, heavy)
        if conf is not None and shared.dist is not None:
            _dist_finish(shared.dist, result, log, offset)
            conf.unlink(missing_ok=True)
        shutil.rmtree(work / "sccache-fallback", ignore_errors=True)
        if private:
            shutil.rmtree(spec.location, ignore_errors=True)


def _start_heavy(gate: GatePlan, server: SccacheServer, shared: SharedCache
                 ) -> SccacheServer | None:
    """The heavy units' server (sparkbuild.team.gate_server) beside the build's own, and
    the launcher in front of both; None, with a warning, when it does not start."""
    logs = Path(server.client_env["SCCACHE_ERROR_LOG"]).parent
    heavy = SccacheServer(server.sccache, gate.heavy_port,
                          heavy_environment(server.server_env, gate, logs),
                          {**server.client_env, "SCCACHE_SERVER_PORT": str(gate.heavy_port)},
                          cpu_list(gate.cpus.heavy))
    why = heavy.start()
    if why is not None:
        warn(f"dist: the heavy units' sccache server did not start ({why}): units that "
             f"fall back share the build's own server's {len(gate.cpus.light)} cpu(s)")
        return None
    shared.launcher = str(gate.launcher)
    shared.build_env = {**server.client_env, **gate.client_env()}
    if shared.dist is not None:
        shared.dist.local_slots = {"heavy_port": gate.heavy_port,
                                   "heavy_cpus": list(gate.cpus.heavy),
                                   "light_cpus": list(gate.cpus.light)}
    info(f"dist: {gate.describe()}")
    return heavy


def _finish(result: CompileCacheResult, server: SccacheServer, watchdog: Watchdog,
            heavy: SccacheServer | None = None) -> None:
    """Read the last numbers (the heavy units' server's added), stop whatever server holds
    the port, say what went wrong."""
    last = server.stats()
    server.stop()
    if heavy is not None:
        heavy_last = heavy.stats()
        heavy.stop()
        if last is not None and heavy_last is not None:
            last = last.plus(heavy_last)
    already = len(result.warnings)
    if watchdog.failed is None:
        result.status = "used" if last is not None else "degraded"
        result.after = last
        if last is None:
            result.warnings.append("the sccache server was gone at the end of the build: "
                                   "its numbers are lost")
    else:
        result.status = "degraded"
        shared_part = watchdog.snapshot or result.before or SccacheStats()
        result.after = shared_part.plus(last) if last else shared_part
        result.warnings.append(
            f"the shared compile cache failed during the build ({watchdog.failed}); the "
            "units after that were compiled here and not stored in it")
        already = len(result.warnings)  # the watchdog said so when it happened
    if result.status == "used" and result.delta.failures:
        result.status = "degraded"
        delta = result.delta
        result.warnings.append(
            f"{delta.failures} cache read/write error(s) during the build (read "
            f"{delta.read_errors}, write {delta.write_errors}, timeouts {delta.timeouts}): "
            "those units were compiled here")
    for message in result.warnings[already:]:
        warn(message)
    info(f"sccache: {result.hits} hit(s), {result.misses} miss(es) ({result.status})")


def probe(spec: CacheSpec, sccache: Path, scratch: Path) -> str | None:
    """Start and stop a server on ``spec`` (``doctor``): None when it works, else why not."""
    port = free_port()
    server_env, client_env = _environments(spec, "sparkbuild", port, scratch, [])
    server = SccacheServer(sccache, port, server_env, client_env)
    endpoint = spec.settings.get("SCCACHE_REDIS_ENDPOINT")
    why = (redis_alive(endpoint) if endpoint else None) or server.start()
    if why is None and server.stats() is None:
        why = "the sccache server gave no stats"
    server.stop()
    return why


@contextlib.contextmanager
def open_shared_cache(spec: CacheSpec | None, *, label: str, torch: str | None, work: Path,
                      cache_root: Path, dist: DistLink | None = None,
                      gate: GateSlots | None = None,
                      server_memory: ServerMemory | None = None
                      ) -> Iterator[SharedCache | None]:
    """The pipeline's entry: ``None`` without a shared cache and without ``--dist``; else
    one build's sccache server, its keys scoped by CUDA, ``torch`` (the one installed in the build
    environment), archs and series (``label``).  ``work`` is ``BUILD_ROOT/work/RECIPE``.
    ``dist``: the scheduler :func:`~sparkbuild.team.dist_client.connect` probed; the server
    is its client when it answered.  Without a shared cache the server runs on a cache of
    the build's own, thrown away at the end -- also when the scheduler did not answer: the
    local build then goes through sccache all the same, and gives the same bytes."""
    if spec is None and dist is None:
        yield None
        return
    private = spec is None
    if spec is None:
        own = work / "sccache-private"
        spec = CacheSpec("local", str(own), {}, {}, str(own))
    space = namespace(cuda=describe_toolchain()["nvcc"], torch=torch, label=label)
    sccache = find_sccache()
    root = work.parent.parent
    client = (DistClient(dist, cache_root / "team" / "dist-toolchains", gate, server_memory)
              if dist else None)
    with shared_compile_cache(spec, namespace=space, sccache=sccache.path if sccache else None,
                              work=work, build_root=root, basedirs=[str(root), str(cache_root)],
                              dist=client, private=private) as shared:
        yield shared


def dist_outcome(link: DistLink | None, shared: SharedCache | None) -> DistResult | None:
    """``dist`` for ``wheel --json``: the server's, or the probe's alone (a local build)."""
    if link is None:
        return None
    if shared is not None and shared.dist is not None:
        return shared.dist
    return DistResult(link)
