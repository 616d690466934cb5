"""A reader of the CMake language, used by :mod:`sparkbuild.build.vendor` to plan sources."""
