"""Stage 5, build: from a prepared tree and a vendored cache to a built wheel, offline.

Whether this machine can build, and how many jobs (:mod:`.doctor`); the fast failure
before an hours-long build (:mod:`.check`, :mod:`.check_plan`, :mod:`.touched_units`);
the build itself (:mod:`.compile`, with the compile cache of :mod:`.compile_cache` and
:mod:`.sccache_server`, the torch already installed in :mod:`.existing_torch`, the
extension subset of :mod:`.ext_targets`); and the E2M1 proof (:mod:`.selftest`).  It hands
:mod:`sparkbuild.wheelhouse` the built wheels and the settings they were built with.
"""
