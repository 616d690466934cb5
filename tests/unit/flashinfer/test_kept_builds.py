"""flashinfer's kept ahead-of-time build (sparkbuild.flashinfer.kept_builds).

flashinfer's builder is never run here: a fake stands in for build_jit_cache, writes a
wheel of known bytes and counts its calls.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.flashinfer import kept_builds as kept_aot
from sparkbuild.flashinfer.builder import AotRequest, AotResult
from sparkbuild.flashinfer.kept_builds import NAMESPACE, aot_key, reusing_jit_cache
from sparkbuild.store.cache import Cache
from sparkbuild.store.hashing import sha256_bytes

WHEEL = "flashinfer_jit_cache-0.6.18+cu130-py3-none-linux_x86_64.whl"


class FakeBuild:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: AotRequest) -> AotResult:
        self.calls += 1
        request.out.mkdir(parents=True, exist_ok=True)
        wheel = request.out / WHEEL
        wheel.write_bytes(b"modules built %d" % self.calls)
        return AotResult(wheel, "0.6.18+cu130", "0.6.18", request.archs, request.args,
                         ["batch_prefill_bf16", "silu_and_mul"], 101.6, wheel.stat().st_size)


@pytest.fixture
def build(monkeypatch: pytest.MonkeyPatch) -> FakeBuild:
    fake = FakeBuild()
    monkeypatch.setattr(kept_aot, "build_jit_cache", fake)
    return fake


@pytest.fixture
def request_(tmp_path: Path) -> AotRequest:
    wheels = tmp_path / "aot-wheels"
    wheels.mkdir()
    flashinfer = wheels / "flashinfer_python-0.6.18-py3-none-any.whl"
    flashinfer.write_bytes(b"flashinfer sources and builder")
    (wheels / "ninja-1.13.0-py3-none-manylinux_2_28_x86_64.whl").write_bytes(b"ninja")
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_bytes(b"nvcc 13.0")
    (cuda / "bin" / "ptxas").write_bytes(b"ptxas 13.0")
    return AotRequest(flashinfer_wheel=flashinfer, wheel_dir=wheels,
                      python=tmp_path / "venv" / "bin" / "python", archs=("12.1a",),
                      out=tmp_path / "dist", work=tmp_path / "work", cuda_home=cuda,
                      cuda_version="13.0", args=("--add-act", "true"))


def test_the_second_build_is_the_kept_wheel_copied(build: FakeBuild, request_: AotRequest,
                                                    tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    first = reusing_jit_cache(cache, request_, "2.11.0")
    built = first.wheel.read_bytes()
    first.wheel.unlink()  # wheel() empties its dist directory before the step
    second = reusing_jit_cache(cache, request_, "2.11.0")
    assert build.calls == 1
    assert second.wheel == request_.out / WHEEL and second.wheel.read_bytes() == built
    assert second.reused is not None and first.reused is None
    assert (second.modules, second.seconds, second.size) == (first.modules, 101.6, len(built))
    assert second.to_dict()["reused_since"] == second.reused
    assert "reused from the cache" in second.summary()[0]


@pytest.mark.parametrize("change", ["flashinfer", "builder wheel", "nvcc", "ptxas", "args",
                                    "archs", "torch", "python"])
def test_what_the_build_reads_changes_and_it_builds_again(
        build: FakeBuild, request_: AotRequest, tmp_path: Path, change: str) -> None:
    cache = Cache(tmp_path / "cache")
    reusing_jit_cache(cache, request_, "2.11.0")
    torch = "2.11.0"
    changed = request_
    if change == "flashinfer":
        request_.flashinfer_wheel.write_bytes(b"another build of the same version")
    elif change == "builder wheel":
        (request_.wheel_dir / "numpy-2.3.5-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
    elif change in ("nvcc", "ptxas"):
        (request_.cuda_home / "bin" / change).write_bytes(b"13.0, patched in place")
    elif change == "args":
        changed = dataclasses.replace(request_, args=("--add-act", "false"))
    elif change == "archs":
        changed = dataclasses.replace(request_, archs=("12.1a", "9.0a"))
    elif change == "python":
        changed = dataclasses.replace(request_, python=tmp_path / "other" / "python")
    else:
        torch = "2.13.0"
    again = reusing_jit_cache(cache, changed, torch)
    assert build.calls == 2 and again.reused is None


def test_jobs_and_the_work_directory_are_not_part_of_the_key(request_: AotRequest,
                                                               tmp_path: Path) -> None:
    moved = dataclasses.replace(request_, jobs=16, work=tmp_path / "elsewhere",
                                out=tmp_path / "other-dist")
    assert aot_key(moved, "2.11.0") == aot_key(request_, "2.11.0")


def test_a_corrupted_kept_wheel_is_a_miss_and_is_built_again(
        build: FakeBuild, request_: AotRequest, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    first = reusing_jit_cache(cache, request_, None)
    blob = cache.blob_path(sha256_bytes(first.wheel.read_bytes()))
    blob.write_bytes(b"flipped")
    again = reusing_jit_cache(cache, request_, None)
    assert build.calls == 2 and again.reused is None
    assert again.wheel.read_bytes() == b"modules built 2"


def _kept_then_rewritten(cache: Cache, request: AotRequest,
                         change: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    """Build once (kept), then rewrite the kept entry with ``change``; its key."""
    reusing_jit_cache(cache, request, None)
    key = aot_key(request, None)
    entry = cache.lookup(NAMESPACE, key)
    assert entry is not None
    cache.record(NAMESPACE, key, entry | change(entry))
    return key


@pytest.mark.parametrize("field,value", [("version", "0.6.17+cu130"),
                                         ("flashinfer_version", "0.6.17"),
                                         ("modules", []), ("modules", "silu_and_mul"),
                                         ("size", 3), ("schema", 0)])
def test_an_entry_that_does_not_read_back_is_a_miss(
        build: FakeBuild, request_: AotRequest, tmp_path: Path, field: str,
        value: object) -> None:
    cache = Cache(tmp_path / "cache")
    key = _kept_then_rewritten(cache, request_, lambda entry: {field: value})
    again = reusing_jit_cache(cache, request_, None)
    assert build.calls == 2 and again.reused is None
    kept_now = cache.lookup(NAMESPACE, key)
    assert kept_now is not None and json.dumps(kept_now["modules"]) != json.dumps(value)


def test_a_wheel_name_with_a_directory_is_refused(build: FakeBuild, request_: AotRequest,
                                                   tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    _kept_then_rewritten(cache, request_,
                         lambda entry: {"wheel": entry["wheel"] | {"name": "../x.whl"}})
    reusing_jit_cache(cache, request_, None)
    assert build.calls == 2
    assert not (tmp_path / "x.whl").exists()
