"""A compile cache shared by a team of Sparks: sccache on Redis, S3 or a directory.

``wheel --compile-cache URL`` (or the recipe's ``[build] compile_cache``) names where the
compiled objects live:

* ``redis://[USER:PASSWORD@]HOST:PORT[/DB]`` (``rediss://`` for TLS);
* ``s3://BUCKET/PREFIX[?endpoint=URL&region=R&use_ssl=true]``, with ``SCCACHE_ENDPOINT``
  (or ``?endpoint=``) for S3-compatible servers such as MinIO, credentials from the usual
  ``AWS_*`` variables;
* a local directory (a plain path, or ``file://PATH``).

Keys are scoped so that two toolchains never share an entry: the CUDA version, torch, the
target archs and the series hash make a namespace (``sparkbuild/cuda13.0.88/torch2.13.0/
sm121a.<series>``) that becomes SCCACHE_REDIS_KEY_PREFIX, SCCACHE_S3_KEY_PREFIX or a
subdirectory of the local directory.

**Paths.**  sccache 0.16's ``SCCACHE_BASEDIRS`` strips a base directory from the
preprocessed source of C, C++ and the host side of CUDA units, but nvcc's device steps
(cudafe++, cicc) carry the source's absolute path in their arguments, which 0.16 hashes as
they are: a CUDA unit built under another path misses.  So with a shared cache the build
runs in a path that is the same on every machine -- ``SPARKBUILD_BUILD_ROOT``, default
``/var/tmp/sparkbuild-build`` -- (the tree, its FetchContent sources and the build
environment with torch's headers), and SCCACHE_BASEDIRS names that root and the sparkbuild
cache for whatever still lies outside it.  The build's sccache server itself lives in
:mod:`sparkbuild.team.sccache_server`.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from sparkbuild.errors import UsageError
from sparkbuild.records import Record, as_json
from sparkbuild.settings import BUILD_ROOT

BUILD_ROOT_ENV = BUILD_ROOT.name
DEFAULT_BUILD_ROOT = Path(BUILD_ROOT.default)

URL_FORMS = ("redis://HOST:PORT[/DB]", "s3://BUCKET/PREFIX", "a local directory")
_S3_QUERY = {"endpoint": "SCCACHE_ENDPOINT", "region": "SCCACHE_REGION",
             "use_ssl": "SCCACHE_S3_USE_SSL"}

PASSTHROUGH = frozenset({
    "SCCACHE_ENDPOINT", "SCCACHE_REGION", "SCCACHE_S3_USE_SSL", "SCCACHE_S3_NO_CREDENTIALS",
    "SCCACHE_S3_SERVER_SIDE_ENCRYPTION", "SCCACHE_S3_ENABLE_VIRTUAL_HOST_STYLE",
    "SCCACHE_REDIS_USERNAME", "SCCACHE_REDIS_PASSWORD", "SCCACHE_REDIS_EXPIRATION",
    "SCCACHE_REDIS_TTL", "SCCACHE_CACHE_SIZE", "SCCACHE_LOG",
})
"""The user's own SCCACHE_* variables that reach the server; every other one is dropped,
so that a stray SCCACHE_BUCKET cannot turn a Redis cache into an S3 one."""


CacheBackend = Literal["redis", "s3", "local"]
"""Where sccache keeps the shared cache."""
CacheStatus = Literal["off", "used", "degraded", "unreachable"]
"""What the shared compile cache did for a build (see :class:`CompileCacheResult`)."""


@dataclass(frozen=True)
class CacheSpec(Record):
    """Where the shared cache lives, as sccache variables (secrets kept apart)."""

    backend: CacheBackend
    location: str
    """The URL without credentials: safe to print, to put in JSON and in the manifest."""
    settings: dict[str, str] = field(default_factory=dict, metadata=as_json(skip=True))
    secrets: dict[str, str] = field(default_factory=dict, metadata=as_json(skip=True))
    """Given to the sccache server only; never echoed, never recorded."""
    prefix: str = field(default="", metadata=as_json(skip=True))
    """The user's own key prefix (S3) or directory (local) under which the namespace goes."""

    def scoped(self, namespace: str) -> dict[str, str]:
        """The backend's variables with the key prefix (or directory) of ``namespace``."""
        settings = dict(self.settings)
        if self.backend == "redis":
            settings["SCCACHE_REDIS_KEY_PREFIX"] = namespace
        elif self.backend == "s3":
            settings["SCCACHE_S3_KEY_PREFIX"] = "/".join(p for p in (self.prefix, namespace) if p)
        else:
            settings["SCCACHE_DIR"] = str(Path(self.prefix) / namespace)
        return settings


