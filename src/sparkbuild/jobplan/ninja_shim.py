"""sparkbuild's ninja: puts the heavy units into the pool, retries a unit killed for memory.

CMake is told to use this as its ``CMAKE_MAKE_PROGRAM`` (a two-line script written by
:func:`write_wrapper`), so ``cmake --build`` -- which vLLM's setup.py runs after the
configure -- comes here with ninja's own arguments. Before ninja starts, the edges of the
units the plan file (``$SPARKBUILD_POOL_PLAN``, :mod:`sparkbuild.jobplan.pools`) calls heavy
(by the planner's own test, :mod:`sparkbuild.jobplan.heavy_units`) get ``pool =
sparkbuild_heavy`` in ``build.ninja`` (CMake has no per-source job pool:
``JOB_POOL_COMPILE`` is a target property, and vLLM's ``_C`` is one target), and the compile
edges are listed longest first by the plan's measured seconds, the order ninja starts them
in (:mod:`sparkbuild.jobplan.unit_order`). Ninja's output is passed through line by line.
When the build fails and every failed unit was killed (SIGKILL, exit 137, nvcc's "died due
to signal 9"), those units join the pool -- its depth halved when they were in it already --
and ninja runs again: it builds only what is left. Each run is appended to
``$SPARKBUILD_NINJA_RECORD`` (one JSON line: build directory, wall-clock start and end, exit
status, the units retried, and the lines this run added to ``.ninja_log``: the timeline reads
a run's units from those alone, so a run with nothing to do has none).

With dist (``$SPARKBUILD_HEAVY_OUTPUTS``), the heavy edges' outputs are listed for the
compiler launcher, which sends those units to the build host's heavy slots when their
steps fall back (:mod:`sparkbuild.team.heavy_gate`).

Anything but a build (``--version``, ``-t TOOL``, ``-n``) goes to ninja unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sparkbuild.jobplan.heavy_units import is_heavy, rule_match, write_heavy_outputs
from sparkbuild.jobplan.ninja_graph import (
    Edge,
    NinjaFile,
    lines_added,
    logical_lines,
    manifest_files,
    read_graph,
    read_log_lines,
    read_ninja_file,
)
from sparkbuild.jobplan.unit_order import expected_seconds, longest_first, plan_measure
from sparkbuild.settings import (
    HEAVY_OUTPUTS,
    HEAVY_POOL_DEPTH,
    NINJA_RECORD,
    POOL_PLAN,
    REAL_NINJA,
)

REAL_VARIABLE = REAL_NINJA.name
RECORD_VARIABLE = NINJA_RECORD.name
PLAN_VARIABLE = POOL_PLAN.name
DEPTH_VARIABLE = HEAVY_POOL_DEPTH.name
"""The heavy pool's depth for the configure (the top-level include declares the pool with
it); the plan file's depth, which this ninja writes into the manifest, rules the build."""
MAX_ATTEMPTS = 3
ANNOUNCE = "sparkbuild: ninja builds in "
"""How this ninja names its build directory on the build's output."""
_KILLED = re.compile(r"\bKilled\b|signal 9|Kill signal|code=137|status 137|SIGKILL|"
                     r"Out of memory|out of memory", re.IGNORECASE)
_STATUS = re.compile(r"^\[\d+/\d+\]")


def relative_source(source: str, tree: str) -> str:
    prefix = tree.rstrip("/") + "/"
    return source[len(prefix):] if tree and source.startswith(prefix) else source


def heavy_edge(edge: Edge, plan: dict[str, Any]) -> bool:
    """Whether the plan file calls the edge's unit heavy
    (:func:`sparkbuild.jobplan.heavy_units.is_heavy`, the planner's test)."""
    source = relative_source(edge.source, plan.get("tree", ""))
    return is_heavy(plan_measure(plan, "measured", "by_source", source, edge.flags_key()),
                    float(plan.get("threshold", 0)), killed=source in plan.get("killed", ()),
                    by_rule=rule_match(source, plan.get("patterns", ())))


