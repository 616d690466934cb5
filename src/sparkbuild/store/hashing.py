"""sha256 of files and streams, the one digest sparkbuild pins and verifies."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import IO

from sparkbuild.console import byte_progress

CHUNK = 1 << 20
"""Read 1 MiB at a time: large enough to be fast, small enough to stay flat in memory."""

PROGRESS_THRESHOLD = 64 << 20
"""Only files above 64 MiB get a progress bar; hashing smaller ones is instant."""

_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256(text: str) -> bool:
    """True when ``text`` is 64 lower-case hex digits."""
    return _HEX.fullmatch(text) is not None


def sha256_file(path: Path, *, progress: bool = True) -> str:
    """The hex sha256 of ``path``, with a byte bar for big files when ``progress``."""
    path = Path(path)
    digest = hashlib.sha256()
    size = path.stat().st_size
    show = progress and size > PROGRESS_THRESHOLD
    with path.open("rb") as stream:
        if not show:
            return sha256_stream(stream).hexdigest()
        with byte_progress(f"hashing {path.name}", size) as advance:
            for chunk in iter(lambda: stream.read(CHUNK), b""):
                digest.update(chunk)
                advance(len(chunk))
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_stream(stream: IO[bytes]) -> hashlib._Hash:
    """The sha256 of what is left in ``stream``, read :data:`CHUNK` bytes at a time."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: stream.read(CHUNK), b""):
        digest.update(chunk)
    return digest


def record_form(digest: hashlib._Hash) -> str:
    """``sha256=<urlsafe base64 without padding>``: the hash form of a wheel's RECORD."""
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")
