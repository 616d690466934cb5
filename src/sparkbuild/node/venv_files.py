"""A venv's own files, which no RECORD lists and which run: recorded by ``install``,
checked by ``verify --installed`` with or without the wheelhouse at hand.

* ``pyvenv.cfg``: its sha256 at install; and, whatever was recorded,
  ``include-system-site-packages`` false (true puts the system's packages on the path);
* ``bin/python*``: each a symbolic link, its target at install; and, whatever was recorded,
  the interpreter the links end at lies in ``pyvenv.cfg``'s ``home`` (a wrapper elsewhere,
  or a script in its place, is named);
* ``bin/activate*`` and ``bin/Activate.ps1``: their sha256 at install (after the profile's
  hook was added); one added since is named;
* sparkbuild's own profile (``sparkbuild/profile.sh``, ``sparkbuild/node.env``): the
  resolved profile is recorded at install, and the files must be what it renders to, byte
  for byte; the profile itself must be the manifest's (the same keys, each value the
  manifest gives, the flashinfer workspace inside the venv, only ``TRITON_PTXAS_PATH``
  found on the node);
* the bytecode of site-packages (``__pycache__/NAME.TAG.pyc``, which the interpreter runs
  instead of the ``.py`` while its header matches): its sha256 at install; a ``.pyc`` that
  differs must be, byte for byte, what :mod:`py_compile` gives now from its checked source
  (with the header's invalidation mode and the file's optimization level): one of another
  interpreter (its magic number not this one's) cannot be, and is named.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import py_compile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import RecipeError
from sparkbuild.node.installed import site_packages_dirs
from sparkbuild.node.profile import (
    ENV_FILE,
    ON_NODE,
    PROFILE_DIR,
    PROFILE_SH,
    PTXAS_KEY,
    WORKSPACE_KEY,
    NodeProfile,
    ProfileEntry,
    profile_from_manifest,
    render_env_file,
    render_profile_sh,
    workspace_of,
)
from sparkbuild.store.hashing import sha256_file
from sparkbuild.store.user_files import NotRegularFile, read_user_text

SMALL_FILE_LIMIT = 1 << 20
"""The largest ``pyvenv.cfg`` or profile file read (install writes a few KiB)."""

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

PYVENV_CFG = "pyvenv.cfg"

Finding = tuple[str, str]
"""(path relative to the venv, problem)."""


def _digest(path: Path) -> str:
    """``link:TARGET`` for a symbolic link, else ``sha256:HEX`` of the file."""
    if path.is_symlink():
        return f"link:{path.readlink()}"
    return "sha256:" + sha256_file(path, progress=False)


def own_files(venv: Path) -> list[Path]:
    """The venv's own files that run or say what runs: pyvenv.cfg, the interpreter links,
    the activate scripts and sparkbuild's profile."""
    found = [venv / PYVENV_CFG, venv / PROFILE_DIR / PROFILE_SH, venv / PROFILE_DIR / ENV_FILE]
    for pattern in ("python*", "activate*", "Activate.ps1"):
        found += sorted((venv / "bin").glob(pattern))
    return [path for path in found if path.is_symlink() or path.is_file()]


def own_file_digests(venv: Path) -> dict[str, str]:
    """What ``install`` records of :func:`own_files` (relative path -> digest)."""
    return {path.relative_to(venv).as_posix(): _digest(path) for path in own_files(venv)}


def bytecode_files(venv: Path) -> list[Path]:
    """Every ``__pycache__/*.pyc`` under the venv's site-packages."""
    return sorted(pyc for site in site_packages_dirs(venv)
                  for pyc in site.rglob("__pycache__/*.pyc") if not pyc.is_symlink())


def bytecode_digests(venv: Path) -> dict[str, str]:
    """What ``install`` records of the bytecode (relative path -> digest)."""
    return {path.relative_to(venv).as_posix(): _digest(path) for path in bytecode_files(venv)}


