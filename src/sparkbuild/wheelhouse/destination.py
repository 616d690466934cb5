"""Where a wheelhouse is written: the ``--out`` directory, a staging copy, and the swap.

``out`` may be missing, empty or an earlier wheelhouse, nothing else; an earlier one is
replaced whole, and the files its manifest does not name are listed before they go.  The
new wheelhouse is staged beside ``out`` (``.NAME.tmp-PID``) and renamed into place at the
end; what killed runs leave behind is swept by the next one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import TYPE_CHECKING

from sparkbuild.console import step, warn
from sparkbuild.errors import DestinationError, VerifyError, disk_full_as_error
from sparkbuild.store.files import writer_gone
from sparkbuild.wheelhouse.manifest import MANIFEST_NAME, expected_hashes, read_manifest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def sweep_stale(out: Path) -> None:
    """Remove staging and old directories that killed runs left beside ``out``."""
    for path in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = path.name.rpartition("-")
        if kind.endswith((".tmp", ".old")) and pid.isdigit() and writer_gone(pid):
            shutil.rmtree(path, ignore_errors=True)


def check_destination(out: Path, *, before_build: bool = False) -> list[str]:
    """``out`` may be missing, empty or an earlier wheelhouse; nothing else is replaced.

    An earlier wheelhouse is replaced whole: this says so, naming any file in it that its
    manifest does not (someone's addition, deleted with it); those files are returned.
    """
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise DestinationError("the wheelhouse path exists and is not a directory",
                               where=str(out), hint="choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return []
    if not (out / MANIFEST_NAME).is_file():
        raise DestinationError(
            "refusing to replace a non-empty directory that is not a sparkbuild wheelhouse",
            where=str(out), hint="choose an empty or new --out directory")
    foreign = foreign_files(out)
    when = "once the build succeeds, this run replaces" if before_build else "replacing"
    if foreign:
        more = f" and {len(foreign) - 10} more" if len(foreign) > 10 else ""
        shown = ", ".join(foreign[:10]) + more
        warn(f"{when} the earlier wheelhouse {out}, deleting {len(foreign)} file(s) its "
             f"manifest does not name: {shown}")
    else:
        step(f"{when} the earlier wheelhouse {out}")
    return foreign


def refuse_inside_source(out: Path, source: Path | None) -> None:
    """``out`` must not lie inside the source directory: the next build would copy the
    wheelhouse into its tree (and this one would write into what it builds)."""
    if source is None:
        return
    out, source = out.resolve(), source.resolve()
    if out.is_relative_to(source):
        raise DestinationError("the wheelhouse (--out) lies inside the source directory",
                               where=f"{out} (source: {source})",
                               hint="choose an --out outside the source tree; the next build "
                               "would copy the wheelhouse into its tree")


def foreign_files(out: Path) -> list[str]:
    """Files under the wheelhouse ``out`` that its manifest names neither as a wheel nor as
    a file it wrote (``requirements.lock``, the ``simple/`` pages)."""
    try:
        known = {MANIFEST_NAME, *expected_hashes(read_manifest(out))}
    except (VerifyError, KeyError, TypeError, AttributeError):  # unreadable: vouches for none
        known = {MANIFEST_NAME}
    found = (p for p in out.rglob("*") if p.is_symlink() or not p.is_dir())
    return sorted(name for p in found if (name := p.relative_to(out).as_posix()) not in known)


def swap_into_place(staging: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A fresh directory beside ``out``, removed unless the caller renamed it away."""
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(out)
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        with disk_full_as_error("the disk filled up while writing the wheelhouse",
                                where=staging):
            yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
