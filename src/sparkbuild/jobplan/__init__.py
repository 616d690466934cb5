"""The job plan: how many units compile at once, which share a pool, and in what order.

The plan resolved once from the machine, the recipe, the measured unit table and what was
asked -- the one doctor prints and ``wheel`` builds with (:mod:`.job_plan`); MAX_JOBS and
NVCC_THREADS from the machine's memory and cores (:mod:`.machine`); the pool
plan that gives every core to the build and holds the heavy units in a pool that memory
bounds (:mod:`.pools`; which units are heavy, the one test the planner and the ninja
wrapper share: :mod:`.heavy_units`; with dist, its depth from the build servers' memory:
:mod:`.team_pool`), judged by list scheduling over the measured unit table
(:mod:`.schedule`) in longest-first order (:mod:`.unit_order`); each unit's peak memory,
measured while the build runs and kept for the next plan (:mod:`.unit_memory`); what ninja
builds and when it built it (:mod:`.ninja_graph`, :mod:`.timeline`), drawn as Chrome
trace-event JSON, one track per core (:mod:`.build_trace`); and sparkbuild's
ninja, which applies the plan to ``build.ninja`` and retries a unit killed for memory
(:mod:`.ninja_shim`).  It hands :mod:`sparkbuild.checks`, :mod:`sparkbuild.flashinfer` and
:mod:`sparkbuild.compile` a :class:`~.machine.BuildPlan` and the plan file ninja reads.
"""
