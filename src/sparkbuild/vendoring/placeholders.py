"""A placeholder for an external source no extension of the build uses.

vLLM's CMake declares every external project whatever the build compiles, and reads some of
their files at configure time (FlashMLA's ``flash_mla_interface.py``), or names their
sources in a target the build never compiles (FlashKDA's ``_flashkda_C``).  For a source
only left-out extensions use (:mod:`sparkbuild.compile.extension_set` decides), the build
gets a directory holding exactly those files instead of a copy at its pin, and nothing is
fetched.  Each file says what it is: a Python file raises ImportError naming the source and
why, a C, C++ or CUDA file is a comment.  The placeholder is recorded in the build's
settings, the manifest's ``build.placeholders``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

from sparkbuild.errors import SourceError
from sparkbuild.records import Record, as_json

MARKER = ".sparkbuild-placeholder.json"
_COMMENTED = frozenset({".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".inl"})


@dataclass(frozen=True)
class Placeholder(Record):
    """The source ``name`` replaced by ``files`` (relative paths), for ``reason``."""

    json_order: ClassVar[tuple[str, ...]] = ("name", "reason", "extensions", "placeholder_files")

    name: str
    reason: str
    files: tuple[str, ...] = field(default=(), metadata=as_json("placeholder_files"))
    extensions: tuple[str, ...] = ()
    where: str = ""
    """The CMake file and line that declare the source."""


def _content(placeholder: Placeholder, relative: str) -> str:
    said = (f"placeholder written by sparkbuild: {placeholder.name} is not part of this "
            f"build ({placeholder.reason})")
    suffix = PurePosixPath(relative).suffix
    if suffix == ".py":
        return f"raise ImportError({said!r})\n"
    if suffix in _COMMENTED:
        return f"// {said}\n"
    return ""


def _inside(root: Path, relative: str) -> Path:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise SourceError(f"a placeholder file of {relative!r} would lie outside its directory",
                          where=str(root), hint="report the tree's CMake that names it")
    return root.joinpath(*path.parts)


def write_placeholder(root: Path, placeholder: Placeholder) -> None:
    """The placeholder's files under ``root`` (created), and a marker naming it."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    for relative in placeholder.files:
        path = _inside(root, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_content(placeholder, relative), encoding="utf-8")
    (root / MARKER).write_text(json.dumps(placeholder.to_dict(), indent=1) + "\n",
                               encoding="utf-8")
