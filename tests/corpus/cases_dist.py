"""Hostile cases of the team's network: the sccache-dist scheduler's probe (``doctor --dist``,
``wheel --dist``), the team's ``--listen`` and every HTTP read's deadline.

Each network case runs its own HTTP server on 127.0.0.1, a thread of the corpus's process
(:class:`Served`): a stand-in scheduler that answers as told (a redirect, a status that is
not one, one byte every second), a second server that notes who reached it, a served
wheelhouse, a jit-cache or an index that trickles.  The root cause each group answers is
named above it; every group holds cases that failed against the code before, and
held-out variants (another spelling of the same attack).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from corpus.cases import Case, Invocation
from sparkbuild.errors import NetworkError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    Reply = Callable[[http.server.BaseHTTPRequestHandler], None]

TOKEN = "corpus-dist-token-7f3a9c"
STATUS = "/api/v1/scheduler/status"
ALLOC = "/api/v1/scheduler/alloc_job"
GOOD_STATUS = {"num_servers": 2, "num_cpus": 8, "in_progress": 0}
DEADLINE = {"SPARKBUILD_NET_DEADLINE": "3"}
QUICK_S = 25.0
"""A command under a 3 s deadline must be done well before this."""
TRICKLE_S = 40.0
"""How long a trickling server goes on (the code before the deadline waited it out)."""
DOCTOR = ("sparkbuild.team.dist_checks",)
TEAM = ("sparkbuild.team.dist_services",)


# -- the servers ------------------------------------------------------------------------------


class Served:
    """An HTTP server on 127.0.0.1 answering ``routes`` (path -> reply); every request it
    got is noted (method, path, Authorization)."""

    def __init__(self, routes: dict[str, Reply], *, files: Path | None = None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        served = self
        base: type[http.server.BaseHTTPRequestHandler] = (
            http.server.SimpleHTTPRequestHandler if files else http.server.BaseHTTPRequestHandler)

        class Handler(base):  # type: ignore[valid-type,misc]
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                served.seen.append((self.command, self.path,
                                    self.headers.get("Authorization")))
                reply = routes.get(self.path)
                with contextlib.suppress(OSError):
                    if reply is not None:
                        reply(self)
                    elif files is not None and self.command == "GET":
                        super().do_GET()
                    else:
                        self.send_error(404)

            do_GET = do_POST = _answer

        handler = functools.partial(Handler, directory=str(files)) if files else Handler
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def body(code: int, data: bytes, content_type: str = "application/json") -> Reply:
    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return reply


def status(value: object) -> Reply:
    """The status route's answer: ``value`` as JSON, or as it is when it is text."""
    return body(200, value.encode() if isinstance(value, str) else json.dumps(value).encode())


def accepts_any() -> Reply:
    """alloc_job as sccache-dist answers a right token: 400, the empty body is no bincode."""
    return body(400, b"the request didn't have a binary content type", "text/plain")


def echoes_token() -> Reply:
    """alloc_job refusing the token and saying it back (as a scheduler's log line does)."""
    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        said = f"Fixed token mismatch: got {handler.headers.get('Authorization')}"
        body(401, said.encode(), "text/plain")(handler)

    return reply


def redirect(code: int, location: Callable[[], str]) -> Reply:
    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(code)
        handler.send_header("Location", location())
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return reply


def raw(data: bytes) -> Reply:
    """Bytes on the connection as they are (no HTTP), then the end."""
    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.wfile.write(data)
        handler.close_connection = True

    return reply


def trickle(*, length: int = 4096, byte: bytes = b" ", headers_too: bool = False,
            every: float = 1.0) -> Reply:
    """An answer of ``length`` bytes sent one byte every ``every`` seconds (the status line
    and headers too, with ``headers_too``), for :data:`TRICKLE_S` at most."""
    def reply(handler: http.server.BaseHTTPRequestHandler) -> None:
        head = (f"HTTP/1.0 200 OK\r\nContent-Length: {length}\r\n"
                "Content-Type: application/json\r\n\r\n").encode()
        ends = time.monotonic() + TRICKLE_S
        if not headers_too:
            handler.wfile.write(head)
            head = b""
        for item in [head[i:i + 1] for i in range(len(head))] + [byte] * length:
            if time.monotonic() > ends:
                return
            handler.wfile.write(item)
            handler.wfile.flush()
            time.sleep(every)

    return reply


