"""Threads that create an extracted tree's small files while the parser reads on.

Creating ~10 000 files is mostly system calls, which release the GIL: two writer threads
beside the main thread are what keep extraction level with ``tar xzf``.  Files are created
with ``O_EXCL | O_NOFOLLOW``, so a writer never follows a link or reuses a file; deciding
*what* may be written is :mod:`sparkbuild.sources.archive`'s job, done before a job is queued.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from sparkbuild.sources.inflate import Buffer

WRITER_THREADS = 2
WRITER_QUEUE_DEPTH = 16
BATCH_FILES = 32
BATCH_BYTES = 2 << 20
"""Small files go to the writer threads in batches: one queue handoff per batch."""
POOLED_FILE_LIMIT = 1 << 20
"""Files up to this size are written by the pool (their bytes held meanwhile)."""

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class FileJob:
    path: str
    perms: int
    mtime: float | None
    pieces: Iterable[Buffer]


def _write_all(fd: int, data: Buffer) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def write_file(job: FileJob) -> None:
    fd = os.open(job.path, _CREATE, job.perms)
    try:
        for piece in job.pieces:
            _write_all(fd, piece)
        if job.mtime is not None:
            with contextlib.suppress(OverflowError, ValueError):
                os.utime(fd, (job.mtime, job.mtime))
    finally:
        os.close(fd)


@contextlib.contextmanager
def interrupts_between_members() -> Iterator[Callable[[], None]]:
    """Hold Ctrl-C while threads hand work to each other; raise it between members.

    A KeyboardInterrupt raised at a random bytecode of the main thread can land inside a
    ``queue.Queue`` call or a ``Thread.join``: the queue's lock stays held (the writer
    threads and the cleanup then wait on it forever), or the join is cut short and the
    writer threads go on creating files while the cleanup removes the tree (a workspace
    left behind).  Inside this block SIGINT is only recorded; the ``check`` it yields
    raises KeyboardInterrupt at a safe point (the caller calls it between archive
    members), and leaving the block raises one still pending, after the cleanup.  Only the
    main thread with Python's own handler is changed; elsewhere ``check`` does nothing.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield lambda: None
        return
    pending: list[int] = []

    def check() -> None:
        if pending:
            pending.clear()
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, lambda signum, _frame: pending.append(signum))
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    check()


class WriterPool:
    """Threads that create small files while the main thread parses the next members.

    Creating ~10 000 files is mostly system calls, which release the GIL; running them
    beside the parser is what keeps extraction level with ``tar xzf``.  The first error
    of a writer is raised in the main thread at its next call.
    """

    def __init__(self, threads: int = WRITER_THREADS) -> None:
        self._jobs: queue.Queue[list[FileJob] | None] = queue.Queue(WRITER_QUEUE_DEPTH)
        self._batch: list[FileJob] = []
        self._batch_bytes = 0
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._work, name=f"write-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                for one in job:
                    if not self._errors:
                        write_file(one)
            except BaseException as exc:  # handed to the main thread
                self._errors.append(exc)
            finally:
                self._jobs.task_done()

    def _raise(self) -> None:
        if self._errors:
            raise self._errors[0]

    def submit(self, job: FileJob, size: int) -> None:
        self._batch.append(job)
        self._batch_bytes += size
        if len(self._batch) >= BATCH_FILES or self._batch_bytes >= BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        self._raise()
        if self._batch:
            self._jobs.put(self._batch)
            self._batch, self._batch_bytes = [], 0

    def wait_idle(self) -> None:
        self._flush()
        self._jobs.join()
        self._raise()

    def close(self, *, abandon: bool = False) -> None:
        """Write every pending file and stop the threads; ``abandon``: after an error,
        stop without writing what is still batched and without raising."""
        if self._threads:
            if not abandon:
                self._jobs.put(self._batch)
            self._batch = []
            for _thread in self._threads:
                self._jobs.put(None)
            for thread in self._threads:
                thread.join()
            self._threads = []
        if not abandon:
            self._raise()

