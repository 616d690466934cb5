"""Longest first: the order in which a build's compile units start.

Ninja starts the ready edges of equal priority in the order ``build.ninja`` lists them
(checked with ninja 1.11 and 1.13: it does not read ``.ninja_log``'s durations), and
CMake lists a target's units in its source order.  In vLLM's ``_moe_C`` at 12.1a that
order starts two Marlin MoE units of 203 and 208 s 85 s into the compile, which takes
293 s where its longest unit takes 216 s (BENCHMARKS.md, "The ``_moe_C`` part with the
pool plan, measured").  With the units'
measured seconds (the cache's unit table, :mod:`sparkbuild.jobplan.unit_memory`), the ninja
wrapper lists the compile edges longest first, so the longest units start at once and the
short ones fill the cores at the end (list scheduling in that order: LPT).

A unit with no measured seconds counts as long as the longest measured one, so a new unit
is never left to start last; with nothing measured (a first build) the order is CMake's.
Ties keep CMake's order.  The planner's simulator (:mod:`sparkbuild.jobplan.pools`) orders
its table with the same function, so what doctor predicts is what ninja is given.

This module keeps to the standard library: the ninja wrapper imports it in the build's
own Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def longest_first(seconds: Sequence[float | None]) -> list[int]:
    """The indices of ``seconds`` longest first; None (not measured) counts as the longest
    measured; ties keep their order.  Nothing measured: the order as given."""
    known = [s for s in seconds if s is not None]
    if not known:
        return list(range(len(seconds)))
    longest = max(known)
    counted = [longest if s is None else s for s in seconds]
    return sorted(range(len(counted)), key=lambda i: (-counted[i], i))


def plan_measure(plan: Mapping[str, object], by_key: str, by_source: str, source: str,
                 flags: str) -> float | None:
    """A unit's measure in the plan file (its ``by_key`` map, ``source|flags`` -> value, and
    ``by_source`` map, source -> the most of its builds): measured with these flags, else
    the most any build of the same source gave; None when neither was measured."""
    keyed, sourced = plan.get(by_key), plan.get(by_source)
    if isinstance(keyed, Mapping) and f"{source}|{flags}" in keyed:
        return float(keyed[f"{source}|{flags}"])
    if isinstance(sourced, Mapping) and source in sourced:
        return float(sourced[source])
    return None


def expected_seconds(source: str, flags: str, plan: Mapping[str, object]) -> float | None:
    """A unit's seconds from the plan file (see :func:`plan_measure`)."""
    return plan_measure(plan, "seconds", "by_source_seconds", source, flags)


def max_by_source(values: Mapping[str, float]) -> dict[str, float]:
    """``source|flags`` -> a measure (seconds, peak bytes), as the most of each source."""
    out: dict[str, float] = {}
    for key, value in values.items():
        source = key.split("|")[0]
        out[source] = max(out[source], value) if source in out else value
    return out
