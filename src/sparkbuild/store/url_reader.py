"""The one reader of URLs: http, https and file, each read bounded in time as a whole.

Every HTTP read of sparkbuild goes through :func:`open_url`: a download into the cache, a
served wheelhouse, a package index's page, the sccache-dist scheduler's probe.  Two limits
hold for each:

* a connection may stay silent for ``SPARKBUILD_NET_TIMEOUT`` seconds (default 60);
* the whole exchange -- connecting, the headers, every byte of the body, and any redirect
  on the way -- must end within ``SPARKBUILD_NET_DEADLINE`` seconds, by default the
  caller's (:data:`DOWNLOAD_DEADLINE_S` for a download, a short one for the probe).  A
  server that sends one byte every few seconds never stays silent long enough for the
  first limit; it meets the second, a :class:`~sparkbuild.errors.NetworkError` naming the
  URL.

Each socket read waits at most the time left, so the deadline holds inside a read too.

A request that carries a token (``Authorization: Bearer``) follows no redirect, so the
token never reaches another host: a redirect is answered as it came (its status and where
it pointed, :attr:`UrlResponse.location`) or refused as a named error.  Other requests
follow redirects as urllib does, within the same deadline.
"""

from __future__ import annotations

import functools
import http.client
import io
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from sparkbuild import __version__
from sparkbuild.console import shown
from sparkbuild.errors import NetworkError, UsageError
from sparkbuild.settings import NET_DEADLINE, NET_TIMEOUT
from sparkbuild.store.cache import FILL_HINT

if TYPE_CHECKING:
    import socket
    from email.message import Message
    from types import TracebackType

OFFLINE_HINT = (
    f"check the network (or the index URL); to build without a network, {FILL_HINT}, "
    "then run with --offline"
)
USER_AGENT = f"sparkbuild/{__version__}"
DOWNLOAD_DEADLINE_S = 3600.0
"""A download's whole time by default: a wheel of a few GiB over a slow link."""
LOCATION_SHOWN = 200
"""The most of a redirect's ``Location`` an error shows."""
TOKEN_FORM = re.compile(r"[\x21-\x7e]+")
"""What a token sent in a header may hold: printable ASCII, no space (RFC 6750 asks less)."""
LONGEST_S = 1e7
"""Any longer limit (``inf``) is taken as this: a socket's timeout must be finite."""


def timeout_seconds(default: float = 60.0) -> float:
    """Seconds a connection may stay silent (``$SPARKBUILD_NET_TIMEOUT``, else ``default``)."""
    return NET_TIMEOUT.seconds(default)


def deadline_seconds(default: float = DOWNLOAD_DEADLINE_S) -> float:
    """Seconds one exchange may take in all (``$SPARKBUILD_NET_DEADLINE``, else ``default``)."""
    value = NET_DEADLINE.seconds(default)
    if value <= 0:
        raise UsageError(
            f"{NET_DEADLINE.name} must be a number of seconds above 0, not {value:g}")
    return value


class DeadlinePassed(TimeoutError):
    """The exchange's deadline passed (inside :mod:`http.client`; never leaves this module)."""


class _Clock:
    """The time one exchange has left."""

    def __init__(self, deadline: float, stall: float) -> None:
        self.deadline = deadline
        self.stall = min(stall, LONGEST_S)
        self.ends = time.monotonic() + min(deadline, LONGEST_S)

    def passed(self) -> bool:
        return time.monotonic() >= self.ends

    def wait(self) -> float:
        """How long the next socket operation may wait: the stall limit or the time left."""
        left = self.ends - time.monotonic()
        if left <= 0:
            raise DeadlinePassed(f"{self.deadline:g} s")
        return min(self.stall, left)


class _TimedStream(io.RawIOBase):
    """The body's bytes as the connection's reader gives them, one socket read at a time,
    each waiting no longer than the stall limit and the time left."""

    def __init__(self, inner: io.BufferedReader, sock: socket.socket, clock: _Clock) -> None:
        super().__init__()
        self._inner = inner
        self._sock = sock
        self._clock = clock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self._clock.wait())
        try:
            data = self._inner.read1(len(buffer))
        except TimeoutError:
            if self._clock.passed():
                raise DeadlinePassed(f"{self._clock.deadline:g} s") from None
            raise
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


class _TimedResponse(http.client.HTTPResponse):
    clock: _Clock

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_TimedStream(self.fp, sock, self.clock))


def _response_class(clock: _Clock) -> type[http.client.HTTPResponse]:
    class Response(_TimedResponse):
        pass

    Response.clock = clock
    return Response


class _TimedHTTPConnection(http.client.HTTPConnection):
    """A connection whose connect and every read wait at most what the clock has left."""

    def __init__(self, host: str, *, clock: _Clock, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._clock = clock
        self.response_class = _response_class(clock)

    def connect(self) -> None:
        self.timeout = self._clock.wait()
        super().connect()


class _TimedHTTPSConnection(_TimedHTTPConnection, http.client.HTTPSConnection):
    """:class:`_TimedHTTPConnection` over TLS (``HTTPSConnection.connect`` wraps the socket)."""


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self._clock = clock

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_TimedHTTPConnection, clock=self._clock), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, clock: _Clock) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(context=self._tls)
        self._clock = clock

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_TimedHTTPSConnection, clock=self._clock), req,
                            context=self._tls)


