"""Stage 3, vendoring: everything a build would fetch, planned, pinned and stored in the cache.

The plan comes from the tree's own CMake under the recorder (:mod:`.plan`, whose recorded
part is kept while its inputs stand in :mod:`.kept_plan`), with the build requirements and
crates (:mod:`.build_deps`) and the sources behind each dependency (:mod:`.sources`); it
is fetched into the content-addressed cache (:mod:`.fetch`, sparse checkouts in
:mod:`.sparse`, what a build never reads in :mod:`.unread`), patched by the series' arch
edit as it enters (:mod:`.patched`), indexed there (:mod:`.index`) and unpacked where a
build looks (:mod:`.materialize`), a source no built extension uses as a placeholder
(:mod:`.placeholders`); what CMake itself fetched beyond the plan is read from
its record after an online build and vendored then (:mod:`.fetch_log`).  It hands
:mod:`sparkbuild.bundle` and :mod:`sparkbuild.compile` a cache that holds the whole build.
"""
