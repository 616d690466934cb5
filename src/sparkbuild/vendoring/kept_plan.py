"""The recorder's part of a vendor plan, kept in the cache and reused while its inputs stand.

Planning a tree costs five runs of its CMake under the recorder (:mod:`.sources`), each
of which starts Python and imports torch for the tree's ``run_python`` calls: 10-20 s for
vLLM, on every ``wheel`` -- also on a warm rebuild after a one-line patch, whose CMake is
the same.  The rest of the plan (build requirements, crates, the recipe's ``[vendor]``
choices, missed sources, the arch edit) reads a few files and is always made afresh.

The kept part is stored under ``vendor-plans/KEY`` by :meth:`Cache.record`, KEY the
sha256 of everything the recorder's runs are computed from (:func:`recorder_inputs`):

* the tree's path and every CMake file of the tree (``CMakeLists.txt``, ``*.cmake``: the
  recorder's own listing, the files its runs can include), each by its sha256;
* the torch pin (from the tree's build requirements) and the environment the runs can read:
  every variable the tree's CMake names (``$ENV{NAME}``, ``ENV{NAME}``) and those CMake,
  nvcc, torch and the build read themselves (:data:`BUILD_VARIABLES`,
  :data:`BUILD_PREFIXES`), from the planner's environment (with the recipe's ``[build]
  env``: ``CMAKE_ARGS``, ``*_SRC_DIR``) and from the process's.  Not the rest: a shell's
  ``_``, a test runner's ``PYTEST_CURRENT_TEST`` or a terminal's variables change between
  two runs of one build and would make every rebuild a miss (the example's
  online-then-offline test showed it); a search path's repeated entries are dropped
  (:mod:`sparkbuild.store.env_key`);
* the recorder: its CMake scripts, the Python modules that drive it and read its
  output, the assumption sets, the cmake it runs (path, size, mtime), and the Python its
  ``run_python`` calls start (executable, version and every installed distribution);
* :data:`SCHEMA`, raised when the stored form changes.

What is not in it, on purpose: the contents of a tree file that is not CMake code (a
FetchContent declaration computed from ``file(READ)`` of one would be missed; vLLM's only
such read is of a fetched dependency, outside the tree, which the recorder never reads).

Only ``wheel`` reuses (``vendor_for_recipe(reuse=True)``); ``vendor`` and ``bundle`` plan
afresh.  A kept record that cannot be read back exactly is a miss, never an error.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.console import step
from sparkbuild.resources import build_tools_dir
from sparkbuild.store.env_key import key_items
from sparkbuild.store.hashing import sha256_bytes, sha256_file
from sparkbuild.toolchain import cmake_recorder, tools
from sparkbuild.vendoring import plan, sources
from sparkbuild.vendoring.plan import (
    EXTERNAL_KINDS,
    RecordedSources,
    SourcePlan,
    SourcesOf,
    record_sources,
    source_plan_from,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

    from sparkbuild.store.cache import Cache

SCHEMA = 2
NAMESPACE = "vendor-plans"
BUILD_VARIABLES = frozenset({
    "PATH", "LD_LIBRARY_PATH", "CPATH", "LIBRARY_PATH", "PKG_CONFIG_PATH", "CC", "CXX",
    "CUDAHOSTCXX", "CFLAGS", "CXXFLAGS", "CUDAFLAGS", "LDFLAGS", "MAX_JOBS"})
"""Variables CMake, the compilers and vLLM's setup read whoever names them."""
BUILD_PREFIXES = ("CMAKE", "CUDA", "NVCC", "TORCH", "VLLM", "SPARKBUILD", "PYTHON")
_ENV_READ = re.compile(r"ENV\{(\w+)\}")


def _file_hashes(paths: list[Path], root: Path) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): sha256_file(path, progress=False)
            for path in paths}


def _cmake_identity() -> list[object] | None:
    found = tools.locate_tool("cmake")
    if found is None:
        return None
    path = found.resolve()
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def _recorder_identity(modules: tuple[ModuleType, ...]) -> dict[str, Any]:
    """What the recorder is: its scripts, the Python code that drives it and reads its
    output (``modules``), its assumptions, its tools."""
    scripts = build_tools_dir()
    code = [Path(module.__file__ or "") for module in modules]
    return {
        "scripts": _file_hashes(sorted(scripts.glob("*.cmake")), scripts),
        "code": {path.name: sha256_file(path, progress=False) for path in code},
        "assumptions": repr((sources.ASSUMPTIONS, sources.VENDOR_ARCHS, sources.ASSUMED_GCC,
                             sources.CPUINFO, str(tools.DEFAULT_CUDA_ROOT))),
        "cmake": _cmake_identity(),
        "python": [sys.executable, sys.version, sysconfig.get_paths()["include"]],
        "distributions": sorted(f"{d.metadata['Name']}=={d.version}"
                                for d in importlib.metadata.distributions()),
    }


