"""Reading what ninja builds: ``build.ninja`` (its edges) and ``.ninja_log`` (their times).

Only as much of the ninja language as CMake and flashinfer's builder write: ``build``
statements with their indented edge variables, top-level variables, ``pool`` declarations,
``include``/``subninja``, ``$``-escapes and ``$``-continued lines.  Variables are not
expanded (an edge's ``FLAGS`` is read as written, which is what a unit's memory is keyed
by).  flashinfer writes one file per module (``NAME/build.ninja``, its flags as the file's
own ``cflags``/``cuda_cflags``, rules ``compile``/``cuda_compile`` and ``link``/``nvcc_link``)
and one top file of ``subninja`` lines that ninja runs with ``-f``.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

COMPILE_RULE = re.compile(r"_COMPILER_|^(cuda_)?compile$")
"""CMake names its compile rules ``<LANG>_COMPILER__<target>_...``, link rules ``_LINKER_``;
flashinfer's are ``compile``/``cuda_compile`` and ``link``/``nvcc_link``."""
LINK_RULE = re.compile(r"_LINKER_|_STATIC_LIBRARY_|^(nvcc_)?link$")
_SCOPE_FLAGS = {"compile": "cflags", "cuda_compile": "cuda_cflags"}


@dataclass
class Edge:
    outputs: list[str]
    rule: str
    inputs: list[str]
    implicit: list[str] = field(default_factory=list)
    order_only: list[str] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    line: int = 0
    """0-based index of the ``build`` line in its file's lines (after joining continuations)."""
    scope: dict[str, str] = field(default_factory=dict)
    """The file's top-level variables when the edge was read (flashinfer's flags)."""

    @property
    def is_compile(self) -> bool:
        return bool(COMPILE_RULE.search(self.rule))

    @property
    def is_link(self) -> bool:
        return bool(LINK_RULE.search(self.rule))

    @property
    def source(self) -> str:
        return self.inputs[0] if self.inputs else ""

    def flags_key(self) -> str:
        """What a unit's memory is keyed by besides its source: its flags and defines (a
        flashinfer edge's are its file's ``cflags`` or ``cuda_cflags``)."""
        if "FLAGS" not in self.variables and self.rule in _SCOPE_FLAGS:
            text = self.rule + "\n" + self.scope.get(_SCOPE_FLAGS[self.rule], "")
        else:
            text = self.variables.get("FLAGS", "") + "\n" + self.variables.get("DEFINES", "")
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def logical_lines(text: str) -> list[str]:
    """The file's lines with ``$``-continuations joined (a line ending in an odd ``$``)."""
    out: list[str] = []
    pending = ""
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        body = line.lstrip() if pending else line
        if (len(line) - len(line.rstrip("$"))) % 2 == 1:
            pending += body[:-1]
            continue
        out.append(pending + body)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _paths(text: str) -> list[str]:
    """Unescaped-space separated paths, with ``$ ``, ``$:`` and ``$$`` unescaped."""
    paths, current, i = [], [], 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            current.append(text[i + 1])
            i += 2
            continue
        if char == " ":
            if current:
                paths.append("".join(current))
                current = []
        else:
            current.append(char)
        i += 1
    if current:
        paths.append("".join(current))
    return paths


def _split_colon(text: str) -> tuple[str, str]:
    """``outs: rest`` at the first unescaped colon."""
    i = 0
    while i < len(text):
        if text[i] == "$":
            i += 2
            continue
        if text[i] == ":":
            return text[:i], text[i + 1:]
        i += 1
    return text, ""


def parse_build_line(line: str) -> tuple[list[str], str, list[str], list[str], list[str]]:
    """``build OUTS [| IMPLICIT_OUTS]: RULE INS [| IMPLICIT] [|| ORDER_ONLY]``."""
    outs_text, rest = _split_colon(line[len("build "):])
    outputs = [p for p in _paths(outs_text) if p != "|"]
    words = _paths(rest)
    rule = words[0] if words else ""
    section, inputs, implicit, order_only = "in", [], [], []
    for word in words[1:]:
        if word == "|":
            section = "implicit"
        elif word == "||":
            section = "order"
        elif word == "|@":
            section = "validation"
        elif section == "in":
            inputs.append(word)
        elif section == "implicit":
            implicit.append(word)
        elif section == "order":
            order_only.append(word)
    return outputs, rule, inputs, implicit, order_only


@dataclass
class NinjaFile:
    path: Path
    lines: list[str]
    edges: list[Edge]
    pools: dict[str, int]
    includes: list[str]


