"""The run's phase clock: where the seconds of one ``wheel`` go.

A stage marks its work with ``with phase("bundle verify"):``; while a :func:`recording`
is open, each phase's own seconds (its time less that of the phases inside it) are added
to it, so that the phases of a run never overlap and add up to the time they cover.
Outside a recording a phase costs nothing and records nothing.  A measured span that no
``with`` block covers (the build's configure, read from its log) is :func:`credit`-ed to
the open phase's name it splits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class PhaseClock:
    seconds: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _inner: list[float] = field(default_factory=list)
    """Per open phase: the seconds of the phases inside it so far."""

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def wall(self) -> float:
        return time.monotonic() - self.started


_local = threading.local()


def _clock() -> PhaseClock | None:
    return getattr(_local, "clock", None)


@contextmanager
def recording() -> Iterator[PhaseClock]:
    """Record the phases of the block (one run) into the yielded clock."""
    previous, _local.clock = _clock(), PhaseClock()
    try:
        yield _local.clock
    finally:
        _local.clock = previous


@contextmanager
def phase(name: str) -> Iterator[None]:
    clock = _clock()
    if clock is None:
        yield
        return
    started = time.monotonic()
    clock._inner.append(0.0)
    try:
        yield
    finally:
        inner = clock._inner.pop()
        elapsed = time.monotonic() - started
        clock.add(name, elapsed - inner)
        if clock._inner:
            clock._inner[-1] += elapsed


def credit(name: str, seconds: float) -> None:
    """``seconds`` of the open phase belong to ``name`` (measured, not timed by a block)."""
    clock = _clock()
    if clock is None or seconds <= 0:
        return
    clock.add(name, seconds)
    if clock._inner:
        clock._inner[-1] += seconds
