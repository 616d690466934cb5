"""Reading a large library's SASS: one ELF per process, only the facts kept.

``cuobjdump -sass`` of a whole library is one process writing one text: for vLLM's
``_vllm_fa2_C`` at 12.1a (22 ELFs, 1472 kernels) that is about 2.3 GB, and reading it took
281 s inside ``wheel`` and 6 minutes in a ``verify`` on 16 cores (bench/full-build/
part1).  Here the ELFs are extracted (``cuobjdump -xelf all``), each one is
disassembled and parsed in its own worker process, and only each function's
:class:`~sparkbuild.toolchain.sass.FunctionFacts` come back, in the library's ELF order.

Each worker is ``python -m sparkbuild.toolchain.sass_library CUBIN ARCH`` (through
:func:`sparkbuild.proc.run`, from a thread pool), which prints its facts as JSON.

An extracted cubin names its arch without a family suffix (``sm_120`` for ``sm_120f``), so
each one gets the arch of its fatbin header, read from ``cuobjdump -symbols`` in the same
order.  When the two listings do not pair up, or the library holds a single ELF, the whole
library is read in one piece, as :func:`~sparkbuild.toolchain.sass.read_sass` does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from sparkbuild.proc import run
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.sass import (
    FunctionFacts,
    arch_digits,
    dump_listing,
    elf_header_archs,
    find_cuobjdump,
    read_sass,
)

_EXTRACTED = re.compile(r"\.(\d+)\.(sm_\w+)\.cubin$")


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cubin_facts(cubin: Path, arch: str) -> list[FunctionFacts]:
    """The facts of one extracted cubin, with its fatbin header's arch (the worker's job)."""
    return [dataclasses.replace(f.facts(), arch=arch) for f in read_sass(cubin)]


def _read_in_worker(cubin: Path, arch: str) -> list[FunctionFacts]:
    result = run([sys.executable, "-m", "sparkbuild.toolchain.sass_library", cubin, arch],
                 echo=False)
    cubin.unlink()  # the ones still waiting need the disk more than this one does
    return [FunctionFacts(**fields) for fields in json.loads(result.output)]


def paired_cubins(directory: Path, headers: list[str]) -> list[tuple[Path, str]] | None:
    """The cubins ``cuobjdump -xelf all`` wrote, in ELF order, each with its header arch;
    None when they do not pair up one to one with ``headers``."""
    found = []
    for cubin in directory.glob("*.cubin"):
        if match := _EXTRACTED.search(cubin.name):
            found.append((int(match.group(1)), match.group(2), cubin))
    found.sort()
    if len(found) != len(headers) or any(
            arch_digits(arch) != arch_digits(header)
            for (_index, arch, _path), header in zip(found, headers, strict=True)):
        return None
    return [(path, header) for (_index, _arch, path), header in zip(found, headers, strict=True)]


class KeptCubins(Protocol):
    """Facts of extracted cubins by their bytes (:class:`~sparkbuild.toolchain.kept_sass.
    CodeCache`): a library rebuilt after a one-line change differs in one cubin, and only
    that one is disassembled again."""

    def cubin_facts(self, digest: str, arch: str) -> list[FunctionFacts] | None: ...

    def keep_cubin(self, digest: str, arch: str, facts: list[FunctionFacts]) -> None: ...


def _facts_of(cubin: Path, arch: str, kept: KeptCubins | None) -> list[FunctionFacts]:
    if kept is None:
        return _read_in_worker(cubin, arch)
    digest = sha256_file(cubin, progress=False)
    found = kept.cubin_facts(digest, arch)
    if found is not None:
        cubin.unlink()
        return found
    found = _read_in_worker(cubin, arch)
    kept.keep_cubin(digest, arch, found)
    return found


def read_library_facts(binary: Path, *, jobs: int | None = None,
                       kept: KeptCubins | None = None) -> list[FunctionFacts]:
    """The facts of every function in ``binary``, its ELFs read in parallel; with ``kept``,
    a cubin whose bytes were read before is not read again (and even a single ELF, such as
    an object file's, is extracted, so that its cubin is kept for the library it goes into:
    the host link copies the cubins byte for byte)."""
    headers = elf_header_archs(dump_listing(binary, "-symbols"))
    if len(headers) < (1 if kept is not None else 2):
        return [f.facts() for f in read_sass(binary)]
    with tempfile.TemporaryDirectory(prefix="sparkbuild-sass-") as scratch:
        run([find_cuobjdump(), "-xelf", "all", binary.resolve()], cwd=scratch, echo=False)
        pairs = paired_cubins(Path(scratch), headers)
        if pairs is None:
            return [f.facts() for f in read_sass(binary)]
        workers = max(1, min(jobs or available_cores(), len(pairs)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(lambda pair: _facts_of(pair[0], pair[1], kept), pairs))
    return [fact for part in parts for fact in part]


def main(argv: list[str]) -> int:
    cubin, arch = argv
    json.dump([dataclasses.asdict(f) for f in cubin_facts(Path(cubin), arch)], sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
