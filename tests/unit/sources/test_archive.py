"""Safe extraction: good archives come out exactly, hostile and broken ones are refused.

Every archive is built in memory with tarfile/zipfile; extraction spawns no process.
Extraction itself is the stdlib's tarfile with its ``data`` filter, under stricter rules.
"""

from __future__ import annotations

import hashlib
import io
import random
import stat
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from sparkbuild.errors import (
    DestinationError,
    HashMismatchError,
    ToolchainError,
    UnsafeArchiveError,
)
from sparkbuild.sources.archive import (
    ArchiveMember,
    clean_member_name,
    detect_format,
    extract_archive,
    read_tar_member,
)

LONG_DIR = "pkg-1.0/" + "/".join(["a-rather-long-directory-name"] * 5)


def _info(name: str, kind: bytes = tarfile.REGTYPE, **attrs: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = 1_700_000_000
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


def make_tar(
    members: Sequence[tuple[tarfile.TarInfo, bytes | None]],
    *,
    mode: str = "w:gz",
    fmt: int = tarfile.PAX_FORMAT,
) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=fmt) as archive:  # type: ignore[call-overload]
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def big_data(size: int) -> bytes:
    """Spans the extractor's 4 MiB chunks when ``size`` is large; not too compressible."""
    return random.Random(size).randbytes(size)


def good_members(big: int = 1000) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    return [
        (_info("pkg-1.0", tarfile.DIRTYPE, mode=0o755), None),
        (_info("pkg-1.0/setup.py", mode=0o644), b"print('hi')\n"),
        (_info("pkg-1.0/tools/run.sh", mode=0o755), b"#!/bin/sh\necho run\n"),
        (_info(f"{LONG_DIR}/deep.txt", mode=0o644), b"deep\n"),
        (_info("pkg-1.0/big.bin", mode=0o600), big_data(big)),
        (_info("pkg-1.0/link-to-setup", tarfile.SYMTYPE, linkname="setup.py"), None),
        (_info("pkg-1.0/tools/up", tarfile.SYMTYPE, linkname="../setup.py"), None),
        (_info("pkg-1.0/hard", tarfile.LNKTYPE, linkname="pkg-1.0/setup.py"), None),
        (_info("pkg-1.0/setuid", mode=0o4755), b"x"),
    ]