def assign_pool(build_dir: Path, plan: dict[str, Any], manifest: Path | None = None
                ) -> list[str]:
    """Put the heavy compile edges of ``build_dir/build.ninja`` (or the ``-f`` manifest
    and the files it runs as subninjas: flashinfer's, one per module) into the plan's pool
    (and declare it, when the top-level include did not), and list the compile edges
    longest first (:mod:`sparkbuild.jobplan.unit_order`) -- within each file, and the
    subninja lines by their longest unit; returns the heavy edges' outputs."""
    pool, depth = str(plan["pool"]), int(plan["depth"])
    files = manifest_files(build_dir, manifest)
    if not files:
        return []
    heavy: list[str] = []
    longest: dict[str, float] = {}
    for path in files[1:]:
        edited = _edit_compiles(path, plan, heavy)
        if edited is not None:
            longest[str(path)] = edited
    top = files[0]
    parsed = read_ninja_file(top)
    lines = list(parsed.lines)
    _edit_lines(parsed, lines, plan, heavy)
    if longest:
        _subninjas_longest_first(lines, build_dir, longest)
    _, pools = read_graph(build_dir, manifest)
    if pool not in pools:
        lines[:0] = [f"pool {pool}", f"  depth = {depth}", ""]
    elif pools[pool] != depth and not _depth_in(lines, pool, depth):
        _set_depth(build_dir, pool, depth)  # declared by the include (rules.ninja)
    text = "\n".join(lines) + ("\n" if lines and lines[-1] else "")
    if text != top.read_text(encoding="utf-8", errors="replace"):
        _replace_text(top, text)
    return sorted(heavy)


def _edit_lines(parsed: NinjaFile, lines: list[str], plan: dict[str, Any],
                heavy: list[str]) -> float | None:
    """Pool the heavy compile edges of one parsed file and list them longest first, in
    ``lines``; the longest expected seconds of its units (None: it has no compile edge)."""
    pool = str(plan["pool"])
    compiles = sorted((e for e in parsed.edges if e.is_compile), key=lambda e: e.line)
    if not compiles:
        return None
    spans: list[tuple[int, int]] = []
    bodies: list[list[str]] = []
    for edge in compiles:
        end = edge.line + 1
        while end < len(lines) and lines[end].startswith(("  ", "\t")):
            end += 1
        spans.append((edge.line, end))
        body = lines[edge.line:end]
        if heavy_edge(edge, plan):
            heavy.append(edge.outputs[0])
            body = _in_pool(body, pool)
        bodies.append(body)
    tree = str(plan.get("tree", ""))
    seconds = [expected_seconds(relative_source(e.source, tree), e.flags_key(), plan)
               for e in compiles]
    order = longest_first(seconds)
    for position in reversed(range(len(spans))):  # from the end: the spans above stand
        start, end = spans[position]
        lines[start:end] = bodies[order[position]]
    known = [s for s in seconds if s is not None]
    return max(known) if len(known) == len(seconds) else float("inf")


def _edit_compiles(path: Path, plan: dict[str, Any], heavy: list[str]) -> float | None:
    """:func:`_edit_lines` on one included file, written back when it changed."""
    parsed = read_ninja_file(path)
    lines = list(parsed.lines)
    longest = _edit_lines(parsed, lines, plan, heavy)
    if longest is not None and lines != parsed.lines:
        _replace_text(path, "\n".join(lines) + ("\n" if lines and lines[-1] else ""))
    return longest


def _subninjas_longest_first(lines: list[str], build_dir: Path,
                             longest: dict[str, float]) -> None:
    """Reorder the top file's ``subninja`` lines by their file's longest unit (an untimed
    unit counts as the longest): ninja starts the edges in the order it reads them."""
    places = [i for i, line in enumerate(lines) if line.startswith("subninja ")]

    def weight(line: str) -> float:
        name = Path(line.split(None, 1)[1].strip())
        return longest.get(str(name if name.is_absolute() else build_dir / name), 0.0)

    ordered = sorted((lines[i] for i in places), key=lambda line: -weight(line))
    for index, line in zip(places, ordered, strict=True):
        lines[index] = line


