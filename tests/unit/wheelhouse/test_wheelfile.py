"""Deterministic wheel rewrite: tiny wheels built in memory with zipfile."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import tracemalloc
import zipfile
from typing import TYPE_CHECKING

import pytest
from packaging.utils import parse_wheel_filename

from sparkbuild.errors import UnsafeArchiveError, UsageError, VerifyError
from sparkbuild.wheelhouse.wheel_rewrite import (
    DEFAULT_EPOCH,
    local_label,
    normalize_wheel,
    relabel_version,
    series_hash,
    source_date_epoch,
)

if TYPE_CHECKING:
    from pathlib import Path

PATCHES = [
    {"name": "cmake-sm121-archs", "sha256": "a" * 64, "status": "applied"},
    {"name": "nvfp4-software-e2m1", "sha256": "b" * 64, "status": "already-applied"},
]


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def make_wheel(
    directory: Path,
    *,
    version: str = "1.0",
    reverse: bool = False,
    date_time: tuple[int, int, int, int, int, int] = (2024, 5, 6, 7, 8, 10),
    mode: int = 0o664,
    extra: dict[str, bytes] | None = None,
    requires: tuple[str, ...] = (),
) -> Path:
    """A wheel of project ``demo`` written the way a sloppy backend might."""
    dist_info = f"demo-{version}.dist-info"
    files = {
        "demo/__init__.py": b"VALUE = 1\n",
        "demo/_C.so": b"\x7fELF fake library",
        f"demo-{version}.data/scripts/demo-tool": b"#!python\nprint('hi')\n",
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: demo\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
            + "\nVersion: body text\n"
        ).encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
        **(extra or {}),
    }
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        writer.writerow([name, _digest(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    files[f"{dist_info}/RECORD"] = record.getvalue().encode()
    path = directory / f"demo-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(files, reverse=reverse):
            info = zipfile.ZipInfo(name, date_time=date_time)
            info.external_attr = ((0o100000 | mode) << 16)
            archive.writestr(info, files[name])
    return path


def test_two_sloppy_builds_give_identical_bytes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = make_wheel(tmp_path / "a")
    second = make_wheel(tmp_path / "b", reverse=True, date_time=(2025, 1, 2, 3, 4, 6), mode=0o600)
    assert first.read_bytes() != second.read_bytes()
    one = normalize_wheel(first, tmp_path / "out1", label="sm121.abcdef12")
    two = normalize_wheel(second, tmp_path / "out2", label="sm121.abcdef12")
    assert one.path.read_bytes() == two.path.read_bytes()
    assert one.sha256 == two.sha256 == hashlib.sha256(one.path.read_bytes()).hexdigest()


def test_relabel_renames_everything_and_regenerates_record(tmp_path: Path) -> None:
    result = normalize_wheel(make_wheel(tmp_path), tmp_path / "out", label="sm121.abcdef12")
    assert result.path.name == "demo-1.0+sm121.abcdef12-py3-none-any.whl"
    assert result.version == "1.0+sm121.abcdef12"
    assert str(parse_wheel_filename(result.path.name)[1]) == result.version
    with zipfile.ZipFile(result.path) as archive:
        names = archive.namelist()
        dist_info = "demo-1.0+sm121.abcdef12.dist-info"
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        record = list(csv.reader(io.StringIO(archive.read(f"{dist_info}/RECORD").decode())))
        contents = {name: archive.read(name) for name in names}
    assert not any(name.startswith("demo-1.0.") for name in names)
    assert "demo-1.0+sm121.abcdef12.data/scripts/demo-tool" in names
    assert "Version: 1.0+sm121.abcdef12\n" in metadata
    assert metadata.endswith("\n\nVersion: body text\n")  # the body is not a header
    rows = {row[0]: row for row in record}
    assert set(rows) == set(names)
    for name, data in contents.items():
        if name != f"{dist_info}/RECORD":
            assert rows[name][1:] == [_digest(data), str(len(data))]


def test_entries_sorted_record_last_fixed_time_and_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    out = normalize_wheel(make_wheel(tmp_path, reverse=True), tmp_path / "o", label=None,
                          epoch=source_date_epoch())
    with zipfile.ZipFile(out.path) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names[-1] == "demo-1.0.dist-info/RECORD"
    package = [n for n in names if not n.startswith("demo-1.0.dist-info/")]
    assert package == sorted(package)
    assert names.index("demo/_C.so") < names.index("demo-1.0.dist-info/METADATA")
    assert {info.date_time for info in infos} == {(2023, 11, 14, 22, 13, 20)}
    modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in infos}
    assert modes["demo-1.0.data/scripts/demo-tool"] == 0o755
    assert modes["demo/__init__.py"] == 0o644
    assert out.version == "1.0"


def test_executable_bit_is_kept_as_0755(tmp_path: Path) -> None:
    out = normalize_wheel(make_wheel(tmp_path, mode=0o700), tmp_path / "o", label=None)
    with zipfile.ZipFile(out.path) as archive:
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
    assert modes.pop("demo-1.0.dist-info/RECORD") == 0o644  # written by us, not executable
    assert set(modes.values()) == {0o755}


def test_existing_local_label_is_extended_once(tmp_path: Path) -> None:
    assert relabel_version("0.33.0+cu130", "sm121.abcdef12") == "0.33.0+cu130.sm121.abcdef12"
    assert relabel_version("0.33.0+cu130.sm121.abcdef12", "sm121.abcdef12") == (
        "0.33.0+cu130.sm121.abcdef12"
    )
    first = normalize_wheel(make_wheel(tmp_path), tmp_path / "o1", label="sm121.abcdef12")
    again = normalize_wheel(first.path, tmp_path / "o2", label="sm121.abcdef12")
    assert again.path.read_bytes() == first.path.read_bytes()


def test_damaged_wheel_is_refused_naming_the_entry(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    damaged = tmp_path / "bad" / wheel.name
    damaged.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(damaged, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, data + b"#" if info.filename == "demo/__init__.py" else data)
    with pytest.raises(VerifyError, match=r"demo/__init__\.py"):
        normalize_wheel(damaged, tmp_path / "o", label=None)


def test_entry_escaping_the_tree_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, extra={"../evil.py": b"x"})
    with pytest.raises(UnsafeArchiveError, match="evil"):
        normalize_wheel(wheel, tmp_path / "o", label=None)


def test_label_names_archs_and_applied_patches_only() -> None:
    label = local_label(["12.1"], PATCHES)
    assert label.startswith("sm121.") and len(label.split(".")[1]) == 8
    failed = [*PATCHES, {"name": "x", "sha256": "c" * 64, "status": "failed"}]
    assert local_label(["12.1"], failed) == label
    changed = [PATCHES[0], {**PATCHES[1], "sha256": "d" * 64}]
    assert series_hash(changed) != series_hash(PATCHES)
    assert local_label(["12.0", "12.1"], PATCHES).startswith("sm120.sm121.")


def test_epoch_from_env_source_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert source_date_epoch({}) == DEFAULT_EPOCH
    assert source_date_epoch({"commit_time": 1700000000}) == 1700000000
    assert source_date_epoch({"commit_time": 5}) == DEFAULT_EPOCH  # zip cannot go before 1980
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1600000000")
    assert source_date_epoch({"commit_time": 1700000000}) == 1600000000
    for refused in ("yesterday", "-1", "315532799", "99999999999", "1.7e9"):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", refused)
        with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH must be whole seconds from"):
            source_date_epoch()


def test_damaged_entry_found_midway_leaves_no_wheel_behind(tmp_path: Path) -> None:
    """Entries are checked while they are streamed: a bad one ends the rewrite, and the
    half-written output is discarded."""
    wheel = make_wheel(tmp_path, extra={"demo/zz_last.py": b"LAST = 1\n"})
    damaged = tmp_path / "bad" / wheel.name
    damaged.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(damaged, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, b"LAST = 2\n" if info.filename == "demo/zz_last.py" else data)
    with pytest.raises(VerifyError, match=r"demo/zz_last\.py"):
        normalize_wheel(damaged, tmp_path / "o", label="sm121.abcdef12")
    assert list((tmp_path / "o").iterdir()) == []


BIG_ENTRY = 96 << 20
"""A synthetic shared library: big enough that holding it would show in the peak."""


def _big_wheel(directory: Path) -> Path:
    """demo 1.0 with one 96 MiB entry, written in pieces (never held whole here)."""
    piece = hashlib.sha256(b"big").digest() * (1 << 15)  # 1 MiB, compressible
    digest = hashlib.sha256()
    path = directory / "demo-1.0-cp312-cp312-linux_aarch64.whl"
    metadata = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(zipfile.ZipInfo("demo/_C.so"), "w", force_zip64=True) as out:
            for n in range(BIG_ENTRY // len(piece)):
                chunk = piece[n % 32 :] + piece[: n % 32]
                digest.update(chunk)
                out.write(chunk)
        archive.writestr("demo-1.0.dist-info/METADATA", metadata)
        record = (f"demo/_C.so,sha256={_b64(digest.digest())},{BIG_ENTRY}\n"
                  f"demo-1.0.dist-info/METADATA,{_digest(metadata)},{len(metadata)}\n"
                  "demo-1.0.dist-info/RECORD,,\n")
        archive.writestr("demo-1.0.dist-info/RECORD", record)
    return path


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_big_wheel_is_streamed_with_flat_memory(tmp_path: Path) -> None:
    """Peak Python memory of the rewrite stays a few MiB for a 96 MiB entry (the old
    reader held every entry, and a vLLM wheel unpacks to more than 1 GB)."""
    wheel = _big_wheel(tmp_path)
    tracemalloc.start()
    try:
        out = normalize_wheel(wheel, tmp_path / "o", label="sm121.abcdef12")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB while rewriting a 96 MiB entry"
    with zipfile.ZipFile(out.path) as archive:
        info = archive.getinfo("demo/_C.so")
        record = archive.read("demo-1.0+sm121.abcdef12.dist-info/RECORD").decode()
        digest = hashlib.sha256()
        with archive.open(info) as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    assert info.file_size == BIG_ENTRY
    assert f"demo/_C.so,sha256={_b64(digest.digest())},{BIG_ENTRY}\n" in record
