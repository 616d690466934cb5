"""The store: where bytes are kept, beneath every stage.

The content-addressed dependency cache (:mod:`.cache`) and its file lock (:mod:`.lock`),
downloads hashed on the way in (:mod:`.download`) through the one reader of URLs, each
exchange bounded in time as a whole (:mod:`.url_reader`), atomic writes and the leftovers of
killed runs (:mod:`.files`), the one reader of the files users hand sparkbuild and of
their TOML and JSON (:mod:`.user_files`), sha256 (:mod:`.hashing`), the run's context --
which cache, offline or not, which recipe (:mod:`.context`) --, the phase clock of one ``wheel``
(:mod:`.phases`), a directory brought up to another file by file (:mod:`.tree_sync`),
an environment variable as a kept result's key sees it (:mod:`.env_key`), and a wheel's
inner structure checked before anything trusts it (:mod:`.wheel_check`, its members read
with bounded memory by :mod:`.wheel_members`): ``verify``, ``install``, ``wheel`` and a
prebuilt flashinfer jit-cache share that one check.  It hands the stages verified paths
and wheels checked inside: it knows no recipe, no tree and no build, and never loads
:mod:`sparkbuild.recipe`.
"""
