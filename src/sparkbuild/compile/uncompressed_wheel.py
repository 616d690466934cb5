"""The tree's own wheel, stored uncompressed: sparkbuild compresses it once, when it rewrites it.

vLLM's setup.py ends with setuptools' ``bdist_wheel``, which deflates every member; the
wheelhouse then rewrites that wheel member by member (:mod:`sparkbuild.wheelhouse.
wheel_rewrite`: relabelled, deterministic) and deflates each one again.  The first
compression is thrown away.  In a 196 s warm rebuild of vLLM at 9.0a they take 20.8 s
("install and package") and 21.1 s ("wheel rewrite").  For a 317 MB payload: the
backend's wheel in 17.2 s deflated, 4.5 s stored; the rewritten wheel is the same bytes
either way (``bench/stored_wheel.py``).

setuptools reads one more configuration file named by ``DIST_EXTRA_CONFIG`` (its
``distutils`` ``find_config_files``): sparkbuild writes ``[bdist_wheel] compression =
stored`` into the work directory and names it there, so the tree is not edited.  Other
backends (scikit-build-core, the example's) ignore the variable.  A ``DIST_EXTRA_CONFIG``
of the user's is left as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkbuild.store.files import write_text_atomic

VARIABLE = "DIST_EXTRA_CONFIG"
FILE = "setuptools-stored-wheel.cfg"
TEXT = "[bdist_wheel]\ncompression = stored\n"


def stored_wheel_environment(work: Path, env: dict[str, str]) -> dict[str, str]:
    """The variable that makes setuptools store the tree's wheel (its file written in
    ``work``); nothing when the user's environment or ``env`` names a file already."""
    if VARIABLE in os.environ or VARIABLE in env:
        return {}
    path = work / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, TEXT)
    return {VARIABLE: str(path)}
