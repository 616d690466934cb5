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
not answer is a warning, and the build compiles here.

The build's own sccache server (sparkbuild.team.sccache_server) is the dist client: its
``[dist]`` settings can only come from a config file (``SCCACHE_CONF``), which
:func:`write_client_config` writes with mode 600 (the token is in it), with
``rewrite_includes_only = true``: the host side is then sent as ``gcc -E
-fdirectives-only`` output, and the objects are the bytes a local compile gives.  The token
comes from ``SPARKBUILD_DIST_TOKEN`` or ``--dist-token-file FILE``, never from the command
line, where ``ps`` would show it.
"""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkbuild.console import warn
from sparkbuild.errors import UsageError
from sparkbuild.jobplan.machine import BuildPlan, read_memory, usable_memory, with_team_cores
from sparkbuild.recipe import read_user_text

TOKEN_ENV = "SPARKBUILD_DIST_TOKEN"
STATUS_ROUTE = "api/v1/scheduler/status"
ALLOC_ROUTE = "api/v1/scheduler/alloc_job"
PROBE_TIMEOUT_S = 10.0
TOOLCHAIN_CACHE_BYTES = 10 * 1024**3
"""The client's packaged toolchains (cudafe++, cicc, ptxas, gcc: about 85 MB on x86_64)."""
URL_FORM = "http://HOST:PORT (https:// behind a proxy)"


def scheduler_url(text: str) -> str:
    """``http://HOST:PORT/``: the scheduler's URL, checked and with one trailing slash."""
    raw = text.strip()
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"the dist scheduler must be a URL: {URL_FORM}", where=raw or "''")
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"the dist scheduler URL has a bad port: {exc}", where=raw) from exc
    if parts.username or parts.password or parts.query or parts.fragment:
        raise UsageError("the dist scheduler URL takes no user, query or fragment (the "
                         f"token comes from {TOKEN_ENV} or --dist-token-file)", where=raw)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{port}" if port else host
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{netloc}{path}/"


TOKEN_LIMIT = 64 << 10
"""The largest token or key file read (sccache-dist's are under a hundred bytes)."""


def read_client_token(token_file: Path | None) -> tuple[str, str]:
    """The client token and where it came from: ``token_file``, else ``$SPARKBUILD_DIST_TOKEN``."""
    if token_file is not None:
        token = read_user_text(token_file, "the dist token file", TOKEN_LIMIT,
                               error=UsageError).strip()
        try:
            mode = token_file.stat().st_mode
        except OSError as exc:
            raise UsageError(f"cannot read the dist token file: {exc.strerror}",
                             where=str(token_file)) from exc
        if not token:
            raise UsageError("the dist token file is empty", where=str(token_file))
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warn(f"the dist token file {token_file} is readable by others "
                 f"(mode {stat.S_IMODE(mode):o}): chmod 600 it")
        return token, f"file {token_file}"
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UsageError("a dist build needs the scheduler's client token",
                         hint=f"set {TOKEN_ENV}, or give --dist-token-file FILE (a file "
                         "holding the token; never the token itself on the command line)")
    return token, f"${TOKEN_ENV}"


@dataclass(frozen=True)
class SchedulerStatus:
    """What ``/api/v1/scheduler/status`` (and ``sccache --dist-status``) reports."""

    servers: int
    cpus: int
    in_progress: int

    @classmethod
    def from_json(cls, data: Any) -> SchedulerStatus:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return cls(int(data["num_servers"]), int(data["num_cpus"]),
                   int(data.get("in_progress", 0)))

    def to_dict(self) -> dict[str, int]:
        return {"servers": self.servers, "cpus": self.cpus, "in_progress": self.in_progress}