# -- pyvenv.cfg and the interpreter ---------------------------------------------------------


def read_pyvenv_cfg(venv: Path) -> dict[str, str]:
    """``pyvenv.cfg``'s ``key = value`` lines (keys lower-cased, as ``site`` reads them)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string("[cfg]\n" + read_user_text(venv / PYVENV_CFG, PYVENV_CFG,
                                                        SMALL_FILE_LIMIT))
    except (RecipeError, configparser.Error):
        return {}
    return dict(parser["cfg"])


def _interpreter_findings(venv: Path) -> list[Finding]:
    cfg = read_pyvenv_cfg(venv)
    if not cfg:
        return [(PYVENV_CFG, "missing or unreadable: the venv's interpreter has no home")]
    found = []
    if cfg.get("include-system-site-packages", "false").strip().lower() != "false":
        found.append((PYVENV_CFG, "include-system-site-packages is not false: the system's "
                                  "packages are on the venv's path"))
    home = Path(cfg.get("home", "").strip())
    for python in sorted((venv / "bin").glob("python*")):
        relative = python.relative_to(venv).as_posix()
        if not python.is_symlink():
            found.append((relative, "not a symbolic link to the interpreter (a wrapper?)"))
            continue
        target = _link_end(python)
        if target is None or target.parent != home:
            found.append((relative, f"ends at {target}, not at an interpreter in pyvenv.cfg's "
                                    f"home {home}"))
    return found


def _link_end(link: Path) -> Path | None:
    """Where a chain of symbolic links inside ``bin/`` leaves it (the first target outside,
    as written); None for a loop."""
    seen = set()
    while link.is_symlink() and link not in seen:
        seen.add(link)
        target = link.readlink()
        if target.is_absolute():
            return target
        link = link.parent / target
    return None if link in seen else link


# -- the profile -------------------------------------------------------------------------


def _profile_findings(venv: Path, recorded: Sequence[Mapping[str, str]],
                      manifest: Mapping[str, Any]) -> list[Finding]:
    entries = [ProfileEntry.from_dict(entry) for entry in recorded]
    found = [(PROFILE_DIR, problem) for problem in _against_manifest(venv, entries, manifest)]
    profile = NodeProfile(entries, [])
    for name, render in ((PROFILE_SH, render_profile_sh), (ENV_FILE, render_env_file)):
        path = venv / PROFILE_DIR / name
        why = "not the profile the install wrote"
        try:
            same = not path.is_symlink() and read_user_text(
                path, name, SMALL_FILE_LIMIT) == render(profile)
        except RecipeError as exc:
            same = False
            if isinstance(exc.__cause__, NotRegularFile):
                why = f"{exc.__cause__.strerror}, not the profile the install wrote"
        if not same:
            found.append((f"{PROFILE_DIR}/{name}", why))
    return found


def _against_manifest(venv: Path, entries: Sequence[ProfileEntry],
                      manifest: Mapping[str, Any]) -> list[str]:
    """How the profile the install wrote differs from the one the manifest declares: a
    value the manifest gives is that value, the workspace is the venv's, only the ptxas is
    the node's, and only a value found on the node may be left out."""
    declared = {entry.key: entry for entry in profile_from_manifest(manifest)}
    workspace = str(workspace_of(venv))
    problems = []
    for entry in entries:
        wanted = declared.get(entry.key)
        if wanted is None:
            problems.append(f"{entry.key} is not in the manifest's profile")
        elif wanted.value != ON_NODE and entry.value != wanted.value:
            problems.append(f"{entry.key} is not the manifest's value")
        elif wanted.value == ON_NODE and entry.key == WORKSPACE_KEY and entry.value != workspace:
            problems.append(f"{entry.key} is not {workspace}")
        elif wanted.value == ON_NODE and entry.key not in (WORKSPACE_KEY, PTXAS_KEY):
            problems.append(f"{entry.key} has a value sparkbuild does not find on a node")
    have = {entry.key for entry in entries}
    problems += [f"{key} of the manifest's profile is left out"
                 for key, entry in declared.items()
                 if key not in have and (entry.value != ON_NODE or key == WORKSPACE_KEY)]
    return problems


