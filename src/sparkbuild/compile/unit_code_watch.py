"""Each CUDA object's machine code, read as ninja finishes it: the first one verify would
refuse stops the build.

verify reads the built libraries once the compile has ended: for vLLM 0.20.0 at 9.0a,
1011 s into ``wheel``, where the 208 kernels of ``_C_stable_libtorch`` that only trap are
all of one unit (``scaled_mm_c2x.cu``) that ninja finishes about 390 s in.  So while the
build runs, this watch takes ninja's status lines from the build's output (ninja prints
``[n/m] Building CUDA object OUT`` when the edge finishes, its output not being a terminal),
finds ``OUT`` under the build directory that sparkbuild's ninja announces
(:data:`ANNOUNCE`, :mod:`sparkbuild.jobplan.ninja_shim`), and reads the object with the same
readers and the same judgement as verify and ``check``, the kernel policy
(:mod:`sparkbuild.toolchain.kernel_policy`): a kernel that only traps or prints and exits on
a target (:func:`~sparkbuild.toolchain.sass.machine_code`), one with no code for a target,
or (unless ``allow_jit``) one with PTX only.  The first such object sets
:attr:`UnitCodeWatch.stop`, which ``proc.run`` answers by stopping the build.

It is an early refusal, never a pass: objects it could not find or did not reach before the
compile ended are counted as unread, and verify still reads every built library.  One
thread reads the objects in the order they finish, beside the compile's jobs.
"""

from __future__ import annotations

import functools
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import SparkbuildError
from sparkbuild.jobplan.ninja_shim import ANNOUNCE
from sparkbuild.toolchain import sass
from sparkbuild.toolchain.kernel_policy import because, refusals
from sparkbuild.toolchain.sass_library import KeptCubins, read_library_facts

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_FINISHED_CUDA_OBJECT = re.compile(r"^\[\d+/\d+\] Building CUDA object (\S+)\s*$")


@dataclass(frozen=True)
class ObjectReaders:
    """How an object's machine code is read: cuobjdump unless a test passes its own."""

    functions: Callable[[Path], Sequence[sass.SassFunction | sass.FunctionFacts]] = (
        sass.read_sass)
    kernels: Callable[[Path], Sequence[sass.KernelCode]] = sass.read_kernels


def object_readers(kept: KeptCubins | None) -> ObjectReaders:
    """cuobjdump's readers; with ``kept``, each object's cubins are extracted and their
    facts kept, so that reading the library they are linked into finds them."""
    if kept is None:
        return ObjectReaders()
    return ObjectReaders(functools.partial(read_library_facts, kept=kept))


def object_refusal(obj: Path, targets: Sequence[str], allow_jit: bool,
                   readers: ObjectReaders) -> str | None:
    """Why verify would refuse the code of ``obj`` for ``targets``; None when it would not."""
    functions = [sass.as_facts(f) for f in readers.functions(obj)]
    archs, _, traps, stubs = sass.machine_code(functions, targets)
    covered = sass.coverage_at(readers.kernels(obj), targets)
    return because(refusals(covered, allow_jit=allow_jit, stub_archs=archs, guard_stubs=stubs,
                            trap_only=traps))


@dataclass(frozen=True)
class ObjectRefusal:
    output: str
    """The object as ninja names it (relative to its build directory)."""
    path: Path
    reason: str
    seconds: float
    """When it was read, in seconds after the watch began."""


@dataclass
class UnitCodeWatch:
    """``with UnitCodeWatch(targets, allow_jit) as watch:`` around the build; feed it every
    output line (``watch(line)``) and pass ``watch.stop`` to ``proc.run``."""

    targets: tuple[str, ...]
    allow_jit: bool = False
    readers: ObjectReaders = field(default_factory=ObjectReaders)
    stop: threading.Event = field(default_factory=threading.Event)
    refusal: ObjectRefusal | None = None
    read: list[str] = field(default_factory=list)
    """Objects read and passed."""
    unread: list[str] = field(default_factory=list)
    """Objects named by ninja but not found, not read before the end, or not readable."""
    build_dir: Path | None = None
    clock: Callable[[], float] = time.monotonic
    _began: float = 0.0
    _queue: queue.Queue[tuple[str, Path | None] | None] = field(default_factory=queue.Queue)
    _ending: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __call__(self, line: str) -> None:
        line = line.strip()  # pip -v indents what the build prints
        if line.startswith(ANNOUNCE):
            self.build_dir = Path(line[len(ANNOUNCE):])
            return
        finished = _FINISHED_CUDA_OBJECT.match(line)
        if finished and self.targets:
            output = finished.group(1)
            self._queue.put((output, self.build_dir / output if self.build_dir else None))

    def check(self, output: str, path: Path | None) -> None:
        """Read one finished object; the first refused one sets :attr:`stop`."""
        if self.stop.is_set() or self._ending.is_set() or path is None or not path.is_file():
            self.unread.append(output)
            return
        try:
            reason = object_refusal(path, self.targets, self.allow_jit, self.readers)
        except (SparkbuildError, OSError):  # cuobjdump missing or failing: left to verify
            self.unread.append(output)
            return
        if reason is None:
            self.read.append(output)
            return
        self.refusal = ObjectRefusal(output, path, reason, self.clock() - self._began)
        self.stop.set()

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            self.check(*item)

    def __enter__(self) -> UnitCodeWatch:
        self._began = self.clock()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="sparkbuild-unit-code")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Objects still waiting are left to verify (counted as unread)."""
        self._ending.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def to_dict(self) -> dict[str, Any]:
        return {"read": len(self.read), "unread": len(self.unread),
                "refused": None if self.refusal is None else {
                    "object": self.refusal.output, "reason": self.refusal.reason,
                    "seconds": round(self.refusal.seconds, 1)}}

    def line(self) -> str:
        return (f"machine code of {len(self.read)} CUDA object(s) read as they were "
                f"compiled, none refused ({len(self.unread)} left to verify)")