def read_ninja_file(path: Path) -> NinjaFile:
    lines = logical_lines(path.read_text(encoding="utf-8", errors="replace"))
    edges: list[Edge] = []
    pools: dict[str, int] = {}
    includes: list[str] = []
    scope: dict[str, str] = {}
    current: Edge | None = None
    pool: str | None = None
    for index, line in enumerate(lines):
        if line.startswith(("  ", "\t")) and (current is not None or pool is not None):
            key, _, value = line.strip().partition("=")
            if current is not None:
                current.variables[key.strip()] = value.strip()
            elif pool is not None and key.strip() == "depth":
                pools[pool] = int(value.strip() or 0)
            continue
        current, pool = None, None
        if line.startswith("build "):
            outputs, rule, inputs, implicit, order_only = parse_build_line(line)
            current = Edge(outputs, rule, inputs, implicit, order_only, line=index,
                           scope=scope)
            edges.append(current)
        elif line.startswith("pool "):
            pool = line[len("pool "):].strip()
            pools.setdefault(pool, 0)
        elif line.startswith(("include ", "subninja ")):
            includes.append(line.split(None, 1)[1].strip())
        elif _TOP_VARIABLE.match(line):
            key, _, value = line.partition("=")
            scope = {**scope, key.strip(): value.strip()}
    return NinjaFile(path, lines, edges, pools, includes)


_TOP_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\s*=")


def manifest_files(build_dir: Path, manifest: Path | None = None) -> list[Path]:
    """The manifest (``build_dir/build.ninja`` unless ``-f`` named another) and every file
    it includes or runs as a subninja, the manifest first, each once."""
    todo = [manifest or build_dir / "build.ninja"]
    seen: list[Path] = []
    while todo:
        path = todo.pop(0)
        if path in seen or not path.is_file():
            continue
        seen.append(path)
        todo += [p if (p := Path(name)).is_absolute() else build_dir / p
                 for name in read_ninja_file(path).includes]
    return seen


def read_graph(build_dir: Path, manifest: Path | None = None
               ) -> tuple[list[Edge], dict[str, int]]:
    """Every edge and pool of ``build_dir/build.ninja`` (or ``manifest``) and the files it
    includes."""
    edges: list[Edge] = []
    pools: dict[str, int] = {}
    todo, seen = [manifest or build_dir / "build.ninja"], set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        parsed = read_ninja_file(path)
        edges += parsed.edges
        pools.update(parsed.pools)
        todo += [p if (p := Path(name)).is_absolute() else build_dir / p
                 for name in parsed.includes]
    return edges, pools


@dataclass(frozen=True)
class LogEntry:
    start_ms: int
    end_ms: int
    output: str
    run: int
    """Which ninja run of the build wrote it (0 the first): its times count from that run's
    start."""

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000.0


def read_log_lines(path: Path) -> list[str]:
    """The lines of a ``.ninja_log`` (none when there is no log yet)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


def lines_added(before: list[str], after: list[str]) -> list[str]:
    """The lines of ``after`` that ``before`` did not hold, each line counted: what one ninja
    run wrote into its log.  Ninja appends a line per edge it ran, or, when the log holds too
    many stale lines, rewrites it first with each output's latest line and appends after
    those; either way an edge this run ran has a line of its own (its times and its output's
    mtime are new), and an edge it did not run has none.  A run with nothing to do adds
    nothing."""
    left = Counter(before)
    added = []
    for line in after:
        if left[line] > 0:
            left[line] -= 1
        else:
            added.append(line)
    return added


def log_entries(lines: list[str], run: int = 0) -> list[LogEntry]:
    """The entries of ``.ninja_log`` lines (v5 to v7: start, end, mtime, output, hash), in
    order, each of ninja run ``run``; the header and broken lines are skipped."""
    entries: list[LogEntry] = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        entries.append(LogEntry(int(fields[0]), int(fields[1]), fields[3], run))
    return entries


def last_run(entries: list[LogEntry]) -> list[LogEntry]:
    """The latest entry of each output (a retried unit counts once, with its last try)."""
    latest: dict[str, LogEntry] = {}
    for entry in entries:
        latest[entry.output] = entry
    return list(latest.values())


def object_target(output: str) -> str:
    """``CMakeFiles/_C.dir/csrc/x.cu.o`` -> ``_C`` (CMake's object layout); else ''."""
    match = re.search(r"(?:^|/)CMakeFiles/([^/]+)\.dir/", output)
    return match.group(1) if match else ""