def _read_by_runs(env: Mapping[str, str], named: set[str]) -> list[tuple[str, str]]:
    """The variables of ``env`` the recorder's runs can read (see the module docstring)."""
    return key_items({name: value for name, value in env.items()
                      if name in named or name in BUILD_VARIABLES
                      or name.startswith(BUILD_PREFIXES)})


def recorder_inputs(tree: Path, env: Mapping[str, str], torch: str | None,
                    modules: tuple[ModuleType, ...] = (plan, sources, cmake_recorder)
                    ) -> dict[str, Any]:
    """Everything :func:`~sparkbuild.vendoring.plan.record_sources` is computed from
    (``modules``: the code that drives the recorder; another reader of its output, such as
    the code forecast, names its own)."""
    hashes: dict[str, str] = {}
    named: set[str] = set()
    for path in cmake_recorder.cmake_files(tree):  # each read once: its hash, its $ENV{}s
        data = path.read_bytes()
        hashes[path.relative_to(tree).as_posix()] = sha256_bytes(data)
        named.update(_ENV_READ.findall(data.decode("utf-8", errors="replace")))
    return {
        "schema": SCHEMA,
        "tree": str(tree),
        "cmake_files": hashes,
        "torch": torch,
        "environment": _read_by_runs(env, named),
        "process_environment": _read_by_runs(os.environ, named),
        "recorder": _recorder_identity(modules),
    }


def recorder_key(tree: Path, env: Mapping[str, str], torch: str | None) -> str:
    inputs = recorder_inputs(tree, env, torch)
    return sha256_bytes(json.dumps(inputs, sort_keys=True).encode())


def _payload(recorded: RecordedSources) -> dict[str, Any]:
    return {
        "sources": [dataclasses.asdict(source) for source in recorded.sources],
        "unreached": [dataclasses.asdict(source) for source in recorded.unreached],
        "notes": list(recorded.notes),
    }


def keep(cache: Cache, key: str, recorded: RecordedSources) -> None:
    cache.keep(NAMESPACE, key, SCHEMA, _payload(recorded))


def _words(value: object) -> bool:
    return isinstance(value, tuple) and all(isinstance(item, str) for item in value)


def _source_well_formed(source: SourcePlan) -> bool:
    values = dataclasses.asdict(source)
    text = all(isinstance(values[name], str) for name in ("name", "kind", "url", "method",
                                                          "where"))
    optional = all(values[name] is None or isinstance(values[name], str)
                   for name in ("ref", "url_hash", "override", "override_subdir", "patched"))
    return (text and optional and isinstance(source.certain, bool) and _words(source.mirrors)
            and source.kind in EXTERNAL_KINDS
            and (source.submodules is None or _words(source.submodules)))


def _well_formed(recorded: RecordedSources) -> bool:
    """Every field of the type a recorder gives it (a hand-edited entry is no entry)."""
    return (_words(recorded.notes)
            and all(map(_source_well_formed, (*recorded.sources, *recorded.unreached))))


def kept(cache: Cache, key: str) -> RecordedSources | None:
    """The record kept under ``key``, only if it reads back to exactly what was stored."""
    entry = cache.kept(NAMESPACE, key, SCHEMA)
    if entry is None:
        return None
    try:
        found = RecordedSources(
            tuple(source_plan_from(item) for item in entry["sources"]),
            tuple(source_plan_from(item) for item in entry["unreached"]),
            tuple(entry["notes"]), reused=entry["when"])
        stored = {name: entry[name] for name in ("sources", "unreached", "notes")}
        exact = json.loads(json.dumps(_payload(found))) == stored
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return found if exact and _well_formed(found) else None


def reusing(cache: Cache, record: SourcesOf = record_sources) -> SourcesOf:
    """``record`` behind the cache: a kept record when its inputs are unchanged, else
    ``record``'s, kept for the next run."""

    def sources_of(tree: Path, env: Mapping[str, str], torch: str | None) -> RecordedSources:
        key = recorder_key(tree, env, torch)
        found = kept(cache, key)
        if found is not None:
            step(f"vendor plan reused: inputs unchanged since {found.reused}")
            return found
        recorded = record(tree, env, torch)
        keep(cache, key, recorded)
        return recorded

    return sources_of