def _in_pool(body: list[str], pool: str) -> list[str]:
    """An edge's lines (``build`` and its variables) with ``pool = POOL``."""
    for index, line in enumerate(body[1:], start=1):
        if line.strip().startswith("pool ") or line.strip().startswith("pool="):
            return [*body[:index], f"  pool = {pool}", *body[index + 1:]]
    return [body[0], f"  pool = {pool}", *body[1:]]


def _replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: ninja (or a rerun) never reads half a manifest.

    The shim runs inside the build's Python, so it keeps to the standard library rather
    than :mod:`sparkbuild.store.files` (which imports rich)."""
    partial = path.with_name(f".{path.name}.sparkbuild-{os.getpid()}")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _depth_in(lines: list[str], pool: str, depth: int) -> bool:
    """Set the depth of ``pool`` where ``lines`` declare it; whether they do."""
    for index, line in enumerate(lines[:-1]):
        if line.strip() == f"pool {pool}" and lines[index + 1].strip().startswith("depth"):
            lines[index + 1] = f"  depth = {depth}"
            return True
    return False


def _set_depth(build_dir: Path, pool: str, depth: int) -> None:
    path = build_dir / "CMakeFiles" / "rules.ninja"
    if path.is_file():
        lines = logical_lines(path.read_text(encoding="utf-8"))
        if _depth_in(lines, pool, depth):
            _replace_text(path, "\n".join(lines))


def failed_units(output: list[str]) -> dict[str, bool]:
    """ninja's ``FAILED: OUT`` blocks: output -> whether it was killed (for memory)."""
    failed: dict[str, bool] = {}
    current: str | None = None
    for line in output:
        if line.startswith("FAILED: "):
            words = [w for w in line[len("FAILED: "):].split() if not w.startswith("[code=")]
            current = words[0] if words else "?"
            failed[current] = "code=137" in line
            continue
        if current is None:
            continue
        if _STATUS.match(line) or line.startswith("ninja: "):
            current = None
        elif _KILLED.search(line):
            failed[current] = True
    return failed


def _build_dir(args: list[str]) -> Path:
    for index, arg in enumerate(args):
        if arg == "-C" and index + 1 < len(args):
            return Path(args[index + 1]).resolve()
        if arg.startswith("-C") and len(arg) > 2:
            return Path(arg[2:]).resolve()
    return Path.cwd()


def _manifest(args: list[str], build_dir: Path) -> Path | None:
    """The file ``-f FILE`` names (relative to the build directory, as ninja reads it);
    None: ``build.ninja``."""
    for index, arg in enumerate(args):
        value = None
        if arg == "-f" and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith("-f") and len(arg) > 2:
            value = arg[2:]
        if value:
            path = Path(value)
            return path if path.is_absolute() else build_dir / path
    return None


def _not_a_build(args: list[str]) -> bool:
    if "CMakeFiles" in _build_dir(args).parts:  # CMake's try_compile projects
        return True
    return any(a in ("--version", "-t", "-n", "--help", "-h") or a.startswith("-t")
               for a in args)


def _run_logged(real: str, args: list[str], build_dir: Path
                ) -> tuple[int, list[str], list[str]]:
    """:func:`_run_ninja`, and the lines the run added to ``build_dir/.ninja_log``."""
    log = build_dir / ".ninja_log"
    before = read_log_lines(log)
    returncode, output = _run_ninja(real, args)
    return returncode, output, lines_added(before, read_log_lines(log))


