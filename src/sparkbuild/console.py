"""Where sparkbuild talks to the user: messages and progress bars, all on stderr.

Standard output is kept for results (``--json`` prints one object there).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
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

console = Console(stderr=True, highlight=False, soft_wrap=True)


def _quiet() -> bool:
    return os.environ.get("SPARKBUILD_QUIET", "") not in ("", "0")


def info(message: str) -> None:
    if not _quiet():
        console.print(message, markup=False)


def step(message: str) -> None:
    """A stage of the pipeline begins."""
    if not _quiet():
        console.print(f"[bold cyan]==>[/] {message}")


def warn(message: str) -> None:
    console.print(f"[bold yellow]warning:[/] {message}")


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
