"""Two real processes share one cache: the second waits for the lock, says so, and
neither corrupts the other's entries.

No wall-clock guesses (a loaded 2-core machine may take seconds to start a Python): the
first run holds the lock until the test tells it to let go (a line on its stdin), and the
test lets go only once the second run has said that it waits, or has given up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import IO, TYPE_CHECKING

from sparkbuild.store.cache import Cache

if TYPE_CHECKING:
    from pathlib import Path

WRITER = r"""
import sys, time
from pathlib import Path
from sparkbuild.store.cache import Cache

root, tag, hold = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "hold"
cache = Cache(root)
print(f"trying {time.time():.6f}", flush=True)
try:
    with cache.locked():
        print(f"acquired {time.time():.6f}", flush=True)
        for n in range(20):
            data = (f"{tag}-{n}-".encode()) * 50_000
            cache.put_bytes(data, name=f"{tag}-{n}")
            cache.put_bytes(b"shared entry" * 10_000)  # both runs store this one
        print(f"stored {time.time():.6f}", flush=True)
        if hold:
            sys.stdin.readline()  # until the test lets go
        print(f"released {time.time():.6f}", flush=True)
except BaseException:
    print(f"gave-up {time.time():.6f}", flush=True)
    raise
"""


def start(root: Path, tag: str, *, hold: bool, **env: str) -> subprocess.Popen[str]:
    """A run that stores entries under the lock; ``hold``: keeps it until told (stdin)."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), tag, "hold" if hold else "go"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPARKBUILD_QUIET": "", **env},
    )


def read_until(stream: IO[str] | None, wanted: str) -> list[str]:
    """Lines of ``stream`` up to the first one containing ``wanted`` (all of them at EOF)."""
    assert stream is not None
    seen = []
    for line in stream:
        seen.append(line)
        if wanted in line:
            break
    return seen


def let_go(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.write("release\n")
    child.stdin.flush()


def stamp(output: str, word: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith(word))
    return float(line.split()[1])


def test_second_run_waits_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = start(root, "first", hold=True)
    assert read_until(first.stdout, "stored")[-1].startswith("stored")
    second = start(root, "second", hold=False, SPARKBUILD_LOCK_TIMEOUT="300")
    said = read_until(second.stderr, "waiting for another sparkbuild run")
    assert said and "waiting for another sparkbuild run" in said[-1], said
    let_go(first)
    out2, rest2 = second.communicate(timeout=300)
    err2 = "".join(said) + rest2
    out1, err1 = first.communicate(timeout=300)
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
    """The first run holds the lock until the second has ended: the second can only have
    ended by its own timeout, which it measured from its first try (at least 0.5 s)."""
    root = tmp_path / "cache"
    first = start(root, "first", hold=True)
    assert read_until(first.stdout, "stored")[-1].startswith("stored")
    second = start(root, "second", hold=False, SPARKBUILD_LOCK_TIMEOUT="0.5")
    out, err = second.communicate(timeout=300)
    assert first.poll() is None, "the first run let go of the lock early"
    let_go(first)
    out1, err1 = first.communicate(timeout=300)
    assert first.returncode == 0, err1
    assert second.returncode != 0
    assert "LockTimeoutError" in err
    assert "held the cache lock for over 0.5 s" in err
    assert "acquired" not in out
    assert stamp(out, "gave-up") - stamp(out, "trying") >= 0.5
    assert stamp(out, "gave-up") < stamp(out1, "released")
