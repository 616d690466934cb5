"""Stage 3, build: from a prepared tree to a built wheel, without the network.

What the build would fetch, planned and stored in the cache (:mod:`.vendor`,
:mod:`.vendor_fetch`); the cache unpacked where the build looks (:mod:`.materialize`);
whether this machine can build, and how many jobs (:mod:`.doctor`); the fast failure
before an hours-long build (:mod:`.check`, :mod:`.touched_units`); the build itself
(:mod:`.compile`); and the E2M1 proof (:mod:`.selftest`).  It hands
:mod:`sparkbuild.wheelhouse` the built wheels and the settings they were built with.
"""
