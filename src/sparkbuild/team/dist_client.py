"""The build's side of sccache-dist: the scheduler probed, the client configured, the result.

``wheel --dist URL`` (or the recipe's ``[build] dist``) names a team's sccache-dist
scheduler.  Before anything compiles, :func:`connect` asks it two things over its own HTTP
API (the routes of sccache 0.16's ``src/dist/http.rs``):

* ``GET /api/v1/scheduler/status`` (``Accept: application/json``): the servers and cores
  the team has now -- the job plan counts those cores (sparkbuild.jobplan.machine);
* ``POST /api/v1/scheduler/alloc_job`` with the client token and no body: 400 means the
  token passed (the empty body is then refused as not bincode), 401 that it did not.
  Nothing is allocated either way.

A wrong token must be caught here: sccache maps a 4xx from the scheduler to a hard error,
so every compile would fail instead of falling back to a local one.  A scheduler that does
not answer, or not as one (a status that sparkbuild.team.scheduler_status refuses), is a
warning, and the build compiles here.  Both questions go through the store's URL reader
(sparkbuild.store.url_reader) with a short deadline for the whole answer (30 s, or
``SPARKBUILD_NET_DEADLINE``) and follow no redirect: a scheduler that answers with one is
refused, naming where it pointed, and the token goes nowhere else.

The build's own sccache server (sparkbuild.team.sccache_server) is the dist client: its
``[dist]`` settings can only come from a config file (``SCCACHE_CONF``), which
:func:`write_client_config` writes with mode 600 (the token is in it), with
``rewrite_includes_only = true``: the host side is then sent as ``gcc -E
-fdirectives-only`` output, and the objects are the bytes a local compile gives.  The token
comes from ``SPARKBUILD_DIST_TOKEN`` or ``--dist-token-file FILE``, never from the command
line, where ``ps`` would show it, and is checked as it is read (sparkbuild.team.dist_token);
no message, ``--json`` or manifest carries it.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from sparkbuild.console import shown, warn
from sparkbuild.errors import NetworkError, UsageError
from sparkbuild.jobplan.machine import BuildPlan, read_memory, usable_memory, with_team_cores
from sparkbuild.jobplan.team_pool import ServerMemory
from sparkbuild.records import Record, as_json
from sparkbuild.store.url_reader import Limits, deadline_seconds, open_url
from sparkbuild.team.dist_token import TOKEN_ENV, read_client_token
from sparkbuild.team.scheduler_status import SchedulerStatus, StatusRefused
from sparkbuild.team.team_options import TeamOptions

STATUS_ROUTE = "api/v1/scheduler/status"
ALLOC_ROUTE = "api/v1/scheduler/alloc_job"
PROBE_TIMEOUT_S = 10.0
"""How long the scheduler may stay silent."""
PROBE_DEADLINE_S = 30.0
"""How long one question to the scheduler may take in all (``SPARKBUILD_NET_DEADLINE``)."""
ANSWER_LIMIT = 1 << 20
"""The most of an answer the probe reads (a status is some tens of bytes)."""
TOOLCHAIN_CACHE_BYTES = 10 * 1024**3
"""The client's packaged toolchains (cudafe++, cicc, ptxas, gcc: about 85 MB on x86_64)."""
URL_FORM = "http://HOST:PORT (https:// behind a proxy)"


def scheduler_url(text: str) -> str:
    """``http://HOST:PORT/``: the scheduler's URL, checked and with one trailing slash."""
    raw = text.strip()
    where = shown(raw) or "''"
    try:
        parts = urllib.parse.urlsplit(raw)
        hostname = parts.hostname
    except ValueError as exc:
        raise UsageError(f"the dist scheduler URL cannot be read: {exc}", where=where,
                         hint=f"give {URL_FORM}; an IPv6 address in brackets, "
                         "http://[fd00::1]:10600") from exc
    if parts.scheme not in ("http", "https") or not hostname:
        raise UsageError(f"the dist scheduler must be a URL: {URL_FORM}", where=where)
    if shown(raw) != raw or any(c.isspace() for c in raw):
        raise UsageError("the dist scheduler URL holds white space or a control character",
                         where=where, hint=f"give {URL_FORM}")
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"the dist scheduler URL has a bad port: {exc}", where=where) from exc
    if parts.username or parts.password or parts.query or parts.fragment:
        raise UsageError("the dist scheduler URL takes no user, query or fragment (the "
                         f"token comes from {TOKEN_ENV} or --dist-token-file)", where=where)
    host = f"[{hostname}]" if ":" in hostname else hostname
    netloc = f"{host}:{port}" if port else host
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{netloc}{path}/"


