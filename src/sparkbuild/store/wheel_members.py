"""Reading a wheel's members with bounded memory: text members up to a limit, the rest
hashed in chunks; and a member nothing can read, named before anything tries.

A wheel is a zip: a member of 2 GiB of zeros compresses to a few MB, so reading one whole
(``ZipFile.read``) can take gigabytes from a wheel that looks small.  Metadata members
(METADATA, RECORD, top_level.txt) are read up to :data:`TEXT_LIMIT` and refused above it;
any other member is hashed :data:`~sparkbuild.store.hashing.CHUNK` bytes at a time.

A member that is encrypted (the zip's flag bits 0 and 6), "compressed patched data" (bit 5)
or compressed by a method :mod:`zipfile` has no codec for makes ``ZipFile.open`` raise
``RuntimeError`` or ``NotImplementedError``, where a damaged member raises
:data:`READ_ERRORS`; :func:`open_member` refuses those members first, as a
``zipfile.BadZipFile`` that names the member, so every reader of a wheel catches one family.
"""

from __future__ import annotations

import lzma
import zipfile
import zlib
from typing import IO, TYPE_CHECKING

from sparkbuild.errors import VerifyError
from sparkbuild.store.hashing import sha256_stream

if TYPE_CHECKING:
    import hashlib

TEXT_LIMIT = 16 << 20
"""The largest metadata member read whole (vLLM's RECORD is a few hundred KiB)."""

READ_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError,
               UnicodeDecodeError)
"""What reading a file that is no zip, or a damaged member of one, raises (a bad CRC, a
truncated stream, a broken deflate, bzip2 or LZMA stream, a name that is not UTF-8)."""

READABLE_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                              zipfile.ZIP_LZMA})
"""The compression methods :mod:`zipfile` (and so pip) can read."""

_ENCRYPTED, _PATCHED, _STRONGLY_ENCRYPTED = 0x1, 0x20, 0x40


def unreadable(info: zipfile.ZipInfo) -> str | None:
    """Why no reader can take member ``info``'s bytes; None when one can."""
    if info.flag_bits & (_ENCRYPTED | _STRONGLY_ENCRYPTED):
        return "an encrypted member: nothing can read it without a password"
    if info.flag_bits & _PATCHED:
        return "compressed patched data (zip flag bit 5), which no installer reads"
    if info.compress_type not in READABLE_METHODS:
        return (f"compressed by method {info.compress_type}, which no installer reads "
                "(stored, deflate, bzip2 and LZMA are)")
    return None


def open_member(archive: zipfile.ZipFile, member: str | zipfile.ZipInfo) -> IO[bytes]:
    """``archive.open(member)``, or ``zipfile.BadZipFile`` naming the member when nothing
    can read it (:func:`unreadable`)."""
    info = member if isinstance(member, zipfile.ZipInfo) else archive.getinfo(member)
    problem = unreadable(info)
    if problem is not None:
        raise zipfile.BadZipFile(f"{info.filename}: {problem}")
    return archive.open(info)


def read_text_member(archive: zipfile.ZipFile, name: str, where: str,
                     limit: int = TEXT_LIMIT) -> str:
    """The member ``name`` as text, read at most ``limit`` bytes (the header's size is not
    trusted: the stream itself stops at ``limit + 1``)."""
    with open_member(archive, name) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise VerifyError(f"the wheel member {name} is over {limit >> 20} MiB: not a metadata "
                          "file sparkbuild reads", where=where,
                          hint="the wheel is damaged or hostile; rebuild it")
    return data.decode("utf-8", "replace")


def member_hash(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> hashlib._Hash:
    """The sha256 of a member's bytes, read in chunks."""
    with open_member(archive, info) as stream:
        return sha256_stream(stream)


def member_digest(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The raw sha256 of a member's bytes, read in chunks."""
    return member_hash(archive, info).digest()
