"""The package index client: find one file of a release, with its sha256.

It asks the index pip is configured with (read from pip's own config files, never by
running pip) through the PEP 691 JSON simple API and falls back to the PEP 503 HTML page,
whose links carry ``#sha256=`` fragments.  Local ``file://`` indexes work the same way.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import sys
import urllib.error
import urllib.parse
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from sparkbuild.console import warn
from sparkbuild.errors import CacheMissError, NetworkError, SourceError
from sparkbuild.store.download import fetch_to_cache
from sparkbuild.store.hashing import is_sha256
from sparkbuild.store.url_reader import open_url

if TYPE_CHECKING:
    from sparkbuild.store.cache import Cache

DEFAULT_INDEX = "https://pypi.org/simple"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
FileKind = Literal["sdist", "wheel"]
"""Which distribution file of a release is asked for."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    size: int | None = None


def normalize(name: str) -> str:
    """PEP 503 name normalization: runs of ``-_.`` become ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


# -- which index ------------------------------------------------------------------------


def config_files() -> list[Path]:
    """pip's config files, lowest priority first (a later file overrides an earlier one).

    As in pip, ``PIP_CONFIG_FILE=/dev/null`` means: read no config file at all.
    """
    if os.environ.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    files = [
        Path("/etc/xdg/pip/pip.conf"),
        Path("/etc/pip.conf"),
        Path.home() / ".pip" / "pip.conf",
        Path(xdg) / "pip" / "pip.conf",
    ]
    venv = os.environ.get("VIRTUAL_ENV") or (sys.prefix if sys.prefix != sys.base_prefix else "")
    if venv:
        files.append(Path(venv) / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def _config_value(option: str) -> str | None:
    value: str | None = None
    for path in config_files():
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            warn(f"ignoring unreadable pip config file {path}")
            continue
        for spelling in (option, option.replace("-", "_")):
            if parser.has_option("global", spelling):
                value = parser.get("global", spelling)
    return value


def index_url() -> str:
    """The index pip would use: $PIP_INDEX_URL, then pip's config files, then PyPI."""
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        return env.strip()
    configured = _config_value("index-url")
    return configured.strip() if configured and configured.strip() else DEFAULT_INDEX


def extra_index_urls() -> list[str]:
    """Further indexes pip searches ($PIP_EXTRA_INDEX_URL or ``extra-index-url``)."""
    raw = os.environ.get("PIP_EXTRA_INDEX_URL") or _config_value("extra-index-url") or ""
    return raw.split()


# -- reading an index page --------------------------------------------------------------


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def parse_html_page(page: str, base_url: str) -> list[IndexFile]:
    """The files of a PEP 503 project page; the hash comes from the ``#sha256=`` fragment."""
    parser = _LinkParser()
    parser.feed(page)
    files = []
    for href, text in parser.links:
        absolute = urllib.parse.urljoin(base_url, href)
        url, _, fragment = absolute.partition("#")
        algo, _, digest = fragment.partition("=")
        sha256 = digest.lower() if algo == "sha256" and is_sha256(digest.lower()) else None
        filename = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1]) or text
        files.append(IndexFile(filename, url, sha256))
    return files


def parse_json_page(payload: str, base_url: str) -> list[IndexFile]:
    """The files of a PEP 691 project page."""
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise NetworkError(f"the index answered with invalid JSON: {exc}", where=base_url) from exc
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise NetworkError("the index's JSON page has no `files` list", where=base_url)
    return [_json_file(entry, base_url) for entry in entries if isinstance(entry, dict)]


def _json_file(entry: dict[str, Any], base_url: str) -> IndexFile:
    hashes = entry.get("hashes") if isinstance(entry.get("hashes"), dict) else {}
    digest = hashes.get("sha256") if hashes else None
    size = entry.get("size")
    return IndexFile(
        filename=str(entry.get("filename", "")),
        url=urllib.parse.urljoin(base_url, str(entry.get("url", ""))),
        sha256=digest.lower() if isinstance(digest, str) and is_sha256(digest.lower()) else None,
        size=size if isinstance(size, int) else None,
    )


def project_url(index: str, name: str) -> str:
    return f"{index.rstrip('/')}/{normalize(name)}/"


