"""Memory per unit, measured: a sampler thread reads /proc while the build runs.

Every :data:`INTERVAL` seconds it lists the processes below sparkbuild (by parent, the
process tree), finds for each the unit it works for -- the ``-o X.o`` of itself or its
nearest ancestor that has one (nvcc's, or the launcher's, for cicc, ptxas and cudafe++ whose
own ``-o`` names a temporary file) -- and adds up their resident memory per unit. The
highest sum of each unit is its peak. A compile launcher that runs the compilers in a server
of its own (sccache: a daemon, not below sparkbuild) is followed too: the sampler is given
the server's pid (``extra_roots``) and the build's sources (``sources``: source path ->
object file); a process below the server is the unit of the nearest ``-o X.o``, else of the
source its arguments name (``--orig_src_file_name`` of cicc and cudafe++), else of the one
source whose file stem its temporary files carry (sccache's ptxas and host compile of nvcc's
steps: ``quantization.ptx``, ``quantization.cudafe1.cpp``). Each process's CPU time (user +
system, from ``/proc/PID/stat``) is read too, and the last value seen of every process below
a unit is that unit's CPU-seconds (what the process spent after the last sample is lost: at
most one interval per process); on a machine whose cores other work shares, they say what a
unit costs where its wall seconds do not. The peaks are stored in the cache
(``CACHE/units/memory.json``) keyed by unit (its source, relative to the tree), flags
(:meth:`~sparkbuild.jobplan.ninja_graph.Edge.flags_key`) and arch, and
:mod:`sparkbuild.jobplan.pools` plans the next build from them; a table that does not parse
or is not of that form is named and set aside (:func:`load`), never trusted.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.jobplan.schedule import KnownUnit
from sparkbuild.store.files import read_kept_file, set_aside, write_text_atomic
from sparkbuild.store.user_files import parse_json

if TYPE_CHECKING:
    from sparkbuild.jobplan.timeline import BuildTimeline

INTERVAL = 0.25
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
OBJECT_SUFFIXES = (".o", ".obj")


def output_of(argv: list[str]) -> str | None:
    """The object file a compiler command line writes (``-o X.o`` or ``-oX.o``)."""
    for index, arg in enumerate(argv):
        value = None
        if arg == "-o" and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-o="):
            value = arg[2:]
        if value and value.endswith(OBJECT_SUFFIXES):
            return value
    return None


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    rss: int
    argv: list[str]
    cpu: float = 0.0
    """User + system seconds so far."""
    started: int = 0
    """Its start time (clock ticks after boot): a pid reused later is another process."""


def unit_rss(procs: Iterable[Proc], root: int) -> dict[str, int]:
    """One sample: the resident bytes of each unit's processes below ``root``, summed."""
    totals: dict[str, int] = {}
    for proc, unit in unit_procs(procs, root):
        totals[unit] = totals.get(unit, 0) + proc.rss
    return totals


_NVCC_TEMP = re.compile(r"^tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_")
STEP_FILES = (".ptx", ".cubin", ".cpp", ".ii", ".c", ".cu", ".fatbin")


def _stem(path: str) -> str:
    """``quantization`` of ``/x/quantization.cu``, ``quantization.cudafe1.cpp`` and nvcc's
    ``tmpxft_00002f78_00000000-6_quantization.ptx``."""
    return _NVCC_TEMP.sub("", path.rsplit("/", 1)[-1]).split(".", 1)[0]


def unit_by_arguments(argv: list[str], sources: Mapping[str, str]) -> str | None:
    """The unit a compiler step works for, from the source its arguments name or the one
    source whose stem its files carry (the steps a launcher's server runs)."""
    for index, arg in enumerate(argv[:-1]):
        if arg in ("--orig_src_file_name", "--orig_src_path_name"):
            named = argv[index + 1]
            if named in sources:
                return sources[named]
    stems: dict[str, list[str]] = {}
    for source, output in sources.items():
        stems.setdefault(_stem(source), []).append(output)
    for arg in argv[1:]:
        if arg.endswith(STEP_FILES):
            candidates = stems.get(_stem(arg), [])
            if len(candidates) == 1:
                return candidates[0]
    return None


