"""The patch series: which patches, in what order, and what each one is.

``patches/series`` names one patch file per line (``#`` starts a comment), applied top to
bottom; the patch's name is the file's stem.  A line may pin the file's bytes:
``NAME sha256=HEX``; a patch whose bytes differ from its pin is a
:class:`HashMismatchError` before any tree is touched, so what a reviewed series says is
exactly what gets applied.  A ``.diff``/``.patch`` file is a unified diff
in git's form (``a/`` and ``b/`` prefixes); a ``.toml`` file is a *structured edit*: a
``kind`` naming a module of :mod:`sparkbuild.patches.edits` plus that kind's parameters, for changes
a line diff cannot carry across upstream releases.

Everything is parsed and checked here, before any tree is touched: a malformed diff, a path
that is absolute, climbs out with ``..`` or reaches into ``.git``, a rename, a mode change,
a binary patch or a diff that declares anything but a plain file (a symbolic link, a
submodule, an executable new file) is refused with :class:`PatchError`; a series file that
names a missing or unknown file is a :class:`RecipeError`.  Diffs are kept as
:class:`FileDiff` values so the engine can re-aim a file whose target moved between releases
and render the diff again.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Literal

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile, PatchSet

from sparkbuild.errors import HashMismatchError, PatchError, RecipeError
from sparkbuild.patches.edits import Edit, EditContext, applied_check_names, make_edit
from sparkbuild.recipe import PATCH_LIMIT, RECIPE_LIMIT
from sparkbuild.store.hashing import is_sha256, sha256_bytes
from sparkbuild.store.user_files import parse_toml, read_user_file, read_user_text

DIFF_SUFFIXES = (".diff", ".patch")
EDIT_SUFFIX = ".toml"
RESERVED_DIRS = frozenset({".git", ".sparkbuild"})
"""Top-level directories a patch may never write: git's own and sparkbuild's records."""

APPLIED_CHECK_KEY = "Sparkbuild-Applied-Check"
"""A preamble line ``Sparkbuild-Applied-Check: NAME`` names a semantic already-applied test."""

Change = Literal["modify", "create", "delete"]


@dataclass(frozen=True)
class Hunk:
    source_start: int
    source_length: int
    text: str
    """The hunk as it appears in the diff: its ``@@`` line and body, newline-terminated."""

    @property
    def header(self) -> str:
        return self.text.split("\n", 1)[0]

    @property
    def ranges(self) -> str:
        """The ``@@ -a,b +c,d @@`` part of the header, without the function context."""
        match = re.match(r"@@ [^@]* @@", self.header)
        return match.group(0) if match else self.header


@dataclass(frozen=True)
class FileDiff:
    """The changes a diff makes to one file; ``path`` is relative to the tree, POSIX form."""

    path: str
    change: Change
    hunks: tuple[Hunk, ...]

    def at(self, path: str) -> FileDiff:
        """The same changes aimed at another file (a target that moved between releases)."""
        return replace(self, path=path)

    def render(self) -> str:
        old = "/dev/null" if self.change == "create" else f"a/{self.path}"
        new = "/dev/null" if self.change == "delete" else f"b/{self.path}"
        lines = [f"diff --git a/{self.path} b/{self.path}\n"]
        if self.change == "create":
            lines.append("new file mode 100644\n")
        elif self.change == "delete":
            lines.append("deleted file mode 100644\n")
        lines += [f"--- {old}\n", f"+++ {new}\n"]
        lines += [hunk.text for hunk in self.hunks]
        return "".join(lines)

    def hunk_at(self, line: int) -> tuple[int, Hunk] | None:
        """The hunk (1-based number, hunk) whose old side starts at ``line``, as git reports it."""
        for number, hunk in enumerate(self.hunks, start=1):
            if line in (hunk.source_start, max(hunk.source_start, 1)):
                return number, hunk
        return None


def render_diff(files: tuple[FileDiff, ...] | list[FileDiff]) -> str:
    return "".join(file.render() for file in files)


def safe_relative_path(raw: str, *, origin: str) -> str:
    """``raw`` as a tree-relative POSIX path; refuse absolute paths, ``..``, ``.git``."""
    if not raw or raw.startswith("/") or "\\" in raw or "\0" in raw:
        raise PatchError(
            f"patch names a path outside the tree: {raw!r}",
            where=origin,
            hint="paths in a patch must be relative to the source tree",
        )
    parts = [part for part in raw.split("/") if part]
    if (
        not parts
        or any(part in ("..", ".", ".git") for part in parts)
        or parts[0] in RESERVED_DIRS
    ):
        raise PatchError(
            f"patch names a path outside the tree: {raw!r}",
            where=origin,
            hint="paths may not contain `..` or `.` components, nor reach into .git or .sparkbuild",
        )
    return str(PurePosixPath(*parts))


def _strip_prefix(raw: str, prefix: str, *, origin: str) -> str | None:
    path = raw.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith("/"):
        return safe_relative_path(path, origin=origin)
    if not path.startswith(prefix):
        raise PatchError(
            f"patch path {path!r} lacks git's {prefix!r} prefix",
            where=origin,
            hint="make the diff with `git diff` (or `diff -u a/FILE b/FILE`)",
        )
    return safe_relative_path(path[len(prefix):], origin=origin)


_DECLARED_MODE = re.compile(
    r"^(?:(new file mode|deleted file mode) (\d+)|index [0-9a-f]+\.\.[0-9a-f]+ (\d+))$")
REGULAR_FILE = "100644"
"""The one mode the series writes: a new file is created as a plain, non-executable file."""
_MODE_NAMES = {"120000": "a symbolic link", "160000": "a submodule (gitlink)",
               "100755": "an executable file", "040000": "a directory"}


def _refuse_declared_mode(patched: PatchedFile, lines: list[str], origin: str) -> None:
    """A header line that declares a file's mode must declare a plain file.

    The series renders a file's diff again (``FileDiff.render``) without such lines, so a
    mode is never applied: a symbolic link or a submodule would become a plain file, and
    an executable one would lose its bit, without a word.  They are refused instead, as a
    mode change is.  Deleting or changing a file that is executable (``100755``) keeps it.
    """
    for line in lines:
        match = _DECLARED_MODE.match(line.rstrip("\r\n"))
        if match is None:
            continue
        mode = match.group(2) or match.group(3)
        allowed = {REGULAR_FILE} if match.group(1) == "new file mode" else {REGULAR_FILE,
                                                                            "100755"}
        if mode not in allowed:
            kind = _MODE_NAMES.get(mode, f"mode {mode}")
            raise PatchError(
                f"patch for {patched.path} declares {kind} ({line.strip()!r}): the series "
                "writes plain files only",
                where=origin,
                hint="the series carries text changes to plain files; make a symbolic link, "
                "submodule or file mode with a structured edit or upstream",
            )


def _refuse_unsupported(patched: PatchedFile, origin: str) -> None:
    lines = [str(line) for line in (patched.patch_info or [])]
    info = "".join(lines)
    unsupported = ("rename from", "copy from", "old mode", "new mode", "GIT binary patch")
    if patched.is_binary_file or patched.is_rename or any(word in info for word in unsupported):
        raise PatchError(
            f"patch for {patched.path} renames, copies, changes modes or is binary",
            where=origin,
            hint="the series carries text changes only; express the rest as a structured edit",
        )
    _refuse_declared_mode(patched, lines, origin)


def _file_diff(patched: PatchedFile, origin: str) -> FileDiff:
    _refuse_unsupported(patched, origin)
    old = _strip_prefix(patched.source_file, "a/", origin=origin)
    new = _strip_prefix(patched.target_file, "b/", origin=origin)
    if old is None and new is None:
        raise PatchError("patch has a file diff from /dev/null to /dev/null", where=origin)
    if old is not None and new is not None and old != new:
        raise PatchError(
            f"patch renames {old} to {new}",
            where=origin,
            hint="the series carries in-place text changes only",
        )
    change: Change = "create" if old is None else "delete" if new is None else "modify"
    path = new if new is not None else old
    assert path is not None
    hunks = tuple(Hunk(h.source_start, h.source_length, str(h)) for h in patched)
    if not hunks:
        raise PatchError(f"patch for {path} has no hunks", where=origin)
    return FileDiff(path, change, hunks)


def parse_diff(text: str, *, origin: str) -> tuple[FileDiff, ...]:
    """Parse a unified diff; refuse a malformed one and any unsafe path (PatchError)."""
    try:
        patch_set = PatchSet(text)
    except UnidiffParseError as exc:
        raise PatchError(
            f"malformed diff: {exc}", where=origin, hint="regenerate the patch with `git diff`"
        ) from exc
    if len(patch_set) == 0:
        raise PatchError(
            "not a unified diff: no file changes found",
            where=origin,
            hint="a diff patch needs `--- a/FILE`, `+++ b/FILE` and `@@` hunks",
        )
    files = tuple(_file_diff(patched, origin) for patched in patch_set)
    seen: set[str] = set()
    for file in files:
        if file.path in seen:
            raise PatchError(f"patch changes {file.path} twice", where=origin)
        seen.add(file.path)
    return files


@dataclass(frozen=True)
class DiffPatch:
    name: str
    path: Path
    sha256: str
    files: tuple[FileDiff, ...]
    applied_check: str | None
    """A semantic test (``sparkbuild.patches.edits``) that recognises upstream's own form of
    the change."""


@dataclass(frozen=True)
class EditPatch:
    name: str
    path: Path
    sha256: str
    edit: Edit


Patch = DiffPatch | EditPatch


@dataclass(frozen=True)
class Series:
    path: Path
    patches: tuple[Patch, ...]


def _preamble_check(text: str, origin: str) -> str | None:
    """The ``Sparkbuild-Applied-Check:`` named in the text before the first file diff."""
    for line in text.splitlines():
        if line.startswith(("diff --git ", "--- ")):
            return None
        match = re.match(rf"#?\s*{APPLIED_CHECK_KEY}:\s*(\S+)\s*$", line)
        if match:
            name = match.group(1)
            if name not in applied_check_names():
                raise PatchError(
                    f"unknown {APPLIED_CHECK_KEY} {name!r}",
                    where=origin,
                    hint=f"known checks: {', '.join(applied_check_names())}",
                )
            return name
    return None


def load_diff_patch(path: Path, data: bytes | None = None) -> DiffPatch:
    """A diff patch from ``path``; ``data`` are its bytes when the caller already read them."""
    data = _patch_bytes(path) if data is None else data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError("patch is not UTF-8 text", where=str(path)) from exc
    return DiffPatch(
        name=path.stem,
        path=path,
        sha256=sha256_bytes(data),
        files=parse_diff(text, origin=str(path)),
        applied_check=_preamble_check(text, str(path)),
    )


def load_edit_patch(path: Path, data: bytes | None = None,
                    context: EditContext | None = None) -> EditPatch:
    """A structured edit from ``path``; ``data`` are its bytes when already read;
    ``context``: the recipe's target and toolchain the edit judges the tree for."""
    data = _patch_bytes(path) if data is None else data
    try:
        table = parse_toml(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RecipeError(f"structured edit is not valid TOML: {exc}", where=str(path)) from exc
    kind = table.pop("kind", None)
    if not isinstance(kind, str):
        raise RecipeError(
            "structured edit lacks `kind = \"...\"`", where=str(path), hint="name an edit kind"
        )
    table.pop("description", None)
    edit = make_edit(kind, table, base=path.parent, origin=str(path), context=context)
    return EditPatch(name=path.stem, path=path, sha256=sha256_bytes(data), edit=edit)


@dataclass(frozen=True)
class SeriesEntry:
    """One line of the series file: a patch file name and, optionally, its pinned sha256."""

    file: str
    sha256: str | None
    where: str
    """``SERIES:LINE``, for messages."""


SERIES_LINE_HINT = "write `FILE` or `FILE sha256=HEX`: one file of the series directory per line"


def parse_series_line(line: str, where: str) -> SeriesEntry | None:
    """A series line without its comment: None for a blank line, else the entry.

    Refuses (RecipeError) a file name with a ``/``, an unknown or repeated option and a
    pin that is not 64 hex digits.
    """
    words = line.split("#", 1)[0].split()
    if not words:
        return None
    name, options = words[0], words[1:]
    if "/" in name or name in (".", "..") or "=" in name:
        raise RecipeError(
            f"series line does not start with a patch file name: {name!r}",
            where=where, hint=SERIES_LINE_HINT,
        )
    pins = []
    for option in options:
        key, sep, value = option.partition("=")
        if key != "sha256" or not sep:
            raise RecipeError(
                f"unknown option on the series line of {name}: {option!r}",
                where=where, hint=SERIES_LINE_HINT,
            )
        if not is_sha256(value.lower()):
            raise RecipeError(
                f"the sha256 pin of {name} is not 64 hex digits: {value!r}",
                where=where, hint=SERIES_LINE_HINT,
            )
        pins.append(value.lower())
    if len(pins) > 1:
        raise RecipeError(f"{name} is pinned twice on one series line", where=where)
    return SeriesEntry(name, pins[0] if pins else None, where)


def _series_entries(path: Path, text: str) -> list[SeriesEntry]:
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        entry = parse_series_line(raw, f"{path}:{number}")
        if entry is not None:
            entries.append(entry)
    return entries


def check_pin(file: Path, data: bytes, entry: SeriesEntry) -> None:
    """Refuse patch bytes that differ from the series' pin (HashMismatchError)."""
    actual = sha256_bytes(data)
    if entry.sha256 is not None and actual != entry.sha256:
        raise HashMismatchError(
            f"patch file {file.name} does not match its pin in the series: "
            f"expected sha256 {entry.sha256}, got {actual}",
            where=f"{file} (pinned at {entry.where})",
            hint="restore the patch file; if it was changed on purpose, review it and put "
            "its new sha256 on its series line",
        )


def _patch_bytes(path: Path) -> bytes:
    """A patch file's bytes (a FIFO, a device or one over PATCH_LIMIT refused, naming it)."""
    return read_user_file(path, f"patch file {path.name}", PATCH_LIMIT)


def _load_entry(directory: Path, entry: SeriesEntry, context: EditContext | None) -> Patch:
    file = directory / entry.file
    if not file.exists():
        raise RecipeError(f"series names a missing patch file: {entry.file}", where=entry.where)
    if file.suffix not in (*DIFF_SUFFIXES, EDIT_SUFFIX):
        raise RecipeError(
            f"unknown patch file type: {entry.file}",
            where=entry.where,
            hint=f"use {', '.join(DIFF_SUFFIXES)} for diffs or {EDIT_SUFFIX} for structured edits",
        )
    data = _patch_bytes(file)
    check_pin(file, data, entry)
    if file.suffix in DIFF_SUFFIXES:
        return load_diff_patch(file, data)
    return load_edit_patch(file, data, context)


def load_series(path: Path, context: EditContext | None = None) -> Series:
    """Read the series file and every patch it names, checking each before any is used.

    ``context`` tells structured edits the recipe's target (the Spark's 12.1a when None)."""
    path = Path(path)
    text = read_user_text(path, "the series file", RECIPE_LIMIT)
    patches: list[Patch] = []
    names: set[str] = set()
    for entry in _series_entries(path, text):
        patch = _load_entry(path.parent, entry, context)
        if patch.name in names:
            raise RecipeError(f"series names patch {patch.name!r} twice", where=entry.where)
        names.add(patch.name)
        patches.append(patch)
    return Series(path=path, patches=tuple(patches))
