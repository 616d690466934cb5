"""What every stage returns: a dataclass that can speak JSON and to a person."""

from __future__ import annotations

from typing import Any, Protocol

from sparkbuild.errors import SparkbuildError


class StageResult(Protocol):
    def to_dict(self) -> dict[str, Any]:
        """The result as one JSON object (``--json``)."""

    def summary(self) -> list[str]:
        """Lines for a person."""

    @property
    def error(self) -> SparkbuildError | None:
        """A failure that still produced a full report (a patch that did not apply)."""
