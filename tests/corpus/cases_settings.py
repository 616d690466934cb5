"""Hostile cases of the environment and the job plan: what ``doctor`` reads besides its
command line.

Each case is a :class:`~corpus.cases.Case`; :data:`CASES` joins the corpus in
:func:`corpus.cases._all_cases`.  Two root causes, named above their groups; every group
holds cases that fail on code without the fix (a value of the wrong type ignored, a plan
that leaves the recipe out).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from corpus.cases import Case, Invocation
from sparkbuild.errors import UsageError
from sparkbuild.recipe import DEFAULT_RECIPE

if TYPE_CHECKING:
    from collections.abc import Callable

DOCTOR = ("sparkbuild.compile.doctor", "sparkbuild.toolchain.tools")
PLAN_VARIABLES = ("MAX_JOBS", "NVCC_THREADS", "SPARKBUILD_JOB_PLAN")


def _doctor(env: dict[str, str], *args: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        unset = tuple(name for name in PLAN_VARIABLES if name not in env)
        return Invocation(["doctor", *args],
                          env={"SPARKBUILD_CACHE": str(work / "cache"), **env}, unset=unset)
    return build


def _recipe(build_table: str) -> Callable[[Path], Path]:
    """A recipe whose ``[build]`` table is ``build_table``."""
    def write(work: Path) -> Path:
        (work / "series").write_text("# empty\n", encoding="utf-8")
        path = work / "plan.toml"
        path.write_text(f"""
[recipe]
name = "plan"
package = "demo"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
[build]
{build_table}
""", encoding="utf-8")
        return path
    return write


def _doctor_recipe(write: Callable[[Path], Path], env: dict[str, str] | None = None
                   ) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        inv = _doctor(env or {})(work)
        inv.args += ["--recipe", str(write(work))]
        return inv
    return build


def _default_recipe(env: dict[str, str]) -> Callable[[Path], Invocation]:
    return _doctor_recipe(lambda work: DEFAULT_RECIPE, env)


CASES = [
    # -- a variable of the wrong type was read as unset: doctor planned as if it were not
    #    there, and wheel ignored it -- now a UsageError that names the variable -----------
    Case("env-max-jobs-word", "cli", UsageError,
         "MAX_JOBS must be a positive whole number, not 'three'",
         _doctor({"MAX_JOBS": "three"}), DOCTOR),
    Case("env-max-jobs-zero", "cli", UsageError,
         "MAX_JOBS must be a positive whole number, not '0'", _doctor({"MAX_JOBS": "0"}), DOCTOR),
    Case("env-max-jobs-fraction", "cli", UsageError,
         "MAX_JOBS must be a positive whole number, not '2.5'",
         _doctor({"MAX_JOBS": "2.5"}), DOCTOR),
    Case("env-nvcc-threads-negative", "cli", UsageError,
         "NVCC_THREADS must be a positive whole number, not '-2'",
         _doctor({"NVCC_THREADS": "-2"}), DOCTOR),
    Case("env-job-plan-unknown", "cli", UsageError,
         "SPARKBUILD_JOB_PLAN must be one of pools, single, not 'fast'",
         _doctor({"SPARKBUILD_JOB_PLAN": "fast"}), DOCTOR),
    Case("env-job-plan-misspelt", "cli", UsageError,
         "SPARKBUILD_JOB_PLAN must be one of pools, single, not 'singel'",
         _doctor({"SPARKBUILD_JOB_PLAN": "singel"}), DOCTOR),
    # -- doctor planned without the recipe (its jobs, nvcc_threads, flashinfer's builder's
    #    memory) and said no source for a number it was given: not the plan wheel builds ---
    Case("env-doctor-recipe-jobs", "cli", None,
         "MAX_JOBS=3: as requested (the recipe's [build] jobs)",
         _doctor_recipe(_recipe("jobs = 3")), DOCTOR),
    Case("env-doctor-recipe-nvcc-threads", "cli", None,
         "NVCC_THREADS=2: as requested (the recipe's [build] nvcc_threads)",
         _doctor_recipe(_recipe("nvcc_threads = 2")), DOCTOR),
    Case("env-doctor-environment-over-recipe", "cli", None,
         "MAX_JOBS=3: as requested ($MAX_JOBS)",
         _doctor_recipe(_recipe("jobs = 5"), {"MAX_JOBS": "3"}), DOCTOR),
    Case("env-doctor-builder-memory", "cli", None,
         "flashinfer's builder runs alongside the compile",
         _default_recipe({}), DOCTOR),
]
