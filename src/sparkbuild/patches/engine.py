"""Apply, check and revert the patch series on a source tree -- all or nothing.

Every patch, diff or structured edit, reaches the tree the same way: as a unified diff fed to
``git apply`` (zero fuzz: the full context must match), after a ``git apply --check``.  Each
patch ends in one status:

* ``applied``: it changed the tree now;
* ``already-applied``: its result is already there (``git apply --check -R`` passes, a
  structured edit finds nothing to change, or a diff's semantic check recognises upstream's
  own form of the change);
* ``failed``: it does not fit, with the file and the hunk that did not match;
* ``not-applied``: ``status`` says it would apply; after ``revert``, it was taken out; after
  a failed ``apply``, it was rolled back or never tried.

All or nothing: :class:`~sparkbuild.patches.journal.Journal` writes the bytes of every file
to ``TREE/.sparkbuild/journal.jsonl`` before the first change to it; when a patch fails (or
the run is interrupted) every file is put back byte for byte and every file and directory
the run created is removed.  A run killed outright (SIGKILL) leaves the journal behind, and
the next ``status``, ``apply`` or ``revert`` on the tree replays it first, says so, and
starts clean (see :mod:`sparkbuild.patches.journal` for why restore rather than finish).
Each applied diff is recorded in the tree (``.sparkbuild/applied/NAME/NNN.diff``) so that
``revert`` can ``git apply -R`` exactly what was applied, wherever a moved target was found.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import PatchError, UsageError
from sparkbuild.patches.edits import EditContext, applied_check, plan_diff
from sparkbuild.patches.edits.edit_plan import SKIP_DIRS
from sparkbuild.patches.journal import (
    Journal,
    Recovery,
    interrupted,
    recover_interrupted,
    remove_empty_state_dirs,
    tree_lock,
)
from sparkbuild.patches.report import (
    ALREADY,
    APPLIED,
    APPLIED_HERE,
    FAILED,
    NOT_APPLIED,
    REVERTED,
    UPSTREAM,
    PatchOutcome,
    PatchStatus,
    SeriesReport,
    describe_failure,
    raw_instruction_uses,
)
from sparkbuild.patches.series import (
    DiffPatch,
    EditPatch,
    FileDiff,
    Patch,
    load_series,
    parse_diff,
    render_diff,
)
from sparkbuild.sources.git import run_git
from sparkbuild.store.files import walk_files

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sparkbuild.recipe import Recipe

RECORD_DIR = Path(".sparkbuild") / "applied"


# --- git apply --------------------------------------------------------------------------


def git_apply(
    tree: Path, diff: str, *, reverse: bool = False, check: bool = False
) -> tuple[bool, str]:
    """Run ``git apply`` in ``tree`` on ``diff``; (succeeded, output).

    GIT_CEILING_DIRECTORIES keeps git from treating a repository *around* the tree as the
    one to patch, so the tree need not be a git checkout and paths stay tree-relative.
    """
    args = ["apply", "--whitespace=nowarn"]
    args += ["-R"] if reverse else []
    args += ["--check"] if check else []
    result = run_git(
        args,
        tree,
        env={"GIT_CEILING_DIRECTORIES": str(tree.parent)},
        stdin_data=diff,
        check=False,
        echo=not check,
        timeout=300,
        foreign=tree,  # the user's tree: its git config runs nothing
    )
    return result.returncode == 0, result.output


# --- all or nothing ---------------------------------------------------------------------


def _records(tree: Path, name: str) -> list[Path]:
    return sorted((tree / RECORD_DIR / name).glob("*.diff"))


def _next_record(tree: Path, name: str) -> Path:
    existing = _records(tree, name)
    number = int(existing[-1].stem) + 1 if existing else 1
    return tree / RECORD_DIR / name / f"{number:03d}.diff"


def _write_record(path: Path, diff: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(diff, encoding="utf-8")


# --- one patch --------------------------------------------------------------------------


def _inside(tree: Path, files: list[FileDiff], origin: str) -> None:
    """Each file a patch writes is a plain file inside the tree: not reached through a link
    that leads out, and no link itself (git apply would rewrite where the link points)."""
    root = tree.resolve()
    for file in files:
        if not (tree / file.path).resolve().is_relative_to(root):
            raise PatchError(
                f"patch reaches outside the tree through a symbolic link: {file.path}",
                where=origin,
            )
        if (tree / file.path).is_symlink():
            raise PatchError(
                f"patch changes {file.path}, a symbolic link in the tree: the series writes "
                "plain files only",
                where=origin,
                hint="patch the file the link points to, under its own name",
            )


class TreeIndex:
    """Files of the tree by name, built on first use, to find a target that moved."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self._by_name: dict[str, list[str]] | None = None

    def candidates(self, path: str) -> list[str]:
        if self._by_name is None:
            self._by_name = {}
            for file in walk_files(self.tree, SKIP_DIRS):
                rel = file.relative_to(self.tree).as_posix()
                self._by_name.setdefault(file.name, []).append(rel)
        wanted = Path(path).parts

        def shared_tail(candidate: str) -> int:
            parts = Path(candidate).parts
            return next((n for n in range(min(len(parts), len(wanted)))
                         if parts[-1 - n] != wanted[-1 - n]), min(len(parts), len(wanted)))

        found = self._by_name.get(Path(path).name, [])
        return sorted(found, key=lambda c: (-shared_tail(c), c))