def _page_url(url: str) -> str:
    """A ``file://`` project page is a directory: read its ``index.html``."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file" and Path(urllib.parse.unquote(parsed.path)).is_dir():
        return url.rstrip("/") + "/index.html"
    return url


def list_files(index: str, name: str) -> list[IndexFile] | None:
    """Every file of project ``name`` on ``index``; None when the index does not have it."""
    url = project_url(index, name)
    try:
        with open_url(_page_url(url), accept=ACCEPT) as response:
            body = response.read().decode("utf-8", "replace")
            content_type = getattr(response, "headers", {}).get("Content-Type", "") or ""
    except NetworkError as exc:
        if _is_not_found(exc):
            return None
        raise
    if JSON_TYPE in content_type or (not content_type and body.lstrip().startswith("{")):
        return parse_json_page(body, url)
    return parse_html_page(body, url)


def _is_not_found(exc: NetworkError) -> bool:
    cause = exc.__cause__
    if isinstance(cause, urllib.error.HTTPError):
        return cause.code in (404, 410)
    return isinstance(cause, urllib.error.URLError) and isinstance(cause.reason, FileNotFoundError)


# -- choosing a file --------------------------------------------------------------------


def _same_version(text: str | Version, version: str) -> bool:
    try:
        return Version(str(text)) == Version(version)
    except InvalidVersion:
        return str(text) == version


def _matches(file: IndexFile, name: str, version: str, kind: FileKind) -> bool:
    try:
        if kind == "sdist":
            sdist_name, sdist_version = parse_sdist_filename(file.filename)
            return sdist_name == canonicalize_name(name) and _same_version(sdist_version, version)
        wheel_name, wheel_version, _build, _tags = parse_wheel_filename(file.filename)
    except (InvalidSdistFilename, InvalidWheelFilename, InvalidVersion):
        return False
    return wheel_name == canonicalize_name(name) and _same_version(wheel_version, version)


def choose_file(
    files: list[IndexFile], name: str, version: str, *, kind: FileKind, filename: str | None
) -> IndexFile | None:
    """The one file asked for; with several wheels and no filename, the pure one."""
    if filename is not None:
        return next((f for f in files if f.filename == filename), None)
    candidates = [f for f in files if _matches(f, name, version, kind)]
    if len(candidates) <= 1 or kind == "sdist":
        return candidates[0] if candidates else None
    pure = [f for f in candidates if f.filename.endswith("-none-any.whl")]
    if pure:
        return pure[0]
    raise SourceError(
        f"{name} {version} has {len(candidates)} wheels; say which one",
        hint="pass a filename, one of: " + ", ".join(f.filename for f in candidates),
    )


def find_file(
    name: str, version: str, *, kind: FileKind = "sdist", filename: str | None = None
) -> IndexFile:
    """Find one file of ``name==version`` on the configured index (then the extra ones)."""
    if kind not in ("sdist", "wheel"):
        raise SourceError(f"unknown file kind {kind!r}", hint='use "sdist" or "wheel"')
    indexes = list(dict.fromkeys([index_url(), *extra_index_urls()]))
    failures: list[NetworkError] = []
    for index in indexes:
        try:
            files = list_files(index, name)
        except NetworkError as exc:
            failures.append(exc)
            continue
        found = choose_file(files or [], name, version, kind=kind, filename=filename)
        if found is not None:
            return found
    if failures and len(failures) == len(indexes):
        raise failures[0]
    wanted = filename or f"{kind} of {name} {version}"
    raise SourceError(
        f"the package index has no {wanted}",
        where=", ".join(project_url(index, name) for index in indexes),
        hint=f"check the name and version, and that the index carries {kind}s",
    )


def fetch_sdist(cache: Cache, name: str, version: str, *, offline: bool = False) -> Path:
    """The sdist of ``name==version`` in the cache, checked against the index's sha256."""
    key = f"{normalize(name)}=={version}"
    known = cache.lookup("sdists", key)
    if known and isinstance(known.get("url"), str):
        sha = known.get("sha256")
        return fetch_to_cache(
            cache, known["url"], sha if isinstance(sha, str) else None, offline=offline
        )
    if offline:
        raise CacheMissError(
            f"the sdist of {name} {version} is not in the cache and --offline forbids the index",
            where=str(cache.root),
            hint="run once online to fill the cache",
        )
    found = find_file(name, version, kind="sdist")
    if found.sha256 is None:
        warn(f"the index gives no sha256 for {found.filename}; recording the one downloaded")
    path = fetch_to_cache(cache, found.url, found.sha256)
    cache.record("sdists", key, {"filename": found.filename, "url": found.url, "sha256": path.name})
    return path
