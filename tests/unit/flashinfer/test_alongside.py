"""flashinfer's builder beside vLLM's compile (sparkbuild.flashinfer.alongside): it runs
while the compile's block runs, its result or failure comes at the wait, and a failed
compile is raised after the builder has ended."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sparkbuild.errors import CommandFailed
from sparkbuild.flashinfer.alongside import (
    BUILDER_JOB_GIB,
    alongside_jobs,
    aot_alongside,
    reserved_bytes,
)
from sparkbuild.flashinfer.builder import AotResult
from sparkbuild.jobplan.machine import GIB


def _result() -> AotResult:
    return AotResult(Path("w.whl"), "0.6.8.post1+cu130", "0.6.8.post1", ("9.0a",), (), ["m"])


def test_the_builder_runs_while_the_compile_runs() -> None:
    compile_started, builder_saw_it = threading.Event(), threading.Event()

    def build() -> AotResult:
        # the builder finishes only once the block (the compile) has begun: run one after
        # the other, this would wait out its timeout and return None
        if compile_started.wait(timeout=10):
            builder_saw_it.set()
        return _result()

    with aot_alongside(build) as running:
        compile_started.set()
        assert builder_saw_it.wait(timeout=10)
    got = running.result()
    assert got is not None and got.modules == ["m"]


def test_the_block_ends_without_waiting_for_the_builder() -> None:
    release = threading.Event()

    def build() -> AotResult:
        release.wait(timeout=10)
        return _result()

    with aot_alongside(build) as running:
        pass
    assert running.future is not None and not running.future.done()  # the wait is result()'s
    release.set()
    assert running.result() is not None


def test_the_builders_failure_is_raised_at_the_wait() -> None:
    def build() -> AotResult:
        raise CommandFailed("flashinfer's builder wrote no module", where="aot.log")

    with aot_alongside(build) as running:
        pass
    with pytest.raises(CommandFailed, match="wrote no module"):
        running.result()


def test_a_failed_compile_waits_for_the_builder_and_is_the_failure_raised() -> None:
    ended = threading.Event()

    def build() -> AotResult:
        ended.set()
        raise CommandFailed("the builder failed too")

    with pytest.raises(RuntimeError, match="configure failed"), aot_alongside(build):
        raise RuntimeError("configure failed")
    assert ended.is_set()  # the builder had ended before the compile's failure came out


def test_no_builder_no_thread() -> None:
    with aot_alongside(None) as running:
        pass
    assert running.future is None and running.result() is None


def test_jobs_and_memory_kept_for_the_builder() -> None:
    assert [alongside_jobs(n) for n in (1, 3, 4, 16, 20)] == [1, 1, 1, 4, 5]
    assert reserved_bytes(16) == 4 * BUILDER_JOB_GIB * GIB
    assert reserved_bytes(2) == BUILDER_JOB_GIB * GIB  # at least one job