def resolve_moved(tree: Path, files: tuple[FileDiff, ...], index: TreeIndex) -> list[FileDiff]:
    """Aim each file diff whose target is missing at the same-named file its hunks fit."""
    resolved = []
    for file in files:
        if file.change == "create" or (tree / file.path).exists():
            resolved.append(file)
            continue
        moved = file
        for candidate in index.candidates(file.path):
            text = file.at(candidate).render()
            if git_apply(tree, text, check=True)[0] or git_apply(
                tree, text, check=True, reverse=True
            )[0]:
                moved = file.at(candidate)
                break
        resolved.append(moved)
    return resolved


@dataclass(frozen=True)
class Prepared:
    """A patch turned into the exact diff for this tree, or the reason it needs none."""

    files: list[FileDiff]
    diff: str
    notes: tuple[str, ...]
    already: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def prepare(tree: Path, patch: Patch, index: TreeIndex) -> Prepared:
    if isinstance(patch, EditPatch):
        plan = patch.edit.plan(tree)
        if not plan.changes:
            return Prepared([], "", plan.notes, already="; ".join(plan.notes),
                            details=plan.details)
        diff = plan_diff(plan)
        files = list(parse_diff(diff, origin=f"{patch.name} (generated)"))
        _inside(tree, files, str(patch.path))
        return Prepared(files, diff, plan.notes, details=plan.details)
    files = resolve_moved(tree, patch.files, index)
    _inside(tree, files, str(patch.path))
    notes = tuple(f"{f.path} (moved from {o.path})"
                  for o, f in zip(patch.files, files, strict=True) if o.path != f.path)
    return Prepared(files, render_diff(files), notes)


def _outcome(patch: Patch, status: PatchStatus, detail: str, where: str | None = None,
             details: dict[str, Any] | None = None) -> PatchOutcome:
    return PatchOutcome(patch.name, status, detail, patch.sha256, where, details or {})


def _already(tree: Path, patch: Patch, detail: str,
             details: dict[str, Any] | None = None) -> PatchOutcome:
    """``already-applied``, saying whether sparkbuild applied it here or the source had it."""
    origin = APPLIED_HERE if _records(tree, patch.name) else UPSTREAM
    return PatchOutcome(patch.name, ALREADY, detail, patch.sha256, details=details or {},
                        origin=origin)


