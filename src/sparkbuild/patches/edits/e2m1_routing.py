"""Structured edit ``e2m1-routing``: nvfp4_utils.cuh converts to E2M1 through e2m1.cuh.

``cvt.rn.satfinite.e2m1x2.f32`` exists only on the arch-specific targets (sm_100a, sm_120a,
sm_121a...); a plain sm_121 build stops in ptxas on every inline-asm use of it.  sparkbuild's
``csrc/e2m1.cuh`` converts with the instruction where the target has it and in software
where it does not.  This edit copies that header beside every ``nvfp4_utils.cuh`` (the file
moved between releases, so it is found by name) and replaces each inline-asm block that
uses the instruction with a call into ``::sparkbuild``, keeping the function around it.

The rewrite is not a text substitution: :mod:`sparkbuild.patches.edits.inline_asm` reads the asm's
operands and checks that its nibble order is the plain element order the sparkbuild
functions produce (PTX's ``cvt... d, a, b`` puts ``a`` in the HIGH nibble, so upstream
passes each pair swapped).  An asm block in any other shape is refused, not guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.errors import HashMismatchError, PatchError, RecipeError
from sparkbuild.patches.edits.edit_plan import EditContext, EditPlan, FileChange, Params
from sparkbuild.patches.edits.inline_asm import route_conversions
from sparkbuild.store.files import walk_files
from sparkbuild.store.hashing import is_sha256, sha256_bytes

if TYPE_CHECKING:
    from collections.abc import Mapping

KIND = "e2m1-routing"
SKIP_DIRS = frozenset({".git", ".sparkbuild", "build", "node_modules"})


def find_files(root: Path, name: str) -> list[Path]:
    """Every file called ``name`` under ``root``, sorted."""
    return sorted(path for path in walk_files(root, SKIP_DIRS) if path.name == name)


def add_include(text: str, header: str) -> str:
    """``#include "header"`` after the include block that precedes the first namespace."""
    line = f'#include "{header}"\n'
    if line in text:
        return text
    lines = text.splitlines(keepends=True)
    stop = next((i for i, ln in enumerate(lines) if ln.startswith("namespace ")), len(lines))
    anchors = [i for i in range(stop) if lines[i].startswith(("#include", "#pragma once"))]
    at = anchors[-1] + 1 if anchors else 0
    return "".join([*lines[:at], line, *lines[at:]])


@dataclass(frozen=True)
class E2m1RoutingEdit:
    file: str
    search: str
    header: Path
    header_name: str
    header_sha256: str
    """The header's bytes are pinned in the edit's own file, so the series' pin of that file
    (and the wheel's label, made of those pins) covers the code the edit brings."""

    def _header_text(self) -> str:
        if not self.header.is_file():
            raise PatchError(
                "sparkbuild's E2M1 header is missing",
                where=str(self.header),
                hint="reinstall sparkbuild from its repository (csrc/e2m1.cuh)",
            )
        data = self.header.read_bytes()
        actual = sha256_bytes(data)
        if actual != self.header_sha256:
            raise HashMismatchError(
                f"{self.header.name} differs from the header the series pins (sha256 "
                f"{actual}, pinned {self.header_sha256})",
                where=str(self.header),
                hint="after a deliberate change: put its sha256 in the edit's header_sha256, "
                "then the edit file's new sha256 in patches/series",
            )
        return data.decode("utf-8")

    def _route(self, tree: Path, path: Path, header: str) -> tuple[list[FileChange], list[str]]:
        relative = path.relative_to(tree).as_posix()
        text = path.read_text(encoding="utf-8")
        new_text, routed = route_conversions(text, origin=relative)
        if not routed and f'#include "{self.header_name}"' not in text:
            return [], []  # upstream converts without the raw instruction: nothing to route
        new_text = add_include(new_text, self.header_name)
        copy = path.with_name(self.header_name)
        copy_rel = copy.relative_to(tree).as_posix()
        old_copy = copy.read_text(encoding="utf-8") if copy.is_file() else None
        changes = [FileChange(relative, text, new_text), FileChange(copy_rel, old_copy, header)]
        changes = [c for c in changes if c.old != c.new]
        notes = [f"{relative}: {', '.join(sorted(set(routed)))} -> ::sparkbuild"] if routed else []
        if old_copy != header:
            notes.append(f"{copy_rel}: {'updated' if old_copy else 'added'}")
        return changes, notes

    def plan(self, tree: Path) -> EditPlan:
        targets = find_files(tree / self.search, self.file)
        if not targets:
            raise PatchError(
                f"no {self.file} under {self.search}/",
                where=str(tree / self.search),
                hint="the NVFP4 kernels moved or were renamed; update patches/ for this tree",
            )
        header = self._header_text()
        changes: list[FileChange] = []
        notes: list[str] = []
        for path in targets:
            file_changes, file_notes = self._route(tree, path, header)
            changes += file_changes
            notes += file_notes
        if not changes:
            places = ", ".join(p.relative_to(tree).as_posix() for p in targets)
            return EditPlan((), (f"{places}: every E2M1 conversion already goes through "
                                 f"{self.header_name}",))
        return EditPlan(tuple(changes), tuple(notes))


def from_params(params: Mapping[str, object], base: Path, origin: str,
                context: EditContext) -> E2m1RoutingEdit:
    del context  # the routing does not depend on the target
    checked = Params(params, origin, {"file", "search", "header", "header_name", "header_sha256"})
    header_sha256 = checked.string("header_sha256").lower()
    if not is_sha256(header_sha256):
        raise RecipeError("header_sha256 must be 64 hexadecimal digits", where=origin)
    header_name = checked.string("header_name", "e2m1.cuh")
    if "/" in header_name:
        raise PatchError(f"header_name must be a file name, not {header_name!r}", where=origin)
    search = checked.string("search", "csrc")
    if search.startswith("/") or ".." in Path(search).parts:
        raise PatchError(f"search must be a directory in the tree, not {search!r}", where=origin)
    return E2m1RoutingEdit(
        file=checked.string("file", "nvfp4_utils.cuh"),
        search=search,
        header=(base / checked.string("header")).resolve(),
        header_name=header_name,
        header_sha256=header_sha256,
    )
