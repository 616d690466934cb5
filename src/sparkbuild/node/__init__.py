"""Stage 7, node: what runs on each Spark, with no network and no compiler.

Installing a wheelhouse into a venv (:mod:`.install`, from a directory or a URL through
:mod:`.remote`), after the check that its built package can start at all
(:mod:`.start_check`); the dependency check after it (:mod:`.pip_check`); the node's
profile, the environment vLLM starts with (:mod:`.profile`); the record of what was
installed (:mod:`.installed`); the fleet's fingerprint (:mod:`.fingerprint`) and the check
of an installed venv against it (:mod:`.installed_check`), the venv's own files and
bytecode included (:mod:`.venv_files`); and a node's preflight before
vLLM's first start (:mod:`.preflight`).  It is the last stage: it hands a venv that starts
vLLM to the people who run it.
"""
