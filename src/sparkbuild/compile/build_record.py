"""What the wheels were built with: the torch compiled against, and the build's settings.

The torch is read once per build, from the build environment's installed files (its
dist-info, not a requirement; with ``--use-existing-torch`` the running interpreter's), and
serves the code forecast (its site-packages), the shared compile cache's namespace and
flashinfer's builder (its version), and the manifest's ``toolchain`` (:meth:`BuildTorch.toolchain`).

:func:`build_settings` is the manifest's ``build_settings``: the archs, the job plan, the
environment the build ran with, the shared cache, the units and their measures, the
vendored dependencies and what the arch edit did to them, flashinfer's modules, the node
profile and the start modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkbuild.toolchain import tools

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sparkbuild.compile.existing_torch import RunningTorch
    from sparkbuild.compile.extension_set import ExtensionSet
    from sparkbuild.compile.tree_build import BuildOutcome
    from sparkbuild.flashinfer.builder import AotResult
    from sparkbuild.jobplan.machine import BuildPlan
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache
    from sparkbuild.team.compile_cache import CompileCacheResult
    from sparkbuild.team.dist_record import DistResult
    from sparkbuild.vendoring.plan import VendorPlan

RECORDED_ENVIRONMENT = ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVCC_THREADS", "CMAKE_ARGS",
                        "CMAKE_GENERATOR")
"""The build's variables the manifest records."""


@dataclass(frozen=True)
class BuildTorch:
    """The torch the extensions are compiled against."""

    version: str | None
    site: Path | None
    """The build environment's site-packages, the one holding torch if any (None with
    ``--use-existing-torch``: the running interpreter's)."""
    existing: bool = False
    """``--use-existing-torch``: the running interpreter's torch."""
    running: RunningTorch | None = None

    def toolchain(self) -> dict[str, str | None]:
        """The manifest's ``toolchain`` entries for it."""
        if not self.existing:
            return {"torch": self.version}
        torch = self.running
        return {"torch": torch.version if torch else None,
                "torch_cuda": torch.cuda if torch else None,
                "torch_from": f"existing: {torch.location}" if torch else None}


def build_site(python: Path) -> Path | None:
    """The site-packages of the environment of ``python`` that holds torch (else its first)."""
    sites = sorted(python.parent.parent.glob("lib*/python*/site-packages"))
    return next((site for site in sites if tools.torch_version(site) is not None),
                sites[0] if sites else None)


def build_torch(python: Path, existing_torch: bool) -> BuildTorch:
    """The torch installed in the build environment of ``python``; ``existing_torch``: the
    running interpreter's."""
    if existing_torch:
        from sparkbuild.compile.existing_torch import running_torch

        running = running_torch()
        return BuildTorch(running.version if running else None, None, True, running)
    site = build_site(python)
    version = tools.torch_version(site) if site is not None else None
    return BuildTorch(str(version) if version is not None else None, site)


@dataclass(frozen=True, kw_only=True)
class FinishedBuild:
    """The facts of one finished ``wheel`` build, passed whole to the wheelhouse: what the
    manifest records of it and what the wheelhouse is written from."""

    recipe: Recipe
    plan: BuildPlan
    outcome: BuildOutcome
    torch: BuildTorch
    cache: Cache
    offline: bool
    use_existing_torch: bool
    targets: Sequence[str]
    """The extensions built (() = all)."""
    bundle: Path | None = None
    compile_cache: CompileCacheResult | None = None
    vendored: VendorPlan | None = None
    aot: AotResult | None = None
    """flashinfer's jit-cache built alongside (None without ``[flashinfer] aot``)."""
    dist: DistResult | None = None
    extensions: ExtensionSet | None = None


def build_settings(build: FinishedBuild, *, node_profile: list[dict[str, str]]
                   ) -> dict[str, Any]:
    """The manifest's ``build_settings`` of one build."""
    from sparkbuild.vendoring.patched import dependency_records

    plan, outcome, vendored = build.plan, build.outcome, build.vendored
    compile_cache, dist, aot, extensions = (build.compile_cache, build.dist, build.aot,
                                            build.extensions)
    return {
        "archs": list(build.recipe.target.cuda_archs),
        "jobs": plan.max_jobs,
        "nvcc_threads": plan.nvcc_threads,
        "launcher": plan.launcher,
        "offline": build.offline,
        "use_existing_torch": build.use_existing_torch,
        "targets": list(build.targets) or "all",
        "bundle": str(build.bundle) if build.bundle else None,
        "environment": {key: outcome.env[key] for key in RECORDED_ENVIRONMENT
                        if key in outcome.env},
        "compile_cache": compile_cache.to_dict() if compile_cache else None,
        "dist": dist.to_dict() if dist else None,
        "pool": plan.pool.to_dict() if plan.pool else None,
        "units": outcome.timeline.units_table() if outcome.timeline else [],
        "dependencies": dependency_records(vendored, build.cache) if vendored else [],
        "flashinfer_aot": aot.to_dict() if aot else None,
        "node_profile": node_profile,
        "start_modules": list(build.recipe.node.start_modules),
        "extension_set": extensions.to_dict() if extensions else None,
        "placeholders": [source.placeholder.to_dict() for source in vendored.excluded
                         if source.placeholder is not None] if vendored else [],
    }
