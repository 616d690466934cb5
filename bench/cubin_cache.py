"""How long ``wheel`` takes to read a library's function facts: every cubin disassembled,
against the cubins whose bytes it read before taken from the cache (issue 18: a warm
rebuild changes one unit, so one cubin of the library it rebuilt).

    python bench/cubin_cache.py LIBRARY.so [...]

For each library: cuobjdump's ELF count, the seconds of ``read_library_facts`` without a
cache, with an empty cubin cache (it fills it) and with that filled cache (every cubin a
hit: the bound of a warm rebuild, which adds the changed cubin's own disassembly), and
whether the three gave the same facts.  Results: BENCHMARKS.md.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from sparkbuild.store.cache import Cache
from sparkbuild.toolchain.kept_sass import CodeCache
from sparkbuild.toolchain.sass_library import read_library_facts


def main(argv: list[str]) -> int:
    for name in argv:
        library = Path(name)
        with tempfile.TemporaryDirectory(prefix="cubin-cache-") as scratch:
            timings, facts = [], []
            caches = [None, CodeCache(Cache(Path(scratch))), CodeCache(Cache(Path(scratch)))]
            for kept in caches:
                began = time.monotonic()
                facts.append(read_library_facts(library, kept=kept))
                timings.append(time.monotonic() - began)
            cold, warm = caches[1], caches[2]
            assert cold is not None and warm is not None
            print(f"{library.name}: {library.stat().st_size / 2**20:.1f} MiB, "
                  f"{cold.cubins_read} cubins, {len(facts[0])} functions; no cache "
                  f"{timings[0]:.1f} s, empty cache {timings[1]:.1f} s, filled cache "
                  f"{timings[2]:.1f} s ({warm.cubins_from_cache} hits); same facts: "
                  f"{facts[0] == facts[1] == facts[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
