"""flashinfer's kernels: built ahead for the target, so a node starts with no compiler.

What the node serves is resolved from the recipe's ``[model]`` and its Hugging Face config
(:mod:`.model_config`) and mapped to the flashinfer modules vLLM reaches on sm_12x, each
with the code that says why (:mod:`.module_set`). flashinfer's own builder, driven from the
pinned flashinfer-python wheel by a script the build environment's interpreter runs
(:mod:`.driver`), builds that set -- or flashinfer's default set when ``aot_args`` say so --
with the cuBLAS/cuRAND headers and a link without a driver (:mod:`.build_env`), through
sparkbuild's ninja and the build's compiler launcher (:mod:`.compile_launcher`), from the
wheels it fetches into the cache before anything compiles (:mod:`.builder_wheels`), and
packs the modules as a ``flashinfer-jit-cache`` wheel (:mod:`.builder`,
:mod:`.jit_cache_wheel`). A build is kept in the cache and reused while what built it stands
(:mod:`.kept_builds`), and runs alongside vLLM's compile on a share of the cores
(:mod:`.alongside`). A prebuilt jit-cache wheel may be taken instead, pinned by hash, its
version checked before anything compiles, cut down to the model's set (:mod:`.jit_cache`).
The guard stubs its modules hold that no sm_12x GPU launches (instantiations for another
arch's branch of a run-time dispatcher) are named per module before anything compiles, each
with the code that says so (:mod:`.unreachable_stubs`). It hands :mod:`sparkbuild.compile`
and the wheelhouse a jit-cache wheel whose every kernel ``verify`` reads.
"""
