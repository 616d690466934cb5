"""The inflated byte stream of an archive: decompression in a thread, read sequentially.

Decompression runs in a second thread (zlib releases the GIL), like ``tar xzf`` runs
``gzip -d`` in a second process.  Memory stays bounded: a few chunks of inflated data are
in flight at a time, and a decompression bomb is inflated at most ``OUT_CHUNK`` per step.
"""

from __future__ import annotations

import bz2
import lzma
import queue
import threading
import zlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

IN_CHUNK = 1 << 20
"""Compressed bytes handed to the decompressor at a time."""
OUT_CHUNK = 4 << 20
"""Most inflated bytes produced per step: bounds memory for a decompression bomb."""
QUEUE_DEPTH = 8

Buffer = bytes | memoryview


class _StreamDecompressor(Protocol):
    """What ``bz2.BZ2Decompressor`` and ``lzma.LZMADecompressor`` have in common."""

    @property
    def eof(self) -> bool: ...

    @property
    def needs_input(self) -> bool: ...

    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


class CorruptStream(Exception):
    """The decompressor rejected the data (raised in the inflate thread, re-raised here)."""


def _inflate_zlib(raw: memoryview, wbits: int) -> Iterator[tuple[bytes, int]]:
    """(inflated bytes, compressed bytes consumed) steps; gzip members may be concatenated."""
    pos = 0
    unit = zlib.decompressobj(wbits)
    while True:
        used = 0
        if unit.unconsumed_tail:
            out = unit.decompress(unit.unconsumed_tail, OUT_CHUNK)
        elif pos < len(raw):
            used = min(IN_CHUNK, len(raw) - pos)
            out = unit.decompress(raw[pos : pos + used], OUT_CHUNK)
            pos += used
        else:  # all input given: collect what the output cap held back, if anything
            out = b"" if unit.eof else unit.decompress(b"", OUT_CHUNK)
            if not out:
                break
        yield out, used
        if unit.eof:
            rest = unit.unused_data + raw[pos:]
            if not rest.strip(b"\0"):
                return
            raw, pos, unit = memoryview(rest), 0, zlib.decompressobj(wbits)
    if not unit.eof:
        raise zlib.error("compressed stream ends early (truncated)")


def _inflate_other(
    raw: memoryview, make: Callable[[], _StreamDecompressor]
) -> Iterator[tuple[bytes, int]]:
    """bzip2 and xz: their decompressors share one interface (``needs_input``)."""
    unit = make()
    pos = 0
    while not unit.eof:
        if unit.needs_input:
            if pos >= len(raw):
                raise EOFError("compressed stream ends early (truncated)")
            used = min(IN_CHUNK, len(raw) - pos)
            data = bytes(raw[pos : pos + used])
            pos += used
        else:
            used, data = 0, b""
        yield unit.decompress(data, OUT_CHUNK), used


def _inflated_steps(raw: memoryview, compression: str) -> Iterator[tuple[Buffer, int]]:
    if compression == "gz":
        return _inflate_zlib(raw, 16 + zlib.MAX_WBITS)
    if compression == "bz2":
        return _inflate_other(raw, bz2.BZ2Decompressor)
    if compression == "xz":
        return _inflate_other(raw, lzma.LZMADecompressor)
    slices = (raw[start : start + OUT_CHUNK] for start in range(0, len(raw), OUT_CHUNK))
    return ((piece, len(piece)) for piece in slices)  # plain tar: no copy at all


class Inflater:
    """Runs :func:`_inflated_steps` in a thread; iterating yields the inflated chunks."""

    def __init__(self, raw: memoryview, compression: str, advance: Callable[[int], None]) -> None:
        self._queue: queue.Queue[tuple[Buffer, int] | BaseException | None] = queue.Queue(
            QUEUE_DEPTH
        )
        self._stop = threading.Event()
        self._advance = advance
        self._thread = threading.Thread(
            target=self._produce, args=(raw, compression), name="inflate", daemon=True
        )
        self._thread.start()

    def _put(self, item: tuple[Buffer, int] | BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, raw: memoryview, compression: str) -> None:
        try:
            for step in _inflated_steps(raw, compression):
                if not self._put(step):
                    return
        except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as exc:
            self._put(CorruptStream(str(exc)))
            return
        self._put(None)

    def __iter__(self) -> Iterator[Buffer]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            chunk, used = item
            self._advance(used)
            if chunk:
                yield chunk

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class Truncated(Exception):
    """The inflated stream ended in the middle of a member."""


class ByteStream:
    """Sequential reads over chunks, copying only when a read spans two of them."""

    def __init__(self, chunks: Iterator[Buffer]) -> None:
        self._chunks = chunks
        self._buf = memoryview(b"")
        self._pos = 0
        self.offset = 0

    def _refill(self) -> bool:
        chunk = next(self._chunks, None)
        if chunk is None:
            return False
        self._buf, self._pos = memoryview(chunk), 0
        return True

    def take(self, size: int) -> memoryview | bytes:
        """The next ``size`` bytes, fewer only at the end of the stream."""
        end = self._pos + size
        if end <= len(self._buf):
            view = self._buf[self._pos : end]
            self._pos = end
            self.offset += size
            return view
        data = b"".join(self.pieces(size, exact=False))
        return data

    def pieces(self, size: int, *, exact: bool = True) -> Iterator[memoryview]:
        """The next ``size`` bytes in pieces; :class:`Truncated` when ``exact`` and short."""
        while size > 0:
            if self._pos >= len(self._buf) and not self._refill():
                if exact:
                    raise Truncated
                return
            piece = self._buf[self._pos : self._pos + size]
            self._pos += len(piece)
            self.offset += len(piece)
            size -= len(piece)
            yield piece

    def skip(self, size: int) -> None:
        for _piece in self.pieces(size):
            pass

    def drain(self) -> None:
        """Read to the end, so the decompressor checks the trailer (CRC and length)."""
        self._buf, self._pos = memoryview(b""), 0
        for _chunk in self._chunks:
            pass

