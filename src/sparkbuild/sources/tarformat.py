"""The tar format, read by hand: headers, pax records, GNU long names, member by member.

``tarfile``'s header parser is slow (half a second for the 19 000 pax headers of a vLLM
sdist) and, before Python 3.12, has no safe extraction; this reader yields each member with
its data left on the stream, and :mod:`sparkbuild.sources.archive` decides what may be written.
A corrupt header (bad checksum, bad number, broken pax record) is an
:class:`UnsafeArchiveError` here already; device files, fifos and sparse members are refused.
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbuild.errors import UnsafeArchiveError
from sparkbuild.sources.inflate import Truncated

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sparkbuild.sources.inflate import ByteStream

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
_HEADER = struct.Struct("100s8s8s8s12s12s8sc100s6s2s32s32s8s8s155s12x")
_FILE_TYPES = (b"0", b"\0", b"7")
_REFUSED_TYPES = {
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a fifo",
    b"S": "a GNU sparse file",
    b"M": "a multi-volume continuation",
    b"N": "an old GNU long-name record",
}
HINT = "the archive is broken or hostile; nothing of it was kept; get a good copy"


def unsafe(what: str, origin: str) -> UnsafeArchiveError:
    """The error every refusal of an archive raises: ``what`` is wrong, in ``origin``."""
    return UnsafeArchiveError(what, where=origin, hint=HINT)


@dataclass(frozen=True)
class TarMember:
    name: str
    kind: str
    """``file``, ``dir``, ``symlink`` or ``hardlink``."""
    size: int
    mode: int
    mtime: float
    linkname: str


def _cstr(field_: bytes) -> bytes:
    return field_.split(b"\0", 1)[0]


def _number(field_: bytes, what: str, origin: str, offset: int) -> int:
    if field_ and field_[0] & 0x80:  # GNU base-256 for values octal cannot hold
        value = int.from_bytes(field_[1:], "big")
        return value - (1 << (8 * len(field_) - 8)) if field_[0] == 0xFF else value
    text = _cstr(field_).strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise unsafe(f"corrupt tar header at byte {offset}: bad {what} field", origin) from None


def _byte_sum(data: memoryview | bytes) -> int:
    """Sum of the bytes of ``data`` (at most 256 of them), computed in C.

    Adler-32's low half is 1 + the byte sum modulo 65521; 256 bytes sum to at most 65280,
    so nothing wraps.  Python's ``sum()`` over 19 000 headers costs a tenth of a second.
    """
    return (zlib.adler32(data) & 0xFFFF) - 1


def _checksum_ok(block: memoryview | bytes, stored: int) -> bool:
    unsigned = _byte_sum(block[:256]) + _byte_sum(block[256:]) - sum(block[148:156]) + 8 * 32
    if unsigned == stored:
        return True
    signed = struct.unpack_from("148b8x356b", block)
    return bool(sum(signed) + 8 * 32 == stored)


def decode_name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def parse_pax(data: bytes, origin: str, offset: int) -> dict[str, str]:
    """The ``length key=value\\n`` records of a pax extended header."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space]) if space > pos else 0
        except ValueError:
            length = 0
        end = pos + length
        if length <= 0 or end > len(data) or data[end - 1] != 0x0A:
            raise unsafe(f"corrupt pax header at byte {offset}", origin)
        key, sep, value = data[space + 1 : end - 1].partition(b"=")
        if not sep:
            raise unsafe(f"corrupt pax record at byte {offset}", origin)
        records[decode_name(key)] = decode_name(value)
        pos = end
    return records


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


@dataclass
class _Extensions:
    """Long names and pax records that apply to the next real member."""

    pax_global: dict[str, str] = field(default_factory=dict)
    pax: dict[str, str] = field(default_factory=dict)
    long_name: str | None = None
    long_link: str | None = None

    def consumed(self) -> None:
        self.pax, self.long_name, self.long_link = {}, None, None


def _kind_of(typeflag: bytes, name: str) -> str:
    if typeflag == b"5" or (typeflag in _FILE_TYPES and name.endswith("/")):
        return "dir"
    if typeflag == b"2":
        return "symlink"
    if typeflag == b"1":
        return "hardlink"
    return "file"


