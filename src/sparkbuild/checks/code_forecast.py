"""Before the first compile: which units the arch lists give no native code for the target.

``verify`` judges the built libraries kernel by kernel, after the build.  Most of what it
refuses is decided long before: the tree's arch lists give each source its ``-gencode``, and
a list such as vLLM's ``MARLIN_ARCHS "8.0+PTX"`` gives a ``9.0a`` target PTX only
(``compute_80``), which the driver JIT-compiles on every node.  A build of vLLM 0.20.0's
``_C`` for 9.0a compiles 60 units (631 s on 16 cores) and flashinfer's modules before
verify refuses it for 365 Marlin kernels that are PTX only.

This stage asks the same question first.  The tree's CMake is recorded in script mode
(:mod:`sparkbuild.toolchain.cmake_recorder`, the recorder ``check`` uses), with the
recipe's targets, the build environment's torch and the materialized dependencies (the
configure-time generators need CUTLASS's Python library), on a scratch copy of the tree
(the generators write next to themselves).  Every CUDA unit of the extensions this build
compiles (``--targets``) whose gencode gives a target no SASS is named, before anything
compiles, and refused as verify would refuse its kernels, by the kernel policy
(:mod:`sparkbuild.toolchain.kernel_policy`): no code always, PTX only unless the recipe sets
``allow_jit``.

A forecast that could not read the tree, or read no CUDA unit of the built extensions,
passes nothing: it says so, and verify stays the judge after the build.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from sparkbuild.checks.check_plan import (
    GencodeCoverage,
    gencodes,
    make_recorder,
    scratch_copy,
    unit_key,
    units_without_target_sass,
)
from sparkbuild.checks.start_imports import setup_extensions
from sparkbuild.checks.target_code import target_arch_fact
from sparkbuild.console import info, step, warn
from sparkbuild.errors import SparkbuildError, VerifyError
from sparkbuild.records import EMPTY, Record, as_json, rounded
from sparkbuild.toolchain import sass, tools
from sparkbuild.toolchain.cmake_recorder import record_build
from sparkbuild.toolchain.kernel_policy import refused

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sparkbuild.recipe import Recipe
    from sparkbuild.toolchain.cmake_recorder import BuildRecord

SHOWN = 8
"""Units named per extension in the refusal (the JSON names them all)."""


@dataclass(frozen=True)
class ForecastInputs:
    """What the build will see: its tree, interpreter, torch and dependencies."""

    tree: Path
    work: Path
    python: Path
    site: Path | None
    """The build environment's site-packages (None: this interpreter's torch)."""
    cmake_defines: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    targets: tuple[str, ...] = ()
    """The extensions built (empty: all)."""
    sources: Mapping[str, Path] = field(default_factory=dict)
    """The materialized fetched projects (FetchContent name -> directory)."""


ForecastStatus = Literal["clear", "lacking", "unknown"]
FORECAST_STATUSES: tuple[ForecastStatus, ...] = ("clear", "lacking", "unknown")


@dataclass
class CodeForecast(Record):
    """The forecast's result: the units read and those lacking native code for a target."""

    json_order: ClassVar[tuple[str, ...]] = ("status", "units", "reason", "seconds", "lacking")

    status: ForecastStatus
    """``clear`` (every unit read has native code), ``lacking`` (some have none) or
    ``unknown`` (the tree could not be read, or no CUDA unit of the build was found)."""
    units: int = 0
    """CUDA units of the built extensions the recorder found."""
    lacking: dict[str, list[GencodeCoverage]] = field(default_factory=dict)
    """Extension -> its units with no SASS for a target."""
    reason: str = ""
    seconds: float = field(default=0.0, metadata=as_json(dump=rounded(2)))
    reused: str | None = field(default=None, metadata=as_json("reused_since", omit=EMPTY))
    """When the kept forecast this one is was made (sparkbuild.checks.kept_forecast)."""
    generators: list[str] = field(default_factory=list, metadata=as_json(skip=True))
    """The tree's configure-time generator scripts that ran, tree-relative."""

    def describe(self) -> str:
        """One line per extension: how many units, of which kind, and the first few."""
        return describe_units(self.lacking)

    def refusing(self, *, allow_jit: bool) -> dict[str, list[GencodeCoverage]]:
        """Extension -> its units the kernel policy refuses (no code; PTX only unless
        ``allow_jit``), as verify would refuse their kernels after the build."""
        found = {target: [c for c in units if refused(c.kind, allow_jit=allow_jit)]
                 for target, units in self.lacking.items()}
        return {target: units for target, units in found.items() if units}


def describe_units(lacking: Mapping[str, Sequence[GencodeCoverage]]) -> str:
    """One line per extension of ``lacking``: how many units, of which kind, the first few."""
    lines = []
    for target, found in lacking.items():
        kinds = sorted({f"PTX only ({c.code})" if c.code else "no code" for c in found})
        names = ", ".join(c.unit for c in found[:SHOWN])
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        lines.append(f"{target}: {len(found)} unit(s), {' / '.join(kinds)} for "
                     f"{found[0].target}: {names}{more}")
    return "\n  ".join(lines)