def _request(url: str, *, token: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET, or of an empty POST when ``token`` is given."""
    headers = {"Accept": "application/json"}
    data = None
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
        data = b""
    request = urllib.request.Request(url, data=data, headers=headers,
                                     method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
            return int(response.status), response.read(4096)
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(4096)


def read_status(url: str) -> tuple[SchedulerStatus | None, str | None]:
    """The scheduler's status, or why there is none (it does not answer, or not as one)."""
    try:
        code, body = _request(url + STATUS_ROUTE)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return None, f"cannot reach {url}: {reason}"
    if code != 200:
        return None, f"{url}{STATUS_ROUTE} answered HTTP {code}: not a sccache-dist scheduler?"
    try:
        return SchedulerStatus.from_json(json.loads(body)), None
    except (ValueError, KeyError, TypeError):
        return None, f"{url}{STATUS_ROUTE} did not answer like a sccache-dist scheduler"


def token_refusal(url: str, token: str) -> tuple[bool | None, str]:
    """Whether the scheduler takes ``token``: True (HTTP 400 to an empty allocation), False
    (401, with the scheduler's words), None (anything else, said)."""
    try:
        code, body = _request(url + ALLOC_ROUTE, token=token)
    except (OSError, ValueError) as exc:
        return None, f"the token probe could not reach {url}: {exc}"
    said = body.decode("utf-8", "replace").strip()[:200]
    if code == 400:
        return True, "the client token is accepted"
    if code in (401, 403):
        return False, f"HTTP {code}" + (f": {said}" if said else "")
    return None, f"the token probe got HTTP {code}" + (f": {said}" if said else "")


@dataclass(frozen=True)
class DistLink:
    """A scheduler probed before the build: connected, or unreachable (a local build)."""

    scheduler: str
    token: str = field(repr=False)
    token_source: str
    status: SchedulerStatus | None
    reason: str | None = None
    """Why the build compiles here (None: connected)."""

    @property
    def connected(self) -> bool:
        return self.status is not None and self.reason is None

    @property
    def cpus(self) -> int:
        return self.status.cpus if self.connected and self.status else 0

    def to_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "connected": self.connected,
                "token_from": self.token_source,
                **(self.status.to_dict() if self.status else {"servers": 0, "cpus": 0}),
                "reason": self.reason}


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


def dist_url(option: str | None, recipe_dist: str | None) -> str | None:
    """``--dist URL``, else the recipe's ``[build] dist``, else None."""
    return option or recipe_dist or None


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


def parse_dist_status(text: str) -> tuple[SchedulerStatus | None, str]:
    """``sccache --dist-status``: the status, or what it said instead."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        data = None
    if isinstance(data, dict) and "SchedulerStatus" in data:
        try:
            return SchedulerStatus.from_json(data["SchedulerStatus"][1]), "connected"
        except (ValueError, KeyError, TypeError, IndexError):
            pass
    if isinstance(data, dict) and "NotConnected" in data:
        said = data["NotConnected"]
        return None, f"not connected: {said[-1] if isinstance(said, list) else said}"
    return None, (text.strip().splitlines() or ["no answer"])[-1][:200]


def connect_for(option: str | None, recipe_dist: str | None,
                token_file: Path | None) -> DistLink | None:
    """``wheel``'s scheduler (``--dist``, else the recipe's), probed; None without one."""
    url = dist_url(option, recipe_dist)
    if url is None:
        if token_file is not None:
            raise UsageError("--dist-token-file needs a scheduler: --dist URL or the "
                             "recipe's [build] dist")
        return None
    return connect(url, token_file)


def team_plan(plan: BuildPlan, link: DistLink | None, requested_jobs: int | None
              ) -> BuildPlan:
    """The job plan with the team's cores (sparkbuild.jobplan.machine.with_team_cores)."""
    if link is None or not link.connected or link.status is None:
        return plan
    total, available = read_memory()
    return with_team_cores(plan, team_cpus=link.status.cpus, servers=link.status.servers,
                           scheduler=link.scheduler, usable_bytes=usable_memory(total, available),
                           requested_jobs=requested_jobs)