# -- what the cases run ---------------------------------------------------------------------


def _stop_all(*servers: Served, then: Callable[[], None] | None = None
              ) -> Callable[[], None]:
    def check() -> None:
        for server in servers:
            server.stop()
        if then is not None:
            then()

    return check


def _token_never_reached(elsewhere: Served) -> Callable[[], None]:
    def check() -> None:
        carried = [seen for seen in elsewhere.seen if seen[2]]
        assert not carried, f"the token went to another server: {carried}"

    return check


def _doctor(url: str, *, token_file: Path | None = None) -> list[str]:
    return ["doctor", "--dist", url,
            *(["--dist-token-file", str(token_file)] if token_file else [])]


def _wheel(work: Path, url: str, *, token_file: Path | None = None) -> list[str]:
    """``wheel --dist URL`` on a recipe whose source is not there: the probe runs before
    anything is prepared, and a build it lets go on stops at the source (SourceError)."""
    recipe = b.good_recipe(work / "recipe", spec=str(work / "no-such-source.tar.gz"))
    return ["wheel", "--recipe", str(recipe), "--cache", str(work / "cache"), "--out",
            str(work / "out"), "--dist", url,
            *(["--dist-token-file", str(token_file)] if token_file else [])]


def _env(work: Path, **extra: str) -> dict[str, str]:
    return {"SPARKBUILD_BUILD_ROOT": str(work / "build-root"), "PIP_CONFIG_FILE": "/dev/null",
            **extra}


def _token_file(work: Path, data: bytes) -> Path:
    path = work / "client.token"
    path.write_bytes(data)
    path.chmod(0o600)
    return path


# -- 6. the probe follows no redirect: the token never reaches another host ------------------
# urllib followed a 301/302/303 of the token probe (POST turned GET) with the Authorization
# header, to whatever host the Location named; a 307 answer was taken as "unknown".


def _redirected(code: int, route: str, *, command: str = "doctor", host: str = "127.0.0.1",
                from_file: bool = False) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        elsewhere = Served({STATUS: status(GOOD_STATUS), ALLOC: accepts_any(),
                            "/elsewhere": accepts_any()})
        target = f"http://{host}:{elsewhere.port}"
        routes = {STATUS: status(GOOD_STATUS), ALLOC: accepts_any()}
        routes[route] = redirect(code, lambda: target + (route if route == STATUS
                                                         else "/elsewhere"))
        scheduler = Served(routes)
        token_file = _token_file(work, f"{TOKEN}\n".encode()) if from_file else None
        args = (_wheel(work, scheduler.url, token_file=token_file) if command == "wheel"
                else _doctor(scheduler.url, token_file=token_file))
        env = _env(work) if from_file else _env(work, SPARKBUILD_DIST_TOKEN=TOKEN)
        return Invocation(args, env=env, unset=("SPARKBUILD_DIST_TOKEN",) if from_file else (),
                          after=_stop_all(scheduler, elsewhere,
                                          then=_token_never_reached(elsewhere)),
                          secrets=(TOKEN,))

    return build


