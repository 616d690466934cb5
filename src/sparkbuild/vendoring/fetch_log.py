"""What CMake itself fetched: the dependency provider's record, and what the plan missed.

The build's configure runs with sparkbuild's dependency provider
(``build_tools/sparkbuild_provider.cmake``), which appends one line per ``FetchContent``
dependency to the fetch log (``$SPARKBUILD_FETCH_LOG``: the name, then each option with its
values).  After an online build, :func:`vendor_unplanned` reads it and vendors every
dependency the CMake reader's plan (:mod:`sparkbuild.vendoring.plan`) did not name, and the
cache's index remembers them for the recipe (:func:`sparkbuild.vendoring.index.remember_missed`),
so the next offline build has them.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from sparkbuild.console import warn
from sparkbuild.vendoring.fetch import fetch_source
from sparkbuild.vendoring.index import remember_missed
from sparkbuild.vendoring.plan import SourcePlan
from sparkbuild.vendoring.sources import fetch_options

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from sparkbuild.store.cache import Cache
    from sparkbuild.vendoring.plan import VendorPlan

RECORDED_KEYS = frozenset({"GIT_REPOSITORY", "GIT_TAG", "URL", "URL_HASH", "SOURCE_DIR",
                           "SOURCE_SUBDIR", "GIT_SUBMODULES"})
"""The options of a dependency the provider records."""


def read_fetch_log(path: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    """The provider's record: dependency name -> {KEY: values}."""
    recorded: dict[str, dict[str, tuple[str, ...]]] = {}
    if not path.is_file():
        return recorded
    for line in path.read_text(encoding="utf-8").splitlines():
        name, *args = line.split("\t")
        if name:  # FetchContent_Declare's own arguments, the recorded keywords' alone
            recorded[name] = {key: values for key, values in fetch_options(tuple(args)).items()
                              if key in RECORDED_KEYS}
    return recorded


def unplanned_sources(recorded: Mapping[str, Mapping[str, tuple[str, ...]]],
                      plan: VendorPlan) -> list[SourcePlan]:
    """The dependencies of ``recorded`` (the fetch log) that ``plan`` lacks, as sources to
    vendor: a git repository at its tag, or a URL with its hash and mirrors."""
    planned = {source.name.lower() for source in plan.sources}
    missed = []
    for name, options in recorded.items():
        if name.lower() in planned:
            continue
        git, urls = options.get("GIT_REPOSITORY"), options.get("URL")
        if git:
            tag = options.get("GIT_TAG")
            missed.append(SourcePlan(name=name, kind="git", url=git[0],
                                     ref=tag[0] if tag else "HEAD", where="recorded by CMake"))
        elif urls:
            url_hash = options.get("URL_HASH")
            missed.append(SourcePlan(name=name, kind="url", url=urls[0], ref=None,
                                     url_hash=url_hash[0] if url_hash else None,
                                     mirrors=urls[1:], where="recorded by CMake"))
    return missed


def vendor_unplanned(cache: Cache, recipe_name: str, plan: VendorPlan, fetch_log: Path,
                     scratch: Path) -> list[SourcePlan]:
    """Vendor what CMake fetched beyond ``plan`` (each named in a warning) and remember it
    for the recipe; returns those sources."""
    missed = unplanned_sources(read_fetch_log(fetch_log), plan)
    if not missed:
        return missed
    with cache.locked():
        for source in missed:
            warn(f"CMake fetched {source.name} ({source.url}), which the CMake reader did not "
                 "find; vendoring it now so that offline builds have it")
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            fetch_source(cache, source, scratch)
        remember_missed(cache, recipe_name, missed)
    shutil.rmtree(scratch, ignore_errors=True)
    return missed