def _redis(parts: urllib.parse.SplitResult, url: str) -> CacheSpec:
    """``url``: the URL as errors show it (no password)."""
    try:
        host, port = parts.hostname, parts.port or 6379
    except ValueError as exc:
        raise UsageError(f"the compile cache URL has a bad port: {exc}", where=url) from exc
    if not host:
        raise UsageError("a redis compile cache needs a host: redis://HOST:PORT[/DB]", where=url)
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise UsageError(f"the redis database must be a number, not {db!r}", where=url,
                         hint="redis://HOST:PORT/DB, e.g. redis://cache.lan:6379/2")
    if parts.query or parts.fragment:
        raise UsageError("a redis compile cache URL takes no query or fragment", where=url)
    shown_host = f"[{host}]" if ":" in host else host
    endpoint = f"{parts.scheme}://{shown_host}:{port}"
    settings = {"SCCACHE_REDIS_ENDPOINT": endpoint}
    if db:
        settings["SCCACHE_REDIS_DB"] = db
    secrets = {}
    if parts.username:
        secrets["SCCACHE_REDIS_USERNAME"] = urllib.parse.unquote(parts.username)
    if parts.password:
        secrets["SCCACHE_REDIS_PASSWORD"] = urllib.parse.unquote(parts.password)
    return CacheSpec("redis", endpoint + (f"/{db}" if db else ""), settings, secrets)


def _s3(parts: urllib.parse.SplitResult, url: str) -> CacheSpec:
    """``url``: the URL as errors show it (no password)."""
    bucket = parts.netloc
    if not bucket or "@" in bucket:
        raise UsageError("an s3 compile cache needs a bucket: s3://BUCKET/PREFIX "
                         "(credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
                         where=url)
    settings = {"SCCACHE_BUCKET": bucket}
    for key, values in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items():
        if key not in _S3_QUERY:
            raise UsageError(f"unknown option {key!r} in the s3 compile cache URL", where=url,
                             hint=f"known: {', '.join(sorted(_S3_QUERY))}")
        settings[_S3_QUERY[key]] = values[-1]
    prefix = parts.path.strip("/")
    endpoint = settings.get("SCCACHE_ENDPOINT") or os.environ.get("SCCACHE_ENDPOINT")
    location = f"s3://{bucket}/{prefix}" + (f" (endpoint {endpoint})" if endpoint else "")
    return CacheSpec("s3", location, settings, {}, prefix)


def parse_cache_url(url: str, *, relative_to: Path) -> CacheSpec:
    """Read a compile cache URL; a relative directory is taken relative to ``relative_to``."""
    text = url.strip()
    if not text:
        raise UsageError("the compile cache URL is empty",
                         hint=f"give one of: {', '.join(URL_FORMS)}")
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower() if "://" in text else ""
    shown = redact(text)  # the only form of the URL an error may print
    if scheme in ("redis", "rediss"):
        return _redis(parts, shown)
    if scheme == "s3":
        return _s3(parts, shown)
    if scheme in ("", "file"):
        raw = urllib.parse.unquote(parts.path) if scheme == "file" else text
        path = Path(raw).expanduser()
        directory = path if path.is_absolute() else relative_to / path
        directory = directory.resolve()
        if directory.exists() and not directory.is_dir():
            raise UsageError("the compile cache path exists and is not a directory",
                             where=str(directory))
        return CacheSpec("local", str(directory), {}, {}, str(directory))
    raise UsageError(f"unknown compile cache scheme {scheme}://", where=shown,
                     hint=f"give one of: {', '.join(URL_FORMS)}")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


