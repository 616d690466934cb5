"""The team's work: what several Sparks share so that one build serves them all.

The shared compile cache (:mod:`.compile_cache`: sccache on Redis, S3 or a directory, its
keys scoped to CUDA, torch, the target and the series) and the one sccache server a build
starts on it, watches, reads and stops (:mod:`.sccache_server`).  It hands
:mod:`sparkbuild.compile` and :mod:`sparkbuild.flashinfer` the compiler launcher and, after
the build, what the cache served.
"""
