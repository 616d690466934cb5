"""The one reader of the files users hand sparkbuild, and of TOML and JSON from users.

:func:`read_user_file` and :func:`read_user_text` read a small file a user hands sparkbuild
or it keeps (a recipe, its lock and series, a patch, a model's ``config.json``, a token
file, an install record, a venv's profile): a FIFO, a device or a directory is refused by
name (:func:`open_regular`, :class:`NotRegularFile`) rather than waited on or read without
end, and a file over the caller's limit is not read.  :func:`parse_toml` and
:func:`parse_json` parse what users give, so that one nested beyond what the reader follows
is that file's error, not a traceback.  It knows no recipe: the caller names the file and
the error.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import IO, Any

from sparkbuild.errors import RecipeError, SparkbuildError

# -- the one reader of TOML and JSON from users -------------------------------------------

NESTED_TOO_DEEPLY = ("nested too deeply: arrays or tables inside one another beyond what "
                     "the reader follows")


def parse_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads`` for every TOML sparkbuild reads (a recipe, a bundle's recipe, a
    structured edit, a tree's ``pyproject.toml`` or ``Cargo.lock``, a ``pylock.toml``).

    Nesting deeper than the reader can follow (tomllib recurses, and raises
    RecursionError) is a :class:`tomllib.TOMLDecodeError` like any other malformed file,
    so each caller's own error names the file.
    """
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(NESTED_TOO_DEEPLY) from None


def parse_json(text: str, **options: Any) -> Any:
    """``json.loads`` for JSON from users (a recipe's lock file, a bundle's manifest and
    plan): too deep a nesting is a :class:`json.JSONDecodeError`, not a RecursionError."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise json.JSONDecodeError(NESTED_TOO_DEEPLY, text[:64], 0) from None


class NotRegularFile(OSError):
    """A path that names a FIFO, a device, a directory or a socket: never opened for reading
    (a FIFO blocks until a writer comes, ``/dev/zero`` never ends); ``strerror`` says which."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a message: ``a named pipe (FIFO)``, ``a directory``."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading, only when it is a regular file (a symbolic link is
    followed); :class:`NotRegularFile` otherwise.  The type is checked before the open and
    again on the descriptor, which is opened without blocking, so a FIFO put in its place
    meanwhile is refused too instead of waiting for a writer."""
    mode = Path(path).stat().st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(0, file_kind(mode), str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(0, file_kind(mode), str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def size_text(limit: int) -> str:
    """``4 MiB``, ``64 KiB``: a limit as a message says it."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if limit >= 1 << shift:
            return f"{limit / (1 << shift):g} {unit}"
    return f"{limit} bytes"


def read_user_file(path: Path, what: str, limit: int, *,
                   error: type[SparkbuildError] = RecipeError, hint: str | None = None) -> bytes:
    """The bytes of ``path``, a file a user hands sparkbuild or a small file it keeps
    (``what`` names it: "the recipe", "the dist token file").  Refused with ``error``, the
    path as where: a path that cannot be opened, one that is no regular file (a FIFO, a
    device, a directory: :func:`open_regular`) and a file over ``limit`` bytes, of which at
    most ``limit + 1`` are read (the size ``stat`` gives is not trusted: a file grows).
    The :class:`OSError` is the raised error's cause (``FileNotFoundError`` for a missing
    file, which some callers say more about)."""
    try:
        with open_regular(path) as stream:
            data = stream.read(limit + 1)
    except NotRegularFile as exc:
        raise error(f"{what} is {exc.strerror}, not a regular file", where=str(path),
                    hint=hint or "give the path of a plain file") from exc
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}", where=str(path),
                    hint=hint) from exc
    if len(data) > limit:
        raise error(f"{what} is over {size_text(limit)}: not read", where=str(path),
                    hint=hint or f"{what} is far smaller: check the path")
    return data


def read_user_text(path: Path, what: str, limit: int, *,
                   error: type[SparkbuildError] = RecipeError, hint: str | None = None) -> str:
    """:func:`read_user_file` decoded as UTF-8; a file that is not is ``error`` too."""
    data = read_user_file(path, what, limit, error=error, hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 text (byte {exc.start})", where=str(path),
                    hint=hint) from exc
