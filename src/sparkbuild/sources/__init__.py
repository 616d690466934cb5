"""Stage 1, sources: a source spec in, an unpatched tree on disk out.

Specs and their fetching (:mod:`.fetch`: ``git+URL@REF``, a directory, an sdist path,
``pypi:NAME==VERSION``), git through a bare mirror in the cache (:mod:`.git`), safe
extraction of archives (:mod:`.archive`), the package index client (:mod:`.index`),
requirement files read one way (:mod:`.requirements`), what a tree declares it needs at
run time (:mod:`.declared`), URL rewrites to local mirrors (:mod:`.mirrors`) and what a
Python file imports whatever runs (:mod:`.module_imports`), which modules a start of some
roots reaches (:mod:`.package_reach`) and the modules a vLLM tree maps to a model or an
attention backend (:mod:`.model_registry`).  It hands
:mod:`sparkbuild.patches` a :class:`~.fetch.SourceResult`: the tree and exactly what it
came from (commit or sha256).
"""
