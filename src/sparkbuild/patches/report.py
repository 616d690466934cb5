"""What a patch run reports: each patch's outcome, the series report, raw-instruction uses.

Split from :mod:`sparkbuild.patches.engine` so the report types and the read-only scans (git
apply's complaint turned into file and hunk, the raw E2M1 instruction left in the tree) sit
apart from the engine that changes the tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sparkbuild.errors import PatchError, SparkbuildError
from sparkbuild.patches.edits.edit_plan import C_SUFFIXES, SKIP_DIRS
from sparkbuild.patches.edits.inline_asm import INSTRUCTION, instruction_lines
from sparkbuild.patches.journal import Recovery
from sparkbuild.records import EMPTY, NONE, Record, as_json
from sparkbuild.store.files import walk_files

if TYPE_CHECKING:
    from sparkbuild.patches.series import FileDiff

PatchStatus = Literal["applied", "already-applied", "failed", "not-applied"]
"""Where a patch stands in a tree."""
APPLIED: PatchStatus = "applied"
ALREADY: PatchStatus = "already-applied"
FAILED: PatchStatus = "failed"
NOT_APPLIED: PatchStatus = "not-applied"
STATUSES: tuple[PatchStatus, ...] = (APPLIED, ALREADY, FAILED, NOT_APPLIED)
REVERTED = "reverted"
APPLIED_HERE = "applied-here"
"""An already-applied patch that sparkbuild applied to this tree (its record is in it)."""
UPSTREAM = "upstream"
"""An already-applied patch whose change the source carried (no record of sparkbuild's)."""

OWN_HEADER = ("e2m1.cuh", "SPARKBUILD_E2M1_HW")
"""sparkbuild's own header uses the instruction only where the target has it: not a raw use."""


def instruction_uses(uses: list[tuple[Path, int]]) -> list[dict[str, Any]]:
    """The raw uses of the instruction, as JSON: each file (POSIX) and line."""
    return [{"file": path.as_posix(), "line": line} for path, line in uses]


@dataclass(frozen=True)
class PatchOutcome(Record):
    name: str
    status: PatchStatus
    detail: str
    sha256: str
    """sha256 of the patch file, so a report names exactly which patch text was used."""
    where: str | None = field(default=None, metadata=as_json(skip=True))
    """For ``failed``: the file and hunk (or file and line) that did not match."""
    details: dict[str, Any] = field(default_factory=dict)
    """A structured edit's findings (each arch list before and after, guards left alone)."""
    origin: str | None = field(default=None, metadata=as_json(omit=EMPTY))
    """For ``already-applied``: :data:`APPLIED_HERE` or :data:`UPSTREAM` (JSON key ``origin``)."""

    @property
    def label(self) -> str:
        """The status as a person reads it: ``already-applied (upstream)``."""
        return f"{self.status} ({self.origin})" if self.origin else self.status


@dataclass
class SeriesReport(Record):
    json_order: ClassVar[tuple[str, ...]] = ("tree", "source")

    tree: Path
    patches: list[PatchOutcome]
    raw_instruction_uses: list[tuple[Path, int]] = field(metadata=as_json(dump=instruction_uses))
    """Raw ``cvt.rn.satfinite.e2m1x2.f32`` left in the tree: (path relative to it, line)."""
    source: dict[str, Any] = field(default_factory=dict, metadata=as_json(skip=True))
    """What the tree came from; empty means the tree itself.  prepare fills it in."""
    interrupted_run: Recovery | None = None
    """A killed earlier run whose half-done changes this run found and undid first (said on
    stderr when found, so not repeated in :meth:`summary`)."""
    dependencies: list[dict[str, Any]] | None = field(default=None, metadata=as_json(omit=NONE))
    """``patch status``: each vendored source's cached copy and what the series' arch edit
    did to it (sparkbuild.vendoring.patched); None when not asked."""

    def source_dict(self) -> dict[str, Any]:
        return self.source or {"kind": "tree", "path": str(self.tree)}

    def json_extra(self) -> dict[str, Any]:
        return {"source": self.source_dict()}

    def summary(self) -> list[str]:
        width = max((len(p.name) for p in self.patches), default=0)
        lines = [f"patch series on {self.tree}"]
        status_width = max((len(p.label) for p in self.patches), default=0)
        lines += [f"  {p.label:<{status_width}} {p.name:<{width}}  {p.detail}"
                  for p in self.patches]
        if self.raw_instruction_uses:
            lines.append(f"raw {INSTRUCTION} in the tree (a plain sm_121 build trips on "
                         "each one that is not behind an arch guard):")
            lines += [f"  {path.as_posix()}:{line}" for path, line in self.raw_instruction_uses]
        for dep in self.dependencies or []:
            lines.append(f"  dependency {dep.get('name')}: {dep.get('status')}")
        return lines

    @property
    def error(self) -> SparkbuildError | None:
        failed = next((p for p in self.patches if p.status == FAILED), None)
        if failed is None:
            return None
        return PatchError(
            f"patch {failed.name} failed: {failed.detail}",
            where=failed.where,
            hint="the tree was left as it was before; update the patch for this source",
        )


_HUNK_FAILED = re.compile(r"error: patch failed: (.+):(\d+)")
_ERROR = re.compile(r"error: (.+)")


def describe_failure(files: list[FileDiff], output: str) -> tuple[str, str | None]:
    """(detail, where) from git apply's complaint: the file and the hunk that did not match."""
    match = _HUNK_FAILED.search(output)
    if match:
        path, line = match.group(1), int(match.group(2))
        file = next((f for f in files if f.path == path), None)
        found = file.hunk_at(line) if file is not None else None
        if found is not None:
            number, hunk = found
            return (
                f"{path}: hunk #{number} ({hunk.ranges}) does not match",
                f"{path}:{line} (hunk #{number})",
            )
        return f"{path}: the hunk at line {line} does not match", f"{path}:{line}"
    errors = _ERROR.findall(output)
    if errors:
        path = errors[0].split(":", 1)[0]
        return errors[0], path if any(f.path == path for f in files) else None
    return f"git apply failed: {output.strip() or 'no message'}", None


def _source_files(tree: Path) -> list[Path]:
    return [path for path in walk_files(tree, SKIP_DIRS)
            if path.suffix in C_SUFFIXES or path.suffix == ".py"]


def raw_instruction_uses(tree: Path) -> list[tuple[Path, int]]:
    """Code (not comments) in the tree that issues the raw E2M1 instruction: (file, line).

    Reported, never fatal: a use behind an arch-specific guard builds fine, but each one is
    a place a plain sm_121 build can trip.  sparkbuild's own e2m1.cuh is not counted.
    """
    uses = []
    for path in _source_files(tree):
        data = path.read_bytes()
        if INSTRUCTION.encode() not in data:
            continue
        text = data.decode("utf-8", errors="replace")
        if path.name == OWN_HEADER[0] and OWN_HEADER[1] in text:
            continue
        relative = path.relative_to(tree)
        uses += [(relative, n) for n in instruction_lines(text, python=path.suffix == ".py")]
    return uses
