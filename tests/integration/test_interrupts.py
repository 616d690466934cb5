"""Runs killed (SIGINT, SIGKILL) at several points leave nothing that lies.

* cache writes: a store or a download killed midway leaves no entry under its final name
  (only a ``.partial-*`` file after SIGKILL, nothing after SIGINT); the next run sweeps the
  leftovers, says so, and starts the download again from the beginning; a run killed after
  the entry was committed is reused by the next run, which downloads nothing.
* prepare: a ``prepare`` killed at several points leaves the destination absent, empty or
  fully patched, never half-extracted or half-patched; the next run says whether it
  resumed or started clean, and finishes.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from corpus import builders as b
from sparkbuild.store.cache import Cache

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

CHUNK = 256 * 1024
CHUNKS = 16
PAYLOAD = hashlib.sha256(b"seed").digest() * (CHUNK * CHUNKS // 32)
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
SWEEP_MESSAGE = "half-written cache file(s) left by an interrupted run"


class SlowServer:
    """Serves PAYLOAD in CHUNK pieces, pausing between them; counts bytes sent.

    With ``hold_at`` set, a response stops once that many bytes are out and waits for
    ``gate``: the client is then certainly mid-download however slow the machine is.
    """

    def __init__(self, pause: float) -> None:
        self.sent = 0
        self.requests = 0
        self.hold_at: int | None = None
        self.gate = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(PAYLOAD)))
                self.end_headers()
                try:
                    for start in range(0, len(PAYLOAD), CHUNK):
                        self.wfile.write(PAYLOAD[start : start + CHUNK])
                        self.wfile.flush()
                        server.sent += CHUNK
                        if server.hold_at is not None and server.sent >= server.hold_at:
                            server.gate.wait(120)
                        time.sleep(pause)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/payload.bin"


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    server = SlowServer(pause=0.05)
    threading.Thread(target=server.httpd.serve_forever, args=(0.02,), daemon=True).start()
    yield server
    server.gate.set()
    server.httpd.shutdown()
    server.httpd.server_close()


FETCH = r"""
import sys
from pathlib import Path
from sparkbuild.store.cache import Cache
from sparkbuild.store.download import fetch_to_cache

cache = Cache(Path(sys.argv[1]))
path = fetch_to_cache(cache, sys.argv[2], sys.argv[3])
print("stored", path, flush=True)
"""

STORE = r"""
import sys, time
from pathlib import Path
from sparkbuild.store.cache import Cache

