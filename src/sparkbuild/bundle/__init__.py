"""Stage 4, bundle: one file that carries a whole offline build to an air-gapped host.

:mod:`.write` assembles the prepared tree, the vendored sources, the recipe with its lock
and the wheels into one ``.tar.xz`` (:mod:`.archive` writes and lists it; :mod:`.strip`
leaves out what a build never reads); :mod:`.read` verifies every member against the
bundle's manifest, unpacks it and imports it into the cache.  It hands the checks and
:mod:`sparkbuild.compile` a prepared tree and a cache that need no network.
"""
