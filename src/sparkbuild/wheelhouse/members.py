"""Reading a wheel's members with bounded memory: text members up to a limit, the rest
hashed in chunks.

A wheel is a zip: a member of 2 GiB of zeros compresses to a few MB, so reading one whole
(``ZipFile.read``) can take gigabytes from a wheel that looks small.  Metadata members
(METADATA, RECORD, top_level.txt) are read up to :data:`TEXT_LIMIT` and refused above it;
any other member is hashed :data:`~sparkbuild.store.hashing.CHUNK` bytes at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkbuild.errors import VerifyError
from sparkbuild.store.hashing import sha256_stream

if TYPE_CHECKING:
    import hashlib
    import zipfile

TEXT_LIMIT = 16 << 20
"""The largest metadata member read whole (vLLM's RECORD is a few hundred KiB)."""


def read_text_member(archive: zipfile.ZipFile, name: str, where: str,
                     limit: int = TEXT_LIMIT) -> str:
    """The member ``name`` as text, read at most ``limit`` bytes (the header's size is not
    trusted: the stream itself stops at ``limit + 1``)."""
    with archive.open(name) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise VerifyError(f"the wheel member {name} is over {limit >> 20} MiB: not a metadata "
                          "file sparkbuild reads", where=where,
                          hint="the wheel is damaged or hostile; rebuild it")
    return data.decode("utf-8", "replace")


def member_hash(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> hashlib._Hash:
    """The sha256 of a member's bytes, read in chunks."""
    with archive.open(info) as stream:
        return sha256_stream(stream)


def member_digest(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The raw sha256 of a member's bytes, read in chunks."""
    return member_hash(archive, info).digest()
