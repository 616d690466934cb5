"""The content-addressed cache: atomic entries, verified reads, the index, the lock."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from pathlib import Path

import pytest

from sparkbuild.errors import (
    CacheMissError,
    DiskFullError,
    HashMismatchError,
    LockTimeoutError,
    UsageError,
    VerifyError,
)
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.hashing import sha256_file

DATA = b"sparkbuild cache entry\n" * 100
DIGEST = hashlib.sha256(DATA).hexdigest()
DEAD_PID = 999_999_999  # above any pid_max: no such process


def leftovers(root: Path) -> list[Path]:
    return sorted(root.rglob(".partial-*"))


def test_put_bytes_stores_under_its_hash(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    assert cache.put_bytes(DATA) == DIGEST
    blob = tmp_path / "c" / "blobs" / "sha256" / DIGEST
    assert blob.read_bytes() == DATA
    assert cache.has(DIGEST)
    assert cache.path_of(DIGEST) == blob
    assert leftovers(tmp_path) == []


def test_put_file_with_name_records_it(tmp_path: Path) -> None:
    source = tmp_path / "pkg-1.0.tar.gz"
    source.write_bytes(DATA)
    cache = Cache(tmp_path / "c")
    assert cache.put_file(source, sha256=DIGEST, name="pkg-1.0.tar.gz") == DIGEST
    assert cache.lookup("names", "pkg-1.0.tar.gz") == {"sha256": DIGEST, "size": len(DATA)}
    # storing it again is a no-op that still answers the hash
    assert cache.put_file(source, sha256=DIGEST) == DIGEST


def test_put_file_with_wrong_hash_stores_nothing(tmp_path: Path) -> None:
    source = tmp_path / "x"
    source.write_bytes(DATA)
    cache = Cache(tmp_path / "c")
    wrong = "0" * 64
    with pytest.raises(HashMismatchError) as caught:
        cache.put_file(source, sha256=wrong)
    assert wrong in caught.value.what and DIGEST in caught.value.what
    assert not cache.has(wrong) and not cache.has(DIGEST)
    assert leftovers(tmp_path) == []


def test_missing_entry_is_a_cache_miss(tmp_path: Path) -> None:
    with pytest.raises(CacheMissError) as caught:
        Cache(tmp_path).path_of(DIGEST)
    assert DIGEST in caught.value.what


def test_corrupted_entry_is_found_and_removed(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.put_bytes(DATA)
    cache.path_of(DIGEST)  # writes the verified marker
    blob = cache.blob_path(DIGEST)
    before = blob.stat()
    blob.write_bytes(DATA[:-1] + b"?")  # same size
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))  # and same mtime
    with pytest.raises(VerifyError) as caught:
        cache.path_of(DIGEST)
    assert "corrupted" in caught.value.what
    assert not blob.exists()
    with pytest.raises(CacheMissError):
        cache.path_of(DIGEST)


def test_verified_marker_spares_rehashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path)
    cache.put_bytes(DATA)
    calls: list[Path] = []
    real = sha256_file

    def counting(path: Path, *, progress: bool = True) -> str:
        calls.append(path)
        return real(path, progress=progress)

    monkeypatch.setattr("sparkbuild.store.cache.sha256_file", counting)
    (tmp_path / "verified" / DIGEST).unlink()
    cache.path_of(DIGEST)
    cache.path_of(DIGEST)
    assert len(calls) == 1


def test_bad_digest_and_namespace_are_usage_errors(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    with pytest.raises(UsageError):
        cache.path_of("../../etc/passwd")
    with pytest.raises(UsageError):
        cache.record("../up", "k", {})


def test_index_round_trip_and_bad_entries(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    assert cache.lookup("urls", "https://x/y") is None
    cache.record("urls", "https://x/y", {"sha256": DIGEST})
    assert cache.lookup("urls", "https://x/y") == {"sha256": DIGEST}
    long_key = "https://example.org/" + "a" * 400
    cache.record("urls", long_key, {"n": 1})
    cache.record("urls", long_key + "b", {"n": 2})
    assert cache.lookup("urls", long_key) == {"n": 1}
    assert cache.lookup("urls", long_key + "b") == {"n": 2}
    entry = next((tmp_path / "index" / "urls").glob("https*x%2Fy.json"))
    entry.write_text("{ not json", encoding="utf-8")
    assert cache.lookup("urls", "https://x/y") is None
    entry.write_text(json.dumps([1, 2]), encoding="utf-8")
    assert cache.lookup("urls", "https://x/y") is None


def test_disk_full_removes_the_partial_and_names_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = Cache(tmp_path / "c")

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(DiskFullError) as caught:
        cache.put_bytes(DATA)
    assert caught.value.where == str(tmp_path / "c")
    assert leftovers(tmp_path) == []
    assert not cache.has(DIGEST)


def test_sweep_removes_only_dead_writers_partials(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.put_bytes(DATA)
    dead = cache.blob_dir / f".partial-{DEAD_PID}-abc"
    dead.write_bytes(DATA[:10])
    alive = cache.blob_dir / f".partial-{os.getpid()}-def"
    alive.write_bytes(DATA[:10])
    assert cache.partial_files() == [dead]
    assert cache.sweep_partials() == 1
    assert not dead.exists() and alive.exists()
    assert cache.path_of(DIGEST).read_bytes() == DATA


def test_lock_is_reentrant_and_records_holder(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    with cache.locked(), Cache(tmp_path).locked():
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
        cache.put_bytes(DATA)
    # released: an outside flock succeeds at once
    fd = os.open(tmp_path / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_lock_held_elsewhere_waits_says_so_then_times_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path.joinpath(".lock").write_text("4242\n")
    fd = os.open(tmp_path / ".lock", os.O_RDWR)  # a separate open file: a "second run"
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(LockTimeoutError), Cache(tmp_path, lock_timeout=0.3).locked():
            pass
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert err.count("waiting for another sparkbuild run that holds the cache lock") == 1
    assert "pid 4242" in err


def test_default_root_honours_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBUILD_CACHE", str(tmp_path / "here"))
    assert default_cache_root() == tmp_path / "here"
    monkeypatch.delenv("SPARKBUILD_CACHE")
    assert default_cache_root() == Path.home() / ".cache" / "sparkbuild"


def test_taking_the_lock_sweeps_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = Cache(tmp_path)
    cache.blob_dir.mkdir(parents=True)
    (cache.blob_dir / f".partial-{DEAD_PID}-abc").write_bytes(b"half")
    with cache.locked():
        assert cache.partial_files() == []
    assert "removed 1 half-written cache file(s) left by an interrupted run" in (
        capsys.readouterr().err
    )
    with cache.locked():
        pass
    assert "half-written" not in capsys.readouterr().err


def test_bad_lock_timeout_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARKBUILD_LOCK_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="SPARKBUILD_LOCK_TIMEOUT"):
        Cache(tmp_path)
    monkeypatch.setenv("SPARKBUILD_LOCK_TIMEOUT", "2.5")
    assert Cache(tmp_path)._lock.timeout == 2.5


def test_find_gives_none_for_an_absent_entry_and_path_of_names_it(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    absent = "0" * 64
    assert cache.find(absent) is None
    with pytest.raises(CacheMissError, match=f"no entry sha256:{absent}"):
        cache.path_of(absent)
    source = tmp_path / "f"
    source.write_bytes(b"x")
    digest = cache.put_file(source)
    assert cache.find(digest) == cache.blob_path(digest)