class _Unfollowed(Exception):
    """A redirect not followed: its status and where it pointed."""

    def __init__(self, code: int, location: str, headers: Message) -> None:
        super().__init__(code, location)
        self.code = code
        self.location = location
        self.headers = headers


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Every redirect is handed back, never followed."""

    def http_error_302(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                       msg: str, headers: Message) -> None:
        fp.close()
        location = headers.get("Location") or headers.get("URI") or ""
        raise _Unfollowed(code, urllib.parse.urljoin(req.full_url, location) if location
                          else "", headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class UrlResponse:
    """An answer being read: its status, headers and body, within the exchange's deadline;
    whatever breaks the reading is a :class:`NetworkError` naming the URL."""

    def __init__(self, url: str, status: int, headers: Message | None, body: IO[bytes] | None,
                 clock: _Clock, hint: str | None, location: str | None = None) -> None:
        self.url = url
        self.status = status
        self.headers: Message | dict[str, str] = headers if headers is not None else {}
        self.location = location
        """Where a redirect that was not followed pointed (None: no redirect)."""
        self.received = 0
        self._body = body
        self._clock = clock
        self._hint = hint

    def read(self, size: int = -1) -> bytes:
        if self._body is None:
            return b""
        try:
            data = self._body.read(size)
        except DeadlinePassed as exc:
            raise deadline_error(self.url, self._clock.deadline, self.received) from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise NetworkError(f"the transfer broke off after {self.received} bytes: "
                               f"{_said(exc)}", where=self.url, hint=self._hint) from exc
        self.received += len(data)
        return data

    def close(self) -> None:
        if self._body is not None:
            self._body.close()

    def __enter__(self) -> UrlResponse:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def deadline_error(url: str, deadline: float, received: int = 0) -> NetworkError:
    got = f" (it had sent {received} bytes)" if received else ""
    return NetworkError(
        f"the server did not finish answering within {deadline:g} s{got}", where=url,
        hint=f"a server this slow is broken or holds the connection on purpose; on a slow "
        f"link give it longer with {NET_DEADLINE.name}=SECONDS")


def _said(exc: BaseException) -> str:
    """What an exception says, on one line."""
    reason = getattr(exc, "reason", None) or exc
    return shown(str(reason) or type(exc).__name__)


def _shown_location(location: str) -> str:
    text = shown(location) or "no Location"
    return text if len(text) <= LOCATION_SHOWN else text[:LOCATION_SHOWN] + "..."


@dataclass(frozen=True)
class Limits:
    """How long one exchange may wait: ``timeout`` a silent connection, ``deadline`` the
    whole exchange (each None: :func:`timeout_seconds`, :func:`deadline_seconds`)."""

    timeout: float | None = None
    deadline: float | None = None


SETTINGS_LIMITS = Limits()


def open_url(url: str, *, accept: str | None = None, token: str | None = None,
             data: bytes | None = None, follow_redirects: bool = True,
             any_status: bool = False, limits: Limits = SETTINGS_LIMITS,
             hint: str | None = OFFLINE_HINT) -> UrlResponse:
    """Open ``url`` for reading (``data``: a POST of those bytes); every way it can fail is
    a :class:`NetworkError` naming it.

    ``token`` is sent as ``Authorization: Bearer``; with it no redirect is followed.
    ``any_status``: an HTTP error status, or a redirect not followed, is the answer
    (``status``, ``location``) instead of an error.  ``limits``: how long it may wait.
    """
    timeout, deadline = limits.timeout, limits.deadline
    clock = _Clock(deadline if deadline is not None else deadline_seconds(),
                   timeout if timeout is not None else timeout_seconds())
    headers = {"User-Agent": USER_AGENT}
    if accept:
        headers["Accept"] = accept
    if token is not None:
        if not TOKEN_FORM.fullmatch(token):
            raise UsageError("a token must be one word of printable ASCII characters", where=url)
        headers["Authorization"] = f"Bearer {token}"
    handlers: list[urllib.request.BaseHandler] = [_HTTPHandler(clock), _HTTPSHandler(clock)]
    if not follow_redirects or token is not None:
        handlers.append(_NoRedirects())
    opener = urllib.request.build_opener(*handlers)
    try:
        request = urllib.request.Request(url, data=data, headers=headers,
                                         method="POST" if data is not None else "GET")
        response = opener.open(request, timeout=clock.stall)
    except _Unfollowed as moved:
        if any_status:
            return UrlResponse(url, moved.code, moved.headers, None, clock, hint,
                               moved.location)
        raise NetworkError(
            f"the server redirected (HTTP {moved.code}) to {_shown_location(moved.location)}"
            f"; {'a request that carries a token' if token else 'this request'} follows no "
            "redirect", where=url, hint="give the address that answers itself") from None
    except urllib.error.HTTPError as exc:
        if any_status:
            moved_to = exc.headers.get("Location") if 300 <= exc.code < 400 else None
            return UrlResponse(url, exc.code, exc.headers, exc, clock, hint,
                               moved_to if moved_to is None else
                               urllib.parse.urljoin(url, moved_to))
        exc.close()
        raise NetworkError(f"the server answered HTTP {exc.code} {shown(str(exc.reason))}",
                           where=url, hint=hint) from exc
    except DeadlinePassed as exc:
        raise deadline_error(url, clock.deadline) from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, DeadlinePassed):
            raise deadline_error(url, clock.deadline) from exc
        raise NetworkError(f"cannot open URL: {_said(exc)}", where=url, hint=hint) from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise NetworkError(f"cannot open URL: {_said(exc)}", where=url, hint=hint) from exc
    status = getattr(response, "status", None)
    return UrlResponse(url, status if isinstance(status, int) else 200,
                       getattr(response, "headers", None), response, clock, hint)
