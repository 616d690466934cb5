"""``pylock.toml`` (PEP 751): the wheelhouse's lock in the standard format, beside
``requirements.lock``.

Every wheel is one ``[[packages]]`` entry with one ``[[packages.wheels]]`` file, named by
its path relative to the lock (the wheelhouse directory), its size and its sha256.  The
lock's ``environments`` is the target's marker (``sys_platform``, ``platform_machine``,
``python_version``), so an installer refuses it on another machine; ``requires-python`` is
the target's Python.  ``uv pip install --offline -r pylock.toml`` installs it with no index
(:mod:`sparkbuild.node.install`, ``--from pylock``); ``verify`` reads it back here and names
every wheel it disagrees on.  Python 3.11 reads TOML (tomllib) but does not write it: the
few forms this file needs are written here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from sparkbuild import __version__
from sparkbuild.store.user_files import parse_toml
from sparkbuild.store.wheel_check import normal_version, same_project, same_version

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

PYLOCK_NAME = "pylock.toml"
LOCK_VERSION = "1.0"


@dataclass(frozen=True)
class PylockWheel:
    """One wheel of the wheelhouse, as the lock names it."""

    name: str
    """The project name as its METADATA spells it."""
    version: str
    file: str
    """Path relative to the lock (the wheel's file name: it lies beside the lock)."""
    size: int
    sha256: str


def target_marker(env: Mapping[str, str]) -> str:
    """The PEP 508 marker that holds on the target and nowhere else that matters here."""
    keys = ("sys_platform", "platform_machine", "python_version")
    return " and ".join(f"{key} == {_quote_marker(env[key])}" for key in keys)


def _quote_marker(value: str) -> str:
    return f"'{value}'" if "'" not in value else f'"{value}"'


def _toml_string(value: str) -> str:
    # A JSON string is a TOML basic string for every character we write (ASCII escapes).
    return json.dumps(value, ensure_ascii=True)


def render_pylock(wheels: Sequence[PylockWheel], *, env: Mapping[str, str],
                  python: str, package: str) -> str:
    """The text of ``pylock.toml``; the same wheels and target give the same bytes."""
    lines = [f"# written by sparkbuild {__version__}: the wheelhouse of {package}",
             f"# install with: uv pip install --offline -r {PYLOCK_NAME}",
             f"lock-version = {_toml_string(LOCK_VERSION)}",
             f"environments = [{_toml_string(target_marker(env))}]",
             f"requires-python = {_toml_string(f'=={python}.*')}",
             f"created-by = {_toml_string('sparkbuild')}", ""]
    for wheel in sorted(wheels, key=lambda w: (canonicalize_name(w.name), w.file)):
        lines += ["[[packages]]", f"name = {_toml_string(str(canonicalize_name(wheel.name)))}",
                  f"version = {_toml_string(wheel.version)}", "",
                  "[[packages.wheels]]", f"name = {_toml_string(wheel.file)}",
                  f"path = {_toml_string(wheel.file)}", f"size = {wheel.size}",
                  f"hashes = {{sha256 = {_toml_string(wheel.sha256)}}}", ""]
    return "\n".join(lines)


def write_pylock(directory: Path, wheels: Sequence[PylockWheel], *, env: Mapping[str, str],
                 python: str, package: str) -> Path:
    from sparkbuild.store.files import write_text_atomic

    path = directory / PYLOCK_NAME
    write_text_atomic(path, render_pylock(wheels, env=env, python=python, package=package))
    return path


# -- reading it back (verify) ----------------------------------------------------------


def read_pylock(path: Path) -> dict[str, Any]:
    """The parsed lock; :class:`ValueError` (or OSError) when it is not a PEP 751 lock."""
    return parse_pylock(path.read_text(encoding="utf-8"))


def parse_pylock(text: str) -> dict[str, Any]:
    """``text`` parsed; :class:`ValueError` when it is not a PEP 751 lock."""
    data = parse_toml(text)
    packages = data.get("packages")
    if data.get("lock-version") != LOCK_VERSION or not isinstance(packages, list) or not all(
            isinstance(p, dict) and isinstance(p.get("wheels", []), list)
            and all(isinstance(w, dict) and isinstance(w.get("hashes", {}), dict)
                    for w in p.get("wheels", [])) for p in packages):
        raise ValueError(f"not a PEP 751 lock (lock-version {LOCK_VERSION!r} and [[packages]])")
    return data


def locked_files(data: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Every wheel the lock names: path -> (canonical project name, version, sha256)."""
    found: dict[str, tuple[str, str, str]] = {}
    for package in data["packages"]:
        name = str(canonicalize_name(str(package.get("name", ""))))
        for wheel in package.get("wheels", []):
            path = str(wheel.get("path", ""))
            found[path] = (name, normal_version(str(package.get("version", ""))),
                           str(wheel.get("hashes", {}).get("sha256", "")))
    return found


FOREIGN_SOURCES = ("sdist", "archive", "vcs", "directory")
"""The keys of a ``[[packages]]`` entry that install it from something other than a wheel
file (PEP 751)."""


def source_problems(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(``pylock.toml``, problem) for each entry that would install from outside the
    wheelhouse: a package from an sdist, an archive, a VCS or a directory, or with no wheel;
    a wheel by URL, or by a path that is not a file name beside the lock, or whose name is
    not its path's."""
    problems = []
    for package in data["packages"]:
        name = str(package.get("name", ""))
        problems += [(PYLOCK_NAME, f"installs {name} from its {key}, not from a wheel of the "
                                   "wheelhouse") for key in FOREIGN_SOURCES if key in package]
        wheels = package.get("wheels", [])
        if not wheels:
            problems.append((PYLOCK_NAME, f"names {name} with no wheel of the wheelhouse"))
        for wheel in wheels:
            path = wheel.get("path")
            if "url" in wheel:
                problems.append((PYLOCK_NAME, f"installs {name} from the URL "
                                              f"{str(wheel['url'])[:160]!r}, not from the "
                                              "wheelhouse"))
            if not isinstance(path, str) or not plain_file_name(path):
                problems.append((PYLOCK_NAME, f"installs {name} from the path "
                                              f"{str(path)[:160]!r}, not a wheel file beside "
                                              "the lock in the wheelhouse"))
            elif wheel.get("name", path) != path:
                problems.append((PYLOCK_NAME, f"names the wheel at {path} "
                                              f"{str(wheel.get('name'))[:160]!r}"))
    return problems


def plain_file_name(path: str) -> bool:
    """Whether ``path`` names a file beside the lock: no directory, drive, scheme or climb."""
    return bool(path) and path not in (".", "..") and not any(c in path for c in "/\\:")


def pylock_disagreements(directory: Path, wheels: Mapping[str, tuple[str, str, str]],
                         env: Mapping[str, str] | None, text: str | None = None
                         ) -> list[tuple[str, str]]:
    """(file, problem) for each way ``pylock.toml`` and the wheelhouse's wheels disagree,
    and each entry that installs from outside the wheelhouse (:func:`source_problems`).

    ``wheels``: the wheels present, file -> (canonical name, version, sha256); ``env``: the
    target's marker values (None: the environment is not checked); ``text``: the lock as
    already read (``install`` hands uv what it checked), else it is read here.
    """
    try:
        data = parse_pylock(text) if text is not None else read_pylock(directory / PYLOCK_NAME)
    except (OSError, ValueError) as exc:
        return [(PYLOCK_NAME, f"cannot be read: {exc}")]
    problems = source_problems(data)
    if env is not None and data.get("environments") != [target_marker(env)]:
        problems.append((PYLOCK_NAME, f"its environments {data.get('environments')!r} are not "
                                      f"the target's [{target_marker(env)!r}]"))
    return problems + listing_disagreements(PYLOCK_NAME, locked_files(data), wheels,
                                            hash_verb="pins", list_verb="names")


def installable_copy(text: str, directory: Path) -> str:
    """The lock ``text`` (already checked: :func:`pylock_disagreements` found nothing) as uv
    gets it, from a copy outside the wheelhouse: the same packages, wheels and sha256, each
    path made absolute in ``directory``, nothing else of each entry kept."""
    data = parse_pylock(text)
    lines = [f"lock-version = {_toml_string(LOCK_VERSION)}",
             "environments = [" + ", ".join(_toml_string(str(e)) for e in
                                            data.get("environments") or []) + "]"]
    if isinstance(data.get("requires-python"), str):
        lines.append(f"requires-python = {_toml_string(data['requires-python'])}")
    lines += [f"created-by = {_toml_string('sparkbuild')}", ""]
    for package in data["packages"]:
        lines += ["[[packages]]", f"name = {_toml_string(str(package.get('name', '')))}",
                  f"version = {_toml_string(str(package.get('version', '')))}", ""]
        for wheel in package.get("wheels", []):
            path = str(wheel["path"])
            lines += ["[[packages.wheels]]", f"name = {_toml_string(path)}",
                      f"path = {_toml_string(str(directory / path))}",
                      f"hashes = {{sha256 = {_toml_string(str(wheel['hashes']['sha256']))}}}",
                      ""]
    return "\n".join(lines)


def listing_disagreements(listing: str, listed: Mapping[str, tuple[str, str, str]],
                          wheels: Mapping[str, tuple[str, str, str]], *, hash_verb: str,
                          list_verb: str) -> list[tuple[str, str]]:
    """(file, problem) for each way the entries of ``listing`` and the wheels present differ.

    ``listed`` and ``wheels``: file -> (canonical name, version, sha256); ``hash_verb`` and
    ``list_verb`` word the problems ("its sha256 is not the one pylock.toml pins",
    "pylock.toml names X, which is not in the wheelhouse").  ``pylock.toml`` and
    ``sbom.cdx.json`` (:func:`sparkbuild.wheelhouse.sbom.sbom_disagreements`) share it.
    """
    problems = []
    for file, (name, version, sha256) in sorted(wheels.items()):
        entry = listed.get(file)
        if entry is None:
            problems.append((file, f"not in {listing}"))
        elif entry[2] != sha256:
            problems.append((file, f"its sha256 is not the one {listing} {hash_verb}"))
        elif not same_project(entry[0], name) or not same_version(entry[1], version):
            problems.append((file, f"{listing} names it {entry[0]}=={entry[1]}"))
    problems += [(listing, f"{list_verb} {file}, which is not in the wheelhouse")
                 for file in sorted(set(listed) - set(wheels))]
    return problems
