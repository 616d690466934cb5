"""Stage 4, wheelhouse: the built wheels, pinned and hashed, ready for an air-gapped node.

Lock files of a runtime closure (:mod:`.lock`), reproducible wheels (:mod:`.wheel_rewrite`),
the pins and closure from the index (:mod:`.closure`), writing the wheelhouse
(:mod:`.write`), checking it (:mod:`.verify`) and installing it (:mod:`.install`).  It is
the last stage: it hands a directory to people and to other machines.
"""
