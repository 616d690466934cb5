"""``prepare``: a source spec in, a patched tree at DEST out, all or nothing.

Everything happens in a temporary directory beside DEST (same filesystem, so the final
step is one ``rename``): the source is fetched or extracted there, the series applied,
and only then is the tree renamed to DEST.  An interrupted or failed prepare removes the
temporary directory and never leaves a half-written tree at DEST; one killed outright
(SIGKILL, power loss) leaves its workspace, named with its pid, for the next prepare of
the same DEST to remove, saying so.  A tree on which a patch
failed is still placed, unpatched (the series engine rolls back all or nothing), so the
user can fix the patch and run ``sparkbuild patch apply DEST``; the exit status says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import info, step
from sparkbuild.errors import DestinationError, PatchError, SparkbuildError
from sparkbuild.patches.report import instruction_uses
from sparkbuild.records import Record, as_json
from sparkbuild.sources.fetch import SourceResult, fetch_source
from sparkbuild.store.files import writer_gone

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sparkbuild.patches.report import SeriesReport
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.context import RunContext


@dataclass(frozen=True)
class PrepareResult(Record):
    tree: Path
    source: SourceResult
    series: SeriesReport = field(metadata=as_json(skip=True))
    seconds: float = field(metadata=as_json(skip=True))

    def json_extra(self) -> dict[str, Any]:
        return {"patches": self.series.patches,
                "raw_instruction_uses": instruction_uses(self.series.raw_instruction_uses)}

    def summary(self) -> list[str]:
        in_place = ("applied", "already-applied")
        applied = sum(outcome.status in in_place for outcome in self.series.patches)
        lines = [
            f"prepared {self.tree} in {self.seconds:.1f} s",
            f"  from {self.source.describe()}",
            f"  patches: {applied} of {len(self.series.patches)} in place",
        ]
        return lines + self.series.summary()[1:]

    def placed_at(self, tree: Path) -> PrepareResult:
        """This result for the same tree brought to ``tree`` (``wheel``'s sync of a tree
        prepared anew into its work directory: sparkbuild.store.tree_sync)."""
        source = SourceResult(**{**self.source.__dict__, "tree": tree})
        self.series.tree = tree
        self.series.source = source.to_dict()
        return replace(self, tree=tree, source=source)

    @property
    def error(self) -> SparkbuildError | None:
        failure = self.series.error
        if failure is None:
            return None
        return PatchError(
            failure.what,
            where=failure.where,
            hint=f"{self.tree} holds the unpatched source; fix the patch, then run "
            f"`sparkbuild patch apply {self.tree}`",
        )


def _check_destination(dest: Path) -> None:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise DestinationError(
            "the destination exists and is not a directory", where=str(dest),
            hint="choose a new path",
        )
    if dest.is_dir() and any(dest.iterdir()):
        raise DestinationError(
            "the destination is not empty; refusing to overwrite it",
            where=str(dest),
            hint="choose a new directory, or remove this one first",
        )


def _workspace_prefix(dest: Path) -> str:
    return f".{dest.name}.sparkbuild-"


def sweep_interrupted(dest: Path) -> list[Path]:
    """Remove the workspaces that killed prepares of ``dest`` left beside it; say so."""
    prefix = _workspace_prefix(dest)
    if not dest.parent.is_dir():
        return []
    swept = []
    for leftover in sorted(dest.parent.iterdir()):
        if not leftover.name.startswith(prefix) or not leftover.is_dir():
            continue
        pid = leftover.name[len(prefix) :].split("-", 1)[0]
        if not writer_gone(pid):
            continue  # a prepare of the same DEST running now: not ours to touch
        shutil.rmtree(leftover, ignore_errors=True)
        info(
            f"removed {leftover.name}, the workspace of an interrupted prepare of {dest} "
            f"(pid {pid} is gone); starting clean"
        )
        swept.append(leftover)
    return swept


@contextlib.contextmanager
def _workspace(dest: Path) -> Iterator[Path]:
    """A temporary directory beside ``dest``, named with our pid, removed whatever happens."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        prefix = f"{_workspace_prefix(dest)}{os.getpid()}-"
        work = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    except OSError as exc:
        raise DestinationError(
            f"cannot create a directory beside the destination: {exc.strerror}",
            where=str(dest.parent),
        ) from exc
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _move_into_place(tree: Path, dest: Path) -> None:
    """One rename; an empty directory at ``dest`` is replaced (POSIX rename allows it)."""
    _check_destination(dest)  # again: something may have appeared while we worked
    try:
        tree.replace(dest)
    except OSError as exc:
        raise DestinationError(
            f"cannot move the prepared tree into place: {exc.strerror}",
            where=str(dest),
            hint="make sure the destination is empty and on a writable filesystem",
        ) from exc


def prepare_tree(
    spec: str,
    dest: Path,
    recipe: Recipe,
    *,
    update_lock: bool = False,
    context: RunContext | None = None,
) -> PrepareResult:
    """Fetch ``spec``, apply ``recipe``'s series and place the tree at ``dest``.

    ``context``: the cache and offline mode (default: the default cache, online).
    """
    from sparkbuild.patches.engine import apply_series

    started = time.monotonic()
    dest = Path(dest).absolute()
    _check_destination(dest)
    sweep_interrupted(dest)
    with _workspace(dest) as work:
        step(f"fetching {spec}")
        source = fetch_source(
            spec, work, recipe=recipe, update_lock=update_lock, context=context
        )
        step(f"applying the patch series {recipe.series}")
        series = apply_series(source.tree, recipe)
        _move_into_place(source.tree, dest)
    series.tree = dest
    placed = SourceResult(**{**source.__dict__, "tree": dest})
    series.source = placed.to_dict()
    return PrepareResult(dest, placed, series, time.monotonic() - started)
