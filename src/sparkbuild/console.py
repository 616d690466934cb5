"""Where sparkbuild talks to the user: messages and progress bars, all on stderr.

Standard output is kept for results (``--json`` prints one object there).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from sparkbuild.settings import QUIET

console = Console(stderr=True, highlight=False, soft_wrap=True)


def _quiet() -> bool:
    return QUIET.flag()


def info(message: str) -> None:
    if not _quiet():
        console.print(message, markup=False)


def step(message: str) -> None:
    """A stage of the pipeline begins."""
    if not _quiet():
        console.print(f"[bold cyan]==>[/] {message}")


def warn(message: str) -> None:
    console.print(f"[bold yellow]warning:[/] {message}")


# -- names in output: nothing a terminal or a line reader would act on --------------------

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")
"""Bidirectional controls: U+202E shows ``exe.txt`` as ``txt.exe``."""
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_unsafe_character(char: str) -> bool:
    """A control character (a newline forges a line of output, an escape drives the
    terminal), a line or paragraph separator, or a bidirectional control."""
    return unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in BIDI_CONTROLS


def unsafe_characters(text: str) -> list[str]:
    """The unsafe characters of ``text`` (:func:`is_unsafe_character`), each once, as
    ``U+000A``."""
    return list(dict.fromkeys(f"U+{ord(c):04X}" for c in text if is_unsafe_character(c)))


def _escape(char: str) -> str:
    if not is_unsafe_character(char):
        return char
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def escaped(text: str) -> str:
    """``text`` with each unsafe character written as an escape (``\\n``, ``\\u202e``)."""
    return "".join(map(_escape, text))


def shown(name: str) -> str:
    """A name (a file, a member, a path) as one line of output can carry it: as it is, or,
    when it holds an unsafe character, in double quotes with those characters (and any
    backslash or double quote) escaped: a name cannot forge a line (``MISMATCH x`` after a
    newline) or turn round (U+202E)."""
    if not unsafe_characters(name):
        return name
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped(quoted)}"'


# -- command echoes (proc.run's `+ cmd` and `env K=V` lines) ------------------------------


class _Echoes:
    """How much of each command proc.run starts is echoed.

    Everything, unless the CLI asked for fewer (:func:`set_verbose` False, stderr not a
    terminal, as in a CI log): then each kind of command (``git apply``) is echoed the
    first time, a second one says that the rest are not, and an ``env K=V`` line is shown
    once per run.  A failing command is named in full by its error whatever this says.
    """

    def __init__(self) -> None:
        self.reduced = False
        self.seen_kinds: dict[str, int] = {}
        self.seen_env: set[tuple[str, str]] = set()


_echoes = _Echoes()


def set_verbose(verbose: bool) -> None:
    """The CLI's ``-v``: echo every command; without it, fewer when stderr is no terminal."""
    _echoes.reduced = not verbose and not console.is_terminal
    _echoes.seen_kinds.clear()
    _echoes.seen_env.clear()


def echo_command(command: str, kind: str, env: Mapping[str, str]) -> None:
    """Say ``+ command`` and the environment it changes (``kind``: ``git apply``)."""
    if not _echoes.reduced:
        info(f"+ {command}")
        for key, value in sorted(env.items()):
            info(f"  env {key}={value}")
        return
    count = _echoes.seen_kinds[kind] = _echoes.seen_kinds.get(kind, 0) + 1
    if count == 2:
        info(f"  (further `{kind}` commands are not echoed; -v echoes them all)")
    if count == 1:
        info(f"+ {command}")
    for key, value in sorted(env.items()):
        if count == 1 and (key, value) not in _echoes.seen_env:
            info(f"  env {key}={value}")
        _echoes.seen_env.add((key, value))


@contextmanager
def byte_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A download or hashing bar; yields ``advance(nbytes)``."""
    if _quiet() or not console.is_terminal:
        yield lambda _n: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def count_progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """An ``[n/m]`` bar with time left (ninja's steps); yields ``update(done, total)``."""
    if _quiet() or not console.is_terminal:
        yield lambda _done, _total: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)