def unit_procs(procs: Iterable[Proc], root: int, extra_roots: Iterable[int] = (),
               sources: Mapping[str, str] | None = None) -> list[tuple[Proc, str]]:
    """Each process below ``root`` (or one of ``extra_roots``) that works for a unit, with
    the unit."""
    by_pid = {p.pid: p for p in procs}
    found: list[tuple[Proc, str]] = []
    extra = set(extra_roots)
    for proc in by_pid.values():
        if extra:
            served = _below(proc, extra, by_pid)
            if served is not None:
                unit = served or (unit_by_arguments(proc.argv, sources) if sources else None)
                if unit is not None:
                    found.append((proc, unit))
                continue
        unit, chain = None, 0
        current: Proc | None = proc
        below_root = False
        while current is not None and chain < 64:
            if unit is None:
                unit = output_of(current.argv)
            if current.ppid == root:
                below_root = True
                break
            current = by_pid.get(current.ppid)
            chain += 1
        if below_root and unit is not None:
            found.append((proc, unit))
    return found


def _below(proc: Proc, roots: set[int], by_pid: Mapping[int, Proc]) -> str | None:
    """For a process below one of ``roots``: the nearest ``-o X.o`` ("" when none); None
    when it is not below them."""
    unit: str | None = None
    current: Proc | None = proc
    chain = 0
    while current is not None and chain < 64:
        if unit is None:
            unit = output_of(current.argv)
        if current.ppid in roots:
            return unit or ""
        current = by_pid.get(current.ppid)
        chain += 1
    return None


def read_procs(proc_root: Path = Path("/proc")) -> list[Proc]:
    """Every process under ``proc_root`` (``/proc``): pid, parent, resident bytes, argv."""
    procs = []
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        base = proc_root / entry.name
        try:
            stat = (base / "stat").read_text(encoding="ascii", errors="replace")
            rss_pages = int((base / "statm").read_text(encoding="ascii").split()[1])
            argv = [a.decode("utf-8", "replace")
                    for a in (base / "cmdline").read_bytes().split(b"\0") if a]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or a kernel thread
        fields = stat[stat.rfind(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS if len(fields) > 19 else 0.0
        procs.append(Proc(int(entry.name), int(fields[1]), rss_pages * _PAGE, argv, cpu,
                          int(fields[19]) if len(fields) > 19 else 0))
    return procs


@dataclass
class MemorySampler:
    """``with MemorySampler() as sampler:`` around the build; then ``sampler.peaks``."""

    root: int = field(default_factory=os.getpid)
    interval: float = INTERVAL
    peaks: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    cpu_seen: dict[tuple[int, int], tuple[str, float]] = field(default_factory=dict)
    """(pid, start) -> (unit, its CPU seconds when last seen)."""
    extra_roots: Callable[[], Iterable[int]] | None = None
    """The pids of a launcher's servers whose compiles count too (sccache's)."""
    sources: Callable[[], Mapping[str, str]] | None = None
    """The build's source -> object file, for what such a server runs."""
    reader: Callable[[], list[Proc]] = read_procs
    """Where a sample's processes come from (tests feed their own)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        totals: dict[str, int] = {}
        extra = list(self.extra_roots()) if self.extra_roots else []
        sources = self.sources() if self.sources and extra else None
        for proc, unit in unit_procs(self.reader(), self.root, extra, sources):
            totals[unit] = totals.get(unit, 0) + proc.rss
            self.cpu_seen[(proc.pid, proc.started)] = (unit, proc.cpu)
        for unit, rss in totals.items():
            self.peaks[unit] = max(self.peaks.get(unit, 0), rss)
        self.samples += 1

    @property
    def cpu_seconds(self) -> dict[str, float]:
        """Each unit's CPU seconds: the last value seen of every process below it, summed."""
        totals: dict[str, float] = {}
        for unit, cpu in self.cpu_seen.values():
            totals[unit] = totals.get(unit, 0.0) + cpu
        return totals

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except OSError:  # /proc unreadable (not Linux): measure nothing
                return

    def __enter__(self) -> MemorySampler:
        if Path("/proc/self/stat").exists():
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name="sparkbuild-memory")
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# -- the store ------------------------------------------------------------------------


def store_path(cache_root: Path) -> Path:
    return cache_root / "units" / "memory.json"


def unit_key(source: str, flags: str, arch: str) -> str:
    return f"{source}|{flags}|{arch}"


TABLE_LIMIT = 64 << 20
"""The largest unit table read (vLLM's few hundred units take a few hundred KiB)."""
_NUMBERS = ("seconds", "start", "peak_rss_bytes")


def _entry_problem(key: str, entry: object) -> str | None:
    """Why ``entry`` is not a unit as :func:`remember` writes one; None when it is."""
    if key.count("|") < 2:
        return f"its key {key[:80]!r} is not SOURCE|FLAGS|ARCH"
    if not isinstance(entry, dict):
        return f"{key[:80]!r} is {type(entry).__name__}, not an object"
    for name in _NUMBERS:
        value = entry.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0):
            return f"{key[:80]!r} has {name} {str(value)[:40]!r}, not a number of 0 or more"
    if not isinstance(entry.get("killed", False), bool):
        return f"{key[:80]!r} has killed {str(entry['killed'])[:40]!r}, not true or false"
    return None