def redirected(url: str, route: str, status: int, location: str | None) -> UsageError:
    """A scheduler that answered with a redirect: sparkbuild follows none (the token would
    go wherever it points)."""
    pointed = shown(location)[:200] if location else "nowhere (no Location)"
    return UsageError(
        f"the dist scheduler {url} answered /{route} with a redirect (HTTP {status}) to "
        f"{pointed}: the probe follows no redirect, so the client token goes to the "
        "scheduler alone",
        where=url, hint="give the scheduler's own address (http://HOST:PORT, where "
        "sccache-dist listens), not one that sends requests elsewhere")


def _ask(url: str, route: str, *, token: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET of ``route``, or of an empty POST with ``token``.
    Trouble on the way is a :class:`NetworkError`; a redirect (never followed) is
    :func:`redirected`."""
    with open_url(url + route, accept="application/json", token=token,
                  data=b"" if token is not None else None, follow_redirects=False,
                  any_status=True, hint=None,
                  limits=Limits(PROBE_TIMEOUT_S, deadline_seconds(PROBE_DEADLINE_S))) as answer:
        if 300 <= answer.status < 400:
            raise redirected(url, route, answer.status, answer.location)
        body = answer.read(ANSWER_LIMIT + 1)
    if len(body) > ANSWER_LIMIT:
        raise NetworkError(f"the answer is over {ANSWER_LIMIT} bytes", where=url + route)
    return answer.status, body


def read_status(url: str) -> tuple[SchedulerStatus | None, str | None]:
    """The scheduler's status, or why there is none (it does not answer, or not as one).
    A redirect raises (:func:`redirected`)."""
    try:
        code, body = _ask(url, STATUS_ROUTE)
    except NetworkError as error:
        return None, f"cannot reach {url}: {error.what}"
    if code != 200:
        return None, f"{url}{STATUS_ROUTE} answered HTTP {code}: not a sccache-dist scheduler?"
    try:
        return SchedulerStatus.from_text(body.decode("utf-8", "replace")), None
    except StatusRefused as refused:
        return None, (f"{url}{STATUS_ROUTE} did not answer like a sccache-dist scheduler: "
                      f"{refused}")


def token_refusal(url: str, token: str) -> tuple[bool | None, str]:
    """Whether the scheduler takes ``token``: True (HTTP 400 to an empty allocation), False
    (401, with the scheduler's words), None (anything else, said).  A redirect raises
    (:func:`redirected`); what the scheduler says is shown without the token."""
    try:
        code, body = _ask(url, ALLOC_ROUTE, token=token)
    except NetworkError as error:
        return None, f"the token probe could not reach {url}: {error.what}"
    said = shown(body.decode("utf-8", "replace").replace(token, "***").strip()[:200])
    if code == 400:
        return True, "the client token is accepted"
    if code in (401, 403):
        return False, f"HTTP {code}" + (f": {said}" if said else "")
    return None, f"the token probe got HTTP {code}" + (f": {said}" if said else "")



def _no_servers(status: SchedulerStatus | None) -> SchedulerStatus | dict[str, int]:
    """A scheduler's status as a link shows it: none read counts no servers."""
    return {"servers": 0, "cpus": 0} if status is None else status


@dataclass(frozen=True)
class DistLink(Record):
    """A scheduler probed before the build: connected, or unreachable (a local build)."""

    json_order: ClassVar[tuple[str, ...]] = ("scheduler", "connected")

    scheduler: str
    token: str = field(repr=False, metadata=as_json(skip=True))
    token_source: str = field(metadata=as_json("token_from"))
    status: SchedulerStatus | None = field(metadata=as_json(flatten=True, dump=_no_servers))
    reason: str | None = None
    """Why the build compiles here (None: connected)."""

    @property
    def connected(self) -> bool:
        return self.status is not None and self.reason is None

    @property
    def cpus(self) -> int:
        return self.status.cpus if self.connected and self.status else 0

    def json_extra(self) -> dict[str, Any]:
        return {"connected": self.connected}


def refused_token(url: str, said: str) -> UsageError:
    return UsageError(
        f"the sccache-dist scheduler {url} refused the client token ({said})", where=url,
        hint=f"give the scheduler's client token in {TOKEN_ENV} or --dist-token-file FILE; "
        "with a wrong token sccache fails every compile instead of compiling here, so "
        "sparkbuild stops before the first one")


def probe(url: str, token: str, token_source: str) -> DistLink:
    """The scheduler's status and its verdict on ``token``; a refusal raises."""
    status, why = read_status(url)
    if status is None:
        return DistLink(url, token, token_source, None, why)
    accepted, said = token_refusal(url, token)
    if accepted is False:
        raise refused_token(url, said)
    if accepted is None:
        return DistLink(url, token, token_source, status, said)
    if status.servers == 0:
        return DistLink(url, token, token_source, status, "the scheduler has no build server")
    return DistLink(url, token, token_source, status)


def connect(url: str, token_file: Path | None) -> DistLink:
    """``wheel --dist``: the scheduler probed before anything compiles.  A wrong token raises
    (naming the scheduler); a scheduler that does not answer is a warning: a local build."""
    where = scheduler_url(url)
    token, source = read_client_token(token_file)
    link = probe(where, token, source)
    if link.connected and link.status is not None:
        return link
    warn(f"dist: {link.reason}; the build compiles here, on this machine alone")
    return link


def client_config(link: DistLink, toolchains: Path) -> str:
    """The ``SCCACHE_CONF`` of the build's sccache server: ``[dist]`` and its token."""
    return "\n".join([
        "# written by sparkbuild for one build (sparkbuild.team.dist_client); holds a secret",
        "[dist]",
        f"scheduler_url = {json.dumps(link.scheduler.rstrip('/'))}",
        "toolchains = []",
        f"cache_dir = {json.dumps(str(toolchains))}",
        f"toolchain_cache_size = {TOOLCHAIN_CACHE_BYTES}",
        "rewrite_includes_only = true",
        "",
        "[dist.auth]",
        'type = "token"',
        f"token = {json.dumps(link.token)}",
        "",
    ])


def write_private(path: Path, text: str) -> Path:
    """``text`` into ``path`` with mode 600 from the start (it holds a secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def write_client_config(path: Path, link: DistLink, toolchains: Path) -> Path:
    return write_private(path, client_config(link, toolchains))


def connect_for(team: TeamOptions) -> DistLink | None:
    """``wheel``'s scheduler (:func:`~sparkbuild.team.team_options.resolve_team`), probed;
    None without one."""
    return connect(team.dist, team.token_file) if team.dist is not None else None


def team_plan(plan: BuildPlan, link: DistLink | None, requested_jobs: int | None,
              server_memory: ServerMemory | None = None) -> BuildPlan:
    """The job plan with the team's cores and the heavy pool the servers' memory holds
    (sparkbuild.jobplan.machine.with_team_cores; ``server_memory``: each server's, from
    :func:`sparkbuild.jobplan.team_pool.server_memory`)."""
    if link is None or not link.connected or link.status is None:
        return plan
    total, available = read_memory()
    return with_team_cores(plan, team_cpus=link.status.cpus, servers=link.status.servers,
                           scheduler=link.scheduler, usable_bytes=usable_memory(total, available),
                           requested_jobs=requested_jobs, server_memory=server_memory)
