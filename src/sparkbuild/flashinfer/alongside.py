"""flashinfer's modules built alongside vLLM's compile instead of after it.

Built after vLLM's compile, ``[flashinfer] aot`` adds its whole wall to the build's: for
vLLM 0.20.0 at 9.0a on 16 cores, 138 s after a 672 s compile whose cores are 18 % idle
(the last wave), behind a configure that runs one core for 53 s.  The builder's work fits
in the cores the build leaves idle, so the builder starts as soon as the build's
interpreter and torch are known (after the code forecast, before the configure), in a thread
of its own, and the wheel waits for it once the compile is done.

* It runs one job per :data:`ALONGSIDE_SHARE` of the compile's (at least one): the compile
  keeps its whole plan, the builder takes what the build leaves idle, and where both run
  the cores are shared rather than the builder's time added at the end.  With B the
  builder's wall at every core and C the compile's: it is hidden while B <= C/4 (a
  narrowed set on 16 cores: B = 110 s, C = 670-1080 s); the wheel then waits 4B - C; it is
  slower than building after the compile (B) once B > C/3, a set as large as a third of
  the compile -- narrow it with ``[flashinfer] aot_args``.
* Its memory is kept out of the compile's plan before the plan is made:
  :func:`reserved_bytes`, :data:`BUILDER_JOB_GIB` per builder job (the FlashAttention
  template units of vllm-flash-attn peaked at 3.9-4.4 GiB per compiler, measured at 12.1a;
  flashinfer's FA2/FA3 modules are of that family -- an estimate, not a measurement
  of flashinfer's own).
* A kept build (flashinfer/kept_builds.py) is copied, not rebuilt, in the same thread.
* It starts after the code forecast, so a refused forecast is said at once.  A failure of
  the configure or the compile is raised after the builder has ended (a running compiler
  is not abandoned in the work directory), and the builder's own failure is then dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbuild.console import step
from sparkbuild.jobplan.job_plan import Reserved
from sparkbuild.jobplan.machine import GIB
from sparkbuild.team.sccache_server import launcher_environment

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from sparkbuild.flashinfer.builder import AotResult
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache
    from sparkbuild.team.sccache_server import SharedCache

ALONGSIDE_SHARE = 4
"""The builder runs one job per this many of the compile's (at least one)."""
BUILDER_JOB_GIB = 4.5
"""Memory kept out of the compile's plan per builder job (the module docstring)."""


