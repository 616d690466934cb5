"""The one error family of sparkbuild.

Every failure a user can cause or meet is a :class:`SparkbuildError` subclass with its own
exit code and a message in three parts, as pip's diagnostic errors: *what* happened, *where*
(a file, a hunk, a URL), and a *hint* on what to do.  ``sparkbuild.cli.main`` catches every
one to print it.  Elsewhere an ``except`` of the family raises again (the same error, or
one with more context, after cleaning up), or is one of the few that name a failure as one
finding of a check, keep a speed-up from failing a run, fall back to a plainer message, or
try the next of several sources; none decides an ordinary branch, and a function that can
find nothing returns nothing (``tests/unit/test_error_catches.py`` lists each).
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class SparkbuildError(Exception):
    """Base class: something went wrong that the user can act on."""

    exit_code: ClassVar[int] = 1

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.where = where
        self.hint = hint
        self.progress: dict[str, object] = {}
        """What the run had done when it failed (``wheel``: its timeline and units), printed
        beside the error by ``--json``."""

    def __str__(self) -> str:
        return self.what if self.where is None else f"{self.what} ({self.where})"

    def render(self) -> str:
        """The message shown to the user: one line, then where and hint when known."""
        lines = [f"error: {self.what}"]
        if self.where:
            lines.append(f"  where: {self.where}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "error": type(self).__name__,
            "exit_code": self.exit_code,
            "what": self.what,
            "where": self.where,
            "hint": self.hint,
        }


class UsageError(SparkbuildError):
    """A command line that cannot be carried out as given."""

    exit_code = 2


class RecipeError(SparkbuildError):
    """A recipe or series file that is malformed or incomplete."""

    exit_code = 3


class SourceError(SparkbuildError):
    """A source spec that cannot be understood or fetched (unknown form, missing ref)."""

    exit_code = 4


class UnsafeArchiveError(SparkbuildError):
    """An archive that is truncated, corrupt, or would write outside its destination."""

    exit_code = 5


class HashMismatchError(SparkbuildError):
    """Bytes whose sha256 differs from the pinned one."""

    exit_code = 6


class PatchError(SparkbuildError):
    """A patch that is malformed, escapes the tree, or does not apply."""

    exit_code = 7


class DestinationError(SparkbuildError):
    """A destination that is not empty, or a tree with changes that would be lost."""

    exit_code = 8


class ToolchainError(SparkbuildError):
    """A compiler or build tool that is missing or too old."""

    exit_code = 9


class CacheMissError(SparkbuildError):
    """Something the offline build needs that the dependency cache does not hold."""

    exit_code = 10


class CommandFailed(SparkbuildError):
    """A subprocess (cmake, ninja, nvcc, pip, git) exited with an error."""

    exit_code = 11


class VerifyError(SparkbuildError):
    """A wheelhouse, wheel or cache entry that does not match what was recorded."""

    exit_code = 12


class DiskFullError(SparkbuildError):
    """The disk filled up while writing."""

    exit_code = 13


class PinRefusedError(SparkbuildError):
    """A pinned requirement that sparkbuild knows to be broken on the target."""

    exit_code = 14


class NetworkError(SparkbuildError):
    """The package index or a git remote could not be reached."""

    exit_code = 15


class LockTimeoutError(SparkbuildError):
    """Another sparkbuild run held the cache lock for longer than we were willing to wait."""

    exit_code = 16


class InterruptedRun(SparkbuildError):
    """The user interrupted the run (Ctrl-C)."""

    exit_code = 130


ALL_ERRORS: tuple[type[SparkbuildError], ...] = (
    SparkbuildError,
    UsageError,
    RecipeError,
    SourceError,
    UnsafeArchiveError,
    HashMismatchError,
    PatchError,
    DestinationError,
    ToolchainError,
    CacheMissError,
    CommandFailed,
    VerifyError,
    DiskFullError,
    PinRefusedError,
    NetworkError,
    LockTimeoutError,
    InterruptedRun,
)


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errnos of a full disk and of an exhausted quota: both are a :class:`DiskFullError`."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


@contextlib.contextmanager
def disk_full_as_error(
    what: str | Callable[[], str],
    *,
    where: str | os.PathLike[str] | None,
    hint: str = "free some space and run again",
    cleanup: Callable[[], object] | None = None,
) -> Iterator[None]:
    """A full disk (ENOSPC or EDQUOT) inside the block becomes a :class:`DiskFullError`.

    ``what`` may be a callable, asked only when the disk did fill up (to say how much is
    free then); ``cleanup`` runs first (remove a half-written file).  Other errors pass.
    """
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        if cleanup is not None:
            cleanup()
        message = what if isinstance(what, str) else what()
        raise DiskFullError(
            message, where=None if where is None else os.fspath(where), hint=hint
        ) from exc


class StageResult(Protocol):
    """What every stage returns: a dataclass that can speak JSON and to a person."""

    def to_dict(self) -> dict[str, Any]:
        """The result as one JSON object (``--json``)."""

    def summary(self) -> list[str]:
        """Lines for a person."""

    @property
    def error(self) -> SparkbuildError | None:
        """A failure that still produced a full report (a patch that did not apply)."""
