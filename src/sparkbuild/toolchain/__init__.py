"""The toolchain: the programs a build runs and what they say, beneath every stage.

Finding nvcc, cmake, ninja, the host compiler and torch (:mod:`.tools`); running a tree's
own CMake in script mode and recording what it declares (:mod:`.cmake_recorder`); the
tree's CUDA arch arithmetic (:mod:`.archs`), asked of its own CMake (:mod:`.arch_eval`);
the nvcc command line CMake would generate (:mod:`.compile_flags`); reading machine code
with cuobjdump (:mod:`.sass`), a large library's ELFs in parallel (:mod:`.sass_library`),
and a library's facts kept by its bytes (:mod:`.kept_sass`); a kernel's mangled name read
as the C++ ABI spells it (:mod:`.mangled`); and the one kernel policy, what makes a kernel
unacceptable on a target, that verify, ``check``, the code forecast and the compile's unit
watch judge by (:mod:`.kernel_policy`).  It hands the stages facts
about tools and binaries; it never changes a tree.
"""
