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
* ``guard-stub``: refused, whatever ``allow_jit`` says -- unless the stub is one a library's
  own dispatcher never launches at the target, named before anything compiles
  (:class:`UnreachableStubs`: the stubs of one kernel class instantiated for an arch tag
  that a run-time branch selects only on SMs the target is not).

Each judge reads a different thing -- verify a built library, ``check`` and the unit watch
one object, the forecast a unit's ``-gencode`` before anything compiles (the unit stands for
a kernel of that code) -- and asks the same questions here: :func:`refused` of one kind,
:func:`refusals` of a binary's coverage per target and its guard stubs, worded by
:meth:`Refusal.describe`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sparkbuild.records import Record, as_json
from sparkbuild.toolchain.mangled import Builtin, Part, Qualified, parse_kernel
from sparkbuild.toolchain.sass import NATIVE, NO_CODE, PTX_ONLY, CoverageKind, arch_digits

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sparkbuild.toolchain.sass import Coverage

VerdictKind = CoverageKind | Literal["guard-stub"]
"""What a kernel is at a target, as the policy judges it: its coverage, or a guard stub."""
GUARD_STUB: VerdictKind = "guard-stub"
VERDICT_KINDS: tuple[VerdictKind, ...] = (NATIVE, PTX_ONLY, NO_CODE, GUARD_STUB)


def refused(kind: VerdictKind, *, allow_jit: bool) -> bool:
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

    kind: VerdictKind
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


@dataclass(frozen=True)
class ClassTemplateKernel:
    """``void FUNCTION<TEMPLATE<a0, ..., aN>>(TEMPLATE<a0, ..., aN>::PARAMS)`` with argument
    ``position`` exactly ``ARGUMENT``: the one kernel of a class template instantiated for
    one arch tag (CUTLASS's ``cutlass::Kernel<Op>(Op::Params)``), read from its mangled name
    by :func:`sparkbuild.toolchain.mangled.parse_kernel` -- whatever the other arguments are,
    and however the substitutions spell this one.  A name the reader cannot read whole, with
    text after its end, another function, template, count of arguments, argument there or
    parameter list is not this kernel."""

    function: tuple[str, ...]
    """``("cutlass", "Kernel")``."""
    template: tuple[str, ...]
    """``("cutlass", "gemm", "kernel", "MoeFCGemm")``."""
    arity: int
    position: int
    """Which argument is fixed, from 0."""
    argument: tuple[str, ...]
    """``("cutlass", "arch", "Sm75")``: a class, no template of its own."""
    params: str = "Params"

    def matches(self, mangled: str) -> bool:
        """Whether the mangled name ``mangled`` is this kernel, whole."""
        kernel = parse_kernel(mangled)
        if kernel is None or not _plain(kernel.name, self.function):
            return False
        outer = kernel.name.args
        if outer is None or len(outer) != 1 or not isinstance(outer[0], Qualified):
            return False
        instance = outer[0]
        if not _plain(instance, self.template) or len(instance.args or ()) != self.arity:
            return False
        assert instance.args is not None
        fixed = Qualified(tuple(Part(identifier) for identifier in self.argument))
        return (instance.args[self.position] == fixed and kernel.returns == Builtin("void")
                and kernel.params == (Qualified((*instance.parts, Part(self.params))),))

    def describe(self) -> str:
        """``void cutlass::Kernel<T<..., cutlass::arch::Sm75, ...> >(T<...>::Params)``."""
        template = "::".join(self.template)
        args = ", ".join("::".join(self.argument) if index == self.position else "_"
                         for index in range(self.arity))
        return (f"void {'::'.join(self.function)}<{template}<{args}> >"
                f"({template}<{args}>::{self.params})")


def _plain(name: Qualified, path: tuple[str, ...]) -> bool:
    """``name`` is ``path`` with template arguments on its last part alone."""
    return name.path == path and all(part.args is None for part in name.parts[:-1])


@dataclass(frozen=True)
class UnreachableStubs(Record):
    """Guard stubs that a library's own dispatcher never launches at the target.

    A template compiled for every arch branch of a run-time dispatcher holds, at a target
    outside a branch's range, that branch's kernels as stubs: CUTLASS compiles a kernel
    whose arch tag is not the one being compiled for to a trap.  Such a stub is accepted
    only when all of this holds: the wheel's project is this one and the library is this
    member of it, its path in the wheel exactly; the kernel's mangled name is ``kernel``,
    whole, its arch tag the template argument the dispatcher's branch instantiates; and
    every target's SM lies outside ``selected_for``, the SMs the dispatcher selects that
    instantiation for.  Any other stub is refused as before.
    """

    project: str
    """The wheel's project (``flashinfer-jit-cache``)."""
    library: str
    """The library's path inside the wheel
    (``flashinfer_jit_cache/jit_cache/fused_moe_120/fused_moe_120.so``)."""
    kernel: ClassTemplateKernel = field(metadata=as_json(dump=ClassTemplateKernel.describe))
    """The kernel, as its mangled name must read whole."""
    selected_for: tuple[int, int]
    """``[low, high)``: the SMs (``75`` for 7.5) whose run-time branch launches it."""
    what: str
    """The instantiation, as a person reads it."""
    why: str
    """The code that says where the dispatcher selects it, and what it compiles to here."""

    def applies(self, project: str, library: str, targets: Sequence[str]) -> bool:
        """Whether this rule speaks for ``library`` of ``project``'s wheel at ``targets``."""
        low, high = self.selected_for
        sms = [int(arch_digits(t) or 0) for t in targets]
        return (project == self.project and library == self.library
                and bool(sms) and all(not low <= sm < high for sm in sms))

    def covers(self, kernel: str) -> bool:
        """Whether the mangled name ``kernel`` is one this rule names."""
        return self.kernel.matches(kernel)

    def describe(self) -> str:
        low, high = self.selected_for
        return (f"{self.library}: {self.what}, launched only for "
                f"{low // 10}.{low % 10} <= SM < {high // 10}.{high % 10} ({self.why})")


def unreachable_stubs(rules: Iterable[UnreachableStubs], project: str, library: str,
                      targets: Sequence[str], guard_stubs: Sequence[str]
                      ) -> dict[UnreachableStubs, tuple[str, ...]]:
    """The guard stubs of ``library`` that a rule names unreachable at ``targets``."""
    found = {}
    for rule in rules:
        if rule.applies(project, library, targets):
            named = tuple(k for k in guard_stubs if rule.covers(k))
            if named:
                found[rule] = named
    return found


def refusals(found: Iterable[Coverage], *, allow_jit: bool, stub_archs: Sequence[str] = (),
             guard_stubs: Sequence[str] = (), trap_only: Sequence[str] = (),
             unreachable: Sequence[str] = ()) -> list[Refusal]:
    """Everything the policy refuses of one binary: its guard stubs (in the SASS of
    ``stub_archs``; ``trap_only``: those of them that trap) but the ``unreachable`` ones
    (:func:`unreachable_stubs`), then its coverage per target."""
    skip = set(unreachable)
    guard_stubs = [k for k in guard_stubs if k not in skip]
    trap_only = [k for k in trap_only if k not in skip]
    stubs = ([Refusal(GUARD_STUB, ", ".join(stub_archs), tuple(guard_stubs),
                      trap_only=len(trap_only))] if guard_stubs else [])
    return [*stubs, *coverage_refusals(found, allow_jit=allow_jit)]


def because(found: Sequence[Refusal], *, width: int = 96) -> str | None:
    """The refusals as one reason, ``; ``-joined; None when there is none."""
    return "; ".join(r.describe(width=width) for r in found) or None
