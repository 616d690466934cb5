"""The compiler launcher of flashinfer's builder: the build's sccache, or one of its own.

flashinfer's ninja files put ``$nvcc_launcher``/``$cxx_launcher`` before each compile
(``FLASHINFER_NVCC_LAUNCHER``/``FLASHINFER_CXX_LAUNCHER``, ``FI/jit/cpp_ext.py:269-273``).
ccache 4.7 cannot cache flashinfer's CUDA units: it preprocesses with nvcc's
``--generate-dependencies-with-compile`` still on the line, nvcc refuses, and ccache
counts the unit "preprocessing failed" and compiles it uncached (measured here on
``fp4_quantization_121``'s ``quantization.cu``); sccache 0.16 splits nvcc's steps and caches
each (4 entries for that unit).  So:

* inside ``wheel`` with a shared compile cache or ``--dist``, the build's own sccache
  server (its environment: :func:`sparkbuild.team.sccache_server.launcher_environment`);
* else an sccache server of the builder's own on a local directory kept in the cache
  (``CACHE/compile-cache/flashinfer``), so a rebuild of the same modules hits;
* without sccache, ccache (its C++ units only, said so), or nothing.

``SPARKBUILD_FLASHINFER_LAUNCHER`` (``sccache``, ``ccache`` or ``none``) picks one for the
builder's own compiles.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.settings import FLASHINFER_LAUNCHER
from sparkbuild.team.compile_cache import CacheSpec
from sparkbuild.team.sccache_server import launcher_environment, shared_compile_cache
from sparkbuild.toolchain.tools import find_launcher, find_sccache

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sparkbuild.team.sccache_server import SharedCache

LOCAL_DIR = "compile-cache/flashinfer"
CHOICE_VARIABLE = FLASHINFER_LAUNCHER.name


@contextlib.contextmanager
def builder_launcher(cache_root: Path, work: Path, shared: SharedCache | None = None
                     ) -> Iterator[tuple[dict[str, str], str]]:
    """flashinfer's launcher variables while the block runs, and what they are."""
    given = launcher_environment(shared)
    if given:
        yield given, f"the build's sccache ({shared.role if shared else ''})"
        return
    choice = FLASHINFER_LAUNCHER.choice() or ""
    sccache = find_sccache() if choice in ("", "sccache") else None
    if sccache is not None:
        local = cache_root / LOCAL_DIR
        spec = CacheSpec("local", str(local), {}, {}, str(local))
        with shared_compile_cache(spec, namespace="flashinfer", sccache=sccache.path,
                                  work=work, build_root=work, basedirs=[str(work)]) as own:
            env = launcher_environment(own)
            if env:
                yield env, f"sccache {sccache.version or ''} on {local / 'flashinfer'}"
                return
    ccache = find_launcher() if choice in ("", "ccache") else None
    if ccache is not None:
        yield ({"FLASHINFER_NVCC_LAUNCHER": str(ccache.path),
                "FLASHINFER_CXX_LAUNCHER": str(ccache.path),
                "CCACHE_BASEDIR": str(work), "CCACHE_NOHASHDIR": "true"},
               f"ccache {ccache.version or ''} (C++ units only: it cannot preprocess "
               "flashinfer's nvcc lines; install sccache for the CUDA units)")
        return
    yield {}, ("none (" + (f"{CHOICE_VARIABLE}={choice}" if choice else
                           "install sccache for rebuilds") + ")")