def lacking_by_target(record: BuildRecord, root: Path, archs: Sequence[str],
                      targets: Sequence[str]) -> tuple[int, dict[str, list[GencodeCoverage]]]:
    """(CUDA units of the built extensions, extension -> its units without target SASS).

    A unit belongs to every target that lists its source; ``targets`` empty means all."""
    owners: dict[str, list[str]] = {}
    for source in record.sources():
        names = [t.name for t in record.targets_of(source) if not targets or t.name in targets]
        if names:
            owners[unit_key(source, root)] = names
    every = gencodes(record, root)
    built = {unit: codes for unit, codes in every.items() if unit in owners}
    found: dict[str, list[GencodeCoverage]] = {}
    for coverage in units_without_target_sass(built, archs):
        for name in owners[coverage.unit]:
            found.setdefault(name, []).append(coverage)
    for name in sorted({name for names in owners.values() for name in names}):
        fact, _units, _native = target_arch_fact(record, root, name, archs, every)
        if fact == "no_code":  # no unit of it gets a -gencode: each is named, no code
            found[name] = [GencodeCoverage(unit, sass.target_name(arch), (), sass.NO_CODE, None)
                           for unit in sorted(u for u in built if name in owners[u])
                           for arch in archs]
    return len(built), dict(sorted(found.items()))


def followed_projects(sources: Mapping[str, Path], names: Sequence[str]) -> tuple[str, ...]:
    """The fetched projects whose own CMakeLists.txt defines an extension of setup.py
    (vllm-flash-attn's ``_vllm_fa2_C``): the recorder reads them too."""
    lasts = [name.rsplit(".", 1)[-1] for name in names]
    found = []
    for project, root in sources.items():
        try:
            text = (root / "CMakeLists.txt").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(re.search(rf"\b{re.escape(last)}\b", text) for last in lasts):
            found.append(project)
    return tuple(found)


def _record(inputs: ForecastInputs, recipe: Recipe) -> BuildRecord:
    recorder = make_recorder(tools.find_nvcc(), recipe)
    scratch = scratch_copy(inputs.tree, inputs.work / "src")
    record_inputs = recorder.inputs(scratch, inputs.work / "cmake", generators=True,
                                    python=inputs.python, site=inputs.site)
    record_inputs = replace(record_inputs, env={**record_inputs.env, **inputs.env},
                            defines={**record_inputs.defines, **inputs.cmake_defines},
                            follow_fetched=followed_projects(inputs.sources,
                                                             setup_extensions(scratch)))
    return record_build(record_inputs)


def forecast_code(inputs: ForecastInputs, recipe: Recipe) -> CodeForecast:
    """Record the tree as the build will configure it; name what lacks native code."""
    started = time.monotonic()
    step("forecasting each unit's code from the tree's arch lists (cmake script mode)")
    shutil.rmtree(inputs.work, ignore_errors=True)
    try:
        record = _record(inputs, recipe)
    except SparkbuildError as exc:
        return CodeForecast("unknown", reason=f"the tree's CMake could not be read: {exc.what}",
                            seconds=time.monotonic() - started)
    finally:
        shutil.rmtree(inputs.work / "src", ignore_errors=True)
    scratch = inputs.work / "src"
    units, lacking = lacking_by_target(record, scratch, recipe.target.cuda_archs,
                                       inputs.targets)
    seconds = time.monotonic() - started
    if units == 0:
        built = ", ".join(inputs.targets) or "any extension"
        return CodeForecast("unknown", reason=f"the recorded CMake gives {built} no CUDA unit",
                            seconds=seconds)
    generators = [unit_key(script, scratch) for script in record.generators]
    return CodeForecast("lacking" if lacking else "clear", units, lacking, seconds=seconds,
                        generators=generators)


def judge_forecast(forecast: CodeForecast, recipe: Recipe) -> None:
    """Print the forecast; refuse, before the build, what verify would refuse after it (the
    kernel policy: no code always, PTX only unless ``allow_jit``)."""
    if forecast.status == "unknown":
        warn(f"code forecast: not made ({forecast.reason}); verify reads the machine code "
             "after the build")
        return
    if forecast.status == "clear":
        made = f"kept since {forecast.reused}" if forecast.reused else \
            f"{forecast.seconds:.1f} s"
        info(f"code forecast: {forecast.units} CUDA unit(s), each with native code for "
             f"{', '.join(recipe.target.cuda_archs)} ({made})")
        return
    allow_jit = recipe.target.allow_jit
    refusing = forecast.refusing(allow_jit=allow_jit)
    if not refusing:
        warn("code forecast: allow_jit: the driver will JIT-compile these at first use:\n  "
             + forecast.describe())
        return
    first = next(iter(refusing.values()))[0]
    raise VerifyError(
        f"the tree's arch lists give {sum(map(len, refusing.values()))} unit(s) no "
        f"native code for {', '.join(recipe.target.cuda_archs)}; verify would refuse the "
        f"wheelhouse after the build, so nothing was compiled:\n  " + describe_units(refusing),
        where=f"{first.unit} [{' '.join(first.gencode)}]",
        hint="add the target to the arch lists that give these units no native code (a series "
        "edit: the Spark's cmake-sm121-archs does it for 12.1a)" + (
            "; allow_jit accepts PTX only, never a unit with no code for the target"
            if allow_jit else ", or set `allow_jit = true` under [target] to ship PTX-only "
            "units, JIT-compiled on every node at first use"),
    )