# -- the checks ----------------------------------------------------------------------------


def own_file_findings(venv: Path, recorded: Mapping[str, str] | None,
                      profile: Sequence[Mapping[str, str]] | None,
                      manifest: Mapping[str, Any]) -> list[Finding]:
    """pyvenv.cfg, the interpreter links, the activate scripts and the profile against what
    ``install`` recorded and what they must be whatever was recorded."""
    found = _interpreter_findings(venv)
    if recorded is not None:
        now = own_file_digests(venv)
        found += [(name, "changed since the install") for name, digest in now.items()
                  if name in recorded and recorded[name] != digest]
        found += [(name, "removed since the install") for name in recorded if name not in now]
        found += [(name, "added since the install") for name in now if name not in recorded]
    if profile is not None:
        found += _profile_findings(venv, profile, manifest)
    return found


def pyc_source(pyc: Path) -> tuple[Path, int] | None:
    """The source of ``__pycache__/NAME.TAG[.opt-N].pyc`` and the optimization level."""
    parts = pyc.name.split(".")
    if pyc.parent.name != "__pycache__" or parts[-1] != "pyc" or len(parts) not in (3, 4):
        return None
    level = parts[2].removeprefix("opt-") if len(parts) == 4 else "0"
    if not level.isdigit():
        return None
    return pyc.parent.parent / f"{parts[0]}.py", int(level)


def compiled_now(source: Path, pyc: Path, optimize: int) -> bytes | None:
    """What :mod:`py_compile` gives now from ``source`` with ``pyc``'s invalidation mode;
    None when ``pyc`` is another interpreter's (its magic number is not this one's)."""
    with pyc.open("rb") as stream:
        header = stream.read(8)
    if header[:4] != importlib.util.MAGIC_NUMBER:
        return None
    flags = int.from_bytes(header[4:8], "little")
    mode = (py_compile.PycInvalidationMode.TIMESTAMP if not flags & 1 else
            py_compile.PycInvalidationMode.CHECKED_HASH if flags & 2 else
            py_compile.PycInvalidationMode.UNCHECKED_HASH)
    with tempfile.TemporaryDirectory(prefix="sparkbuild-pyc-") as scratch:
        out = Path(scratch) / "module.pyc"
        try:
            py_compile.compile(str(source), cfile=str(out), dfile=str(source), doraise=True,
                               optimize=optimize, invalidation_mode=mode)
        except (py_compile.PyCompileError, OSError, ValueError):
            return b""
        return out.read_bytes()


def bytecode_findings(venv: Path, bytecode: Iterable[Path],
                      recorded: Mapping[str, str] | None) -> list[Finding]:
    """Each ``.pyc`` of a checked module that is neither what the install recorded nor
    what its source compiles to now."""
    found = []
    for pyc in bytecode:
        relative = pyc.relative_to(venv).as_posix()
        if recorded is not None and recorded.get(relative) == _digest(pyc):
            continue
        source, optimize = pyc_source(pyc) or (pyc, 0)
        now = compiled_now(source, pyc, optimize)
        if now is None:
            found.append((relative, "bytecode of another interpreter that the install did not "
                                    "write: it cannot be compared with its source"))
        elif now != pyc.read_bytes():
            found.append((relative, f"bytecode that is not its checked source "
                                    f"{source.name} compiled: it runs at import instead"))
    return found


def walk_no_links(top: Path) -> Iterable[Path]:
    """Every file and symbolic link under ``top``; a linked directory is not entered."""
    for directory, subdirs, files in os.walk(top):
        base = Path(directory)
        links = [d for d in subdirs if (base / d).is_symlink()]
        yield from (base / name for name in sorted([*files, *links]))