# -- the namespace and the stable build root ----------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def namespace(*, cuda: str | None, torch: str | None, label: str) -> str:
    """``sparkbuild/cuda13.0.88/torch2.13.0/sm121a.<series hash>``: one toolchain's keys.

    ``label`` is the wheel's local label (target archs and series hash).  An unknown
    version is spelt ``unknown``, so it still never meets a known one.
    """
    parts = [f"cuda{cuda or 'unknown'}", f"torch{torch or 'unknown'}", label or "unlabelled"]
    return "/".join(["sparkbuild", *(_UNSAFE.sub("_", part) for part in parts)])


def build_root() -> Path:
    """The stable path shared builds run under (``$SPARKBUILD_BUILD_ROOT``)."""
    raw = BUILD_ROOT.raw() or ""
    root = BUILD_ROOT.path() or DEFAULT_BUILD_ROOT
    if not root.is_absolute():
        raise UsageError(f"{BUILD_ROOT_ENV} must be an absolute path, not {raw!r}",
                         hint="every machine of the team must build under the same path")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the shared build root: {exc.strerror}",
                         where=str(root),
                         hint=f"set {BUILD_ROOT_ENV} to a writable path, the same on every "
                         "machine of the team") from exc
    if not os.access(root, os.W_OK):
        raise UsageError("the shared build root is not writable", where=str(root),
                         hint=f"set {BUILD_ROOT_ENV} to a writable path, the same on every "
                         "machine of the team")
    return root


# -- sccache's numbers ----------------------------------------------------------------------

def _counts(stats: dict[str, Any], key: str) -> dict[str, int]:
    value = stats.get(key, {})
    counts = value.get("counts", {}) if isinstance(value, dict) else {}
    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}


def _combine(one: dict[str, int], other: dict[str, int], sign: int) -> dict[str, int]:
    keys = sorted(set(one) | set(other))
    values = {k: one.get(k, 0) + sign * other.get(k, 0) for k in keys}
    return {k: v for k, v in values.items() if v}


@dataclass(frozen=True)
class SccacheStats(Record):
    """One reading of ``sccache --show-stats --stats-format=json``."""

    json_order: ClassVar[tuple[str, ...]] = ("hits", "misses")

    hits: dict[str, int] = field(default_factory=dict, metadata=as_json("hits_by_language"))
    """Cache hits per language, as sccache names them: ``C/C++``; for nvcc ``CUDA`` (a unit's
    host side, one per unit), ``CUDA (Device code)`` (cudafe++), ``PTX`` (cicc, one per
    virtual arch), ``CUBIN`` (ptxas, one per real arch)."""
    misses: dict[str, int] = field(default_factory=dict,
                                   metadata=as_json("misses_by_language"))
    errors: dict[str, int] = field(default_factory=dict,
                                   metadata=as_json("errors_by_language"))
    read_errors: int = 0
    write_errors: int = 0
    timeouts: int = 0
    compile_requests: int = 0
    compilations: int = 0
    """Compiler processes sccache actually ran (misses and steps it cannot cache)."""
    not_cacheable: int = 0
    dist_compiles: dict[str, int] = field(default_factory=dict)
    """sccache-dist: compiler steps run on each build server (``ip:port``); an nvcc unit
    sends up to four (cudafe++, cicc, ptxas, the host compile)."""
    dist_errors: int = 0
    """Steps sent to a build server that failed there and were compiled here instead."""
    compile_fails: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SccacheStats:
        stats = data.get("stats", data)
        number = {k: int(stats.get(k, 0) or 0) for k in (
            "cache_read_errors", "cache_write_errors", "cache_timeouts", "compile_requests",
            "compilations", "non_cacheable_compilations", "dist_errors", "compile_fails")}
        dist = stats.get("dist_compiles") or {}
        return cls(_counts(stats, "cache_hits"), _counts(stats, "cache_misses"),
                   _counts(stats, "cache_errors"), number["cache_read_errors"],
                   number["cache_write_errors"], number["cache_timeouts"],
                   number["compile_requests"], number["compilations"],
                   number["non_cacheable_compilations"],
                   {str(k): int(v) for k, v in dist.items() if isinstance(v, int)}
                   if isinstance(dist, dict) else {},
                   number["dist_errors"], number["compile_fails"])

    def _combined(self, other: SccacheStats, sign: int) -> SccacheStats:
        return SccacheStats(
            _combine(self.hits, other.hits, sign), _combine(self.misses, other.misses, sign),
            _combine(self.errors, other.errors, sign),
            self.read_errors + sign * other.read_errors,
            self.write_errors + sign * other.write_errors, self.timeouts + sign * other.timeouts,
            self.compile_requests + sign * other.compile_requests,
            self.compilations + sign * other.compilations,
            self.not_cacheable + sign * other.not_cacheable,
            _combine(self.dist_compiles, other.dist_compiles, sign),
            self.dist_errors + sign * other.dist_errors,
            self.compile_fails + sign * other.compile_fails)

    def minus(self, before: SccacheStats) -> SccacheStats:
        """What happened between ``before`` and this reading."""
        return self._combined(before, -1)

    def plus(self, other: SccacheStats) -> SccacheStats:
        """Two servers' numbers together (the shared one, then the fallback)."""
        return self._combined(other, 1)

    @property
    def total_hits(self) -> int:
        return sum(self.hits.values())

    @property
    def total_misses(self) -> int:
        return sum(self.misses.values())

    @property
    def failures(self) -> int:
        """Reads and writes the cache failed (the units were compiled all the same)."""
        return self.read_errors + self.write_errors + self.timeouts + sum(self.errors.values())

    def json_extra(self) -> dict[str, Any]:
        return {"hits": self.total_hits, "misses": self.total_misses}


