"""The team's secrets read: the scheduler's client token and the servers' key, checked.

A secret comes from a file (``--dist-token-file``, ``--client-token-file``,
``--server-key-file``) or from ``SPARKBUILD_DIST_TOKEN``, never from the command line,
where ``ps`` would show it.  It is checked as it is read: one word of printable ASCII
(``sccache-dist auth`` makes hex), white space around it and a final newline dropped.  A
secret that breaks the rule -- a second line, a control character, a space inside -- is
refused naming the file or the variable, never what it holds: the secret never reaches a
message, ``--json``, a manifest or a log.  Only the files sparkbuild writes for
sccache-dist (mode 600) carry it.
"""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING

from sparkbuild.console import warn
from sparkbuild.errors import UsageError
from sparkbuild.settings import DIST_TOKEN
from sparkbuild.store.url_reader import TOKEN_FORM
from sparkbuild.store.user_files import read_user_file

if TYPE_CHECKING:
    from pathlib import Path

TOKEN_ENV = DIST_TOKEN.name
SECRET_LIMIT = 4096
"""The most characters a secret may have (sccache-dist's are 64 hex digits)."""
RULE = "one word of printable ASCII characters on one line (as sccache-dist auth writes it)"


def _fault(text: str) -> str | None:
    """What is wrong with ``text`` as a secret (never quoting it), or None."""
    if not text:
        return "is empty"
    if len(text) > SECRET_LIMIT:
        return f"holds more than {SECRET_LIMIT} characters"
    if TOKEN_FORM.fullmatch(text):
        return None
    if "\n" in text or "\r" in text:
        return "holds more than one line"
    if any(c.isspace() for c in text):
        return "holds white space inside the secret"
    return "holds a character that is not printable ASCII (a control character or beyond)"


def checked_secret(text: str, *, what: str, where: str) -> str:
    """``text`` without the white space around it, once it passes the rule; a
    :class:`UsageError` naming ``where`` (never the text) otherwise."""
    secret = text.strip()
    fault = _fault(secret)
    if fault is not None:
        raise UsageError(f"{what} {fault}", where=where,
                         hint=f"a secret is {RULE}; nothing of it is shown")
    return secret


SECRET_FILE_LIMIT = 64 << 10
"""The largest token or key file read (sccache-dist's are under a hundred bytes)."""


def read_secret_file(path: Path, *, what: str) -> str:
    """The secret in ``path``, checked; a warning when others may read the file."""
    raw = read_user_file(path, what, SECRET_FILE_LIMIT, error=UsageError)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}", where=str(path)) from exc
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00"  # refused below as not printable ASCII, without quoting the bytes
    secret = checked_secret(text, what=what, where=str(path))
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"{what} {path} is readable by others (mode {stat.S_IMODE(mode):o}): chmod 600 it")
    return secret


def token_from_environment() -> str | None:
    """``$SPARKBUILD_DIST_TOKEN``, checked; None when unset or empty."""
    raw = DIST_TOKEN.text() or ""
    if not raw.strip():
        return None
    return checked_secret(raw, what=f"the token in {TOKEN_ENV}", where=f"${TOKEN_ENV}")


def read_client_token(token_file: Path | None) -> tuple[str, str]:
    """The client token and where it came from: ``token_file``, else ``$SPARKBUILD_DIST_TOKEN``."""
    if token_file is not None:
        return read_secret_file(token_file, what="the dist token file"), f"file {token_file}"
    token = token_from_environment()
    if token is None:
        raise UsageError("a dist build needs the scheduler's client token",
                         hint=f"set {TOKEN_ENV}, or give --dist-token-file FILE (a file "
                         "holding the token; never the token itself on the command line)")
    return token, f"${TOKEN_ENV}"