def _header_name(fields: tuple[bytes, ...]) -> str:
    name = decode_name(_cstr(fields[0]))
    prefix = _cstr(fields[15])
    if fields[9] == b"ustar\x00" and prefix:  # POSIX ustar only: GNU uses the field otherwise
        return f"{decode_name(prefix)}/{name}"
    return name


def _member_from(
    fields: tuple[bytes, ...], ext: _Extensions, origin: str, offset: int
) -> TarMember:
    typeflag = fields[7]
    if typeflag in _REFUSED_TYPES:
        name = decode_name(_cstr(fields[0]))
        raise unsafe(f"member {name!r} is {_REFUSED_TYPES[typeflag]}; refused", origin)
    pax = {**ext.pax_global, **ext.pax}
    if any(key.startswith("GNU.sparse.") for key in pax):
        raise unsafe("sparse members are not supported", origin)
    name = pax.get("path") or ext.long_name or _header_name(fields)
    linkname = pax.get("linkpath") or ext.long_link or decode_name(_cstr(fields[8]))
    try:
        size = int(pax["size"]) if "size" in pax else _number(fields[4], "size", origin, offset)
        mtime = float(pax.get("mtime") or _number(fields[5], "mtime", origin, offset))
    except ValueError:
        raise unsafe(f"corrupt pax size or mtime at byte {offset}", origin) from None
    if size < 0:
        raise unsafe(f"corrupt tar header at byte {offset}: negative size", origin)
    mode = _number(fields[1], "mode", origin, offset)
    return TarMember(name, _kind_of(typeflag, name), size, mode, mtime, linkname)


def tar_members(stream: ByteStream, origin: str) -> Iterator[TarMember]:
    """The members of a tar stream, their data left on ``stream`` for the caller to read.

    Whatever data the caller does not read is skipped before the next header.
    """
    ext = _Extensions()
    while True:
        offset = stream.offset
        block = stream.take(BLOCK)
        if len(block) < BLOCK:
            raise unsafe("truncated tar: it ends without an end-of-archive marker", origin)
        if block == ZERO_BLOCK:
            return
        fields: tuple[bytes, ...] = _HEADER.unpack_from(block)
        if not _checksum_ok(block, _number(fields[6], "checksum", origin, offset)):
            raise unsafe(f"corrupt tar header at byte {offset} (bad checksum)", origin)
        typeflag = fields[7]
        if typeflag in (b"x", b"g", b"L", b"K"):
            _read_extension(stream, typeflag, fields, ext, origin, offset)
            continue
        if typeflag == b"V":  # a volume label: not a member
            stream.skip(_padded(_number(fields[4], "size", origin, offset)))
            continue
        member = _member_from(fields, ext, origin, offset)
        ext.consumed()
        data_size = member.size if member.kind == "file" else 0
        start = stream.offset
        yield member
        stream.skip(_padded(data_size) - (stream.offset - start))


def _read_extension(
    stream: ByteStream,
    typeflag: bytes,
    fields: tuple[bytes, ...],
    ext: _Extensions,
    origin: str,
    offset: int,
) -> None:
    size = _number(fields[4], "size", origin, offset)
    data = bytes(stream.take(size))
    if len(data) < size:
        raise Truncated
    stream.skip(_padded(size) - size)
    if typeflag == b"x":
        ext.pax = parse_pax(data, origin, offset)
    elif typeflag == b"g":
        ext.pax_global.update(parse_pax(data, origin, offset))
    elif typeflag == b"L":
        ext.long_name = decode_name(_cstr(data))
    else:
        ext.long_link = decode_name(_cstr(data))


def looks_like_tar(head: bytes) -> bool:
    """Whether ``head`` starts like a tar: ustar magic, an empty archive, or a good checksum."""
    if len(head) < BLOCK:
        return False
    if head[257:262] == b"ustar" or head[:BLOCK] == ZERO_BLOCK:
        return True
    with contextlib.suppress(UnsafeArchiveError):
        if _checksum_ok(head[:BLOCK], _number(head[148:156], "checksum", "", 0)):
            return True
    return False