def _build_server_redirected(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    elsewhere = Served({STATUS: status(GOOD_STATUS)})
    scheduler = Served({STATUS: redirect(302, lambda: elsewhere.url + STATUS)})
    return Invocation(["doctor", "--dist", scheduler.url, "--build-server",
                       str(work / "server-cache")], after=_stop_all(scheduler, elsewhere))


REDIRECT = "follows no redirect"
REDIRECT_CASES = [
    Case("dist-redirect-alloc-302-doctor", "dist", UsageError, REDIRECT,
         _redirected(302, ALLOC), DOCTOR),
    Case("dist-redirect-alloc-302-names-where", "dist", UsageError, "/elsewhere",
         _redirected(302, ALLOC), DOCTOR),
    Case("dist-redirect-alloc-301-wheel", "dist", UsageError, REDIRECT,
         _redirected(301, ALLOC, command="wheel"), DOCTOR),
    Case("dist-redirect-alloc-303-other-host", "dist", UsageError, "http://localhost:",
         _redirected(303, ALLOC, host="localhost"), DOCTOR),
    Case("dist-redirect-alloc-307-doctor", "dist", UsageError, "HTTP 307",
         _redirected(307, ALLOC), DOCTOR),
    Case("dist-redirect-alloc-308-token-file-wheel", "dist", UsageError, REDIRECT,
         _redirected(308, ALLOC, command="wheel", from_file=True), DOCTOR),
    Case("dist-redirect-status-302-doctor", "dist", UsageError,
         "answered /api/v1/scheduler/status with a redirect (HTTP 302)",
         _redirected(302, STATUS), DOCTOR),
    Case("dist-redirect-status-build-server", "dist", UsageError, REDIRECT,
         _build_server_redirected, DOCTOR),
]


# -- 7. a token is checked as it is read and never shown --------------------------------------
# A token file's inner newline went into the Authorization header: http.client refused it
# with a message quoting the header, which became the probe's reason, printed, in --json and
# in the manifest.  Other control characters, white space inside and bytes beyond ASCII were
# sent as they were.

FIRST, SECOND = "SECRETFIRSTLINE", "SECRETSECONDLINE"


def _bad_token(data: bytes, *, command: str = "doctor", env: bool = False,
               secrets: tuple[str, ...] = (FIRST, SECOND),
               alloc: Reply | None = None) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        scheduler = Served({STATUS: status(GOOD_STATUS), ALLOC: alloc or accepts_any()})
        token_file = None if env else _token_file(work, data)
        args = (_wheel(work, scheduler.url, token_file=token_file) if command == "wheel"
                else _doctor(scheduler.url, token_file=token_file))
        extra = {"SPARKBUILD_DIST_TOKEN": data.decode()} if env else {}
        return Invocation(args, env=_env(work, **extra),
                          unset=() if env else ("SPARKBUILD_DIST_TOKEN",),
                          after=_stop_all(scheduler), secrets=secrets)

    return build


TWO_LINES = f"{FIRST}\n{SECOND}\n".encode()
TOKEN_CASES = [
    Case("dist-token-file-inner-newline-doctor", "dist", UsageError,
         "the dist token file holds more than one line", _bad_token(TWO_LINES), DOCTOR),
    Case("dist-token-file-inner-newline-names-the-file", "dist", UsageError, "client.token",
         _bad_token(TWO_LINES), DOCTOR),
    Case("dist-token-file-inner-newline-wheel", "dist", UsageError, "more than one line",
         _bad_token(TWO_LINES, command="wheel"), DOCTOR),
    Case("dist-token-env-inner-newline", "dist", UsageError, "$SPARKBUILD_DIST_TOKEN",
         _bad_token(TWO_LINES, env=True), DOCTOR),
    Case("dist-token-env-inner-newline-wheel", "dist", UsageError, "more than one line",
         _bad_token(TWO_LINES, env=True, command="wheel"), DOCTOR),
    Case("dist-token-file-carriage-return", "dist", UsageError, "more than one line",
         _bad_token(f"{FIRST}\r{SECOND}".encode()), DOCTOR),
    Case("dist-token-file-escape-sequence", "dist", UsageError, "not printable ASCII",
         _bad_token(f"{FIRST}\x1b[2J{SECOND}".encode()), DOCTOR),
    Case("dist-token-file-nul", "dist", UsageError, "not printable ASCII",
         _bad_token(f"{FIRST}\x00{SECOND}".encode()), DOCTOR),
    Case("dist-token-file-space-inside", "dist", UsageError, "white space inside",
         _bad_token(f"{FIRST} {SECOND}".encode()), DOCTOR),
    Case("dist-token-file-tab-inside-wheel", "dist", UsageError, "white space inside",
         _bad_token(f"{FIRST}\t{SECOND}".encode(), command="wheel"), DOCTOR),
    Case("dist-token-file-latin1", "dist", UsageError, "not printable ASCII",
         _bad_token(f"{FIRST}\u00e9{SECOND}".encode()), DOCTOR),
    Case("dist-token-echoed-by-the-scheduler", "dist", UsageError,
         "refused the client token (HTTP 401: Fixed token mismatch",
         _bad_token(f"{FIRST}{SECOND}\n".encode(), secrets=(FIRST + SECOND,),
                    alloc=echoes_token()), DOCTOR),
]


# -- 10. every spelling of "every address" is warned about, or refused ------------------------
# --listen [::ffff:0.0.0.0]:PORT (IPv4-mapped IPv6) binds every IPv4 address, yet only
# 0.0.0.0 and [::] were taken for "every address".


def _team(role: str, listen: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        key = work / "server.key"
        if role == "scheduler":
            return Invocation(["team", "scheduler", "--listen", listen, "--client-token-file",
                               str(work / "client.token"), "--server-key-file", str(key),
                               "--dir", str(work / "state"), "--systemd"])
        return Invocation(["team", "server", "--scheduler", "http://192.168.1.10:10600",
                           "--listen", listen, "--server-key-file", str(key), "--cache-dir",
                           str(work / "server-cache"), "--systemd"])

    return build


EVERY = "binds every interface (0.0.0.0"
NOT_SERVER = "a build server cannot listen on every address (0.0.0.0"
LISTEN_CASES = [
    Case("dist-listen-mapped-any-scheduler", "dist", None, EVERY,
         _team("scheduler", "[::ffff:0.0.0.0]:10600"), TEAM),
    Case("dist-listen-mapped-any-server", "dist", UsageError, NOT_SERVER,
         _team("server", "[::ffff:0.0.0.0]:10501"), TEAM),
    Case("dist-listen-mapped-any-hex-scheduler", "dist", None, EVERY,
         _team("scheduler", "[::ffff:0:0]:10600"), TEAM),
    Case("dist-listen-mapped-any-long-server", "dist", UsageError, NOT_SERVER,
         _team("server", "[0:0:0:0:0:ffff:0.0.0.0]:10501"), TEAM),
    Case("dist-listen-mapped-any-upper-server", "dist", UsageError, NOT_SERVER,
         _team("server", "[::FFFF:0.0.0.0]:10501"), TEAM),
    Case("dist-listen-mapped-lan-normalised", "dist", None, "--listen 192.168.1.10:10600",
         _team("scheduler", "[::ffff:192.168.1.10]:10600"), TEAM),
]


# -- 12. the scheduler's answers are read typed and bounded; no traceback ---------------------
# The status was taken with int(): Infinity raised OverflowError (a traceback), -50 cpus and
# 40.5 or "40" passed as counts; an unclosed IPv6 URL raised ValueError from urlsplit; a
# reply that is not HTTP (BadStatusLine), a header line over http.client's limit
# (LineTooLong) and JSON nested too deeply (RecursionError) were tracebacks.


def _scheduler_says(status_reply: Reply, alloc: Reply | None = None,
                    **env: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        scheduler = Served({STATUS: status_reply, ALLOC: alloc or accepts_any()})
        return Invocation(_doctor(scheduler.url), env=_env(work, SPARKBUILD_DIST_TOKEN=TOKEN,
                                                           **env),
                          after=_stop_all(scheduler), secrets=(TOKEN,))

    return build


def _url(args: Callable[[Path, str], list[str]], url: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        return Invocation(args(work, url), env=_env(work, SPARKBUILD_DIST_TOKEN=TOKEN))

    return build


def _team_server_url(work: Path, url: str) -> list[str]:
    return ["team", "server", "--scheduler", url, "--listen", "192.168.1.11:10501",
            "--server-key-file", str(work / "server.key"), "--cache-dir",
            str(work / "server-cache"), "--systemd"]


NOT_LIKE = "did not answer like a sccache-dist scheduler"
ANSWER_CASES = [
    Case("dist-url-ipv6-unclosed-doctor", "dist", UsageError,
         "the dist scheduler URL cannot be read",
         _url(lambda w, u: _doctor(u), "http://[::1"), DOCTOR),
    Case("dist-url-ipv6-unclosed-wheel", "dist", UsageError,
         "the dist scheduler URL cannot be read",
         _url(lambda w, u: _wheel(w, u), "http://[::1:10600"), DOCTOR),
    Case("dist-url-ipv6-unopened-team-server", "dist", UsageError,
         "the dist scheduler URL cannot be read", _url(_team_server_url, "http://::1]:10600"),
         TEAM),
    Case("dist-status-infinity-cpus", "dist", None, "it holds Infinity, which is no count",
         _scheduler_says(status('{"num_servers": 1, "num_cpus": Infinity}')), DOCTOR),
    Case("dist-status-nan-servers", "dist", None, "it holds NaN, which is no count",
         _scheduler_says(status('{"num_servers": NaN, "num_cpus": 4}')), DOCTOR),
    Case("dist-status-negative-cpus", "dist", None, "num_cpus is -50, not a count",
         _scheduler_says(status({"num_servers": 2, "num_cpus": -50})), DOCTOR),
    Case("dist-status-fractional-cpus", "dist", None, "num_cpus is 40.5, not a whole number",
         _scheduler_says(status({"num_servers": 2, "num_cpus": 40.5})), DOCTOR),
    Case("dist-status-text-cpus", "dist", None, "num_cpus is a string, not a whole number",
         _scheduler_says(status({"num_servers": 2, "num_cpus": "40"})), DOCTOR),
    Case("dist-status-boolean-servers", "dist", None, "num_servers is true, not a whole number",
         _scheduler_says(status({"num_servers": True, "num_cpus": 8})), DOCTOR),
    Case("dist-status-huge-cpus", "dist", None, "num_cpus is 1000000000000000000000000, not",
         _scheduler_says(status({"num_servers": 2, "num_cpus": 10**24})), DOCTOR),
    Case("dist-status-servers-without-cpus", "dist", None, "3 server(s) but 0 cpu(s)",
         _scheduler_says(status({"num_servers": 3, "num_cpus": 0})), DOCTOR),
    Case("dist-status-nested-too-deep", "dist", None, NOT_LIKE,
         _scheduler_says(status("[" * 100_000 + "]" * 100_000)), DOCTOR),
    Case("dist-status-not-http", "dist", None, "cannot reach",
         _scheduler_says(raw(b"HELLO THERE\r\n\r\n")), DOCTOR),
    Case("dist-status-header-line-too-long", "dist", None, "cannot reach",
         _scheduler_says(raw(b"HTTP/1.0 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n{}")),
         DOCTOR),
    Case("dist-alloc-not-http", "dist", None, "the token probe could not reach",
         _scheduler_says(status(GOOD_STATUS), raw(b"\x00\x01garbage\r\n\r\n")), DOCTOR),
]


# -- 13. every HTTP read ends by a deadline ---------------------------------------------------
# A server that sends one byte every second never stays silent for the 60 s (10 s for the
# probe) socket timeout, so the probe, install from a URL, a jit-cache's download and an
# index's page waited as long as it went on.


def _served_wheelhouse(trickling: str) -> Callable[[Path], Invocation]:
    """A served wheelhouse whose ``trickling`` file (a name in it) comes a byte a second."""
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        out = b.node_wheelhouse(work / "srv" / "wheelhouse")
        name = trickling if trickling != "*.whl" else next(out.glob("*.whl")).name
        server = Served({f"/wheelhouse/{name}": trickle()}, files=work / "srv")
        venv = work / "venv"

        def nothing_installed() -> None:
            assert not venv.exists(), f"a refused install left {venv} behind"

        return Invocation(["install", f"{server.url}/wheelhouse/", "--venv", str(venv)],
                          env=_env(work), after=_stop_all(server, then=nothing_installed))

    return build


def _jit_cache_trickles(work: Path) -> Invocation:
    from corpus.cases_jitcache import _recipe
    from support.jit_caches import cuobjdump_env

    work.mkdir(parents=True, exist_ok=True)
    server = Served({"/flashinfer_jit_cache-0.6.18+cu130-cp39-abi3-linux_aarch64.whl":
                     trickle(length=1 << 20)})
    url = f"{server.url}/flashinfer_jit_cache-0.6.18+cu130-cp39-abi3-linux_aarch64.whl"
    recipe = _recipe(work, f'{{ url = "{url}", sha256 = "{"e" * 64}" }}')
    return Invocation(["flashinfer-aot", "--recipe", str(recipe), "--cache",
                       str(work / "cache"), "--out", str(work / "out")],
                      env={**cuobjdump_env(work / "tools"), **_env(work)},
                      after=_stop_all(server))


def _index_trickles(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    server = Served({f"/simple/{b.PACKAGE}/": trickle(length=4096, byte=b"<")})
    recipe = b.good_recipe(work / "recipe")
    return Invocation(["prepare", "--source", f"pypi:{b.PACKAGE}=={b.VERSION}", "--dest",
                       str(work / "dest"), "--recipe", str(recipe)],
                      env={**_env(work), "PIP_INDEX_URL": f"{server.url}/simple",
                           "PIP_EXTRA_INDEX_URL": "", "SPARKBUILD_CACHE": str(work / "cache")},
                      after=_stop_all(server))


def _timed(build: Callable[[Path], Invocation]) -> Callable[[Path], Invocation]:
    """``build`` under a 3 s deadline, which the command must meet."""
    def timed(work: Path) -> Invocation:
        started = time.monotonic()
        inv = build(work)
        inv.env.update(DEADLINE)
        finish = inv.after

        def check() -> None:
            if finish is not None:
                finish()
            took = time.monotonic() - started
            assert took < QUICK_S, f"the command took {took:.0f} s under a 3 s deadline"

        inv.after = check
        return inv

    return timed


WITHIN = "did not finish answering within 3 s"
DEADLINE_CASES = [
    Case("dist-deadline-status-trickles-doctor", "dist", None, WITHIN,
         _timed(_scheduler_says(trickle())), DOCTOR),
    Case("dist-deadline-status-headers-trickle-doctor", "dist", None, WITHIN,
         _timed(_scheduler_says(trickle(headers_too=True))), DOCTOR),
    Case("dist-deadline-alloc-trickles-doctor", "dist", None,
         "the token probe could not reach",
         _timed(_scheduler_says(status(GOOD_STATUS), trickle())), DOCTOR),
    Case("dist-deadline-install-manifest-trickles", "dist", NetworkError, WITHIN,
         _timed(_served_wheelhouse("manifest.json")), ("sparkbuild.node.remote",)),
    Case("dist-deadline-install-wheel-trickles", "dist", NetworkError, WITHIN,
         _timed(_served_wheelhouse("*.whl")), ("sparkbuild.node.remote",)),
    Case("dist-deadline-jit-cache-trickles", "dist", NetworkError, WITHIN,
         _timed(_jit_cache_trickles), ("sparkbuild.flashinfer.jit_cache",)),
    Case("dist-deadline-index-page-trickles", "dist", NetworkError, WITHIN,
         _timed(_index_trickles), ("sparkbuild.sources.index",)),
    Case("dist-deadline-zero-is-refused", "dist", UsageError,
         "SPARKBUILD_NET_DEADLINE must be a number of seconds above 0",
         _scheduler_says(status(GOOD_STATUS), SPARKBUILD_NET_DEADLINE="0"), DOCTOR),
    Case("dist-deadline-not-a-number-is-refused", "dist", UsageError,
         "SPARKBUILD_NET_DEADLINE must be a number of seconds",
         _scheduler_says(status(GOOD_STATUS), SPARKBUILD_NET_DEADLINE="soon"), DOCTOR),
]

# -- 7. each build server's memory: a size, refused before anything is asked or prepared ----


def _server_memory(value: str, *, command: str = "doctor") -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        scheduler = Served({STATUS: status(GOOD_STATUS), ALLOC: accepts_any()})
        args = (_wheel(work, scheduler.url) if command == "wheel" else _doctor(scheduler.url))
        return Invocation([*args, "--dist-server-memory", value],
                          env=_env(work, SPARKBUILD_DIST_TOKEN=TOKEN),
                          after=_stop_all(scheduler, then=_nothing_asked(scheduler)),
                          secrets=(TOKEN,))

    return build


def _nothing_asked(scheduler: Served) -> Callable[[], None]:
    def check() -> None:
        assert not scheduler.seen, f"the scheduler was asked: {scheduler.seen}"

    return check


SERVER_MEMORY = "--dist-server-memory must be a number of GiB above 0"
SERVER_MEMORY_CASES = [
    Case("dist-server-memory-negative-doctor", "dist", UsageError, SERVER_MEMORY,
         _server_memory("-3"), ("sparkbuild.jobplan.team_pool",)),
    Case("dist-server-memory-zero-wheel", "dist", UsageError, SERVER_MEMORY,
         _server_memory("0", command="wheel"), ("sparkbuild.jobplan.team_pool",)),
    Case("dist-server-memory-infinite-wheel", "dist", UsageError, "doctor --dist URL "
         "--build-server DIR", _server_memory("inf", command="wheel"),
         ("sparkbuild.jobplan.team_pool",)),
]

CASES = [*REDIRECT_CASES, *TOKEN_CASES, *LISTEN_CASES, *ANSWER_CASES, *DEADLINE_CASES,
         *SERVER_MEMORY_CASES]
