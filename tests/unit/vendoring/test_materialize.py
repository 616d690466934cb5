"""An unpacked dependency source is reused only while its files are the ones unpacked."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest

from corpus.builders import good_sdist
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.build_deps import CratePlan
from sparkbuild.vendoring.fetch import store_tree_tarball
from sparkbuild.vendoring.index import record_crates
from sparkbuild.vendoring.materialize import COMPLETE_MARKER, _cargo_home, _unpack
from sparkbuild.vendoring.plan import VendorPlan


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
    """An edited header in work/<recipe>/deps/... is put back and named, never compiled
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


def _vendored_crates(cache: Cache, tmp_path: Path, lockfile: str,
                     crates: dict[str, str]) -> CratePlan:
    """``cargo vendor``'s output for one lockfile (directory -> the crate's checksum), in
    the cache as the vendor step keeps it."""
    out = tmp_path / "vendor-out" / lockfile.replace("/", "_")
    for directory, checksum in crates.items():
        (out / directory / "src").mkdir(parents=True)
        (out / directory / "Cargo.toml").write_text(f'[package]\nname = "{directory}"\n')
        (out / directory / ".cargo-checksum.json").write_text(
            f'{{"files": {{}}, "package": "{checksum}"}}')
    plan = CratePlan(lockfile, hashlib.sha256(lockfile.encode()).hexdigest(), len(crates))
    record_crates(cache, plan, store_tree_tarball(cache, out))
    return plan


def test_the_cargo_home_reads_the_crates_of_every_lockfile(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    first = _vendored_crates(cache, tmp_path, "rust/Cargo.lock",
                             {"serde": "a" * 64, "libc": "b" * 64})
    second = _vendored_crates(cache, tmp_path, "tools/cli/Cargo.lock",
                              {"serde": "c" * 64, "libc": "b" * 64, "clap": "d" * 64})
    plan = VendorPlan(tmp_path, sources=(), unreached=(), wheels=(), crates=(first, second),
                      torch=None)
    home = _cargo_home(cache, plan, tmp_path / "work")
    assert home is not None
    config = tomllib.loads((home / "config.toml").read_text())
    directory = Path(config["source"]["sparkbuild-vendored"]["directory"])
    names = sorted(p.name for p in directory.iterdir())
    # libc is the same crate in both; serde is another version under the same name
    assert names[:3] == ["clap", "libc", "serde"] and len(names) == 4
    assert names[3].startswith("serde-")
    checksums = sorted((directory / name / ".cargo-checksum.json").read_text()
                       for name in names)
    assert [c.count('"package"') for c in checksums] == [1, 1, 1, 1]
    assert any("c" * 64 in c for c in checksums) and any("d" * 64 in c for c in checksums)
    assert _cargo_home(cache, plan, tmp_path / "work") == home  # made again, the same
    assert sorted(p.name for p in directory.iterdir()) == names
