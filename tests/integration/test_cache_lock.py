"""Two real processes share one cache: the second waits for the lock, says so, and
neither corrupts the other's entries."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from sparkbuild.store.cache import Cache

if TYPE_CHECKING:
    from pathlib import Path

WRITER = r"""
import sys, time
from pathlib import Path
from sparkbuild.store.cache import Cache

root, tag, hold = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
cache = Cache(root)
with cache.locked():
    print(f"acquired {time.time():.6f}", flush=True)
    for n in range(20):
        data = (f"{tag}-{n}-".encode()) * 50_000
        cache.put_bytes(data, name=f"{tag}-{n}")
        cache.put_bytes(b"shared entry" * 10_000)  # both runs store this one
    time.sleep(hold)
    print(f"released {time.time():.6f}", flush=True)
"""


def start(root: Path, tag: str, hold: float, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), tag, str(hold)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPARKBUILD_QUIET": "", **env},
    )


def stamp(output: str, word: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith(word))
    return float(line.split()[1])


def test_second_run_waits_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = start(root, "first", hold=1.5)
    assert first.stdout is not None
    assert first.stdout.readline().startswith("acquired")
    second = start(root, "second", hold=0)
    out2, err2 = second.communicate(timeout=60)
    out1, err1 = first.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert err2.count("waiting for another sparkbuild run that holds the cache lock") == 1
    assert f"held by pid {first.pid}" in err2
    assert "waiting" not in err1
    assert stamp(out2, "acquired") >= stamp(out1, "released")
    cache = Cache(root)
    for tag in ("first", "second"):
        for n in range(20):
            entry = cache.lookup("names", f"{tag}-{n}")
            assert entry is not None
            cache.path_of(entry["sha256"])  # re-hashes: raises if corrupted
    assert not list(root.rglob(".partial-*"))


def test_second_run_gives_up_after_the_timeout(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = start(root, "first", hold=4)
    assert first.stdout is not None
    first.stdout.readline()
    began = time.monotonic()
    second = start(root, "second", hold=0, SPARKBUILD_LOCK_TIMEOUT="0.5")
    _out, err = second.communicate(timeout=60)
    assert time.monotonic() - began < 3.5
    first.kill()
    first.communicate()
    assert second.returncode != 0
    assert "LockTimeoutError" in err
    assert "held the cache lock for over 0.5 s" in err