@dataclass
class CompileCacheResult(Record):
    """What the shared compile cache did for one build."""

    json_order: ClassVar[tuple[str, ...]] = (
        "backend", "location", "status", "namespace", "hits", "misses", "...", "before", "after",
        "units", "build_root", "basedirs", "sccache", "warnings",
    )

    spec: CacheSpec = field(metadata=as_json(flatten=True))
    namespace: str
    status: CacheStatus = "off"
    """``used``; ``degraded`` (the cache failed during the build: those units were compiled
    here); ``unreachable`` (it failed before the build: nothing was cached)."""
    sccache: str | None = None
    build_root: str | None = None
    basedirs: list[str] = field(default_factory=list)
    before: SccacheStats | None = None
    after: SccacheStats | None = None
    warnings: list[str] = field(default_factory=list)
    units: dict[str, int] = field(default_factory=dict)
    """The units ninja compiled, by language (sccache also counts CMake's compiler checks)."""

    @property
    def delta(self) -> SccacheStats:
        if self.after is None:
            return SccacheStats()
        return self.after.minus(self.before) if self.before else self.after

    @property
    def hits(self) -> int:
        return self.delta.total_hits

    @property
    def misses(self) -> int:
        return self.delta.total_misses

    def json_extra(self) -> dict[str, Any]:
        return self.delta.to_dict()

    def summary(self) -> list[str]:
        head = f"  compile cache: {self.spec.backend} {self.spec.location} ({self.status})"
        if self.status == "unreachable":
            return [head, *(f"    warning: {w}" for w in self.warnings)]
        delta = self.delta
        languages = sorted(set(delta.hits) | set(delta.misses))
        split = ", ".join(f"{lang} {delta.hits.get(lang, 0)}/{delta.misses.get(lang, 0)}"
                          for lang in languages)
        units = ", ".join(f"{n} {lang}" for lang, n in sorted(self.units.items()))
        lines = [head, f"    hits {self.hits}, misses {self.misses}"
                 + (f" (hits/misses: {split})" if split else "")
                 + (f"; ninja compiled {units} unit(s)" if units else ""),
                 f"    namespace {self.namespace}; built under {self.build_root}"]
        if self.before is not None and self.after is not None:
            lines.append(f"    sccache stats before: {self.before.total_hits} hits, "
                         f"{self.before.total_misses} misses; after: {self.after.total_hits} "
                         f"hits, {self.after.total_misses} misses")
        return lines + [f"    warning: {w}" for w in self.warnings]


def units_by_language(objects: list[str]) -> dict[str, int]:
    """``CMakeFiles/_C.dir/csrc/x.cu.o`` -> CUDA; every other object -> C/C++."""
    counts: dict[str, int] = {}
    for name in objects:
        language = "CUDA" if name.endswith((".cu.o", ".cu.obj")) else "C/C++"
        counts[language] = counts.get(language, 0) + 1
    return counts
