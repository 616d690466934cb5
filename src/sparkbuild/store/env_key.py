"""An environment variable as a kept result's key sees it: a search path's repeats dropped.

A search path (``PATH``, ``LD_LIBRARY_PATH``, ``PYTHONPATH``, ``CPATH``...: every variable
whose name ends in ``PATH``) is read first entry first, so an entry listed again later finds
nothing the earlier one did not: ``/a:/b:/a`` finds what ``/a:/b`` finds.  A script that
prepends a directory already there changes the value and nothing else.  Keyed raw, such a
value makes a warm rebuild plan its vendor sources, forecast its code and configure again
(``/tmp/site/bin`` twice on ``PATH``: 68 s of a 196 s rebuild).

Standard library only: the build's own cmake (:mod:`sparkbuild.compile.cmake_shim`) keys its
configure with it inside the build's Python.
"""

from __future__ import annotations

from collections.abc import Mapping


def is_search_path(name: str) -> bool:
    return name.endswith("PATH")


def key_value(name: str, value: str) -> str:
    """``value`` as a key sees it: a search path's entries after their first occurrence
    dropped, in order; any other variable as it is."""
    if not is_search_path(name):
        return value
    return ":".join(dict.fromkeys(value.split(":")))


def key_items(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The variables of ``env``, sorted, as keys see them."""
    return sorted((name, key_value(name, value)) for name, value in env.items())
