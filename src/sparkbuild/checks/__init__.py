"""The checks before the build: what can fail is named before the first compile.

``sparkbuild check`` compiles the units the series touched for the target and reads their
machine code (:mod:`.check`, with its plan in :mod:`.check_plan`, its outcomes in
:mod:`.check_result` and the touched units in :mod:`.touched_units`); the code forecast
reads each unit's arch lists before ``wheel`` compiles anything (:mod:`.code_forecast`,
kept while its inputs stand in :mod:`.kept_forecast`), what CMake compiles of each
extension target at the target (:mod:`.target_code`); ``wheel --targets`` narrows the
extensions (:mod:`.ext_targets`) and never leaves out one the package imports at every
start (:mod:`.start_imports`); ``selftest e2m1`` proves the software E2M1 conversion
(:mod:`.selftest`, with ``csrc/``).  It hands :mod:`sparkbuild.compile` a tree whose every
unit is forecast to give native code for the target, or a named refusal.
"""
