"""Downloads: http, https and file URLs, hashed on the way in, never half-written.

A download streams into a ``.partial-<pid>-*`` file beside its destination and is renamed
only once complete and, when a sha256 is pinned, matching.  The bytes come through the one
URL reader (:mod:`sparkbuild.store.url_reader`: a stall timeout and a deadline for the whole
download); every network failure becomes a :class:`NetworkError` that names the URL and
says how to build without the network.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sparkbuild.console import byte_progress, info, warn
from sparkbuild.errors import (
    CacheMissError,
    HashMismatchError,
    NetworkError,
    VerifyError,
    disk_full_as_error,
)
from sparkbuild.store.cache import FILL_HINT
from sparkbuild.store.files import discarded, replacing
from sparkbuild.store.hashing import CHUNK
from sparkbuild.store.url_reader import OFFLINE_HINT, UrlResponse, open_url

if TYPE_CHECKING:
    from sparkbuild.store.cache import Cache


def _expected_length(response: UrlResponse | IO[bytes]) -> int | None:
    length = getattr(response, "headers", {}).get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _too_large(url: str, limit: int) -> VerifyError:
    return VerifyError(f"the file served is over {limit} bytes, the most it may be: refused, "
                       "not read further and not kept", where=url,
                       hint="the server does not serve what sparkbuild wrote: check what it "
                       "serves")


def _stream_to(response: UrlResponse | IO[bytes], out: IO[bytes], url: str, label: str,
               limit: int | None = None) -> str:
    """Copy the body, returning its sha256; a short body is a :class:`NetworkError`, one
    over ``limit`` bytes a :class:`VerifyError` (refused as soon as it is, or as its
    Content-Length says it will be); the reading's own failures are the reader's
    (:class:`~sparkbuild.store.url_reader.UrlResponse`)."""
    digest = hashlib.sha256()
    expected = _expected_length(response)
    if limit is not None and expected is not None and expected > limit:
        raise _too_large(url, limit)
    received = 0
    with byte_progress(label, expected) as advance:
        for chunk in iter(lambda: response.read(CHUNK), b""):
            if limit is not None and received + len(chunk) > limit:
                raise _too_large(url, limit)
            digest.update(chunk)
            out.write(chunk)
            received += len(chunk)
            advance(len(chunk))
    if expected is not None and received != expected:
        raise NetworkError(
            f"the download ended after {received} of {expected} bytes",
            where=url,
            hint="run again; " + OFFLINE_HINT,
        )
    return digest.hexdigest()


def _partial_beside(dest: Path) -> Path:
    return dest.with_name(f".partial-{os.getpid()}-{secrets.token_hex(6)}-{dest.name}")


def download(
    url: str, dest: Path, *, sha256: str | None = None, description: str | None = None,
    limit: int | None = None,
) -> Path:
    """Fetch ``url`` to ``dest`` atomically (a served wheelhouse's files: install from a URL);
    with ``sha256`` the bytes must match it; with ``limit`` they may be at most that many
    (a served ``manifest.json``: a server cannot fill the disk with one)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    label = description or f"downloading {dest.name}"
    with replacing(dest, _partial_beside(dest)) as partial:
        with open_url(url) as response, _disk_full_guard(dest.parent), partial.open("wb") as out:
            actual = _stream_to(response, out, url, label, limit)
            out.flush()
            os.fsync(out.fileno())
        check_sha256(url, sha256, actual)
    return dest


def check_sha256(url: str, expected: str | None, actual: str) -> None:
    if expected is not None and expected.lower() != actual:
        raise HashMismatchError(
            f"sha256 mismatch for {url}: expected {expected.lower()}, got {actual}",
            where=url,
            hint="the file changed upstream or the pin is wrong; nothing was kept",
        )


def _disk_full_guard(where: Path) -> contextlib.AbstractContextManager[None]:
    """A full disk while writing becomes :class:`DiskFullError` naming ``where``."""
    return disk_full_as_error(
        "the disk filled up during a download; the partial file was removed", where=where
    )


def fetch_to_cache(cache: Cache, url: str, sha256: str | None, *, offline: bool = False) -> Path:
    """The verified cache entry for ``url``, downloading it only when needed.

    A corrupted entry is removed and fetched again (online) or reported as a
    :class:`CacheMissError` (offline).  Without ``sha256`` the hash recorded for the URL
    by an earlier download is used, and a fresh download's hash is recorded.
    """
    known = sha256 or _recorded_sha256(cache, url)
    with cache.locked():
        if known is not None:
            cached = _cached_entry(cache, url, known, offline=offline)
            if cached is not None:
                return cached
        if offline:
            raise CacheMissError(
                f"not in the cache and --offline forbids downloading: {url}",
                where=str(cache.root),
                hint=FILL_HINT,
            )
        return _download_into(cache, url, known)


def _recorded_sha256(cache: Cache, url: str) -> str | None:
    entry = cache.lookup("urls", url)
    value = entry.get("sha256") if entry else None
    return value if isinstance(value, str) else None


def _cached_entry(cache: Cache, url: str, sha256: str, *, offline: bool) -> Path | None:
    try:
        return cache.find(sha256)
    except VerifyError as exc:  # the damaged entry was removed: fetched again, online
        if offline:
            raise CacheMissError(
                f"the cache entry for {url} was corrupted and has been removed; "
                "--offline forbids fetching it again",
                where=exc.where,
                hint="run once online to fetch it again",
            ) from exc
        warn(f"{exc.what}; fetching it again from {url}")
        return None


def _download_into(cache: Cache, url: str, sha256: str | None) -> Path:
    name = url.rstrip("/").rsplit("/", 1)[-1]
    info(f"downloading {url}")
    with discarded(cache.new_partial_path()) as partial:
        with open_url(url) as response, _disk_full_guard(cache.root), partial.open("wb") as out:
            actual = _stream_to(response, out, url, f"downloading {name}")
            out.flush()
            os.fsync(out.fileno())
        check_sha256(url, sha256, actual)
        digest = cache.adopt_file(partial, sha256=actual)
    cache.record("urls", url, {"sha256": digest, "name": name})
    return cache.path_of(digest)
