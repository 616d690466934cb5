"""A wheelhouse served over HTTP: any static server of the wheelhouse directory will do.

``install http://HOST:PORT/wheelhouse/ --venv VENV`` fetches ``manifest.json``, then every
file it names (the lock, each wheel, the ``simple/`` pages), each checked against the
manifest's sha256 as it arrives; the copy is then verified and installed exactly as a local
wheelhouse is (:func:`sparkbuild.node.install.install_wheelhouse`), pip reading nothing from
the server.  What ties the lot to the wheelhouse that was built is the fingerprint
``install`` prints (the manifest's sha256): compare it with the one the build machine shows.
"""

from __future__ import annotations

import contextlib
import tempfile
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.errors import NetworkError, SparkbuildError, VerifyError
from sparkbuild.node.install import InstallResult, check_venv_path, install_wheelhouse
from sparkbuild.store.download import download
from sparkbuild.wheelhouse.manifest import (
    MANIFEST_LIMIT,
    MANIFEST_NAME,
    expected_hashes,
    read_manifest,
)
from sparkbuild.wheelhouse.verify import leaves_directory

if TYPE_CHECKING:
    from collections.abc import Iterator


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def fetch_wheelhouse(url: str, into: Path) -> Path:
    """Every file the wheelhouse at ``url`` names in its manifest, each checked against the
    manifest's sha256 as it arrives, in ``into`` (a name that leaves the directory is
    refused before anything is fetched)."""
    base = _base(url)
    download(base + MANIFEST_NAME, into / MANIFEST_NAME, description="fetching the manifest",
             limit=MANIFEST_LIMIT)
    expected = expected_hashes(read_manifest(into))
    outside = [name for name in sorted(expected) if leaves_directory(name)]
    if outside:
        raise VerifyError(f"the served manifest names file(s) outside the wheelhouse: "
                          f"{', '.join(outside)}", where=base + MANIFEST_NAME,
                          hint="do not install it: the server's wheelhouse is not one "
                          "`sparkbuild wheel` wrote")
    for name, digest in sorted(expected.items()):
        download(base + urllib.parse.quote(name), into / name, sha256=digest)
    return into


def install_from_url(url: str, venv: Path, *, source: str = "lock") -> InstallResult:
    """Install the wheelhouse served at ``url`` into ``venv``: fetched whole, verified like
    a local one, installed from the verified copy (from its lock, or its pylock.toml).
    ``venv`` is checked before anything is fetched."""
    check_venv_path(venv)
    with tempfile.TemporaryDirectory(prefix="sparkbuild-remote-") as scratch, \
            _as_served(url, Path(scratch)):
        local = fetch_wheelhouse(url, Path(scratch))
        return install_wheelhouse(local, venv, origin=url, source=source)


@contextlib.contextmanager
def _as_served(url: str, scratch: Path) -> Iterator[None]:
    """Errors say where on the server, not in the scratch copy (gone when they are read),
    and a server that cannot be reached gets a hint about serving, not about building."""
    try:
        yield
    except SparkbuildError as exc:
        if exc.where:
            for local in {str(scratch.resolve()), str(scratch)}:
                exc.where = exc.where.replace(local + "/", _base(url)).replace(local, url)
        if isinstance(exc, NetworkError):
            exc.hint = (f"check the URL and that the wheelhouse is served there (it is the "
                        f"directory holding {MANIFEST_NAME}; any static HTTP server of it will "
                        "do, e.g. `python -m http.server` in it) and that this machine can "
                        "reach the server; or copy the wheelhouse here and install from its "
                        "directory")
        raise
