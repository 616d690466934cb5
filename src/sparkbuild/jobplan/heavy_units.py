"""Whether a unit is heavy: the one test the planner and sparkbuild's ninja both apply.

A heavy unit compiles in the pool that memory bounds (:mod:`sparkbuild.jobplan.pools`).  A
unit killed for memory before is heavy, whatever was measured; a measured one is heavy when
its peak is above the plan's threshold; one never measured is heavy when the rule names it
(its source path matches one of the plan's patterns, the first build's rule).

The planner judges its candidate tables and its plan's units with :func:`is_heavy`
(:func:`sparkbuild.jobplan.pools.heavy_indices`), and the ninja wrapper judges each compile
edge of ``build.ninja`` with it from the plan file (:mod:`sparkbuild.jobplan.ninja_shim`),
so what doctor predicts is what ninja is given.

With dist, the wrapper lists the heavy edges' outputs (:func:`write_heavy_outputs`) for the
compiler launcher in front of sccache (sparkbuild.team.heavy_gate), which keys a compile by
its output the same way (:func:`output_key`).

This module keeps to the standard library: the ninja wrapper and the launcher import it in
the build's own Python.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path


def rule_match(source: str, patterns: Iterable[str]) -> bool:
    """Whether the rule names ``source``: one of ``patterns`` is found in its path
    (case-insensitive)."""
    return any(re.search(p, source, re.IGNORECASE) for p in patterns)


def is_heavy(peak: float | None, threshold: float, *, killed: bool, by_rule: bool) -> bool:
    """Killed for memory before: heavy.  Measured (``peak``, in the threshold's scale):
    heavy when strictly above ``threshold``.  Never measured: heavy when the rule names it
    (``by_rule``)."""
    if killed:
        return True
    if peak is not None:
        return peak > threshold
    return by_rule


def output_key(output: str, cwd: str) -> str:
    """An output as the heavy list keys it: absolute and normalised (ninja runs every
    command in its build directory, against which the manifest's paths are relative)."""
    return os.path.normpath(Path(cwd) / output)


def write_heavy_outputs(directory: Path, build_dir: Path, name: str,
                        outputs: Iterable[str]) -> Path:
    """The heavy edges' outputs of one manifest (``name``: a file name of the build's own),
    absolute, for the launcher: one JSON list a manifest, replaced whole."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    keys = sorted({output_key(o, str(build_dir)) for o in outputs})
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(keys) + "\n", encoding="utf-8")
    partial.replace(path)
    return path