def alongside_jobs(compile_jobs: int) -> int:
    """The builder's jobs beside a compile of ``compile_jobs``."""
    return max(1, compile_jobs // ALONGSIDE_SHARE)


def reserved_bytes(cores: int) -> float:
    """What the compile's plan leaves to a builder beside it on ``cores`` cores (the plan's
    jobs are not known yet when the memory is counted: at most one per core)."""
    return alongside_jobs(cores) * BUILDER_JOB_GIB * GIB


BUILDER_REASON = "flashinfer's builder runs alongside the compile"
"""Why the plan keeps :func:`builder_reserve` out, as its reasons say."""


def builder_reserve(recipe: Recipe, cores: int | None = None) -> float:
    """The memory the compile's plan keeps for the builder on ``cores`` (else this
    machine's): none without ``[flashinfer] aot``."""
    return reserved_bytes(cores or os.cpu_count() or 1) if recipe.flashinfer.aot else 0.0


def builder_reservation(recipe: Recipe, cores: int) -> Reserved:
    """What the compile's plan keeps for the builder on ``cores``, and why: the one
    reservation ``doctor`` and ``wheel`` plan with."""
    return Reserved(builder_reserve(recipe, cores), BUILDER_REASON)


def builder_for(recipe: Recipe, *, python: Path, torch: str | None, cache: Cache, work: Path,
                offline: bool, compile_jobs: int, shared: SharedCache | None = None
                ) -> Callable[[], AotResult] | None:
    """The build of flashinfer's modules that runs beside a compile of ``compile_jobs``
    (a kept one reused, flashinfer/kept_builds.py; a prebuilt jit-cache taken,
    flashinfer/jit_cache.py), through the build's sccache when ``shared`` runs one; None
    without ``[flashinfer] aot``."""
    if recipe.flashinfer.jit_cache is not None:
        return functools.partial(_take, recipe, cache=cache, work=work, offline=offline)
    if not recipe.flashinfer.aot:
        return None
    return _Builder(recipe, python=python, torch=torch, cache=cache, work=work,
                    offline=offline, jobs=alongside_jobs(compile_jobs), shared=shared,
                    usable_bytes=reserved_bytes(os.cpu_count() or 1))


def builder_alone(recipe: Recipe, *, python: Path, torch: str | None, cache: Cache,
                  work: Path, offline: bool, jobs: int | None,
                  shared: SharedCache | None = None) -> Callable[[], AotResult] | None:
    """flashinfer's part of the main job on a machine of its own (``wheel --part
    flashinfer``): the builder of :func:`builder_for` with ``jobs`` (None: its own plan) and
    the machine's memory, nothing compiling beside it; the same kept build and wheel."""
    if recipe.flashinfer.jit_cache is not None:
        return functools.partial(_take, recipe, cache=cache, work=work, offline=offline)
    if not recipe.flashinfer.aot:
        return None
    return _Builder(recipe, python=python, torch=torch, cache=cache, work=work,
                    offline=offline, jobs=jobs, shared=shared)


def _take(recipe: Recipe, *, cache: Cache, work: Path, offline: bool) -> AotResult:
    from sparkbuild.flashinfer.jit_cache import take_recipe_jit_cache

    dist = work / "flashinfer-aot-dist"
    shutil.rmtree(dist, ignore_errors=True)
    return take_recipe_jit_cache(recipe, cache.root, out=dist, offline=offline)


@dataclass(frozen=True, kw_only=True)
class _Builder:
    """One run of flashinfer's builder for the recipe, called when the build starts: the
    kept build reused, else the pinned wheel's builder through the build's sccache, its
    heavy pool sized by the team's servers when ``shared`` is a dist build's."""

    recipe: Recipe = field(kw_only=False)
    python: Path
    torch: str | None
    cache: Cache
    work: Path
    offline: bool
    jobs: int | None
    """None: the builder's own plan."""
    shared: SharedCache | None = None
    usable_bytes: float | None = None
    """The memory the builder plans with (None: the machine's)."""

    def __call__(self) -> AotResult:
        from sparkbuild.flashinfer.builder import AotPlace, request_for_recipe
        from sparkbuild.flashinfer.kept_builds import reusing_jit_cache

        shared = self.shared
        team = shared.dist.team() if shared is not None and shared.dist is not None else None
        dist = self.work / "flashinfer-aot-dist"
        shutil.rmtree(dist, ignore_errors=True)
        request = dataclasses.replace(request_for_recipe(self.recipe, AotPlace(
            out=dist, python=self.python, cache_root=self.cache.root,
            work=self.work / "flashinfer-aot", offline=self.offline, jobs=self.jobs,
            launcher_env=launcher_environment(shared), usable_bytes=self.usable_bytes)),
            team=team)
        return reusing_jit_cache(self.cache, request, self.torch)


@dataclass
class AotAlongside:
    """The builder's run beside the compile: :meth:`result` waits for it."""

    future: Future[AotResult | None] | None

    def result(self) -> AotResult | None:
        """The builder's result; its failure is raised here."""
        if self.future is None:
            return None
        if not self.future.done():
            step("waiting for flashinfer's builder, started alongside the compile")
        return self.future.result()


@contextmanager
def aot_alongside(build: Callable[[], AotResult | None] | None) -> Iterator[AotAlongside]:
    """Run ``build`` (None: nothing to build) in a thread while the block runs and after it,
    until :meth:`AotAlongside.result`.  When the block raises, the builder is waited for and
    its own outcome dropped."""
    if build is None:
        yield AotAlongside(None)
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flashinfer-aot")
    future = pool.submit(build)
    try:
        yield AotAlongside(future)
    except BaseException:
        if not future.done():
            step("the build failed: waiting for flashinfer's builder to end first")
        pool.shutdown(wait=True)  # the build's own failure is the one raised
        raise
    pool.shutdown(wait=False)  # the thread ends with the builder; result() waits for it
