"""A kernel's mangled name read as the Itanium C++ ABI spells it: its name, its template
arguments and its parameters, each substitution (``S_``, ``S4_``) resolved to what it
stands for.

A kernel policy rule that names an instantiation (``MoeFCGemm<..., cutlass::arch::Sm75,
...>``) must see which template argument is which: a regular expression over the mangled
text cannot, since ``cutlass::arch::Sm75`` is spelt ``NS_4arch4Sm75E`` where it comes first,
``NSP_4Sm75E`` once ``cutlass::arch`` was named, and ``SZ_`` once ``Sm75`` itself was (in
an argument before it).  :func:`parse_kernel` reads the subset of the grammar that CUDA
kernels of class templates are mangled in: nested and unscoped names, template arguments,
integer, bool, char and enum literals, builtin types, ``const``, pointers and references,
template parameters, substitutions.  Anything else -- and any name with text after its end,
or nested deeper than :data:`MAX_DEPTH`, or longer than :data:`MAX_NAME` -- is no kernel it
can read: :func:`parse_kernel` returns None, and a rule never covers it.

The rendering (``str``) is c++filt's (``void ns::K<ns::Q<int, 3> >(ns::Q<int, 3>::Params)``),
for people and for the tests that hold the reading to c++filt's.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_NAME = 1 << 16
"""The longest mangled name read (CUTLASS's kernels run to a few KiB)."""
MAX_DEPTH = 64
"""The deepest nesting of names and arguments read (CUTLASS's kernels nest about 10 deep)."""

BUILTINS = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char",
    "h": "unsigned char", "s": "short", "t": "unsigned short", "i": "int",
    "j": "unsigned int", "l": "long", "m": "unsigned long", "x": "long long",
    "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float",
    "d": "double", "e": "long double", "g": "__float128",
}
"""The builtin types' one-letter codes (``<builtin-type>``)."""
_LITERAL_SUFFIX = {"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
"""How c++filt writes an integer literal of each type (``5u``); others are ``(T)5``."""
_QUALIFIERS = {"K": " const", "P": "*", "R": "&", "O": "&&"}


class Unreadable(Exception):
    """A name outside the grammar this module reads."""


@dataclass(frozen=True)
class Part:
    """One component of a qualified name, with its template arguments (None: no ``<>``)."""

    identifier: str
    args: tuple[Node, ...] | None = None

    def __str__(self) -> str:
        if self.args is None:
            return self.identifier
        inner = ", ".join(map(str, self.args))
        return f"{self.identifier}<{inner}{' ' if inner.endswith('>') else ''}>"


@dataclass(frozen=True)
class Qualified:
    """``cutlass::gemm::GemmShape<128, 128, 64>``: its parts, outermost first."""

    parts: tuple[Part, ...]

    @property
    def path(self) -> tuple[str, ...]:
        """The identifiers alone: ``("cutlass", "gemm", "GemmShape")``."""
        return tuple(part.identifier for part in self.parts)

    @property
    def args(self) -> tuple[Node, ...] | None:
        """The template arguments of the last part."""
        return self.parts[-1].args

    def __str__(self) -> str:
        return "::".join(map(str, self.parts))


@dataclass(frozen=True)
class Builtin:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Literal:
    """A template argument's value: ``Li128E``, ``Lb1E``, ``LNS_15FloatRoundStyleE2E``."""

    type: Node
    value: int

    def __str__(self) -> str:
        code = next((k for k, v in BUILTINS.items() if Builtin(v) == self.type), None)
        if code == "b" and self.value in (0, 1):
            return "true" if self.value else "false"
        if code in _LITERAL_SUFFIX:
            return f"{self.value}{_LITERAL_SUFFIX[code]}"
        return f"({self.type}){self.value}"


@dataclass(frozen=True)
class Modified:
    """A type with ``const``, or a pointer or reference to one."""

    modifier: str
    """``K``, ``P``, ``R`` or ``O``."""
    type: Node

    def __str__(self) -> str:
        return f"{self.type}{_QUALIFIERS[self.modifier]}"


Node = Qualified | Builtin | Literal | Modified


@dataclass(frozen=True)
class Kernel:
    """A function's encoding: its name (template arguments on the last part), the return
    type a template's encoding carries, and its parameters."""

    name: Qualified
    returns: Node | None
    params: tuple[Node, ...]

    def __str__(self) -> str:
        params = "" if self.params == (Builtin("void"),) else ", ".join(map(str, self.params))
        head = f"{self.returns} " if self.returns is not None else ""
        return f"{head}{self.name}({params})"


def parse_kernel(mangled: str) -> Kernel | None:
    """The kernel ``mangled`` names, read whole; None for a name this module cannot read."""
    if not mangled.startswith("_Z") or len(mangled) > MAX_NAME:
        return None
    reader = _Reader(mangled, 2)
    try:
        kernel = reader.encoding()
    except Unreadable:
        return None
    return kernel if reader.at == len(mangled) else None


class _Reader:
    """One pass over a mangled name, with its substitution table and template arguments."""

    def __init__(self, text: str, at: int) -> None:
        self.text = text
        self.at = at
        self.substitutions: list[Node] = []
        self.template_args: tuple[Node, ...] | None = None
        self.depth = 0

    # -- the cursor -----------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        return self.text[index] if index < len(self.text) else ""

    def take(self, expected: str) -> None:
        if self.peek() != expected:
            raise Unreadable(f"expected {expected!r} at {self.at}")
        self.at += 1

    def number(self) -> int:
        start = self.at
        while self.peek().isdigit() and self.peek().isascii():
            self.at += 1
        if start == self.at or self.at - start > 6:
            raise Unreadable(f"no length at {start}")
        return int(self.text[start:self.at])

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unreadable("nested too deep")

    # -- the grammar --------------------------------------------------------------------

    def encoding(self) -> Kernel:
        name = self.name()
        args = name.args
        self.template_args = args
        returns = self.type() if args is not None else None
        params = [self.type()]
        while self.at < len(self.text):
            params.append(self.type())
        return Kernel(name, returns, tuple(params))

    def source_name(self) -> str:
        length = self.number()
        identifier = self.text[self.at:self.at + length]
        if len(identifier) != length or not identifier.replace("_", "a").isalnum() or (
                not identifier.isascii()):
            raise Unreadable(f"no identifier of {length} characters at {self.at}")
        self.at += length
        return identifier

    def substitution(self) -> Node:
        self.take("S")
        if self.peek() == "_":
            index = 0
        else:
            start = self.at
            while self.peek() and (self.peek().isdigit() or "A" <= self.peek() <= "Z"):
                self.at += 1
            if start == self.at or self.at - start > 4:
                raise Unreadable(f"not a substitution this module reads at {start}")
            index = int(self.text[start:self.at], 36) + 1
        self.take("_")
        if index >= len(self.substitutions):
            raise Unreadable(f"substitution {index} before it was defined")
        return self.substitutions[index]

    def template_param(self) -> Node:
        self.take("T")
        index = 0 if self.peek() == "_" else self.number() + 1
        self.take("_")
        if self.template_args is None or index >= len(self.template_args):
            raise Unreadable(f"template parameter {index} outside the arguments")
        return self.template_args[index]

    def name(self) -> Qualified:
        """``N ... E``, or an unscoped name (with its template arguments)."""
        self.deeper()
        if self.peek() == "N":
            found = self.nested()
        elif self.peek().isdigit():
            found = Qualified((Part(self.source_name()),))
            if self.peek() == "I":
                self.substitutions.append(found)
                found = self.with_args(found)
        else:
            raise Unreadable(f"not a name at {self.at}")
        self.depth -= 1
        return found

    def nested(self) -> Qualified:
        """``N prefix... E``: each prefix but the whole is a substitution (:meth:`type` adds
        the whole, where it is a type and not the function's own name)."""
        self.take("N")
        parts: tuple[Part, ...] = ()
        while self.peek() != "E":
            kind = self.peek()
            if kind.isdigit():
                parts += (Part(self.source_name()),)
            elif kind == "S" and not parts:
                parts = self.as_qualified(self.substitution()).parts
            elif kind == "T" and not parts:
                parts = self.as_qualified(self.template_param()).parts
            elif kind == "I" and parts and parts[-1].args is None:
                parts = self.with_args(Qualified(parts)).parts
            else:
                raise Unreadable(f"not a name component at {self.at}")
            if kind != "S" and self.peek() != "E":
                self.substitutions.append(Qualified(parts))
        self.take("E")
        if not parts:
            raise Unreadable("an empty nested name")
        return Qualified(parts)

    @staticmethod
    def as_qualified(node: Node) -> Qualified:
        if not isinstance(node, Qualified):
            raise Unreadable(f"{node} cannot start a qualified name")
        return node

    def with_args(self, template: Qualified) -> Qualified:
        """``template`` followed by ``I args E``."""
        self.take("I")
        args = []
        while self.peek() != "E":
            args.append(self.template_arg())
        self.take("E")
        last = template.parts[-1]
        if last.args is not None:
            raise Unreadable("template arguments twice")
        return Qualified((*template.parts[:-1], Part(last.identifier, tuple(args))))

    def template_arg(self) -> Node:
        if self.peek() != "L":
            return self.type()
        self.take("L")
        if self.peek() == "_":
            raise Unreadable("an external name as a template argument")
        kind = self.type()
        negative = self.peek() == "n"
        if negative:
            self.at += 1
        value = self.number()
        self.take("E")
        return Literal(kind, -value if negative else value)

    def type(self) -> Node:
        self.deeper()
        kind = self.peek()
        found: Node
        if kind in BUILTINS:
            self.at += 1
            found = Builtin(BUILTINS[kind])
        elif kind in _QUALIFIERS:
            self.at += 1
            found = Modified(kind, self.type())
            self.substitutions.append(found)
        elif kind == "S":
            found = self.substitution()
            if self.peek() == "I":
                found = self.with_args(self.as_qualified(found))
                self.substitutions.append(found)
        elif kind == "T":
            found = self.template_param()
            self.substitutions.append(found)
        elif kind == "N" or kind.isdigit():
            found = self.name()
            self.substitutions.append(found)
        else:
            raise Unreadable(f"not a type this module reads at {self.at}")
        self.depth -= 1
        return found
