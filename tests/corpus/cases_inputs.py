"""Hostile cases of issue 41's probe: what a build reads.

A checkout's git config, the cache after a failed step, ``SOURCE_DATE_EPOCH``, recipes,
bundles, diffs, exit codes.  Each case is a :class:`~corpus.cases.Case`; :data:`CASES`
joins the corpus in :func:`corpus.cases._all_cases`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corpus.cases import Case

CASES: list[Case] = []
