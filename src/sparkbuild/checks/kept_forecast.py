"""The code forecast, kept in the cache and reused while what it was read from stands.

The forecast (:mod:`sparkbuild.checks.code_forecast`) runs the tree's CMake and its
configure-time generators: 6 to 16 s for vLLM 0.20.0, on every
``wheel`` -- also on a warm rebuild after a one-line patch to a ``.cu`` file, which changes
no unit's ``-gencode``.  Its result is kept under ``code-forecasts/KEY``, KEY the sha256 of:

* what the vendor plan's record is keyed on (:func:`sparkbuild.vendoring.kept_plan.
  recorder_inputs`: the tree's CMake files, the environment its runs can read, torch, the
  recorder's scripts, cmake, the Python and its distributions), with the forecast's own
  code in place of the vendor planner's;
* the recipe's targets and ``allow_jit``, the extensions built, the build's Python and
  site-packages, and the dependencies' ``-D`` values and variables.

The configure-time generators read Python files that are not CMake code.  The entry keeps
the sha256 of every ``.py`` file in the directories of the generators that ran, and a
changed or missing one is a miss.  A kept entry that does not read back exactly is a miss,
never an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.checks import check_plan, code_forecast
from sparkbuild.checks.check_plan import GencodeCoverage
from sparkbuild.checks.code_forecast import FORECAST_STATUSES, CodeForecast
from sparkbuild.records import one_of
from sparkbuild.store.env_key import key_items
from sparkbuild.store.hashing import sha256_bytes, sha256_file
from sparkbuild.toolchain import cmake_recorder, compile_flags
from sparkbuild.toolchain.sass import COVERAGE_KINDS
from sparkbuild.vendoring.kept_plan import recorder_inputs

if TYPE_CHECKING:
    from sparkbuild.checks.code_forecast import ForecastInputs
    from sparkbuild.recipe import Recipe
    from sparkbuild.store.cache import Cache

SCHEMA = 1
NAMESPACE = "code-forecasts"
MODULES = (code_forecast, check_plan, compile_flags, cmake_recorder)


def forecast_key(inputs: ForecastInputs, recipe: Recipe) -> str:
    keyed = {
        "schema": SCHEMA,
        "recorder": recorder_inputs(inputs.tree, inputs.env, None, MODULES),
        "archs": list(recipe.target.cuda_archs),
        "allow_jit": recipe.target.allow_jit,
        "targets": list(inputs.targets),
        "python": str(inputs.python),
        "site": str(inputs.site) if inputs.site else None,
        "defines": sorted(inputs.cmake_defines.items()),
        "env": key_items(inputs.env),
    }
    return sha256_bytes(json.dumps(keyed, sort_keys=True).encode())


def generator_files(tree: Path, scripts: list[str]) -> dict[str, str]:
    """Every ``.py`` file beside each generator script that ran, by its sha256."""
    found: dict[str, str] = {}
    for script in scripts:
        directory = (tree / script).parent
        if not directory.resolve().is_relative_to(tree.resolve()):
            continue
        for path in sorted(directory.glob("*.py")):
            found[path.relative_to(tree).as_posix()] = sha256_file(path, progress=False)
    return found


def keep(cache: Cache, key: str, forecast: CodeForecast, generators: dict[str, str]) -> None:
    if forecast.status == "unknown":
        return  # nothing read: the next run reads again
    cache.keep(NAMESPACE, key, SCHEMA, {"generators": generators,
                                        "forecast": forecast.to_dict()})


def _coverage(item: dict[str, Any]) -> GencodeCoverage:
    gencode = item["gencode"]
    if not isinstance(gencode, list) or not all(isinstance(g, str) for g in gencode):
        raise TypeError("gencode")
    kind = one_of(item["coverage"], COVERAGE_KINDS)
    if kind is None:
        raise ValueError("coverage")
    return GencodeCoverage(str(item["unit"]), str(item["target"]), tuple(gencode), kind,
                           item["ptx_arch"])


def kept(cache: Cache, key: str, tree: Path) -> CodeForecast | None:
    """The forecast kept under ``key``, if its generators' files stand and it reads back
    exactly; None otherwise."""
    entry = cache.kept(NAMESPACE, key, SCHEMA)
    if entry is None:
        return None
    try:
        generators = entry["generators"]
        stored = entry["forecast"]
        for relative, digest in generators.items():
            path = tree / relative
            if not path.is_file() or sha256_file(path, progress=False) != digest:
                return None
        status = one_of(stored["status"], FORECAST_STATUSES)
        if status is None:
            raise ValueError("status")
        found = CodeForecast(
            status, int(stored["units"]),
            {str(target): [_coverage(item) for item in items]
             for target, items in stored["lacking"].items()},
            str(stored["reason"]), float(stored["seconds"]), reused=entry["when"])
        exact = json.loads(json.dumps(found.to_dict() | {"reused_since": None})) == (
            stored | {"reused_since": None})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    consistent = found.status == ("lacking" if found.lacking else "clear") and found.units > 0
    return found if exact and consistent else None


def reusing_forecast(cache: Cache, inputs: ForecastInputs, recipe: Recipe) -> CodeForecast:
    """The kept forecast when what it was read from stands, else a new one, kept."""
    key = forecast_key(inputs, recipe)
    found = kept(cache, key, inputs.tree)
    if found is not None:
        return found
    forecast = code_forecast.forecast_code(inputs, recipe)
    keep(cache, key, forecast, generator_files(inputs.tree, forecast.generators))
    return forecast
