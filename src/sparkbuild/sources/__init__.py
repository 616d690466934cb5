"""Stage 1, sources: a source spec in, an unpatched tree on disk out.

Specs and their fetching (:mod:`.fetch`: ``git+URL@REF``, a directory, an sdist path,
``pypi:NAME==VERSION``), git through a bare mirror in the cache (:mod:`.git`), safe
extraction of archives (:mod:`.archive`) and the package index client (:mod:`.index`).
It hands :mod:`sparkbuild.patches` a :class:`~.fetch.SourceResult`: the tree and exactly
what it came from (commit or sha256).
"""
