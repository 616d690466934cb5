"""The machine-code facts of a library, kept by its bytes: ``wheel`` reads only what changed.

Reading a built wheel's libraries with cuobjdump takes 50 s of a 232 s warm rebuild on
16 cores (BENCHMARKS.md, "Warm rebuild after one patched line"), although the
libraries a one-line change did not touch are byte-identical to the last build's.  Here a
library's :class:`LibraryCode` (exactly what the readers return: its machine code archs,
each function's :class:`~sparkbuild.toolchain.sass.FunctionFacts`, each kernel's
:class:`~sparkbuild.toolchain.sass.KernelCode`) is kept as JSON in the cache's index
(``CACHE/index/machine-code/``, written atomically by :meth:`Cache.record`), under the
sha256 of the library's bytes and of everything else that decides the facts: the bytes of
cuobjdump, nvdisasm and c++filt that would read it, the source of the parser
(``sass.py``, ``sass_library.py``), what was read (the ``scope``) and
:data:`FACTS_SCHEMA`.  An entry that is missing, unreadable, of another key or not of
this format is a miss: the library is read again and the entry written anew.

A library that did change (the one a warm rebuild rebuilt) is read again, but its cubins
are kept the same way (``CACHE/index/machine-code-cubins/``, under each extracted cubin's
sha256, its fatbin header's arch and the same tools' identity): only the cubins of the
units that changed are disassembled (:func:`~sparkbuild.toolchain.sass_library.
read_library_facts` with ``kept``).  vLLM 0.20.0's upstream ``_moe_C`` (95 cubins): 204 s
with every cubin disassembled, 1.2 s with every one kept (2 cores, ``bench/cubin_cache.py``).
The compile's unit watch (:mod:`sparkbuild.compile.unit_code_watch`) keeps each object's
cubins as it reads them, so even a first build's libraries are mostly read from here.

Only ``wheel`` uses it, and only for the wheelhouse it has just built: a :class:`CodeCache`
is an explicit argument (``kept_code``) that :mod:`sparkbuild.pipeline` alone passes, to
:func:`~sparkbuild.wheelhouse.write.write_wheelhouse`; nothing makes one by default.  The
standalone ``sparkbuild verify DIR`` cannot use it: ``verify_wheelhouse`` takes no such
argument, so a wheelhouse that travelled is judged by its machine code read afresh, never
by what a cache on this machine says about bytes like it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import warn
from sparkbuild.errors import DiskFullError
from sparkbuild.records import Record
from sparkbuild.store.hashing import sha256_bytes, sha256_file
from sparkbuild.toolchain import sass, sass_library
from sparkbuild.toolchain.sass import FunctionFacts, KernelCode

if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbuild.store.cache import Cache

FACTS_SCHEMA = 1
"""The format of an entry; bump it whenever :class:`LibraryCode` or its JSON changes."""

NAMESPACE = "machine-code"
"""The cache index's folder of entries: ``CACHE/index/machine-code/``."""
CUBIN_NAMESPACE = "machine-code-cubins"
"""The facts of one extracted cubin of a library that was read (``read_library_facts``)."""


