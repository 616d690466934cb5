"""flashinfer's kernels: built ahead for the target, so a node starts with no compiler.

flashinfer's own builder, driven from the pinned flashinfer-python wheel, packs the modules
as a ``flashinfer-jit-cache`` wheel (:mod:`.builder`); a build is kept in the cache and
reused while what built it stands (:mod:`.kept_builds`); and it runs alongside vLLM's
compile on a share of the cores (:mod:`.alongside`).  It hands :mod:`sparkbuild.compile`
and the wheelhouse a jit-cache wheel whose every kernel ``verify`` reads.
"""