def load(cache_root: Path) -> dict[str, dict[str, Any]]:
    """The unit table kept in the cache; {} when there is none.  A table that does not
    parse or holds an entry :func:`remember` would not write is named (a warning) and set
    aside: never trusted, never a crash (the plan is then the first build's rule)."""
    path = store_path(cache_root)
    raw = read_kept_file(path, "the unit table", TABLE_LIMIT)
    if raw is None:
        return {}
    try:
        data = parse_json(raw.decode("utf-8"))
    except ValueError as exc:
        set_aside(path, "the unit table", f"is not JSON ({str(exc)[:120]})")
        return {}
    if not isinstance(data, dict):
        set_aside(path, "the unit table", f"is a JSON {type(data).__name__}, not an object")
        return {}
    problem = next((p for key, entry in data.items()
                    if (p := _entry_problem(key, entry)) is not None), None)
    if problem is not None:
        set_aside(path, "the unit table", f"is not one sparkbuild wrote ({problem})")
        return {}
    return data


def measured_for(cache_root: Path, arch: str) -> tuple[dict[str, int], tuple[str, ...]]:
    """``source|flags`` -> peak bytes of the units measured for ``arch``, and the sources
    killed for memory before."""
    peaks: dict[str, int] = {}
    killed: set[str] = set()
    for key, entry in load(cache_root).items():
        source, _, rest = key.partition("|")
        flags, _, entry_arch = rest.partition("|")
        if entry_arch != arch:
            continue
        if entry.get("peak_rss_bytes"):
            peaks[f"{source}|{flags}"] = int(entry["peak_rss_bytes"])
        if entry.get("killed"):
            killed.add(source)
    return peaks, tuple(sorted(killed))


def known_units(cache_root: Path, arch: str) -> list[KnownUnit]:
    """The unit table of the earlier builds for ``arch``: each unit's seconds (from the
    last build's ``.ninja_log``), its peak where measured, in the last build's start order."""
    units = []
    for key, entry in load(cache_root).items():
        source, _, rest = key.partition("|")
        flags, _, entry_arch = rest.partition("|")
        seconds = entry.get("seconds")
        if entry_arch != arch or not isinstance(seconds, (int, float)):
            continue
        peak = entry.get("peak_rss_bytes")
        units.append(KnownUnit(source, flags, float(seconds), int(peak) if peak else None,
                               float(entry.get("start") or 0.0)))
    return sorted(units, key=lambda u: (u.start, u.source))


def remember_build(cache_root: Path, arch: str, timeline: BuildTimeline) -> int:
    """Store a finished build's units, from its timeline (seconds, start, flags and the
    peaks measured), and the sources killed for memory; returns how many had a peak."""
    return remember(cache_root, arch,
                    [unit.to_dict() | {"source": unit.source,
                                       "peak_rss_bytes": unit.peak_rss_bytes}
                     for unit in timeline.units], timeline.killed_sources)


def remember(cache_root: Path, arch: str, units: Iterable[Mapping[str, Any]],
             killed: Iterable[str] = ()) -> int:
    """Store the build's units (``source``, ``flags``, ``seconds``, ``start`` and, where
    measured, ``peak_rss_bytes``: an earlier peak stays when this build measured none);
    returns how many had a peak."""
    data = load(cache_root)
    count = 0
    for unit in units:
        key = unit_key(str(unit["source"]), str(unit.get("flags", "")), arch)
        entry = {**data.get(key, {}), "seconds": unit.get("seconds"),
                 "start": unit.get("start")}
        if unit.get("peak_rss_bytes"):
            entry["peak_rss_bytes"] = int(unit["peak_rss_bytes"])
            count += 1
        data[key] = entry
    for source in killed:
        matches = [k for k in data if k.startswith(source + "|") and k.endswith("|" + arch)]
        for key in matches or [unit_key(source, "", arch)]:
            data.setdefault(key, {})["killed"] = True
    path = store_path(cache_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return count


def launcher_servers(port: str | None, proc_root: Path = Path("/proc")) -> list[int]:
    """The pids of sccache servers listening on ``port`` (their environment says
    ``SCCACHE_SERVER_PORT``): a daemon, whose compiles are not below the build."""
    if not port:
        return []
    wanted = f"SCCACHE_SERVER_PORT={port}".encode()
    found = []
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        base = Path(entry.path)
        try:
            argv0 = (base / "cmdline").read_bytes().split(b"\0", 1)[0]
            if not argv0.endswith(b"sccache"):
                continue
            if wanted in (base / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