def _classify(tree: Path, patch: Patch, ready: Prepared) -> PatchOutcome:
    """Status of a prepared patch without changing the tree."""
    if ready.already is not None:
        return _already(tree, patch, ready.already, details=ready.details)
    if isinstance(patch, DiffPatch) and git_apply(tree, ready.diff, check=True, reverse=True)[0]:
        return _already(tree, patch, "its changes are in the tree (reverse check)")
    fits, output = git_apply(tree, ready.diff, check=True)
    if fits:
        return _outcome(patch, NOT_APPLIED, "would apply: " + ("; ".join(ready.notes) or "cleanly"),
                        details=ready.details)
    if isinstance(patch, DiffPatch) and patch.applied_check is not None:
        found = applied_check(patch.applied_check)(tree)
        if found is not None:
            return _already(tree, patch, found)
    detail, where = describe_failure(ready.files, output)
    return _outcome(patch, FAILED, detail, where)


def _prepared_or_failed(tree: Path, patch: Patch, index: TreeIndex) -> Prepared | PatchOutcome:
    try:
        return prepare(tree, patch, index)
    except PatchError as error:
        return _outcome(patch, FAILED, error.what, error.where)


def status_one(tree: Path, patch: Patch, index: TreeIndex) -> PatchOutcome:
    ready = _prepared_or_failed(tree, patch, index)
    return ready if isinstance(ready, PatchOutcome) else _classify(tree, patch, ready)


def apply_one(tree: Path, patch: Patch, index: TreeIndex, journal: Journal) -> PatchOutcome:
    ready = _prepared_or_failed(tree, patch, index)
    if isinstance(ready, PatchOutcome):
        return ready
    outcome = _classify(tree, patch, ready)
    if outcome.status != NOT_APPLIED:
        return outcome
    record = _next_record(tree, patch.name)
    _journal_files(journal, patch.name, tree, ready.files, record)
    applied, output = git_apply(tree, ready.diff)
    if not applied:
        detail, where = describe_failure(ready.files, output)
        return _outcome(patch, FAILED, detail, where)
    _write_record(record, ready.diff)
    journal.done(patch.name)
    return _outcome(patch, APPLIED, "; ".join(ready.notes) or "applied cleanly",
                    details=ready.details)


def _journal_files(
    journal: Journal, name: str, tree: Path, files: list[FileDiff], record: Path
) -> None:
    """Put the originals of everything a patch step changes on disk before it changes."""
    journal.begin(name)
    for file in files:
        journal.save(tree / file.path)
    journal.save(record)
    journal.commit()


def revert_one(tree: Path, patch: Patch, index: TreeIndex, journal: Journal) -> PatchOutcome:
    records = _records(tree, patch.name)
    if not records:
        outcome = status_one(tree, patch, index)
        if outcome.status == ALREADY:
            return _already(tree, patch, f"{outcome.detail}; not sparkbuild's to revert")
        return _outcome(patch, NOT_APPLIED, "was not applied")
    for record in reversed(records):
        diff = record.read_text(encoding="utf-8")
        files = list(parse_diff(diff, origin=str(record)))
        fits, output = git_apply(tree, diff, check=True, reverse=True)
        if not fits:
            detail, where = describe_failure(files, output)
            return _outcome(patch, FAILED, f"changed since it was applied: {detail}", where)
        _journal_files(journal, patch.name, tree, files, record)
        git_apply(tree, diff, reverse=True)
        record.unlink()
    journal.done(patch.name)
    return _outcome(patch, NOT_APPLIED, REVERTED)


# --- the series -------------------------------------------------------------------------


def _checked_tree(tree: Path) -> Path:
    if not tree.is_dir():
        raise UsageError(f"no such source tree: {tree}", hint="pass the directory prepare made")
    return tree.resolve()