# -- what is kept ----------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryCode(Record):
    """What the readers return for one library: the SASS archs cuobjdump lists, the facts
    of every function (``read_functions``) and every kernel's code (``read_kernels``)."""

    archs: tuple[str, ...] = ()
    functions: tuple[FunctionFacts, ...] = ()
    kernels: tuple[KernelCode, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> LibraryCode:
        """The inverse of :meth:`to_dict`; ValueError for anything else."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return cls(_strings(data.get("archs")),
                   tuple(_function(f) for f in _list(data.get("functions"))),
                   tuple(_kernel(k) for k in _list(data.get("kernels"))))


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"not a list: {value!r:.40}")
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if not all(isinstance(item, str) for item in _list(value)):
        raise ValueError("not a list of strings")
    return tuple(value)


def _typed(data: Any, fields: dict[str, tuple[type, ...]]) -> dict[str, Any]:
    """``data`` when it is an object with exactly ``fields``, each of its types."""
    if not isinstance(data, dict) or set(data) != set(fields) or any(
            not isinstance(data[name], types) or (isinstance(data[name], bool)
                                                  and bool not in types)
            for name, types in fields.items()):
        raise ValueError(f"not an entry of the format: {data!r:.80}")
    return data


_FUNCTION_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "arch": (str, type(None)), "count": (int,), "block_scaled_mma": (int,),
    "is_trap_only": (bool,), "is_guard_stub": (bool,)}
_KERNEL_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "sass": (list,), "ptx": (list,), "demangled": (str, type(None))}


def _function(data: Any) -> FunctionFacts:
    return FunctionFacts(**_typed(data, _FUNCTION_FIELDS))


def _kernel(data: Any) -> KernelCode:
    fields = _typed(data, _KERNEL_FIELDS)
    return KernelCode(fields["name"], _strings(fields["sass"]), _strings(fields["ptx"]),
                      fields["demangled"])


# -- what decides the facts ------------------------------------------------------------


def _identity(name: str, path: Path | None) -> str:
    return f"{name}={sha256_file(path, progress=False) if path else 'none'}"


def tool_identity() -> str:
    """The sha256 of the bytes of everything that turns a library into its facts: the
    cuobjdump, nvdisasm and c++filt a read would run now, and the parser's source."""
    parts = [_identity("cuobjdump", sass.find_cuobjdump()),
             _identity("nvdisasm", sass.find_nvdisasm()),
             _identity("c++filt", sass.find_demangler()),
             *(_identity(module.__name__, Path(module.__file__) if module.__file__ else None)
               for module in (sass, sass_library))]
    return sha256_bytes("\n".join(parts).encode())


# -- the cache -------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeReads(Record):
    """How the machine code of a wheelhouse's libraries was had: read, or from the cache."""

    libraries: int
    read: int
    from_cache: int
    cubins_read: int = 0
    """Of the libraries read: their cubins disassembled."""
    cubins_from_cache: int = 0
    """Of the libraries read: their cubins whose bytes had been read before."""

    def line(self) -> str:
        cubins = (f" (their cubins: {self.cubins_read} disassembled, "
                  f"{self.cubins_from_cache} from the cache)"
                  if self.cubins_read or self.cubins_from_cache else "")
        return (f"machine code: {self.libraries} librar{'y' if self.libraries == 1 else 'ies'}"
                f", {self.read} read with cuobjdump{cubins}, {self.from_cache} from the cache")


@dataclass
class CodeCache:
    """Facts of libraries by their bytes, in ``cache``; one per ``wheel`` run (it counts)."""

    cache: Cache
    identify: Callable[[], str] = tool_identity
    """The tools' identity (:func:`tool_identity`); asked once, at the first library."""
    read: int = 0
    from_cache: int = 0
    cubins_read: int = 0
    cubins_from_cache: int = 0
    _tools: str | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def library_code(self, path: Path, read: Callable[[Path], LibraryCode], *, scope: str
                     ) -> LibraryCode:
        """The facts of the library at ``path``: kept ones for its bytes, else ``read(path)``
        (then kept).  ``scope`` names what ``read`` reads: another scope is another key."""
        key, material = self._key(path, scope)
        kept = self._kept(key, material)
        if kept is not None:
            self.from_cache += 1
            return kept
        code = read(path)
        self.read += 1
        self._record(NAMESPACE, key, {**material, "code": code.to_dict()}, path.name)
        return code

    def reads(self) -> CodeReads:
        return CodeReads(self.read + self.from_cache, self.read, self.from_cache,
                         self.cubins_read, self.cubins_from_cache)

    def read_functions(self, path: Path) -> list[FunctionFacts]:
        """A library's function facts, its cubins read once per their bytes (the reader
        ``wheel`` gives verify's judgement of the libraries it has just built)."""
        return sass_library.read_library_facts(path, kept=self)

    def cubin_facts(self, digest: str, arch: str) -> list[FunctionFacts] | None:
        key, material = self._cubin_key(digest, arch)
        entry = self._entry(CUBIN_NAMESPACE, key, material)
        found: list[FunctionFacts] | None = None
        if entry is not None:
            try:
                found = [_function(f) for f in _list(entry.get("facts"))]
            except (TypeError, ValueError):
                found = None
        with self._lock:
            if found is None:
                self.cubins_read += 1
            else:
                self.cubins_from_cache += 1
        return found

    def keep_cubin(self, digest: str, arch: str, facts: list[FunctionFacts]) -> None:
        key, material = self._cubin_key(digest, arch)
        self._record(CUBIN_NAMESPACE, key, {
            **material, "facts": [dataclasses.asdict(f) for f in facts]}, "a cubin")

    def _tool_identity(self) -> str:
        """:attr:`identify`'s answer, asked once (library reads and cubin workers share it)."""
        with self._lock:
            if self._tools is None:
                self._tools = self.identify()
            return self._tools

    def _keyed(self, digest: str, fields: dict[str, str]) -> tuple[str, dict[str, Any]]:
        """The entry's key (``digest`` and a hash of what else decides it) and that material."""
        material = {"schema": FACTS_SCHEMA, **fields, "tools": self._tool_identity()}
        rest = sha256_bytes(json.dumps(material, sort_keys=True).encode())[:16]
        return f"{digest}-{rest}", material

    def _cubin_key(self, digest: str, arch: str) -> tuple[str, dict[str, Any]]:
        return self._keyed(digest, {"cubin": digest, "arch": arch})

    def _key(self, path: Path, scope: str) -> tuple[str, dict[str, Any]]:
        library = sha256_file(path)
        return self._keyed(library, {"library": library, "scope": scope})

    def _entry(self, namespace: str, key: str, material: dict[str, Any]
               ) -> dict[str, Any] | None:
        """The kept entry under ``key`` when it was made of ``material``; else None."""
        entry = self.cache.lookup(namespace, key)
        if entry is None or any(entry.get(name) != value for name, value in material.items()):
            return None
        return entry

    def _kept(self, key: str, material: dict[str, Any]) -> LibraryCode | None:
        entry = self._entry(NAMESPACE, key, material)
        if entry is None:
            return None
        try:
            return LibraryCode.from_dict(entry.get("code"))
        except (TypeError, ValueError):
            return None

    def _record(self, namespace: str, key: str, entry: dict[str, Any], what: str) -> None:
        try:
            self.cache.record(namespace, key, entry)
        except (OSError, DiskFullError) as exc:  # a speed-up only: never fail a build for it
            warn(f"the machine code facts of {what} were not kept in the cache: {exc}")
