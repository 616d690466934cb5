"""The compile: from a prepared tree and a vendored cache to the tree's built wheel, offline.

Which extensions the recipe's model needs, each with why, and the sources only the left-out
ones use (:mod:`.extension_set`); whether this machine can build (:mod:`.doctor`, with
sparkbuild's own requirements in :mod:`.own_requirements` and the torch already installed
in :mod:`.existing_torch`); the
build itself (:mod:`.tree_build`), with sparkbuild's cmake inside it, which skips a
configure that would repeat the last one (:mod:`.cmake_shim`), the build directories an
earlier CUDA compiler left (:mod:`.stale_cmake`), the tree's wheel written uncompressed
(:mod:`.uncompressed_wheel`) and each CUDA object's machine code read as ninja finishes it
(:mod:`.unit_code_watch`); what the wheels were built with, the torch read once and the
manifest's build settings (:mod:`.build_record`).  It hands :mod:`sparkbuild.wheelhouse` the
built wheels and the settings they were built with.
"""
