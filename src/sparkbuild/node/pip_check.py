"""``pip check`` in the venv a wheelhouse was installed into, read against its overrides.

pip check names every installed distribution whose requirements the venv does not meet.
A line that a recorded override explains (the manifest says the recipe pinned that version
of that project on purpose, replacing that package's requirement) is reported, not fatal;
any other line is a problem, and ``install`` fails naming it -- except, for a wheelhouse
written with ``--no-closure``, a requirement that is not installed at all: that closure is
the node's to provide (as ``verify`` reads it), so it is reported as left to the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.utils import canonicalize_name

from sparkbuild.errors import VerifyError
from sparkbuild.records import EMPTY, Record, as_json
from sparkbuild.wheelhouse.overrides import Override
from sparkbuild.wheelhouse.requirements_check import CLOSURE_LEFT_OUT

if TYPE_CHECKING:
    from collections.abc import Sequence

_CONFLICT = re.compile(
    r"(?P<dist>\S+) (?P<version>\S+) has requirement (?P<requirement>.+), "
    r"but you have (?P<have>\S+) (?P<have_version>\S+)\.")
_MISSING = re.compile(
    r"(?P<dist>\S+) (?P<version>\S+) requires (?P<requirement>.+), which is not installed\.")
_CLEAN = "No broken requirements found."


@dataclass(frozen=True)
class PipCheckLine:
    text: str
    dist: str | None = None
    """The distribution whose requirement is unmet (canonical name)."""
    have: str | None = None
    """The installed project that does not meet it (canonical name)."""
    have_version: str | None = None


def parse_pip_check(output: str) -> list[PipCheckLine]:
    """pip check's complaints, one per line (its "all clear" line is not one)."""
    lines = []
    for raw in output.splitlines():
        text = raw.strip()
        if not text or text == _CLEAN or text.startswith(("+ ", "WARNING:", "[notice]")):
            continue
        conflict, missing = _CONFLICT.fullmatch(text), _MISSING.fullmatch(text)
        if conflict:
            lines.append(PipCheckLine(text, canonicalize_name(conflict["dist"]),
                                      canonicalize_name(conflict["have"]),
                                      conflict["have_version"]))
        elif missing:
            lines.append(PipCheckLine(text, canonicalize_name(missing["dist"])))
        else:
            lines.append(PipCheckLine(text))
    return lines


def explained_by(line: PipCheckLine, overrides: Sequence[Override]) -> Override | None:
    """The override that replaced exactly this requirement: same pin, same asking package."""
    have, version, asker = line.have, line.have_version, line.dist
    if have is None or version is None or asker is None:
        return None
    return next((o for o in overrides if o.explains(have, version, asker)), None)


@dataclass
class PipCheck(Record):
    json_order: ClassVar[tuple[str, ...]] = ("ok",)

    overrides: list[str] = field(default_factory=list)
    """pip check's lines that a recorded override explains, with its reason."""
    problems: list[str] = field(default_factory=list)
    left_to_node: list[str] = field(default_factory=list, metadata=as_json(omit=EMPTY))
    """Requirements not installed at all, of a wheelhouse whose closure was left out."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def json_extra(self) -> dict[str, Any]:
        return {"ok": self.ok}

    def summary(self) -> list[str]:
        lines = [f"  pip check: {'ok' if self.ok else 'FAILED'}"]
        lines += [f"    override (recorded): {text}" for text in self.overrides]
        lines += [f"    PROBLEM: {text}" for text in self.problems]
        if self.left_to_node:
            lines.append(f"    left to the node (the wheelhouse's closure was left out): "
                         f"{len(self.left_to_node)} requirement(s) not installed")
            lines += [f"      {text}" for text in self.left_to_node]
        return lines

    @property
    def error(self) -> VerifyError | None:
        if self.ok:
            return None
        return VerifyError(
            f"pip check found {len(self.problems)} conflict(s) no override records: "
            + "; ".join(self.problems),
            hint="the wheelhouse does not install consistently: rebuild it, or record the "
            'pin with override = "REASON" in the recipe if the conflict is intended',
        )


def judge_pip_check(output: str, manifest: dict[str, Any]) -> PipCheck:
    """Sort pip check's lines into overrides the manifest records and problems."""
    overrides = [Override.from_dict(o) for o in manifest.get("overrides", [])
                 if isinstance(o, dict)]
    result = PipCheck()
    closure_left_out = manifest.get("closure") == CLOSURE_LEFT_OUT
    for line in parse_pip_check(output):
        item = explained_by(line, overrides)
        if closure_left_out and line.dist is not None and line.have is None:
            result.left_to_node.append(line.text)
        elif item is None:
            result.problems.append(line.text)
        else:
            result.overrides.append(f"{line.text} (override {item.pin}: {item.reason})")
    return result
