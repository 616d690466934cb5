"""Stage 3, vendor: everything a build would fetch, planned, pinned and stored in the cache.

The plan comes from the tree's own CMake under the recorder (:mod:`.plan`), with the build
requirements and crates (:mod:`.build_deps`) and the sources behind each dependency
(:mod:`.sources`); it is fetched into the content-addressed cache (:mod:`.fetch`, sparse
checkouts in :mod:`.sparse`, what a build never reads in :mod:`.unread`), indexed there
(:mod:`.index`) and unpacked where a build looks (:mod:`.materialize`).  It hands
:mod:`sparkbuild.bundle` and :mod:`sparkbuild.build` a cache that holds the whole build.
"""