def _after_failure(
    tree: Path, outcomes: list[PatchOutcome], patches: tuple[Patch, ...], index: TreeIndex
) -> list[PatchOutcome]:
    """Outcomes once the journal has put the tree back: each patch's status as it is now."""
    failed = next(o for o in outcomes if o.status == FAILED)
    done = {o.name: o for o in outcomes}
    result = []
    for patch in patches:
        outcome = done.get(patch.name)
        if outcome is failed:
            result.append(failed)
            continue
        if outcome is None:
            detail = f"not attempted: {failed.name} failed"
        elif outcome.status == APPLIED or outcome.detail == REVERTED:
            detail = f"undone: {failed.name} failed"
        else:
            detail = outcome.detail
        now = status_one(tree, patch, index)
        result.append(PatchOutcome(patch.name, now.status, detail, patch.sha256, now.where,
                                   now.details, now.origin))
    return result


@contextlib.contextmanager
def _locked_tree(tree: Path) -> Iterator[tuple[Path, Recovery | None]]:
    """The tree, locked against other runs, with what a killed earlier run left undone."""
    tree = _checked_tree(tree)
    with tree_lock(tree):
        yield tree, recover_interrupted(tree)


def _steps(
    tree: Path, patches: tuple[Patch, ...], journal: Journal, *, reverse: bool
) -> list[PatchOutcome]:
    index = TreeIndex(tree)
    step = revert_one if reverse else apply_one
    outcomes: list[PatchOutcome] = []
    try:
        for patch in reversed(patches) if reverse else patches:
            outcomes.append(step(tree, patch, index, journal))
            if outcomes[-1].status == FAILED:
                break
    except BaseException:
        journal.restore()
        raise
    if outcomes and outcomes[-1].status == FAILED:
        journal.restore()
        return _after_failure(tree, outcomes, patches, index)
    journal.finish()
    remove_empty_state_dirs(tree)
    return outcomes


def _run_series(tree: Path, recipe: Recipe, *, reverse: bool) -> SeriesReport:
    patches = load_series(recipe.series, EditContext.for_recipe(recipe)).patches
    with _locked_tree(tree) as (tree, recovery):
        names = [patch.name for patch in patches]
        journal = Journal(tree, "revert" if reverse else "apply", names)
        outcomes = _steps(tree, patches, journal, reverse=reverse)
        outcomes.sort(key=lambda outcome: names.index(outcome.name))
        return SeriesReport(tree, outcomes, raw_instruction_uses(tree), interrupted_run=recovery)


def series_status(tree: Path, recipe: Recipe) -> SeriesReport:
    """What each patch would do to ``tree``; changes nothing (but repairs a killed run)."""
    patches = load_series(recipe.series, EditContext.for_recipe(recipe)).patches
    with _locked_tree(tree) as (tree, recovery):
        index = TreeIndex(tree)
        outcomes = [status_one(tree, patch, index) for patch in patches]
        return SeriesReport(tree, outcomes, raw_instruction_uses(tree), interrupted_run=recovery)


def apply_series(tree: Path, recipe: Recipe) -> SeriesReport:
    """Apply the recipe's series in order; when one patch fails, leave the tree untouched."""
    return _run_series(tree, recipe, reverse=False)


def revert_series(tree: Path, recipe: Recipe) -> SeriesReport:
    """Take out what ``apply_series`` recorded, last patch first; all or nothing too."""
    return _run_series(tree, recipe, reverse=True)


def touched_files(tree: Path, recipe: Recipe) -> list[Path]:
    """Files of ``tree`` that the series changed or created (for ``check``), in series order.

    Refuses a tree a killed run left half-patched: its records would not say what is in it.
    """
    tree = _checked_tree(tree)
    if interrupted(tree):
        raise PatchError(
            "a patch run on this tree was interrupted (or is still running): it may be "
            "half-patched",
            where=str(tree),
            hint="run `sparkbuild patch apply TREE` again: it restores the tree and re-applies",
        )
    touched: dict[Path, None] = {}
    for patch in load_series(recipe.series, EditContext.for_recipe(recipe)).patches:
        for record in _records(tree, patch.name):
            for file in parse_diff(record.read_text(encoding="utf-8"), origin=str(record)):
                if file.change != "delete":
                    touched[tree / file.path] = None
    return list(touched)
