"""The one URL reader: the deadline of a whole exchange, redirects with and without a token,
HTTP errors as answers, the limits read from the environment (a local server in a thread)."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from typing import TYPE_CHECKING, ClassVar

import pytest

from sparkbuild.errors import NetworkError, UsageError
from sparkbuild.settings import NET_DEADLINE, NET_TIMEOUT
from sparkbuild.store import url_reader
from sparkbuild.store.url_reader import Limits, deadline_seconds, open_url, timeout_seconds

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Handler(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []
    other: ClassVar[str] = ""

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        Handler.seen.append((self.path, self.headers.get("Authorization")))
        with contextlib.suppress(OSError):
            getattr(self, "route_" + self.path.strip("/").replace("-", "_"), self.route_ok)()

    do_GET = do_POST = _answer

    def _send(self, code: int, body: bytes, **headers: str) -> None:
        self.send_response(code)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def route_ok(self) -> None:
        self._send(200, b"ok")

    def route_trickle(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        for _ in range(100):
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(0.1)

    def route_slow_head(self) -> None:
        for char in b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok":
            self.wfile.write(bytes([char]))
            self.wfile.flush()
            time.sleep(0.1)

    def route_moved(self) -> None:
        self._send(302, b"", Location=f"{Handler.other}/ok")

    def route_refused(self) -> None:
        self._send(401, b"no such token")


@pytest.fixture
def base() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Handler.seen = []
    Handler.other = f"http://localhost:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_plain_read(base: str) -> None:
    with open_url(base + "/ok") as answer:
        assert (answer.status, answer.read(), answer.location) == (200, b"ok", None)


@pytest.mark.parametrize("route", ["/trickle", "/slow-head"])
def test_a_trickling_server_meets_the_deadline(base: str, route: str) -> None:
    """A byte every 0.1 s never trips the 5 s silence limit; the 0.5 s deadline stops it,
    inside one read as well (the body) and while the headers come."""
    started = time.monotonic()
    within = r"did not finish answering within 0\.5 s"
    with pytest.raises(NetworkError, match=within) as error, \
            open_url(base + route, limits=Limits(timeout=5, deadline=0.5)) as answer:
        answer.read()
    assert time.monotonic() - started < 3
    assert error.value.where == base + route and "SPARKBUILD_NET_DEADLINE" in str(
        error.value.hint)


def test_a_redirect_is_followed_without_a_token(base: str) -> None:
    with open_url(base + "/moved") as answer:
        assert answer.read() == b"ok"
    assert Handler.seen == [("/moved", None), ("/ok", None)]


def test_a_request_with_a_token_follows_no_redirect(base: str) -> None:
    answer = open_url(base + "/moved", token="t0k", any_status=True)
    assert answer.status == 302 and answer.location == f"{Handler.other}/ok"
    with pytest.raises(NetworkError, match="a request that carries a token follows no "
                       "redirect") as error:
        open_url(base + "/moved", token="t0k")
    assert Handler.other in error.value.what and "t0k" not in error.value.render()
    assert Handler.seen == [("/moved", "Bearer t0k")] * 2  # never /ok


def test_no_redirect_when_asked(base: str) -> None:
    assert open_url(base + "/moved", follow_redirects=False, any_status=True).status == 302
    assert [path for path, _ in Handler.seen] == ["/moved"]


def test_an_http_error_is_an_answer_or_an_error(base: str) -> None:
    with open_url(base + "/refused", data=b"", any_status=True) as answer:
        assert (answer.status, answer.read()) == (401, b"no such token")
    with pytest.raises(NetworkError, match="HTTP 401"):
        open_url(base + "/refused")


def test_urls_that_cannot_be_opened_are_network_errors(tmp_path: Path) -> None:
    for bad in ("http://[::1", "http://127.0.0.1:0/", (tmp_path / "none").as_uri()):
        with pytest.raises(NetworkError):
            open_url(bad)
    (tmp_path / "f").write_bytes(b"here")
    with open_url((tmp_path / "f").as_uri()) as answer:
        assert answer.read() == b"here"


def test_a_token_an_http_header_cannot_carry_is_refused_unsent(base: str) -> None:
    for token in ("two\nlines", "a b", "caf\u00e9", ""):
        with pytest.raises(UsageError) as error:
            open_url(base + "/ok", token=token)
        assert token not in error.value.what or not token
    assert Handler.seen == []


def test_the_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NET_DEADLINE.name, raising=False)
    monkeypatch.delenv(NET_TIMEOUT.name, raising=False)
    assert deadline_seconds() == url_reader.DOWNLOAD_DEADLINE_S == 3600
    assert deadline_seconds(30) == 30 and timeout_seconds() == 60
    monkeypatch.setenv(NET_DEADLINE.name, "7.5")
    assert deadline_seconds(30) == deadline_seconds() == 7.5
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv(NET_DEADLINE.name, bad)
        with pytest.raises(UsageError, match="SPARKBUILD_NET_DEADLINE must be"):
            deadline_seconds()
