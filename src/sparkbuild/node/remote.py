"""A wheelhouse served over HTTP: any static server of the wheelhouse directory will do.

``install http://HOST:PORT/wheelhouse/ --venv VENV`` fetches ``manifest.json``, then
``requirements.lock`` and the built wheels, each checked against the manifest's sha256,
and pip installs from the wheelhouse's own PEP 503 index (``URL/simple/``) with
``--require-hashes``: whatever the server sends must have the lock's hashes.  What ties the
lot to the wheelhouse that was built is the fingerprint ``install`` prints (the manifest's
sha256): compare it with the one the build machine shows.
"""

from __future__ import annotations

import contextlib
import ipaddress
import tempfile
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.errors import NetworkError, SparkbuildError, VerifyError
from sparkbuild.node.install import InstallResult, install_wheelhouse
from sparkbuild.store.download import download
from sparkbuild.wheelhouse.lock import LOCK_NAME
from sparkbuild.wheelhouse.manifest import MANIFEST_NAME, read_manifest
from sparkbuild.wheelhouse.write import SIMPLE_DIR

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def index_args(url: str) -> list[str]:
    """pip's options for the wheelhouse's index: plain HTTP to another host must be trusted
    explicitly (``--require-hashes`` and the fingerprint are what make that safe)."""
    parts = urllib.parse.urlsplit(url)
    args = ["--index-url", _base(url) + SIMPLE_DIR + "/"]
    if parts.scheme == "http" and parts.hostname and not _loopback(parts.hostname):
        args += ["--trusted-host", parts.netloc]
    return args


def _expected(manifest: dict[str, Any], name: str) -> str:
    files = {**{str(w["file"]): str(w["sha256"]) for w in manifest["wheels"]},
             **{str(k): str(v) for k, v in manifest.get("files", {}).items()}}
    if name not in files:
        raise VerifyError(f"the served manifest does not list {name}", where=MANIFEST_NAME)
    return files[name]


def fetch_wheelhouse(url: str, into: Path) -> Path:
    """The manifest, the lock and the built wheels of the wheelhouse at ``url``, in ``into``."""
    base = _base(url)
    download(base + MANIFEST_NAME, into / MANIFEST_NAME, description="fetching the manifest")
    manifest = read_manifest(into)
    download(base + LOCK_NAME, into / LOCK_NAME, sha256=_expected(manifest, LOCK_NAME))
    for wheel in manifest["wheels"]:
        if wheel.get("role") == "built":
            name = str(wheel["file"])
            download(base + urllib.parse.quote(name), into / name,
                     sha256=_expected(manifest, name))
    return into


def install_from_url(url: str, venv: Path) -> InstallResult:
    """Install the wheelhouse served at ``url`` into ``venv``."""
    with tempfile.TemporaryDirectory(prefix="sparkbuild-remote-") as scratch, \
            _as_served(url, Path(scratch)):
        local = fetch_wheelhouse(url, Path(scratch))
        return install_wheelhouse(local, venv, pip_sources=index_args(url), origin=url)


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