class Slow:
    def __init__(self, data, chunk, stop_at):
        self.data, self.chunk, self.pos, self.stop_at = data, chunk, 0, stop_at
    def read(self, _n):
        piece = self.data[self.pos : self.pos + self.chunk]
        self.pos += len(piece)
        print("chunk", self.pos // self.chunk, flush=True)
        if self.pos // self.chunk == self.stop_at:
            sys.stdin.readline()  # stopped here until killed: the kill point is exact
        time.sleep(0.05)
        return piece

import hashlib
chunk, chunks = int(sys.argv[2]), int(sys.argv[3])
data = hashlib.sha256(b"seed").digest() * (chunk * chunks // 32)
stop_at = int(sys.argv[4])
cache = Cache(Path(sys.argv[1]))
with cache.locked():
    digest = cache.put_stream(Slow(data, chunk, stop_at), name="payload")
print("stored", digest, flush=True)
time.sleep(30)
"""


def default_sigint() -> None:
    """Run in each child before it starts: SIGINT back to its default action.

    A CI runner may start jobs with SIGINT ignored; an ignored signal stays ignored across
    exec, and a Python started that way never turns SIGINT into KeyboardInterrupt, so the
    SIGINT below would test nothing.  (``restore_signals`` covers SIGPIPE and SIGXFSZ only.)
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPARKBUILD_QUIET": ""},
        preexec_fn=default_sigint,
    )


def kill(child: subprocess.Popen[str], sig: signal.Signals) -> None:
    child.send_signal(sig)
    child.communicate(timeout=30)


def assert_entries_honest(root: Path) -> None:
    """Every entry under its final name hashes to that name."""
    for blob in (root / "blobs" / "sha256").iterdir():
        if not blob.name.startswith(".partial-"):
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


def partials(root: Path) -> list[Path]:
    return list(root.rglob(".partial-*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("after_bytes", [CHUNK, CHUNK * 10], ids=["early", "late"])
def test_download_killed_midway(
    slow_server: SlowServer, tmp_path: Path, sig: signal.Signals, after_bytes: int
) -> None:
    root = tmp_path / "cache"
    slow_server.hold_at = after_bytes  # the server waits there until the kill is done
    child = spawn(FETCH, str(root), slow_server.url, PAYLOAD_SHA)
    deadline = time.monotonic() + 120
    # the kill point: the bytes are out, and the child has its .partial file open
    while not (slow_server.sent >= after_bytes and partials(root)):
        assert time.monotonic() < deadline, "the download never reached the kill point"
        time.sleep(0.01)
    assert child.poll() is None, "the download finished before it could be interrupted"
    kill(child, sig)
    slow_server.gate.set()
    assert not Cache(root).has(PAYLOAD_SHA), "a half download sits under its final name"
    assert_entries_honest(root)
    left = partials(root)
    if sig == signal.SIGINT:
        assert left == [], "SIGINT must clean up its partial file"
    else:
        assert left, "SIGKILL cannot clean up: expected a .partial- file to sweep"

    again = spawn(FETCH, str(root), slow_server.url, PAYLOAD_SHA)
    _out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert ("removed 1 " + SWEEP_MESSAGE in err) == (sig == signal.SIGKILL), err
    assert f"downloading {slow_server.url}" in err  # started again from the beginning
    assert Cache(root).path_of(PAYLOAD_SHA).read_bytes() == PAYLOAD
    assert partials(root) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("point", ["chunk 1", "chunk 12", "stored"])
def test_store_killed_at_several_points(tmp_path: Path, sig: signal.Signals, point: str) -> None:
    root = tmp_path / "cache"
    stop_at = int(point.split()[1]) if point.startswith("chunk") else 0
    child = spawn(STORE, str(root), str(CHUNK), str(CHUNKS), str(stop_at))
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == point or line.startswith(point + " "):
            break
    kill(child, sig)
    assert_entries_honest(root)
    committed = point == "stored"
    assert Cache(root).has(PAYLOAD_SHA) == committed
    if sig == signal.SIGINT:
        assert partials(root) == []
    # the next run takes the lock at once (the kernel dropped the dead run's flock),
    # sweeps what a SIGKILL left, and either reuses the entry or stores it afresh
    again = spawn(STORE, str(root), str(CHUNK), str(CHUNKS), "0")
    assert again.stdout is not None
    for line in again.stdout:
        if line.startswith("stored"):
            break
    again.kill()
    _out, err = again.communicate(timeout=30)
    assert "waiting for another sparkbuild run" not in err
    swept = sig == signal.SIGKILL and not committed
    assert (SWEEP_MESSAGE in err) == swept, err
    assert Cache(root).path_of(PAYLOAD_SHA).read_bytes() == PAYLOAD
    assert_entries_honest(root)


def test_committed_download_is_reused_not_refetched(
    slow_server: SlowServer, tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    first = spawn(FETCH, str(root), slow_server.url, PAYLOAD_SHA)
    assert first.stdout is not None
    assert first.stdout.readline().startswith("stored")
    kill(first, signal.SIGKILL)  # killed right after the commit
    again = spawn(FETCH, str(root), slow_server.url, PAYLOAD_SHA)
    _out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert slow_server.requests == 1 and "downloading" not in err


# -- patch apply and prepare, through the CLI -------------------------------------------

SERIES_LENGTH = 80
CLI = [sys.executable, "-m", "sparkbuild"]
RESTORED_MESSAGE = "found an interrupted run of `patch "


def many_patches(work: Path, count: int = SERIES_LENGTH) -> tuple[Path, Path]:
    """A tree of ``count`` small files and a series with one patch per file."""
    files = {f"src/f{n:03d}.c": f"int v{n} = 0;\n" for n in range(count)}
    tree = b.write_tree(work / "tree", files)
    patches = {}
    for n in range(count):
        name = f"src/f{n:03d}.c"
        patches[f"{n:04d}-v{n}.diff"] = (
            f"diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n"
            f"@@ -1 +1 @@\n-int v{n} = 0;\n+int v{n} = 1;\n"
        )
    b.series_dir(work / "recipe" / "patches", patches)
    return tree, b.write_recipe(work / "recipe", b.recipe_text("unused", "patches/series"))


def patched_count(tree: Path, count: int = SERIES_LENGTH) -> int:
    """Files of the tree that carry their patch (one being rewritten counts as not)."""
    patched = 0
    for n in range(count):
        with contextlib.suppress(FileNotFoundError):  # git apply replaces files
            patched += (tree / f"src/f{n:03d}.c").read_text(encoding="utf-8").endswith("= 1;\n")
    return patched


def spawn_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPARKBUILD_QUIET": ""},
        preexec_fn=default_sigint,
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def wait_until(predicate: Callable[[], bool], child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        assert child.poll() is None, "the run ended before the kill point"
        assert time.monotonic() < deadline, "the kill point never came"
        time.sleep(0.005)


def reference_digests(tree: Path, recipe: Path, work: Path) -> tuple[str, str]:
    """(pristine, fully patched in one undisturbed run) digests of a copy of ``tree``."""
    from sparkbuild.patches.engine import apply_series
    from sparkbuild.recipe import load_recipe

    copy = work / "reference"
    shutil.copytree(tree, copy, symlinks=True)
    pristine = b.tree_digest(copy)
    assert apply_series(copy, load_recipe(recipe)).error is None
    return pristine, b.tree_digest(copy)


@pytest.mark.parametrize("kill_after", [1, SERIES_LENGTH // 2], ids=["first", "half"])
def test_patch_apply_sigint_leaves_tree_untouched(tmp_path: Path, kill_after: int) -> None:
    tree, recipe = many_patches(tmp_path)
    pristine = b.tree_digest(tree)
    child = spawn_cli("patch", "apply", str(tree), "--recipe", str(recipe))
    wait_until(lambda: patched_count(tree) >= kill_after, child)
    child.send_signal(signal.SIGINT)
    _out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert b.tree_digest(tree) == pristine, "SIGINT left a half-patched tree (or a journal)"
    again = run_cli("patch", "apply", str(tree), "--recipe", str(recipe))
    assert again.returncode == 0, again.stderr
    assert RESTORED_MESSAGE not in again.stderr, "SIGINT rolled back: nothing to recover"
    assert patched_count(tree) == SERIES_LENGTH


def test_patch_apply_sigkill_then_next_run_restores_and_completes(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the next ``patch apply`` finds the journal, restores the
    tree, says so, and applies the whole series: byte-identical to an undisturbed run."""
    tree, recipe = many_patches(tmp_path)
    _pristine, patched = reference_digests(tree, recipe, tmp_path)
    child = spawn_cli("patch", "apply", str(tree), "--recipe", str(recipe))
    wait_until(lambda: patched_count(tree) >= SERIES_LENGTH // 3, child)
    child.kill()
    child.communicate(timeout=30)
    assert 0 < patched_count(tree) < SERIES_LENGTH, "the kill did not land mid-series"
    again = run_cli("patch", "apply", str(tree), "--recipe", str(recipe), "--json")
    assert again.returncode == 0, again.stderr
    assert RESTORED_MESSAGE + "apply`" in again.stderr and "starting clean" in again.stderr
    found = json.loads(again.stdout)["interrupted_run"]
    assert found["outcome"] == "restored" and found["restored"] >= SERIES_LENGTH // 3
    assert b.tree_digest(tree) == patched


# Deterministic kill points: the child patches sparkbuild's own functions (in its own
# process only) so that it SIGKILLs itself at an exact step of the run.
KILLER = r"""
import os, signal, sys
from sparkbuild.patches import engine, journal
from sparkbuild.cli import main

point, nth = sys.argv[1], int(sys.argv[2])
calls = {"n": 0}

def die_at(name):
    if point != name:
        return
    calls["n"] += 1
    if calls["n"] == nth:
        os.kill(os.getpid(), signal.SIGKILL)

real_git_apply = engine.git_apply
def git_apply(tree, diff, *, reverse=False, check=False):
    if not check and point == "torn":
        calls["n"] += 1
        if calls["n"] == nth:  # git apply's own unlink-then-create, cut in the middle
            target = diff.split("\n--- a/", 1)[1].split("\n", 1)[0]
            (tree / target).unlink()
            os.kill(os.getpid(), signal.SIGKILL)
    result = real_git_apply(tree, diff, reverse=reverse, check=check)
    if not check:
        die_at("changed")
    return result
engine.git_apply = git_apply

for method, name, after in (("commit", "committed", True), ("done", "recorded", False),
                            ("finish", "finished", False)):
    def wrap(real, name=name, after=after):
        def wrapper(self, *args):
            if not after:
                die_at(name)
            real(self, *args)
            if after:
                die_at(name)
        return wrapper
    setattr(journal.Journal, method, wrap(getattr(journal.Journal, method)))

sys.exit(main(sys.argv[3:]))
"""

SHORT = 12
"""Patches in the series of the deterministic kill tests."""

KILLS = [
    # (killed action, kill point, at its nth call, next action)
    ("apply", "committed", 1, "apply"),  # journal durable, nothing touched yet
    ("apply", "torn", 6, "apply"),  # a file gone mid-rewrite
    ("apply", "changed", 6, "apply"),  # applied, not yet recorded
    ("apply", "recorded", 6, "apply"),  # recorded, not yet marked done
    ("apply", "finished", 1, "apply"),  # all done, journal not yet removed
    ("apply", "changed", 6, "status"),
    ("apply", "recorded", 6, "revert"),
    ("revert", "changed", 4, "apply"),
    ("revert", "torn", 4, "status"),
]
NEXT_STATUS = {
    # (tree before the killed run, next action): every patch's status in the next run
    ("pristine", "apply"): "applied",
    ("pristine", "status"): "not-applied",
    ("pristine", "revert"): "not-applied",
    ("patched", "apply"): "already-applied",
    ("patched", "status"): "already-applied",
}


@pytest.mark.parametrize(
    ("killed", "point", "nth", "then"),
    KILLS,
    ids=[f"{k}-{p}{n}-then-{t}" for k, p, n, t in KILLS],
)
def test_patch_run_sigkilled_at_a_step_is_repaired_by_the_next_run(
    tmp_path: Path, killed: str, point: str, nth: int, then: str
) -> None:
    """Restore, never finish: the next run puts back the tree the killed run started
    from, then does its own work; an apply ends byte-identical to an undisturbed one."""
    tree, recipe = many_patches(tmp_path, SHORT)
    pristine, patched = reference_digests(tree, recipe, tmp_path)
    digests = {"pristine": pristine, "patched": patched}
    before = "pristine" if killed == "apply" else "patched"
    if before == "patched":
        assert run_cli("patch", "apply", str(tree), "--recipe", str(recipe)).returncode == 0
    child = subprocess.run(
        [sys.executable, "-c", KILLER, point, str(nth), "patch", killed, str(tree),
         "--recipe", str(recipe)],
        capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert (tree / ".sparkbuild" / "journal.jsonl").is_file(), "a killed run left no journal"

    again = run_cli("patch", then, str(tree), "--recipe", str(recipe), "--json")
    assert again.returncode == 0, again.stderr
    said = [line for line in again.stderr.splitlines() if RESTORED_MESSAGE in line]
    assert len(said) == 1 and said[0].endswith("starting clean"), again.stderr
    assert f"`patch {killed}`" in said[0]
    report = json.loads(again.stdout)
    assert report["interrupted_run"]["action"] == killed
    assert report["interrupted_run"]["message"] in said[0]
    after = "patched" if then == "apply" else before
    assert b.tree_digest(tree) == digests[after]
    statuses = {p["status"] for p in report["patches"]}
    assert statuses == {NEXT_STATUS[before, then]}, report["patches"]

    quiet = run_cli("patch", "status", str(tree), "--recipe", str(recipe))
    assert quiet.returncode == 0 and RESTORED_MESSAGE not in quiet.stderr, quiet.stderr


def many_patches_sdist(work: Path) -> tuple[Path, Path]:
    """An sdist of the many-patches tree (plus bulk, so extraction takes a while)."""
    tree, recipe = many_patches(work)
    bulk = {f"bulk/m{n:04d}.py": "# filler\n" * 20 for n in range(600)}
    b.write_tree(tree, bulk)
    sdist = work / "demo-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname="demo-1.0")
    shutil.rmtree(tree)
    return sdist, recipe


def workspaces(dest: Path) -> list[Path]:
    """prepare's temporary trees beside ``dest``."""
    return sorted(dest.parent.glob(f".{dest.name}.sparkbuild-*"))


def workspace_tops(dest: Path) -> list[Path]:
    """Directories one or two levels into prepare's workspaces (where a tree may sit)."""
    tops: list[Path] = []
    with contextlib.suppress(OSError):  # a workspace may vanish while we look
        for ws in workspaces(dest):
            tops += [p for p in ws.glob("*") if p.is_dir()]
            tops += [p for p in ws.glob("*/*") if p.is_dir()]
    return tops


def in_workspace(dest: Path, relative: str) -> Callable[[], bool]:
    def present() -> bool:
        return any((top / relative).exists() for top in workspace_tops(dest))

    return present


def patched_in_workspace(dest: Path, at_least: int) -> Callable[[], bool]:
    def enough() -> bool:
        return any(
            (top / "src").is_dir() and patched_count(top) >= at_least
            for top in workspace_tops(dest)
        )

    return enough


KILL_POINTS = {
    "extracting": lambda dest: in_workspace(dest, "bulk/m0000.py"),
    "patching": lambda dest: patched_in_workspace(dest, SERIES_LENGTH // 2),
}


def prepare_args(sdist: Path, dest: Path, recipe: Path) -> list[str]:
    return ["prepare", "--source", str(sdist), "--dest", str(dest), "--recipe", str(recipe)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_prepare_killed_leaves_no_half_tree(
    tmp_path: Path, sig: signal.Signals, point: str
) -> None:
    sdist, recipe = many_patches_sdist(tmp_path)
    dest = tmp_path / "out" / "tree"
    child = spawn_cli(*prepare_args(sdist, dest, recipe))
    wait_until(KILL_POINTS[point](dest), child)
    child.send_signal(sig)
    _out, err = child.communicate(timeout=60)
    assert not dest.exists(), "an interrupted prepare left a tree at --dest"
    if sig == signal.SIGINT:
        assert child.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
        assert workspaces(dest) == [], "SIGINT must remove prepare's temporary tree"
    again = run_cli(*prepare_args(sdist, dest, recipe))
    assert again.returncode == 0, again.stderr
    assert patched_count(dest) == SERIES_LENGTH


def test_prepare_finished_then_killed_keeps_the_tree(tmp_path: Path) -> None:
    """Killed after the rename: the tree is complete, and a second prepare refuses to
    overwrite it rather than half-redo it."""
    sdist, recipe = many_patches_sdist(tmp_path)
    dest = tmp_path / "out" / "tree"
    child = spawn_cli(*prepare_args(sdist, dest, recipe))
    wait_until(dest.exists, child)
    child.kill()
    child.communicate(timeout=30)
    assert patched_count(dest) == SERIES_LENGTH
    again = run_cli(*prepare_args(sdist, dest, recipe))
    assert again.returncode == 8 and "not empty" in again.stderr, again.stderr


def test_prepare_after_sigkill_sweeps_and_says_so(tmp_path: Path) -> None:
    sdist, recipe = many_patches_sdist(tmp_path)
    dest = tmp_path / "out" / "tree"
    child = spawn_cli(*prepare_args(sdist, dest, recipe))
    wait_until(KILL_POINTS["patching"](dest), child)
    child.kill()
    child.communicate(timeout=30)
    assert workspaces(dest), "SIGKILL cannot clean up: a workspace should be left"
    again = run_cli(*prepare_args(sdist, dest, recipe))
    assert again.returncode == 0, again.stderr
    assert workspaces(dest) == [], "the next run must remove what the killed run left"
    said = again.stderr.lower()
    assert "interrupted" in said and ("clean" in said or "resum" in said), again.stderr


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("test", [
    "test_patch_apply_sigint_leaves_tree_untouched[first]",
    "test_download_killed_midway[early-SIGINT]",
])
def test_sigint_tests_hold_when_started_with_sigint_ignored(test: str) -> None:
    """A SIGINT test run by a pytest that inherited SIGINT ignored (as some CI runners
    start jobs) still interrupts its child: the children restore the default first."""
    probe = subprocess.run([sys.executable, "-c",
                            "import signal; print(int(signal.getsignal(signal.SIGINT)))"],
                           capture_output=True, text=True, preexec_fn=ignore_sigint, check=True)
    assert int(probe.stdout) == signal.SIG_IGN  # what a child inherits
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         f"{__file__}::{test}"],
        capture_output=True, text=True, timeout=600, preexec_fn=ignore_sigint, check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout, result.stdout[-2000:]
