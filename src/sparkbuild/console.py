"""Where sparkbuild talks to the user: messages and progress bars, all on stderr.

Standard output is kept for results (``--json`` prints one object there).  Every line a
person reads -- a message, a stage's summary, an error -- is printed by :func:`say` (or
:func:`info`, :func:`step`, :func:`warn`, which call it), and :func:`say` makes it
:func:`terminal_safe` first: text from outside (a file name in a tree, a model config's
architecture, a tool's output) cannot drive the terminal.  ``--json`` is written as it is:
``json`` escapes those characters itself.

Progress is a bar on a terminal; without one (a log file, CI) it is a plain line now and
then (:class:`PlainProgress`), so that a long step is never silent.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape as escape_markup
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


def say(text: str, *, style: str | None = None) -> None:
    """Print ``text`` for a person (made :func:`terminal_safe`), whatever SPARKBUILD_QUIET
    says: a result's summary, an error."""
    console.print(terminal_safe(text), markup=False, highlight=False, soft_wrap=True,
                  style=style)


def info(message: str) -> None:
    if not _quiet():
        say(message)


def _marked(mark: str, message: str) -> None:
    console.print(f"{mark} {escape_markup(terminal_safe(message))}", highlight=False,
                  soft_wrap=True)


def step(message: str) -> None:
    """A stage of the pipeline begins."""
    if not _quiet():
        _marked("[bold cyan]==>[/]", message)


def warn(message: str) -> None:
    _marked("[bold yellow]warning:[/]", message)


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


LAYOUT_CHARACTERS = frozenset("\n\t")
"""What :func:`terminal_safe` leaves as it is: a message's own line breaks and tabs."""


def terminal_safe(text: str) -> str:
    """``text`` as a terminal shows it without acting on it: every unsafe character
    (:func:`is_unsafe_character`: ESC and the other controls, C1's CSI included, line
    separators, bidirectional controls) but a line break or a tab written as an escape
    (``\\u001b``).  The one filter of everything :func:`say` prints; a name that must not
    forge a line either is :func:`shown` where it is put into a message."""
    if not any(is_unsafe_character(c) and c not in LAYOUT_CHARACTERS for c in text):
        return text
    return "".join(c if c in LAYOUT_CHARACTERS else _escape(c) for c in text)


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


PLAIN_SECONDS = 30.0
"""Without a terminal, a progress line at least this often while work goes on."""
PLAIN_STEPS = 10
"""Without a terminal, a count's progress line also at each tenth of its total."""
MIB = 1 << 20


class PlainProgress:
    """Progress as plain lines, for a log file or CI where no bar can be drawn.

    Fed ``update(done, total)``, it says ``DESCRIPTION: done/total (P%), S s`` when
    :data:`PLAIN_SECONDS` have passed since its last line, and, for a count (``by_steps``),
    whenever ``done`` reaches another tenth of ``total``; :meth:`finish` says the last
    state when the last line did not.  ``describe`` writes an amount (bytes as MiB).
    """

    def __init__(self, description: str, *, by_steps: bool = True,
                 describe: Callable[[int], str] = str,
                 clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None) -> None:
        self.description = description
        self.by_steps = by_steps
        self.describe = describe
        self.clock = clock
        self.write = write or info
        self.started = self.last_line = clock()
        self.done, self.total = 0, 0
        self.said: tuple[int, int] | None = None
        self.tenth = 0

    def update(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total or 0
        now = self.clock()
        tenth = PLAIN_STEPS * done // self.total if self.by_steps and self.total else 0
        if now - self.last_line >= PLAIN_SECONDS or tenth > self.tenth:
            self.tenth = max(self.tenth, tenth)
            self._say(now)

    def advance(self, amount: int) -> None:
        self.update(self.done + amount, self.total)

    def finish(self) -> None:
        if self.done and self.said != (self.done, self.total) and (
                self.said is not None or self.by_steps):
            self._say(self.clock())

    def line(self, now: float) -> str:
        amount = self.describe(self.done)
        if self.total:
            amount += (f"/{self.describe(self.total)} "
                       f"({100 * self.done // self.total}%)")
        return f"{self.description}: {amount}, {now - self.started:.0f} s"

    def _say(self, now: float) -> None:
        self.write(self.line(now))
        self.said, self.last_line = (self.done, self.total), now


def _mib(amount: int) -> str:
    return f"{amount / MIB:.1f} MiB"


@contextmanager
def _plain(progress: PlainProgress) -> Iterator[PlainProgress]:
    try:
        yield progress
    finally:
        progress.finish()


@contextmanager
def byte_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A download or hashing bar; yields ``advance(nbytes)``.  Without a terminal, a plain
    line every :data:`PLAIN_SECONDS` (a short transfer says nothing)."""
    if _quiet():
        yield lambda _n: None
        return
    if not console.is_terminal:
        with _plain(PlainProgress(description, by_steps=False, describe=_mib)) as plain:
            plain.total = total or 0
            yield plain.advance
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(_bar_text(description), total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def count_progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """An ``[n/m]`` bar with time left (ninja's steps); yields ``update(done, total)``.
    Without a terminal, a plain line at each tenth of the total and every
    :data:`PLAIN_SECONDS` (:class:`PlainProgress`)."""
    if _quiet():
        yield lambda _done, _total: None
        return
    if not console.is_terminal:
        with _plain(PlainProgress(description)) as plain:
            yield plain.update
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(_bar_text(description), total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)


def _bar_text(description: str) -> str:
    """A bar's description (rich reads it as markup), made terminal-safe."""
    return escape_markup(terminal_safe(description))