def _run_ninja(real: str, args: list[str]) -> tuple[int, list[str]]:
    # Not proc.run: that starts ninja in a process group of its own (setsid), out of the group of
    # the build that sparkbuild's proc.run stops (and records for the cache lock), so a
    # stopped or killed build would leave ninja and its nvcc jobs running.  This process
    # is the build's, started by cmake, and keeps to the standard library and ninja_graph.
    lines: list[str] = []
    with subprocess.Popen([real, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", bufsize=1) as child:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
    return child.returncode, lines


def _list_heavy(build_dir: Path, manifest: Path | None, heavy: list[str]) -> None:
    """With dist: the heavy pool's outputs for the compiler launcher in front of sccache,
    which sends them to the heavy units' server (sparkbuild.team.heavy_gate)."""
    directory = HEAVY_OUTPUTS.path()
    if directory is None:
        return
    name = hashlib.sha256(f"{build_dir}\n{manifest or ''}".encode()).hexdigest()[:16]
    write_heavy_outputs(directory, build_dir, name, heavy)


def _record(entry: dict[str, Any]) -> None:
    path = NINJA_RECORD.path()
    if path is not None:
        with path.open("a", encoding="utf-8") as record:
            record.write(json.dumps(entry) + "\n")


def _announce(build_dir: Path) -> None:
    """Name the build directory on the build's output: the unit watch finds the objects
    ninja reports under it (sparkbuild.compile.unit_code_watch)."""
    print(f"{ANNOUNCE}{build_dir}", flush=True)


def main(argv: list[str]) -> int:
    real = str(REAL_NINJA.path() or "ninja")
    plan_path = POOL_PLAN.path()
    building = not _not_a_build(argv)
    if building:
        _announce(_build_dir(argv))
    if not building or plan_path is None or not plan_path.is_file():
        if building and NINJA_RECORD.path() is not None:
            started = time.time()
            returncode, _, log = _run_logged(real, argv, _build_dir(argv))
            manifest = _manifest(argv, _build_dir(argv))
            _record({"dir": str(_build_dir(argv)),
                     **({"manifest": str(manifest)} if manifest else {}),
                     "start": started, "end": time.time(),
                     "rc": returncode, "attempt": 1, "heavy": [], "retried": [], "log": log})
            return returncode
        os.execvp(real, [real, *argv])
    plan = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    build_dir = _build_dir(argv)
    manifest = _manifest(argv, build_dir)
    named = {"manifest": str(manifest)} if manifest else {}
    returncode = 1
    for attempt in range(1, MAX_ATTEMPTS + 1):
        heavy = (assign_pool(build_dir, plan, manifest)
                 if (manifest or build_dir / "build.ninja").is_file() else [])
        _list_heavy(build_dir, manifest, heavy)
        started = time.time()
        returncode, output, log = _run_logged(real, argv, build_dir)
        failed = failed_units(output) if returncode else {}
        killed = [out for out, was_killed in failed.items() if was_killed]
        retry = bool(failed) and len(killed) == len(failed) and attempt < MAX_ATTEMPTS
        _record({"dir": str(build_dir), **named, "start": started, "end": time.time(),
                 "rc": returncode, "attempt": attempt, "heavy": heavy,
                 "retried": killed if retry else [], "depth": plan["depth"], "log": log})
        if not retry:
            break
        edges, _ = read_graph(build_dir, manifest)
        sources = {e.outputs[0]: relative_source(e.source, plan.get("tree", ""))
                   for e in edges if e.outputs}
        again = [sources.get(out, out) for out in killed]
        if all(out in heavy for out in killed):
            plan["depth"] = max(1, int(plan["depth"]) // 2)
        plan["killed"] = sorted({*plan.get("killed", ()), *again})
        _replace_text(Path(plan_path), json.dumps(plan, indent=1) + "\n")
        print(f"sparkbuild: {', '.join(killed)} killed (out of memory?): retrying in pool "
              f"{plan['pool']} (depth {plan['depth']})", flush=True)
    return returncode


def write_wrapper(path: Path, python: str, package_parent: Path,
                  module: str = "sparkbuild.jobplan.ninja_shim") -> Path:
    """The script CMake runs as ninja (or the build finds as cmake: ``module``
    :mod:`sparkbuild.compile.cmake_shim`): ``module``'s ``main``, with sparkbuild importable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    code = (f"import sys; sys.path.insert(0, {str(package_parent)!r}); "
            f"from {module} import main; sys.exit(main(sys.argv[1:]))")
    path.write_text(f"#!/bin/sh\nexec '{python}' -c \"{code}\" \"$@\"\n", encoding="utf-8")
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
