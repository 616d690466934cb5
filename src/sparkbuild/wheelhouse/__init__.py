"""Stage 6, wheelhouse: the built wheels, pinned and hashed, ready for an air-gapped node.

Lock files of a runtime closure (:mod:`.lock`), pins against what they ship beside
(:mod:`.overrides`), reproducible wheels (:mod:`.wheel_rewrite`), the pins and closure from
the index (:mod:`.closure`), writing the wheelhouse (:mod:`.write`, :mod:`.destination`,
:mod:`.manifest`; a main job built in parts and joined, :mod:`.parts`), its lock and SBOM
in the standards' words (:mod:`.standards`, :mod:`.pylock`, :mod:`.sbom`) and checking it
(:mod:`.verify`, :mod:`.requirements_check`; which wheels the build made and the archs they
are judged at, from the files, :mod:`.wheel_roles`; whether a wheel installs on the target,
:mod:`.target_tags`; each wheel's inner structure by :mod:`sparkbuild.store.wheel_check`).
It hands :mod:`sparkbuild.node` a directory that every node installs the same way.
"""
