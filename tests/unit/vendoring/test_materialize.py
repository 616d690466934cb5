"""An unpacked dependency source is reused only while its files are the ones unpacked."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.builders import good_sdist
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.materialize import COMPLETE_MARKER, _unpack


def _unpacked(tmp_path: Path) -> tuple[Cache, str, Path]:
    cache = Cache(tmp_path / "cache")
    digest = cache.put_file(good_sdist(tmp_path))
    dest = tmp_path / "work" / "deps" / f"demo-{digest[:12]}"
    return cache, digest, dest


def test_an_intact_copy_is_reused(tmp_path: Path) -> None:
    cache, digest, dest = _unpacked(tmp_path)
    root = _unpack(cache, digest, dest, "demo", strip_top=True)
    header = root / "csrc" / "kernel.cu"
    marker = (dest / COMPLETE_MARKER).stat().st_mtime_ns
    assert _unpack(cache, digest, dest, "demo", strip_top=True) == root
    assert (dest / COMPLETE_MARKER).stat().st_mtime_ns == marker  # not unpacked again
    assert header.is_file()


@pytest.mark.parametrize("how", ["changed", "added", "removed"])
def test_an_edited_copy_is_unpacked_again_with_a_warning(
        tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An edited header in work/<recipe>/deps/... is put back or named, never compiled
    without a word."""
    cache, digest, dest = _unpacked(tmp_path)
    root = _unpack(cache, digest, dest, "demo", strip_top=True)
    kernel = root / "csrc" / "kernel.cu"
    original = kernel.read_bytes()
    changed = {"changed": kernel, "added": root / "csrc" / "shadow.h",
               "removed": kernel}[how]
    if how == "removed":
        kernel.unlink()
    else:
        changed.write_text("#error planted\n")
    capsys.readouterr()
    assert _unpack(cache, digest, dest, "demo", strip_top=True) == root
    said = capsys.readouterr().err
    assert f"{changed.relative_to(dest).as_posix()} ({how})" in said
    assert "unpacking it again from the verified cache" in said
    assert kernel.read_bytes() == original
    assert not (root / "csrc" / "shadow.h").exists()


def test_a_marker_without_a_listing_is_unpacked_again(tmp_path: Path) -> None:
    cache, digest, dest = _unpacked(tmp_path)
    root = _unpack(cache, digest, dest, "demo", strip_top=True)
    (dest / COMPLETE_MARKER).write_text(root.name + "\n")  # the format before the listing
    (root / "csrc" / "kernel.cu").write_text("edited\n")
    _unpack(cache, digest, dest, "demo", strip_top=True)
    assert "edited" not in (root / "csrc" / "kernel.cu").read_text()
