"""Hostile cases of issue 41's probe: what runs on a node.

The profile, ``--venv``, ``verify --installed``, a built wheel's inner structure and the
manifest.  Each case is a :class:`~corpus.cases.Case`; :data:`CASES` joins the corpus in
:func:`corpus.cases._all_cases`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corpus.cases import Case

CASES: list[Case] = []
