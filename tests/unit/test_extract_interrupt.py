"""Ctrl-C during extraction lands between members, never inside the writer threads' handoff.

A KeyboardInterrupt raised inside a ``queue.Queue`` call or a ``Thread.join`` of the writer
pool left the queue's lock held (prepare hung) or the writer threads creating files while
the destination was removed (prepare's workspace left behind): the intermittent
``test_prepare_killed_leaves_no_half_tree[extracting-SIGINT]``.
"""

from __future__ import annotations

import io
import os
import signal
import tarfile
import threading
import time
from typing import TYPE_CHECKING

import pytest

from sparkbuild.sources import writerpool
from sparkbuild.sources.archive import extract_archive

if TYPE_CHECKING:
    from pathlib import Path


def sdist(tmp_path: Path, files: int = 400) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for n in range(files):
            data = f"# file {n}\n".encode() * 20
            info = tarfile.TarInfo(f"demo-1.0/bulk/m{n:04d}.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "demo-1.0.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("write-") and t.is_alive()]


@pytest.mark.parametrize("where", ["close", "flush"])
def test_ctrl_c_inside_the_pool_handoff_is_raised_after_the_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """SIGINT sent from inside the pool's queue handoff: extraction stops with
    KeyboardInterrupt only once the writer threads are gone and the destination is removed."""
    real = getattr(writerpool.WriterPool, "close" if where == "close" else "_flush")
    sent: list[bool] = []

    def interrupted(self: writerpool.WriterPool, *args: object, **kwargs: object) -> None:
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode: in here
        real(self, *args, **kwargs)

    monkeypatch.setattr(writerpool.WriterPool, "close" if where == "close" else "_flush",
                        interrupted)
    dest = tmp_path / "out" / "tree"
    with pytest.raises(KeyboardInterrupt):
        extract_archive(sdist(tmp_path), dest)
    assert sent
    assert writer_threads() == []  # no thread left writing into what was removed
    assert not dest.exists()
    time.sleep(0.05)
    assert not dest.exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_ctrl_c_nothing_changes(tmp_path: Path) -> None:
    extracted = extract_archive(sdist(tmp_path, files=50), tmp_path / "out")
    assert extracted.entries == 50
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
