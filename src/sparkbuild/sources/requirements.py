"""Requirement files, read one way: pip's line rules on :mod:`packaging.requirements`.

A tree declares what it needs in ``requirements/*.txt`` (runtime and build), in
``pyproject.toml``, and sparkbuild writes hashed lock files; every one of them is read
here, with pip's rules: a ``#`` at the start of a line or after whitespace starts a
comment (``pkg @ https://host/x.whl#sha256=...`` keeps its fragment), a trailing
backslash continues the line, ``-r FILE`` / ``--requirement FILE`` includes another file
relative to this one, and other options (``-c``, ``--index-url``, ``-e``) are not
requirements.  A line that is not a valid requirement is a :class:`RecipeError` naming its
file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sparkbuild.errors import RecipeError

if TYPE_CHECKING:
    from collections.abc import Iterable

_COMMENT = re.compile(r"(^|\s)#.*$")
_INCLUDE = re.compile(r"(?:-r|--requirement)(?:\s+|\s*=\s*)(\S+)$")


@dataclass(frozen=True)
class RequirementLine:
    """One requirement as a file states it."""

    text: str
    """The requirement as written (its marker kept)."""
    where: str
    """``FILE:LINE``."""

    @property
    def requirement(self) -> Requirement:
        return Requirement(self.text)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with comments removed and backslash continuations joined: (first line, text)."""
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        if (pending + line).strip():
            joined.append((start, (pending + line).strip()))
        pending = ""
    return joined


def parse_requirement(text: str, where: str) -> Requirement:
    """``text`` as a :class:`Requirement`, or a :class:`RecipeError` naming ``where``."""
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise RecipeError(f"not a requirement: {text!r} ({exc})", where=where,
                          hint="fix the line (PEP 508: NAME[extras] SPECIFIER ; MARKER)") from exc


def read_requirements(path: Path, *, _seen: set[Path] | None = None) -> list[RequirementLine]:
    """Every requirement of ``path`` and of the files it includes, in order."""
    seen = set() if _seen is None else _seen
    resolved = path.resolve()
    if resolved in seen:
        return []
    seen.add(resolved)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"cannot read requirements file: {exc.strerror}",
                          where=str(path)) from exc
    found: list[RequirementLine] = []
    for number, line in logical_lines(text):
        include = _INCLUDE.match(line)
        if include:
            found += read_requirements(path.parent / include.group(1), _seen=seen)
        elif not line.startswith("-"):
            where = f"{path}:{number}"
            parse_requirement(line, where)
            found.append(RequirementLine(line, where))
    return found


def exact_pin(requirements: Iterable[str], project: str) -> Version | None:
    """The version ``project`` is pinned to with ``==`` (the newest, if several), else None.

    Versions compare as versions (2.10.0 is newer than 2.9.1), never as text.
    """
    wanted = canonicalize_name(project)
    pins: list[Version] = []
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != wanted:
            continue
        for spec in requirement.specifier:
            if spec.operator in ("==", "===") and "*" not in spec.version:
                try:
                    pins.append(Version(spec.version))
                except InvalidVersion:
                    continue
    return max(pins, default=None)
