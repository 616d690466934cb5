"""The build's timeline: its phases, and every unit from ninja's own ``.ninja_log``.

The ninja wrapper (:mod:`sparkbuild.jobplan.ninja_shim`) records each ninja run: the build
directory, the wall-clock start and end, and the lines the run added to ``.ninja_log``.
The units are this build's alone: those lines, never the log's older ones (a rebuild that
compiled nothing has no unit).  Each unit's start and end are ninja's own (relative to its
run's start); the memory sampler's peak is joined by the unit's object file.  The phases
of the build are cut at marks in pip's output and at the ninja runs: ``metadata`` (pip's
metadata step, up to "Building wheel for"), ``configure`` (up to the first ninja run),
``compile`` (each run up to its last compile unit's end), ``link`` (the rest of each run),
``install and package`` (the rest of pip's time).

The critical path is the longest chain of dependent edges of ``build.ninja`` (explicit,
implicit and order-only inputs), each weighed with its ``.ninja_log`` time: exact for
what ninja had to order, blind to what only the job limit serialised.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from sparkbuild.jobplan.ninja_graph import (
    Edge,
    LogEntry,
    last_run,
    log_entries,
    object_target,
    read_graph,
)
from sparkbuild.jobplan.ninja_shim import relative_source
from sparkbuild.records import EMPTY, NONE, Record, as_json, rounded

GIB = 1024**3
_WHEEL_STARTED = re.compile(r"Building wheel for \S+ \(.*\): started|running bdist_wheel")


@dataclass
class BuildMarks:
    """Wall-clock times of lines in pip's output: fed every line by the build's reader."""

    started: float = field(default_factory=time.time)
    wheel_started: float | None = None
    ended: float | None = None

    def __call__(self, line: str) -> None:
        if self.wheel_started is None and _WHEEL_STARTED.search(line):
            self.wheel_started = time.time()


@dataclass(frozen=True)
class NinjaRun:
    dir: Path
    start: float
    end: float
    rc: int
    retried: tuple[str, ...] = ()
    heavy: tuple[str, ...] = ()
    manifest: Path | None = None
    """The ``-f`` file ninja ran (flashinfer's); None: ``dir/build.ninja``."""
    log: tuple[str, ...] = ()
    """The lines this run added to ``dir/.ninja_log``: one per edge it ran."""


def read_runs(record: Path) -> list[NinjaRun]:
    runs: list[NinjaRun] = []
    if not record.is_file():
        return runs
    for line in record.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            manifest = data.get("manifest")
            runs.append(NinjaRun(Path(data["dir"]), float(data["start"]), float(data["end"]),
                                 int(data["rc"]), tuple(data.get("retried", ())),
                                 tuple(data.get("heavy", ())),
                                 Path(manifest) if manifest else None,
                                 tuple(str(line) for line in data.get("log", ()))))
        except (ValueError, KeyError, TypeError):
            continue
    return runs



def _gib(size: int) -> float:
    return round(size / GIB, 3)


def _phases(phases: dict[str, float]) -> dict[str, float]:
    return {name: round(seconds, 2) for name, seconds in phases.items()}


def _critical_path(path: list[tuple[str, float]]) -> dict[str, Any]:
    return {"seconds": round(sum(s for _, s in path), 2),
            "edges": [{"output": o, "seconds": round(s, 2)} for o, s in path],
            "method": "longest chain of build.ninja edges weighed with .ninja_log times"}


@dataclass
class Unit(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "path", "output", "target", "seconds", "start", "peak_rss_gib", "pool",
    )

    source: str = field(metadata=as_json("path"))
    output: str
    target: str
    seconds: float = field(metadata=as_json(dump=rounded(2)))
    start: float = field(metadata=as_json(dump=rounded(2)))
    """Seconds after the build's first ninja run began."""
    flags: str = ""
    peak_rss_bytes: int | None = field(
        default=None, metadata=as_json("peak_rss_gib", omit=NONE, dump=_gib))
    pool: str | None = field(default=None, metadata=as_json(omit=EMPTY))


@dataclass
class BuildTimeline(Record):
    phases: dict[str, float] = field(metadata=as_json(dump=_phases))
    units: list[Unit] = field(metadata=as_json(skip=True))
    compile_wall: float = field(metadata=as_json("compile_wall_seconds", dump=rounded(2)))
    busy: float = field(metadata=as_json(dump=rounded(3)))
    """Unit-seconds / (compile wall x cores): how busy the cores were while compiling."""
    cores: int
    critical_path: list[tuple[str, float]] = field(metadata=as_json(dump=_critical_path))
    retried: list[str] = field(default_factory=list, metadata=as_json("retried_after_kill"))
    edges: int = field(default=0, metadata=as_json("ninja_edges"))
    origin: float = field(default=0.0, metadata=as_json(skip=True))
    """Epoch seconds of the first ninja run's start: what each unit's ``start`` counts from."""

    @property
    def killed_sources(self) -> list[str]:
        """The sources of the units retried after a kill (to be heavy from now on)."""
        by_output = {unit.output: unit.source for unit in self.units}
        return sorted({by_output.get(out, out) for out in self.retried})

    def units_table(self) -> list[dict[str, Any]]:
        return [unit.to_dict() for unit in self.units]

    def summary(self) -> list[str]:
        lines = [f"  {len(self.units)} units; compile wall {self.compile_wall:.0f} s; cores "
                 f"busy {100 * self.busy:.0f}% of {self.cores}"]
        for unit in sorted(self.units, key=lambda u: -u.seconds)[:5]:
            peak = (f", {unit.peak_rss_bytes / GIB:.1f} GiB" if unit.peak_rss_bytes
                    else "")
            lines.append(f"    {unit.seconds:7.1f} s  {unit.source}{peak}"
                         f"{' [pool]' if unit.pool else ''}")
        total = sum(s for _, s in self.critical_path)
        chain = " -> ".join(Path(o).name for o, _ in self.critical_path[-4:])
        lines.append(f"  critical path {total:.0f} s ({len(self.critical_path)} edges): {chain}")
        if self.retried:
            lines.append(f"  retried in the pool after a kill: {', '.join(self.retried)}")
        return lines


def critical_path(edges: list[Edge], seconds: Mapping[str, float]) -> list[tuple[str, float]]:
    """The heaviest chain of dependent edges: [(first output, seconds), ...], first first."""
    producer = {out: edge for edge in edges for out in edge.outputs}
    best: dict[int, tuple[float, int | None]] = {}
    order: list[Edge] = []
    state: dict[int, int] = {}
    for root in edges:  # iterative post-order (vLLM's graphs are deep enough for recursion)
        stack = [(root, False)]
        while stack:
            edge, done = stack.pop()
            key = id(edge)
            if done:
                if state.get(key) != 2:
                    state[key] = 2
                    order.append(edge)
                continue
            if state.get(key):
                continue
            state[key] = 1
            stack.append((edge, True))
            for name in (*edge.inputs, *edge.implicit, *edge.order_only):
                dep = producer.get(name)
                if dep is not None and not state.get(id(dep)):
                    stack.append((dep, False))
    by_id = {id(e): e for e in edges}
    for edge in order:
        own = max((seconds.get(o, 0.0) for o in edge.outputs), default=0.0)
        deps = [producer[n] for n in (*edge.inputs, *edge.implicit, *edge.order_only)
                if n in producer]
        prev = max(deps, key=lambda d: best.get(id(d), (0.0, None))[0], default=None)
        base = best.get(id(prev), (0.0, None))[0] if prev is not None else 0.0
        best[id(edge)] = (base + own, id(prev) if prev is not None else None)
    if not best:
        return []
    tip: int | None = max(best, key=lambda k: best[k][0])
    chain: list[tuple[str, float]] = []
    while tip is not None:
        edge = by_id[tip]
        own = max((seconds.get(o, 0.0) for o in edge.outputs), default=0.0)
        if own > 0:
            chain.append((edge.outputs[0], own))
        tip = best[tip][1]
    return chain[::-1]


def build_timeline(runs: list[NinjaRun], marks: BuildMarks, tree: Path,
                   peaks: Mapping[str, int] | None = None,
                   cores: int | None = None) -> BuildTimeline:
    """The build's phases and units (see the module docstring)."""
    peaks = peaks or {}
    cores = cores or os.cpu_count() or 1
    ended = marks.ended or time.time()
    units: list[Unit] = []
    all_edges: list[Edge] = []
    compile_seconds = link_seconds = busy_seconds = 0.0
    durations: dict[str, float] = {}
    by_dir: dict[Path, list[NinjaRun]] = {}
    for run in runs:
        by_dir.setdefault(run.dir, []).append(run)
    first_start = min((r.start for r in runs), default=ended)
    for build_dir, dir_runs in by_dir.items():
        edges, _pools = read_graph(build_dir, dir_runs[-1].manifest)
        all_edges += edges
        by_output = {e.outputs[0]: e for e in edges if e.outputs}
        entries: list[LogEntry] = []
        for index, run in enumerate(dir_runs):
            own = log_entries(list(run.log), run=index)
            entries += own
            compile_end = max((e.end_ms for e in own
                               if (edge := by_output.get(e.output)) and edge.is_compile),
                              default=0) / 1000.0
            span = max(0.0, run.end - run.start)
            compile_seconds += min(span, compile_end)
            link_seconds += max(0.0, span - compile_end)
        offsets = {index: run.start - first_start for index, run in enumerate(dir_runs)}
        for entry in last_run(entries):
            durations[entry.output] = entry.seconds
            busy_seconds += entry.seconds
            edge = by_output.get(entry.output)
            if edge is None or not edge.is_compile:
                continue
            pool = edge.variables.get("pool")
            units.append(Unit(
                relative_source(edge.source, str(tree)), entry.output,
                object_target(entry.output), entry.seconds,
                offsets.get(entry.run, 0.0) + entry.start_ms / 1000.0, edge.flags_key(),
                peaks.get(entry.output), pool if pool and pool != "compile" else None))
    wheel_started = marks.wheel_started or marks.started
    phases = {"metadata": max(0.0, min(wheel_started, first_start) - marks.started),
              "configure": max(0.0, first_start - wheel_started),
              "compile": compile_seconds, "link": link_seconds}
    phases["install and package"] = max(0.0, ended - marks.started - sum(phases.values()))
    wall = compile_seconds
    busy = busy_seconds / (wall * cores) if wall > 0 else 0.0
    units.sort(key=lambda u: u.start)
    retried = sorted({o for r in runs for o in r.retried})
    return BuildTimeline(phases, units, wall, min(1.0, busy), cores,
                         critical_path(all_edges, durations), retried, len(all_edges),
                         first_start)


PHASE_ORDER = ("bundle verify", "bundle unpack", "bundle import", "tree copy", "prepare",
               "pins", "vendor", "doctor", "build environment", "code forecast", "metadata",
               "configure", "compile", "link", "install and package", "wheel rewrite",
               "machine code", "verify", "wheelhouse")


def run_timeline(phases: Mapping[str, float], wall: float,
                 build: BuildTimeline | None) -> dict[str, Any]:
    """``wheel --json``'s ``timeline``: every phase's own seconds, in the run's order."""
    ordered = {name: phases[name] for name in PHASE_ORDER if name in phases}
    ordered.update({k: v for k, v in phases.items() if k not in ordered})
    covered = sum(ordered.values())
    return {"wall_seconds": round(wall, 2),
            "phases": {k: round(v, 2) for k, v in ordered.items()},
            "covered": round(covered / wall, 3) if wall > 0 else 0.0,
            "build": build.to_dict() if build else None}


def timeline_lines(timeline: Mapping[str, Any], build: BuildTimeline | None) -> list[str]:
    if not timeline:
        return []
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in timeline["phases"].items() if v >= 0.5)
    lines = [f"  timeline ({timeline['wall_seconds']:.0f} s): {phases}"]
    return lines + (build.summary() if build else [])
