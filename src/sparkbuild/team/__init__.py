"""The team's work: what several Sparks share so that one build serves them all.

What a build asks of the team -- the shared cache, the scheduler and the client token's
file -- is resolved once from the flags and the recipe, for ``wheel`` and ``doctor`` alike
(:mod:`.team_options`).

The shared compile cache (:mod:`.compile_cache`: sccache on Redis, S3 or a directory, its
keys scoped to CUDA, torch, the target and the series) and the one sccache server a build
starts on it, watches, reads and stops (:mod:`.sccache_server`).  The team's cores through
sccache-dist: that same server as the dist client of a scheduler probed before the build
(:mod:`.dist_client`; its status read typed and bounded, :mod:`.scheduler_status`; the
client token and the servers' key read and checked, never shown, :mod:`.dist_token`), what
it did -- compiles per build server, local fallbacks, each step's server read from its
log, and the build's picture (:mod:`.dist_record`) --, the heavy units' own server on the
build host's local slots, so that a step falling back never overcommits it
(:mod:`.gate_server`), with the compiler launcher that routes to it (:mod:`.heavy_gate`), the
scheduler and build servers started from sccache-dist's own binary (:mod:`.dist_services`)
and ``doctor``'s checks of both ends (:mod:`.dist_checks`).  It hands
:mod:`sparkbuild.compile` and :mod:`sparkbuild.flashinfer` the compiler launcher (and its
environment, :func:`.sccache_server.launcher_environment`), and, after the build, what the
cache and the build servers did.
"""