def write(tmp_path: Path, data: bytes, name: str = "pkg-1.0.tar.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def assert_good_tree(dest: Path, big: int) -> None:
    root = dest / "pkg-1.0"
    assert (root / "setup.py").read_bytes() == b"print('hi')\n"
    assert (root / "tools/run.sh").stat().st_mode & 0o777 == 0o755
    assert (root / "setup.py").stat().st_mode & 0o777 == 0o644
    assert (root / "setup.py").stat().st_mtime == 1_700_000_000
    assert (dest / LONG_DIR / "deep.txt").read_bytes() == b"deep\n"
    assert (root / "big.bin").read_bytes() == big_data(big)
    assert (root / "link-to-setup").is_symlink()
    assert str((root / "link-to-setup").readlink()) == "setup.py"
    assert (root / "tools/up").read_bytes() == b"print('hi')\n"
    assert (root / "hard").stat().st_ino == (root / "setup.py").stat().st_ino
    assert not (root / "setuid").stat().st_mode & stat.S_ISUID


@pytest.mark.parametrize(
    ("mode", "fmt", "expected", "big"),
    [
        ("w:gz", tarfile.PAX_FORMAT, "tar.gz", 9_000_000),
        ("w:gz", tarfile.GNU_FORMAT, "tar.gz", 1000),
        ("w:bz2", tarfile.PAX_FORMAT, "tar.bz2", 300_000),
        ("w:xz", tarfile.PAX_FORMAT, "tar.xz", 300_000),
        ("w", tarfile.USTAR_FORMAT, "tar", 9_000_000),
    ],
)
def test_good_tarball_comes_out_exactly(
    tmp_path: Path, mode: str, fmt: int, expected: str, big: int
) -> None:
    members = good_members(big)
    if fmt == tarfile.USTAR_FORMAT:  # ustar splits a long name into prefix + name
        members = [m for m in members if not m[0].name.startswith(LONG_DIR)]
        members.append((_info(f"{LONG_DIR}/deep.txt"), b"deep\n"))
    data = make_tar(members, mode=mode, fmt=fmt)
    archive = write(tmp_path, data)
    result = extract_archive(archive, tmp_path / "out", sha256=hashlib.sha256(data).hexdigest())
    assert result.format == expected
    assert result.top_level == ("pkg-1.0",)
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert_good_tree(tmp_path / "out", big)


def test_good_zip_comes_out_exactly(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("pkg-1.0/setup.py", b"print('hi')\n")
        exe = zipfile.ZipInfo("pkg-1.0/run.sh")
        exe.external_attr = (stat.S_IFREG | 0o755) << 16
        archive.writestr(exe, b"#!/bin/sh\n")
        link = zipfile.ZipInfo("pkg-1.0/link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, b"setup.py")
    result = extract_archive(write(tmp_path, buffer.getvalue(), "p.zip"), tmp_path / "out")
    assert result.format == "zip"
    root = tmp_path / "out/pkg-1.0"
    assert (root / "setup.py").read_bytes() == b"print('hi')\n"
    assert (root / "run.sh").stat().st_mode & 0o111
    assert (root / "link").read_bytes() == b"print('hi')\n"


def test_highly_compressed_member_is_inflated_in_full(tmp_path: Path) -> None:
    """40 MB of zeros from a few kB of gzip, inflated in capped steps: nothing is lost."""
    zeros = bytes(40_000_000)
    data = make_tar([(_info("p/zeros"), zeros), (_info("p/after"), b"after\n")])
    assert len(data) < 100_000
    extract_archive(write(tmp_path, data), tmp_path / "out")
    assert (tmp_path / "out/p/zeros").stat().st_size == len(zeros)
    assert (tmp_path / "out/p/after").read_bytes() == b"after\n"


def test_later_member_of_the_same_name_wins(tmp_path: Path) -> None:
    data = make_tar([(_info("p/a.txt"), b"first"), (_info("p/a.txt"), b"second")])
    extract_archive(write(tmp_path, data), tmp_path / "out")
    assert (tmp_path / "out/p/a.txt").read_bytes() == b"second"


HOSTILE: dict[str, tuple[list[tuple[tarfile.TarInfo, bytes | None]], str]] = {
    "dotdot": ([(_info("p/../../evil"), b"x")], "escapes the destination"),
    "absolute": ([(_info("/tmp/evil-abs"), b"x")], "absolute path"),
    "symlink-out": (
        [(_info("p/link", tarfile.SYMTYPE, linkname="../../evil"), None)],
        "points outside",
    ),
    "symlink-absolute": (
        [(_info("p/link", tarfile.SYMTYPE, linkname="/etc/passwd"), None)],
        "points outside",
    ),
    "hardlink-out": (
        [(_info("p/hard", tarfile.LNKTYPE, linkname="../outside"), None)],
        "points outside",
    ),
    "hardlink-absolute": (
        [(_info("p/hard", tarfile.LNKTYPE, linkname="/etc/passwd"), None)],
        "points outside",
    ),
    "hardlink-not-a-member": (
        [(_info("p/hard", tarfile.LNKTYPE, linkname="p/missing"), None)],
        "does not name a file extracted before it",
    ),
    "write-through-symlink": (
        [
            (_info("p", tarfile.DIRTYPE), None),
            (_info("p/sub", tarfile.SYMTYPE, linkname="."), None),
            (_info("p/sub/file"), b"x"),
        ],
        "through symlink",
    ),
    "symlink-chain-out": (
        [
            (_info("p", tarfile.DIRTYPE), None),
            (_info("p/here", tarfile.SYMTYPE, linkname="."), None),
            (_info("p/here2", tarfile.SYMTYPE, linkname="here/.."), None),
            (_info("p/out", tarfile.SYMTYPE, linkname="here2/.."), None),
        ],
        "resolves outside",
    ),
    "char-device": ([(_info("p/dev", tarfile.CHRTYPE, devmajor=1, devminor=3), None)], "device"),
    "block-device": ([(_info("p/blk", tarfile.BLKTYPE), None)], "device"),
    "fifo": ([(_info("p/fifo", tarfile.FIFOTYPE), None)], "fifo"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_member_is_refused_and_nothing_lands_outside(tmp_path: Path, case: str) -> None:
    members, message = HOSTILE[case]
    archive = write(tmp_path, make_tar(members))
    dest = tmp_path / "deep/er/out"
    dest.mkdir(parents=True)
    before = set(tmp_path.rglob("*"))
    with pytest.raises(UnsafeArchiveError, match=message):
        extract_archive(archive, dest)
    assert set(tmp_path.rglob("*")) == before  # dest emptied again, nothing beside it
    assert not Path("/tmp/evil-abs").exists()


def test_gzip_cut_short_is_truncated(tmp_path: Path) -> None:
    data = make_tar(good_members())
    for cut in (len(data) - 4, len(data) // 2, 30):
        dest = tmp_path / f"out{cut}"
        with pytest.raises(UnsafeArchiveError, match=r"truncated|corrupt"):
            extract_archive(write(tmp_path, data[:cut], f"cut{cut}.tar.gz"), dest)
        assert not dest.exists()  # created by the extraction, so removed again


def test_gzip_with_flipped_bytes_is_corrupt(tmp_path: Path) -> None:
    data = bytearray(make_tar(good_members()))
    data[len(data) // 2] ^= 0xFF
    data[-6] ^= 0xFF  # the CRC: caught even if the flip in the middle were not
    with pytest.raises(UnsafeArchiveError, match=r"corrupt|truncated"):
        extract_archive(write(tmp_path, bytes(data)), tmp_path / "out")


@pytest.mark.parametrize("where", ["in-data", "at-header", "no-end-marker"])
def test_plain_tar_cut_short_is_truncated(tmp_path: Path, where: str) -> None:
    members = [(_info("p/a"), b"a" * 2000), (_info("p/b"), b"b" * 100)]
    data = make_tar(members, mode="w", fmt=tarfile.USTAR_FORMAT)
    cut = {"in-data": 1500, "at-header": 512 * 5 + 100, "no-end-marker": 512 * 7}[where]
    with pytest.raises(UnsafeArchiveError, match="truncated"):
        extract_archive(write(tmp_path, data[:cut], "t.tar"), tmp_path / "out")


def test_bad_header_checksum_is_corrupt(tmp_path: Path) -> None:
    data = bytearray(make_tar([(_info("p/a"), b"a")], mode="w", fmt=tarfile.USTAR_FORMAT))
    data[10] ^= 0x01  # inside the name field of the first header
    with pytest.raises(UnsafeArchiveError, match="bad checksum"):
        extract_archive(write(tmp_path, bytes(data), "t.tar"), tmp_path / "out")


def test_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(UnsafeArchiveError, match="not a tar or zip"):
        extract_archive(write(tmp_path, b"hello, world\n" * 100, "x.tar.gz"), tmp_path / "out")


def test_hash_mismatch_extracts_nothing(tmp_path: Path) -> None:
    archive = write(tmp_path, make_tar(good_members()))
    with pytest.raises(HashMismatchError, match="expected 0000"):
        extract_archive(archive, tmp_path / "out", sha256="0" * 64)
    assert not (tmp_path / "out").exists()


def test_non_empty_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out/keep").write_text("mine")
    with pytest.raises(DestinationError, match="empty"):
        extract_archive(write(tmp_path, make_tar(good_members())), tmp_path / "out")
    assert (tmp_path / "out/keep").read_text() == "mine"


def _zip(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return buffer.getvalue()


def test_hostile_zip_is_refused(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("p/link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    cases = {
        "dotdot.zip": (_zip([("p/../../evil", b"x")]), "escapes"),
        "abs.zip": (_zip([("/tmp/evil-zip", b"x")]), "absolute"),
        "link.zip": (_zip([(link, b"../../evil")]), "points outside"),
        "cut.zip": (_zip([("p/a", b"a" * 5000)])[:-30], "corrupt or truncated zip"),
    }
    for name, (data, message) in cases.items():
        with pytest.raises(UnsafeArchiveError, match=message):
            extract_archive(write(tmp_path, data, name), tmp_path / name.replace(".", "-"))
    assert not (tmp_path.parent / "evil").exists()


@pytest.mark.parametrize(
    ("name", "clean"),
    [("./a/b", "a/b"), ("a//b/./c", "a/b/c"), ("a/", "a"), (".", ""), ("a/b..c", "a/b..c")],
)
def test_clean_member_name_normalizes(name: str, clean: str) -> None:
    assert clean_member_name(name, "x") == clean


@pytest.mark.parametrize("name", ["../a", "a/../../b", "a/..", "/etc/passwd", "a\0b"])
def test_clean_member_name_refuses(name: str) -> None:
    with pytest.raises(UnsafeArchiveError):
        clean_member_name(name, "x")


def test_detect_format_reads_magic_not_names() -> None:
    assert detect_format(b"\x1f\x8b\x08") == "tar.gz"
    assert detect_format(b"PK\x03\x04") == "zip"
    assert detect_format(b"hello") == "unknown"


def test_header_checksum_sums_high_bytes_exactly(tmp_path: Path) -> None:
    """Names full of 0xff-ish bytes push the header's byte sum to its maximum."""
    name = "p/" + "ÿ" * 40  # 80 bytes of 0xc3 0xbf in UTF-8
    data = make_tar([(_info(name, mode=0o777), b"x")], mode="w", fmt=tarfile.USTAR_FORMAT)
    extract_archive(write(tmp_path, data, "high.tar"), tmp_path / "out")
    assert (tmp_path / "out" / name).read_bytes() == b"x"


# -- the stdlib's tarfile and its data filter, under sparkbuild's stricter rules -------------


def test_every_member_passes_the_data_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = tarfile.data_filter

    def spy(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        seen.append(member.name)
        return real(member, dest)

    monkeypatch.setattr(tarfile, "data_filter", spy)
    members = good_members()
    extract_archive(write(tmp_path, make_tar(members)), tmp_path / "out")
    assert sorted(seen) == sorted(info.name for info, _data in members)


def test_without_the_data_filter_nothing_is_extracted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python whose tarfile lacks ``data_filter`` (< 3.11.4): refused, not extracted."""
    monkeypatch.delattr(tarfile, "data_filter")
    for name, data in (("p.tar.gz", make_tar(good_members())), ("p.zip", _zip([("p/a", b"a")]))):
        with pytest.raises(ToolchainError, match="no data filter"):
            extract_archive(write(tmp_path, data, name), tmp_path / name.replace(".", "-"))
        assert not (tmp_path / name.replace(".", "-")).exists()


def test_corrupt_header_after_the_first_is_refused(tmp_path: Path) -> None:
    """tarfile alone takes an unreadable header past the first for the end of the archive
    and stops without a word: here it is a corrupt archive, and nothing is kept."""
    members = [(_info("p/a"), b"a" * 100), (_info("p/b"), b"b" * 100)]
    data = bytearray(make_tar(members, mode="w", fmt=tarfile.USTAR_FORMAT))
    data[1024 + 10] ^= 0x01  # the name field of the second header (after a's data block)
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError, match="corrupt tar header at byte 1024"):
        extract_archive(write(tmp_path, bytes(data), "t.tar"), dest)
    assert not dest.exists()


def test_a_later_member_never_writes_through_an_earlier_hardlink(tmp_path: Path) -> None:
    data = make_tar([
        (_info("p/a"), b"first"),
        (_info("p/hard", tarfile.LNKTYPE, linkname="p/a"), None),
        (_info("p/a"), b"second"),
    ])
    extract_archive(write(tmp_path, data), tmp_path / "out")
    assert (tmp_path / "out/p/a").read_bytes() == b"second"
    assert (tmp_path / "out/p/hard").read_bytes() == b"first"


def test_a_later_file_replaces_an_earlier_symlink(tmp_path: Path) -> None:
    data = make_tar([
        (_info("p/target"), b"target"),
        (_info("p/name", tarfile.SYMTYPE, linkname="target"), None),
        (_info("p/name"), b"file"),
    ])
    extract_archive(write(tmp_path, data), tmp_path / "out")
    assert not (tmp_path / "out/p/name").is_symlink()
    assert (tmp_path / "out/p/name").read_bytes() == b"file"
    assert (tmp_path / "out/p/target").read_bytes() == b"target"


def test_a_later_link_that_leads_an_earlier_one_out_is_refused(tmp_path: Path) -> None:
    """Each link's text stays inside; together, on disk, ``p/a`` leads two levels out."""
    data = make_tar([
        (_info("p", tarfile.DIRTYPE), None),
        (_info("p/a", tarfile.SYMTYPE, linkname="b/../.."), None),
        (_info("p/b", tarfile.SYMTYPE, linkname=".."), None),
    ])
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError, match="resolves outside"):
        extract_archive(write(tmp_path, data), dest)
    assert not dest.exists()


def test_a_member_type_tar_does_not_define_is_refused(tmp_path: Path) -> None:
    data = make_tar([(_info("p/odd", b"Q"), b"data")])
    with pytest.raises(UnsafeArchiveError, match="unknown type"):
        extract_archive(write(tmp_path, data), tmp_path / "out")


@pytest.mark.parametrize("mode", ["w:bz2", "w:xz"])
def test_corrupt_bzip2_and_xz_are_refused(tmp_path: Path, mode: str) -> None:
    data = bytearray(make_tar(good_members(300_000), mode=mode))
    data[len(data) // 2] ^= 0xFF
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError, match="corrupt"):
        extract_archive(write(tmp_path, bytes(data), "p.tar"), dest)
    assert not dest.exists()


def test_a_link_under_a_link_recorded_later_is_refused(tmp_path: Path) -> None:
    """``p/c/x`` comes before ``p/c`` is a link: created last, in name order, it would be
    made through ``p/c``, which (with ``p/b``) leads two levels out."""
    data = make_tar([
        (_info("p", tarfile.DIRTYPE), None),
        (_info("p/c/x", tarfile.SYMTYPE, linkname="y"), None),
        (_info("p/b", tarfile.SYMTYPE, linkname=".."), None),
        (_info("p/c", tarfile.SYMTYPE, linkname="b/../.."), None),
    ])
    archive = write(tmp_path, data)
    dest = tmp_path / "deep/er/out"
    dest.mkdir(parents=True)
    before = set(tmp_path.rglob("*"))
    with pytest.raises(UnsafeArchiveError, match="written through symlink 'p/c'"):
        extract_archive(archive, dest)
    assert set(tmp_path.rglob("*")) == before


class _Refused(Exception):
    pass


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_the_caller_sees_each_member_before_it_is_written(tmp_path: Path, kind: str) -> None:
    """``admit`` is asked about each member the archive's own rules let through, before a
    byte of it is written; its refusal leaves the destination empty."""
    files = {"pkg/a.txt": b"a", "pkg/big.bin": bytes(1 << 16)}
    if kind == "tar":
        data = make_tar([(_info(name), payload) for name, payload in files.items()])
        archive = write(tmp_path, data)
    else:
        archive = write(tmp_path, _zip(list(files.items())), "p.zip")
    seen: list[ArchiveMember] = []

    def admit(member: ArchiveMember) -> None:
        seen.append(member)
        if member.name == "pkg/big.bin":
            assert not (tmp_path / "out" / "pkg" / "big.bin").exists()
            raise _Refused(member.name)

    with pytest.raises(_Refused):
        extract_archive(archive, tmp_path / "out", admit=admit)
    assert [(m.name, m.kind, m.size) for m in seen] == [("pkg/a.txt", "file", 1),
                                                        ("pkg/big.bin", "file", 1 << 16)]
    assert not (tmp_path / "out").exists()


def test_a_member_the_rules_refuse_never_reaches_the_caller(tmp_path: Path) -> None:
    data = make_tar([(_info("pkg/link", tarfile.SYMTYPE, linkname="/etc"), None)])
    seen: list[ArchiveMember] = []
    with pytest.raises(UnsafeArchiveError, match="points outside the tree"):
        extract_archive(write(tmp_path, data), tmp_path / "out", admit=seen.append)
    assert seen == []


def test_one_member_is_read_without_extracting(tmp_path: Path) -> None:
    data = make_tar([(_info("top/first.json"), b"{}"), (_info("top/rest"), bytes(1 << 16))],
                    mode="w:xz")
    archive = write(tmp_path, data, "b.tar.xz")
    assert read_tar_member(archive, "top/first.json", limit=10) == b"{}"
    assert read_tar_member(archive, "top/absent", limit=10) is None
    with pytest.raises(UnsafeArchiveError, match="more than the 10 it may be"):
        read_tar_member(archive, "top/rest", limit=10)
    with pytest.raises(UnsafeArchiveError, match="truncated"):
        read_tar_member(write(tmp_path, data[: len(data) // 2], "cut.tar.xz"), "top/absent",
                        limit=10)
