"""Tampering with a bundle the way a bad copy or an attacker would: one member changed,
dropped, or added, the manifest left as it was."""

from __future__ import annotations

import io
import tarfile
from typing import TYPE_CHECKING

from sparkbuild.bundle.archive import TOP

if TYPE_CHECKING:
    from pathlib import Path


def rewrite_bundle(bundle: Path, out: Path, *, change: str | None = None,
                   drop: str | None = None, add: str | None = None) -> Path:
    """``bundle`` copied to ``out`` with the member ``change`` edited (a comment appended),
    ``drop`` left out, or a new member ``add`` put in after the first file of the tree."""
    with tarfile.open(bundle) as source, tarfile.open(out, "w:xz", preset=0) as target:
        added = add is None
        for member in source.getmembers():
            name = member.name.removeprefix(f"{TOP}/")
            if name == drop:
                continue
            data = source.extractfile(member) if member.isreg() else None
            if name == change and data is not None:
                payload = data.read() + b"\n// changed\n"
                member.size = len(payload)
                data = io.BytesIO(payload)
            target.addfile(member, data)
            if not added and member.isreg() and name.startswith("tree/"):
                extra = tarfile.TarInfo(f"{TOP}/{add}")
                extra.size = 3
                target.addfile(extra, io.BytesIO(b"new"))
                added = True
    return out
