"""A prebuilt flashinfer-jit-cache wheel taken instead of building the modules.

``[flashinfer] jit_cache = { url = "...", sha256 = "..." }`` (or ``path = "FILE.whl"``
beside the recipe) names one: flashinfer publishes them for cu130 aarch64 (12.1a from 0.6.18
on) on its own index, gigabytes each.  A ``[vendor] mirrors`` rule serves the URL from a
mirror directory (``https://flashinfer.ai/whl/=file:///srv/mirror/``).  Taken:

* pinned by hash: fetched into the cache verified (:func:`sparkbuild.store.download.
  fetch_to_cache`), a local file re-hashed;
* named by a plain ``flashinfer_jit_cache-VERSION-TAG.whl`` file name, the one it is written
  under, and checked inside as a wheel sparkbuild built, before anything reads a member or
  compiles (:func:`refuse_unsafe_structure`: the one structure check of
  :mod:`sparkbuild.store.wheel_check`); a member that cannot be read is a named error;
* its version checked against the pinned flashinfer-python before anything compiles: the
  wheel's file name, its METADATA and its package's ``__version__`` must all be the pin's
  version with a local label (``0.6.18+cu130`` for ``flashinfer-python==0.6.18``).
  flashinfer itself only refuses a mismatch when it imports the cache (``FI/jit/env.py:
  113-145``, a prefix test) -- on the node, where the modules would then be compiled at
  first use with no compiler; sparkbuild refuses it here, naming both versions;
* cut down to the model's set when ``cut_to_model = true``: only the modules of
  :mod:`sparkbuild.flashinfer.module_set` stay (a module of the set the wheel lacks is
  named), so the wheelhouse does not carry what the node never loads;
* checked per kernel as a built one: it goes into the wheelhouse as a built wheel, whose
  every library ``verify`` judges (sm_121a native, no trap, no guard stub; a module with
  no machine code for the target named).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sparkbuild.console import escaped, shown, step, unsafe_characters
from sparkbuild.errors import HashMismatchError, PinRefusedError, RecipeError, VerifyError
from sparkbuild.flashinfer.builder import AotResult
from sparkbuild.flashinfer.jit_cache_wheel import (
    JIT_CACHE_DIR,
    JIT_CACHE_PACKAGE,
    JIT_CACHE_PROJECT,
    pack_jit_cache,
)
from sparkbuild.store.files import replacing
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.wheel_check import wheel_problems
from sparkbuild.store.wheel_members import READ_ERRORS, open_member, read_text_member

if TYPE_CHECKING:
    from sparkbuild.recipe import JitCacheInput, Recipe
    from sparkbuild.store.cache import Cache

_MODULE = re.compile(rf"^{JIT_CACHE_PACKAGE}/{JIT_CACHE_DIR}/([^/]+)/([^/]+)\.so$")
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


HOST_ONLY_MODULES = {"spdlog": "its one source is csrc/logging.cc (FI/jit/spdlog.py)"}
"""flashinfer 0.6.18's modules with no CUDA source (the only one of its default set at
12.1a): no machine code is expected of them."""


def jit_cache_module(wheel: str, member: str) -> str | None:
    """The flashinfer module a wheel member is (``flashinfer_jit_cache/jit_cache/M/M.so``
    of a flashinfer-jit-cache wheel), else None."""
    if canonicalize_name(wheel.split("-")[0]) != JIT_CACHE_PROJECT:
        return None
    match = _MODULE.match(member)
    return match.group(1) if match and match.group(1) == match.group(2) else None


def codeless_modules(libraries: list[tuple[str, str, tuple[str, ...]]]) -> list[str]:
    """Of (wheel, member, machine code archs): the jit-cache modules with no machine code
    at all, named (``verify`` refuses them: a module built for no target arch, whose
    kernels the node would JIT or miss -- the class of flashinfer#5237/#5238)."""
    named = []
    for wheel, member, archs in libraries:
        module = jit_cache_module(wheel, member)
        if module is not None and not archs and module not in HOST_ONLY_MODULES:
            named.append(module)
    return sorted(named)


@dataclass
class JitCacheWheel:
    """What a jit-cache wheel says of itself."""

    path: Path
    version: str
    modules: list[str]
    tag: str
    name: str
    versions: dict[str, str | None] = field(default_factory=dict)
    """Where each version was read: ``file name``, ``METADATA``, ``__version__``."""
    source: str = ""
    """What the recipe named it by: the path as given, or the URL (messages name this)."""

    @property
    def shown_as(self) -> str:
        return self.source or str(self.path)


def jit_cache_file_name(name: str, where: str) -> tuple[str, str]:
    """The version and tag of a jit-cache wheel's file name; :class:`RecipeError` for a name
    that is not a plain ``flashinfer_jit_cache-VERSION-TAG.whl`` (a URL's last part may
    hold ``/`` once unquoted: the wheel is written under this name)."""
    problem = None
    if not name or "/" in name or "\\" in name or name.startswith(".") or (
            unsafe_characters(name)):
        problem = "is not a plain file name"
    else:
        try:
            project, _version, _build, _tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            problem = "is not a wheel's file name"
        else:
            if project != JIT_CACHE_PROJECT:
                problem = f"is not a {JIT_CACHE_PROJECT} wheel's"
    if problem is not None:
        raise RecipeError(f"the jit-cache wheel's name {shown(name)} {problem}", where=where,
                          hint=f"name a {JIT_CACHE_PACKAGE}-VERSION-TAG.whl file")
    parts = name.removesuffix(".whl").split("-")
    return parts[1], "-".join(parts[-3:])


def refuse_unsafe_structure(path: Path, name: str, where: str) -> None:
    """A prebuilt jit-cache is checked as a wheel sparkbuild built, before anything reads
    its members or compiles (:mod:`sparkbuild.store.wheel_check`: names that climb out,
    symbolic links, a RECORD that omits a member or misstates one, a ``.pth``, a member
    nothing can read); it goes into the wheelhouse as a built wheel, held to the same."""
    problems = wheel_problems(path, built=True, name=name)
    if problems:
        raise VerifyError(
            f"the prebuilt {JIT_CACHE_PROJECT} {shown(name)} is not a wheel an installer may "
            f"be given: {len(problems)} problem(s): {'; '.join(escaped(p) for p in problems)}",
            where=where, hint="take the jit-cache wheel flashinfer publishes, or build the "
            "modules ([flashinfer] aot without jit_cache)")


def read_jit_cache(path: Path, name: str | None = None, source: str | None = None
                   ) -> JitCacheWheel:
    """The version (file name, METADATA, ``__version__``), tag and modules of a wheel whose
    structure is first checked (:func:`refuse_unsafe_structure`).  ``name``: its file name,
    when ``path`` is a cache blob; ``source``: what messages name it by."""
    name = name or path.name
    where = source or str(path)
    version, tag = jit_cache_file_name(name, where)
    refuse_unsafe_structure(path, name, where)
    versions: dict[str, str | None] = {"file name": version, "METADATA": None,
                                       "__version__": None}
    modules = []
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                match = _MODULE.match(member)
                if match and match.group(1) == match.group(2):
                    modules.append(match.group(1))
                elif member.endswith(".dist-info/METADATA"):
                    found = re.search(r"^Version:\s*(\S+)",
                                      read_text_member(archive, member, where), re.MULTILINE)
                    versions["METADATA"] = found.group(1) if found else None
                elif member == f"{JIT_CACHE_PACKAGE}/__init__.py":
                    found = _VERSION_LINE.search(read_text_member(archive, member, where))
                    versions["__version__"] = found.group(1) if found else None
    except READ_ERRORS as exc:
        raise _unreadable(name, where, exc) from exc
    return JitCacheWheel(path, version, sorted(modules), tag, name, versions, where)


def _unreadable(name: str, where: str, exc: Exception) -> VerifyError:
    return VerifyError(f"the prebuilt {JIT_CACHE_PROJECT} {shown(name)} cannot be read: "
                       f"{escaped(str(exc))}", where=where,
                       hint="the wheel is damaged: fetch it again, or build the modules")


def refuse_other_version(wheel: JitCacheWheel, pinned: str) -> None:
    """The wheel's every version must be ``pinned`` with a local label (``+cu130``)."""
    for where, version in wheel.versions.items():
        try:
            public = Version(version).public if version else None
        except InvalidVersion:
            public = None
        if public is None or Version(public) != Version(pinned):
            raise PinRefusedError(
                f"the prebuilt {JIT_CACHE_PROJECT} is {version or 'unversioned'} (its "
                f"{where}), the pinned flashinfer-python is {pinned}: flashinfer would "
                "ignore it on the node and compile its modules at first use",
                where=wheel.shown_as,
                hint=f"take the jit-cache wheel of flashinfer {pinned} (version {pinned}+cuXYZ)"
                ", or build the modules ([flashinfer] aot without jit_cache)")


def fetch_jit_cache(given: JitCacheInput, cache: Cache, *, offline: bool,
                    mirrors: tuple[str, ...] = ()) -> JitCacheWheel:
    """The pinned wheel: a local file re-hashed, or the URL (through a mirror) fetched into
    the cache verified; read."""
    if given.path is not None:
        where = shown(str(given.path))
        if not given.path.is_file():
            raise RecipeError("the jit-cache wheel is not there (or not a file)", where=where)
        actual = sha256_file(given.path)
        if actual != given.sha256:
            raise HashMismatchError(f"the jit-cache wheel differs from its pin: sha256 {actual}"
                                    f", the recipe pins {given.sha256}", where=where)
        return read_jit_cache(given.path, source=where)
    from sparkbuild.sources.mirrors import Mirrors
    from sparkbuild.store.download import fetch_to_cache

    assert given.url is not None
    url = Mirrors.parse(mirrors, where="[vendor] mirrors").rewrite(given.url)
    name = urllib.parse.unquote(given.url.rstrip("/").rsplit("/", 1)[-1])
    return read_jit_cache(fetch_to_cache(cache, url, given.sha256, offline=offline), name,
                          shown(given.url))


def cut_to(wheel: JitCacheWheel, keep: list[str], out: Path) -> Path:
    """A wheel holding only the modules ``keep`` (the same version and tag)."""
    lacking = sorted(set(keep) - set(wheel.modules))
    if lacking:
        raise RecipeError(
            f"the prebuilt {JIT_CACHE_PROJECT} lacks {len(lacking)} module(s) of the model's "
            f"set: {', '.join(lacking)}", where=wheel.shown_as,
            hint="the node would compile them at first use: build them ([flashinfer] aot) "
            "or take a jit-cache that has them")
    with tempfile.TemporaryDirectory() as scratch:
        modules = Path(scratch)
        try:
            with zipfile.ZipFile(wheel.path) as archive:
                for name in keep:
                    member = f"{JIT_CACHE_PACKAGE}/{JIT_CACHE_DIR}/{name}/{name}.so"
                    target = modules / name / f"{name}.so"
                    target.parent.mkdir(parents=True)
                    with open_member(archive, member) as source, target.open("wb") as copy:
                        shutil.copyfileobj(source, copy)
        except READ_ERRORS as exc:
            raise _unreadable(wheel.name, wheel.shown_as, exc) from exc
        base = wheel.version.split("+")[0]
        return pack_jit_cache(modules, out, wheel.version, base, tag=wheel.tag)


def take_jit_cache(recipe: Recipe, cache: Cache, *, out: Path, offline: bool,
                   pinned: str) -> AotResult:
    """The recipe's prebuilt jit-cache: fetched, its version checked, cut when asked."""
    from sparkbuild.flashinfer.module_set import recipe_set

    given = recipe.flashinfer.jit_cache
    assert given is not None
    started = time.monotonic()
    wheel = fetch_jit_cache(given, cache, offline=offline, mirrors=recipe.vendor.mirrors)
    refuse_other_version(wheel, pinned)
    out.mkdir(parents=True, exist_ok=True)
    source = wheel.shown_as
    if given.cut_to_model:
        chosen = recipe_set(recipe)
        if chosen is None:
            raise RecipeError("cut_to_model needs the model's set: a [model] and no aot_args",
                              where=str(recipe.path))
        step(f"cutting {wheel.name} down to the model's {len(chosen.modules)} modules")
        taken = cut_to(wheel, chosen.names, out)
        modules = sorted(chosen.names)
        how = f"prebuilt {source}, cut from {len(wheel.modules)} modules to the model's"
    else:
        taken = out / wheel.name  # a plain file name (jit_cache_file_name)
        with replacing(taken) as partial:
            shutil.copyfile(wheel.path, partial)
        modules, how = wheel.modules, f"prebuilt {source}"
    return AotResult(taken, wheel.version, pinned, recipe.target.cuda_archs, (), modules,
                     time.monotonic() - started, taken.stat().st_size, prebuilt=how)


def ready_jit_cache(recipe: Recipe, cache: Cache, *, offline: bool, pinned: str) -> None:
    """``wheel``'s check before anything compiles: the pinned wheel there (fetched online),
    a wheel an installer may be given, and of the pinned flashinfer's version."""
    given = recipe.flashinfer.jit_cache
    if given is None:
        return
    refuse_other_version(fetch_jit_cache(given, cache, offline=offline,
                                         mirrors=recipe.vendor.mirrors), pinned)


def take_recipe_jit_cache(recipe: Recipe, cache_root: Path, *, out: Path,
                          offline: bool) -> AotResult:
    """:func:`take_jit_cache` with the recipe's flashinfer-python pin and this cache."""
    from sparkbuild.flashinfer.builder_wheels import pinned_flashinfer
    from sparkbuild.store.cache import Cache

    return take_jit_cache(recipe, Cache(cache_root), out=out, offline=offline,
                          pinned=pinned_flashinfer(recipe).version)
