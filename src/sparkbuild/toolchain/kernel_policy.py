"""What makes a kernel unacceptable: the one policy that verify, ``check``, the code forecast
and the compile's unit watch judge by.

A GPU of the target runs a kernel from what the binary holds for it
(:mod:`sparkbuild.toolchain.sass`): machine code it loads (``native``), only PTX that the
driver JIT-compiles at load on every node (``ptx``), or nothing (``none``).  Native code can
still be empty: a feature guard (CUTLASS's, for plain sm_121) compiles a kernel's body to
printf and a trap, or printf and exit, and nvcc exits 0 -- a *guard stub*, the trap-only
kernels among them (:attr:`~sparkbuild.toolchain.sass.SassFunction.is_guard_stub`).

The verdicts, one per kind:

* ``native``: accepted;
* ``ptx``: refused unless the recipe sets ``allow_jit`` (the manifest then lists the kernel
  in ``jit_kernels``);
* ``none``: refused, whatever ``allow_jit`` says;
* ``guard-stub``: refused, whatever ``allow_jit`` says.

Each judge reads a different thing -- verify a built library, ``check`` and the unit watch
one object, the forecast a unit's ``-gencode`` before anything compiles (the unit stands for
a kernel of that code) -- and asks the same questions here: :func:`refused` of one kind,
:func:`refusals` of a binary's coverage per target and its guard stubs, worded by
:meth:`Refusal.describe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbuild.toolchain.sass import NATIVE, NO_CODE, PTX_ONLY

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sparkbuild.toolchain.sass import Coverage

GUARD_STUB = "guard-stub"
VERDICT_KINDS = (NATIVE, PTX_ONLY, NO_CODE, GUARD_STUB)
"""What a kernel is at a target, as the policy judges it."""


def refused(kind: str, *, allow_jit: bool) -> bool:
    """Whether a kernel of ``kind`` (one of :data:`VERDICT_KINDS`) is unacceptable."""
    if kind not in VERDICT_KINDS:
        raise ValueError(f"not a kind the kernel policy knows: {kind!r}")
    return kind != NATIVE and not (kind == PTX_ONLY and allow_jit)


def kernel_names(names: Sequence[str], *, width: int = 96, shown: int | None = None) -> str:
    """Kernel names for a message, each cut at ``width`` characters; with ``shown``, the
    first that many and a count of the rest (the JSON names them all)."""
    listed = names if shown is None else names[:shown]
    text = ", ".join(n if len(n) <= width else n[:width] + "..." for n in listed)
    more = len(names) - len(listed)
    return text + (f" and {more} more (--json names them all)" if more else "")


@dataclass(frozen=True)
class Refusal:
    """Kernels refused for one reason at one place."""

    kind: str
    """``none``, ``ptx`` or ``guard-stub``."""
    at: str
    """The target (``12.1a``); for guard stubs, the SASS archs read (``sm_121a``)."""
    kernels: tuple[str, ...]
    codes: tuple[str, ...] = ()
    """``ptx``: the virtual archs the driver would JIT-compile (``compute_80``)."""
    trap_only: int = 0
    """``guard-stub``: how many of them trap (the others print and exit)."""

    def describe(self, *, width: int = 96, shown: int | None = None) -> str:
        """``3 kernel(s) PTX only for 12.1a (compute_80, JIT-compiled at load): a, b, c``."""
        names = kernel_names(self.kernels, width=width, shown=shown)
        count = f"{len(self.kernels)} kernel(s)"
        if self.kind == NO_CODE:
            return f"{count} with no code for {self.at}: {names}"
        if self.kind == PTX_ONLY:
            return (f"{count} PTX only for {self.at} ({', '.join(self.codes)}, "
                    f"JIT-compiled at load): {names}")
        return (f"{count} for {self.at} only trap or print and exit ({self.trap_only} "
                f"trap-only): {names}")


def coverage_refusals(found: Iterable[Coverage], *, allow_jit: bool) -> list[Refusal]:
    """Per target of ``found``: the kernels with no code, then, unless ``allow_jit``, those
    with PTX only."""
    out = []
    for cover in found:
        for kind in (NO_CODE, PTX_ONLY):
            kernels = cover.of_kind(kind)
            if kernels and refused(kind, allow_jit=allow_jit):
                codes = (tuple(sorted({k.code or "?" for k in kernels}))
                         if kind == PTX_ONLY else ())
                out.append(Refusal(kind, cover.target, tuple(k.name for k in kernels), codes))
    return out


def refusals(found: Iterable[Coverage], *, allow_jit: bool, stub_archs: Sequence[str] = (),
             guard_stubs: Sequence[str] = (), trap_only: Sequence[str] = ()) -> list[Refusal]:
    """Everything the policy refuses of one binary: its guard stubs (in the SASS of
    ``stub_archs``; ``trap_only``: those of them that trap), then its coverage per target."""
    stubs = ([Refusal(GUARD_STUB, ", ".join(stub_archs), tuple(guard_stubs),
                      trap_only=len(trap_only))] if guard_stubs else [])
    return [*stubs, *coverage_refusals(found, allow_jit=allow_jit)]


def because(found: Sequence[Refusal], *, width: int = 96) -> str | None:
    """The refusals as one reason, ``; ``-joined; None when there is none."""
    return "; ".join(r.describe(width=width) for r in found) or None
