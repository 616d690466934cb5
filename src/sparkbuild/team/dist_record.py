"""What sccache-dist did for one build: compiles per build server, local fallbacks, failures.

The numbers are sccache's own (``--show-stats``: ``dist_compiles`` per ``ip:port``,
``dist_errors``, ``compile_fails``), taken before and after the build.  Each step's server
and times are read from the build's sccache log (:func:`read_steps`), which sparkbuild
writes at ``debug`` for two of sccache's modules while dist is on:

* ``[NAME]: Requesting allocation`` -- a step (cudafe++, cicc, ptxas or the host compile
  of a unit; NAME is its output file's name) asks the scheduler for a server;
* ``[NAME]: Could not perform distributed compile, falling back to local: WHY``;
* ``[NAME]: compile result: cache miss`` followed by ``stats after compile result:
  ServerStats {... dist_compiles: {...}, dist_errors: N ...}``.  sccache prints both lines,
  and counts the step's server, under one lock, but counts it *after* the stats line: the
  server of each step is the difference between the next stats line and its own (for the
  last step: the final stats).

The log serves the build's picture (sparkbuild.jobplan.build_trace: one track per
server); the counts in ``wheel --json`` and the manifest come from the stats alone.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.jobplan.build_trace import Span, Track, host_track, trace_document, write_trace
from sparkbuild.jobplan.team_pool import ServerMemory, TeamFacts
from sparkbuild.records import EMPTY, Record, as_json, rounded

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sparkbuild.jobplan.timeline import BuildTimeline
    from sparkbuild.team.compile_cache import SccacheStats
    from sparkbuild.team.dist_client import DistLink
    from sparkbuild.team.scheduler_status import SchedulerStatus

LOG_MODULES = "sccache::server=debug,sccache::compiler::compiler=debug"
"""Added to ``SCCACHE_LOG`` of a dist build's sccache server: the lines :func:`read_steps`
reads (the rest stays at ``warn``, or at the user's own level)."""

_LINE = re.compile(r"^\[(\S+)\s+(\w+)\s+([\w:]+)\]\s?(.*)$")
_NAMED = re.compile(r"^\[([^\]]+)\]: (.*)$")
_COUNTS = re.compile(r"dist_compiles: \{([^}]*)\}, dist_errors: (\d+)")
_ENTRY = re.compile(r'"([^"]+)": (\d+)')
FALLBACK = "local (fallback)"
CAPACITY = "Insufficient capacity"
"""The scheduler's answer when every server already has cpus + 1 + cpus/8 jobs."""


@dataclass(frozen=True)
class DistStep(Record):
    """One compiler step that went to the scheduler."""

    json_order: ClassVar[tuple[str, ...]] = ("name", "where", "start", "seconds")

    name: str
    """sccache's name of the step: its output file's name (``x.cu.o``, ``x.ptx``...)."""
    where: str
    """The build server's ``ip:port``, :data:`FALLBACK`, or ``unknown``."""
    start: float = field(metadata=as_json(dump=rounded(3)))
    """Epoch seconds: the allocation request."""
    end: float = field(metadata=as_json(skip=True))
    why: str | None = field(default=None, metadata=as_json(omit=EMPTY))
    """A fallback's reason, as sccache gave it."""

    def json_extra(self) -> dict[str, Any]:
        return {"seconds": round(self.end - self.start, 3)}


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _counts(text: str) -> tuple[dict[str, int], int] | None:
    found = _COUNTS.search(text)
    if found is None:
        return None
    return {k: int(v) for k, v in _ENTRY.findall(found.group(1))}, int(found.group(2))


def _difference(after: tuple[dict[str, int], int], before: tuple[dict[str, int], int]
                ) -> str | None:
    """The one server (or the fallback) whose count rose by one between two readings."""
    servers, errors = after
    old_servers, old_errors = before
    rose = [s for s, n in servers.items() if n - old_servers.get(s, 0) == 1]
    changed = sum(n - old_servers.get(s, 0) for s, n in servers.items())
    if changed == 1 and len(rose) == 1 and errors == old_errors:
        return rose[0]
    if changed == 0 and errors - old_errors == 1:
        return FALLBACK
    return None


@dataclass
class _Reader:
    requested: dict[str, deque[float]] = field(default_factory=dict)
    fell_back: dict[str, str] = field(default_factory=dict)
    steps: list[DistStep] = field(default_factory=list)
    last: tuple[str, float, float, str | None] | None = None
    """The last miss whose server is not known yet: name, start, end, fallback reason."""
    counts: tuple[dict[str, int], int] = field(default_factory=lambda: ({}, 0))
    miss: tuple[str, float] | None = None

    def settle(self, counts: tuple[dict[str, int], int]) -> None:
        if self.last is not None:
            name, start, end, why = self.last
            where = FALLBACK if why else (_difference(counts, self.counts) or "unknown")
            self.steps.append(DistStep(name, where, start, end, why))
        self.last = None
        self.counts = counts

    def line(self, stamp: float, module: str, text: str) -> None:
        named = _NAMED.match(text)
        if named and module.endswith("compiler::compiler"):
            name, said = named.groups()
            if said.startswith("Requesting allocation"):
                self.requested.setdefault(name, deque()).append(stamp)
            elif said.startswith("Could not perform distributed compile"):
                self.fell_back[name] = said.partition(": ")[2] or said
        elif named and named.group(2).startswith("compile result: cache miss"):
            self.miss = (named.group(1), stamp)
        elif text.startswith("stats after compile result") and self.miss is not None:
            counts = _counts(text)
            if counts is None:
                return
            name, end = self.miss
            self.miss = None
            self.settle(counts)
            pending = self.requested.get(name)
            if pending:
                self.last = (name, pending.popleft(), end, self.fell_back.pop(name, None))


def read_steps(lines: Iterable[str], final: SccacheStats | None) -> list[DistStep]:
    """Every step of the log that asked the scheduler for a server, with where it ran.
    ``final``: the server's stats after the build (they settle the last step)."""
    reader = _Reader()
    for raw in lines:
        match = _LINE.match(raw.rstrip("\n"))
        if match is None:
            continue
        stamp = _epoch(match.group(1))
        if stamp is not None:
            reader.line(stamp, match.group(3), match.group(4))
    if final is not None:
        reader.settle((dict(final.dist_compiles), final.dist_errors))
    return reader.steps


@dataclass
class DistResult(Record):
    """``dist`` in ``wheel --json`` and in the manifest."""

    json_order: ClassVar[tuple[str, ...]] = (
        "...", "status", "dist_status_at_start", "dist_compiles", "dist_compiles_total",
        "local_fallbacks", "fallbacks_for_capacity", "compile_fails", "compilations",
        "steps_read_from_log", "local_slots", "warnings",
    )

    link: DistLink = field(metadata=as_json(flatten=True))
    at_start: SchedulerStatus | None = field(default=None, metadata=as_json(skip=True))
    """``sccache --dist-status`` of the build's server once started."""
    start_note: str = field(default="", metadata=as_json(skip=True))
    stats: SccacheStats | None = field(default=None, metadata=as_json(skip=True))
    """The build's share of the server's stats (after minus before)."""
    steps: list[DistStep] = field(default_factory=list,
                                  metadata=as_json("steps_read_from_log", dump=len))
    warnings: list[str] = field(default_factory=list)
    local_slots: dict[str, Any] | None = None
    """The heavy units' server of the build host's slots (sparkbuild.team.gate_server):
    its port and cpus, and the others' cpus; None: one server."""
    server_memory: ServerMemory | None = field(default=None, metadata=as_json(skip=True))
    """Each server's memory as the build planned with it (not reported: the plan says it)."""

    def team(self) -> TeamFacts | None:
        """The team a builder alongside plans with; None: not connected."""
        status = self.at_start or self.link.status
        if not self.link.connected or status is None or status.cpus <= 0:
            return None
        return TeamFacts(status.servers, status.cpus, self.server_memory)

    @property
    def capacity_fallbacks(self) -> int:
        """Fallbacks the log says were for want of a free server slot (more units in
        flight than the team's capacity): this machine's share of the work, not a fault."""
        return sum(1 for s in self.steps if s.why and CAPACITY in s.why)

    @property
    def status(self) -> str:
        """``used`` (a step ran on a build server), ``local`` (connected, nothing sent
        out: every step a cache hit, or fell back) or ``unreachable`` (a local build)."""
        if not self.link.connected:
            return "unreachable"
        return "used" if self.stats is not None and self.stats.dist_compiles else "local"

    def json_extra(self) -> dict[str, Any]:
        stats = self.stats
        servers: dict[str, int] = dict(sorted(stats.dist_compiles.items())) if stats else {}
        return {
            "status": self.status,
            "dist_status_at_start": self.at_start or self.start_note or None,
            "dist_compiles": servers, "dist_compiles_total": sum(servers.values()),
            "local_fallbacks": stats.dist_errors if stats else 0,
            "fallbacks_for_capacity": self.capacity_fallbacks,
            "compile_fails": stats.compile_fails if stats else 0,
            "compilations": stats.compilations if stats else 0,
        }

    def summary(self) -> list[str]:
        head = f"  dist: {self.link.scheduler} ({self.status})"
        if not self.link.connected:
            return [head, f"    warning: {self.link.reason}; compiled here"]
        stats = self.stats
        per_server = ", ".join(f"{s} {n}" for s, n in sorted((stats.dist_compiles
                                                               if stats else {}).items()))
        team = self.link.status
        lines = [head + (f": {team.servers} server(s), {team.cpus} cpus at the start"
                         if team else ""),
                 f"    steps compiled on build servers: {per_server or 'none'}; local "
                 f"fallbacks {stats.dist_errors if stats else 0}, compile failures "
                 f"{stats.compile_fails if stats else 0}"]
        return lines + [f"    warning: {w}" for w in self.warnings]


# -- the picture: build-trace.json ----------------------------------------------------------

STEP_KINDS = {"module_id": "cudafe++", "ptx": "cicc", "cubin": "ptxas"}


def step_kind(name: str) -> str:
    """What a step ran, from sccache's name for it (``x.ptx`` is cicc's output)."""
    return STEP_KINDS.get(name.rsplit(".", 1)[-1], "host compile")


def _stems(output: str) -> set[str]:
    """The names sccache may give a unit's steps, without their suffix: ``a.cu.o`` ->
    ``a.cu``, ``a``."""
    base = Path(output).name
    stem = base[:-2] if base.endswith(".o") else base
    return {stem, stem.split(".", 1)[0]}


def unit_servers(steps: list[DistStep], outputs: list[str]) -> dict[str, str]:
    """Each unit's (by its object file) build server: where most of its steps ran."""
    by_stem: dict[str, list[str]] = {}
    for output in outputs:
        for stem in _stems(output):
            by_stem.setdefault(stem, []).append(output)
    votes: dict[str, dict[str, int]] = {}
    for item in steps:
        owners = (by_stem.get(item.name.rsplit(".", 1)[0]) or by_stem.get(item.name)
                  or by_stem.get(item.name.split(".", 1)[0]) or [])
        if len(owners) == 1:
            tally = votes.setdefault(owners[0], {})
            tally[item.where] = tally.get(item.where, 0) + 1
    return {output: max(tally, key=lambda k: (tally[k], k)) for output, tally in votes.items()}


def server_tracks(steps: list[DistStep], origin: float) -> list[Track]:
    """One track per build server (and one for the local fallbacks): its steps."""
    by_where: dict[str, list[Span]] = {}
    for item in steps:
        kind = step_kind(item.name)
        by_where.setdefault(item.where, []).append(Span(
            f"{item.name} ({kind})", item.start - origin, item.end - item.start,
            {"step": item.name, "tool": kind, "seconds": round(item.end - item.start, 3),
             **({"fallback": item.why} if item.why else {})}, "dist step"))
    names = {FALLBACK: "build host: dist steps compiled here (fallback)"}
    return [Track(names.get(where, f"build server {where}"), spans, "job")
            for where, spans in sorted(by_where.items(), key=lambda kv: kv[0] == FALLBACK)]


def write_build_trace(path: Path, timeline: BuildTimeline, dist: DistResult | None) -> Path:
    """``build-trace.json``: the build host's units, one track per core (job slots with
    dist), then each build server's steps."""
    steps = dist.steps if dist is not None else []
    servers = unit_servers(steps, [u.output for u in timeline.units]) if steps else None
    # the trace starts at the first thing it shows: CMake's compiler checks go through the
    # servers before ninja's first unit
    origin = min([timeline.origin, *(s.start for s in steps)]) if timeline.origin else 0.0
    about: dict[str, Any] = {"units": len(timeline.units), "cores": timeline.cores,
                             "compile_wall_seconds": round(timeline.compile_wall, 2),
                             "origin_epoch": round(origin, 3)}
    if dist is not None:
        about["dist"] = {"scheduler": dist.link.scheduler, "status": dist.status,
                         "dist_compiles": dist.stats.dist_compiles if dist.stats else {}}
    document = trace_document(host_track(timeline, servers, timeline.origin - origin),
                              server_tracks(steps, origin), about)
    return write_trace(path, document)
