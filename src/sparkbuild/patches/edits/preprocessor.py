"""Preprocessor conditions of CUDA sources, read and judged per target arch.

Used by the ``sm12x-family-guards`` edit: which ``#if``/``#elif`` branches a build for one
GPU target takes, from the macros nvcc defines for it (measured with nvcc 13.0):

* sm_120a: ``__CUDA_ARCH__`` 1200, ``__CUDA_ARCH_SPECIFIC__`` 1200,
  ``__CUDA_ARCH_FAMILY_SPECIFIC__`` 1200, ``__CUDA_ARCH_FEAT_SM120_ALL``;
* sm_121a: 1210, 1210, 1210, ``__CUDA_ARCH_FEAT_SM121_ALL``;
* sm_121f: ``__CUDA_ARCH__`` 1210 and ``__CUDA_ARCH_FAMILY_SPECIFIC__`` 1210 only;
* sm_120f: 1200 and 1200 only (its code also runs on sm_121);
* sm_121: ``__CUDA_ARCH__`` 1210 only.

Conditions are evaluated in three-valued logic: a macro that is not an arch macro (``ENABLE_X``,
``CUTLASS_ARCH_MMA_SM120_SUPPORTED``) is unknown, and so is anything built on it, unless the
other side of an ``&&``/``||`` decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkbuild.patches.edits.inline_asm import strip_comments

Value = int | None
"""An integer, or None: not known without the build's configuration."""

SM120A = {"__CUDA_ARCH__": 1200, "__CUDA_ARCH_SPECIFIC__": 1200,
          "__CUDA_ARCH_FAMILY_SPECIFIC__": 1200, "__CUDA_ARCH_FEAT_SM120_ALL": 1}
SM121A = {"__CUDA_ARCH__": 1210, "__CUDA_ARCH_SPECIFIC__": 1210,
          "__CUDA_ARCH_FAMILY_SPECIFIC__": 1210, "__CUDA_ARCH_FEAT_SM121_ALL": 1}
_ARCH_MACRO = re.compile(r"__CUDA_ARCH\w*")
_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_]\w*|\|\||&&|==|!=|<=|>=|[-+*/%!<>()?:~])")
_INT_SUFFIX = re.compile(r"[uUlL]+$")


class _Parser:
    """Recursive descent over the C preprocessor's expression grammar (no ?: beyond parsing)."""

    def __init__(self, tokens: list[str], macros: dict[str, int]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.macros = macros

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("condition ended early")
        self.pos += 1
        return token

    def parse(self) -> Value:
        value = self.ternary()
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()!r}")
        return value

    def ternary(self) -> Value:
        condition = self.logical_or()
        if self.peek() != "?":
            return condition
        self.take()
        yes = self.ternary()
        if self.take() != ":":
            raise ValueError("expected ':'")
        no = self.ternary()
        if condition is None:
            return yes if yes == no else None
        return yes if condition else no

    def logical_or(self) -> Value:
        value = self.logical_and()
        while self.peek() == "||":
            self.take()
            right = self.logical_and()
            value = 1 if (value or right) else (None if None in (value, right) else 0)
        return value

    def logical_and(self) -> Value:
        value = self.comparison()
        while self.peek() == "&&":
            self.take()
            right = self.comparison()
            value = 0 if 0 in (value, right) else (None if None in (value, right) else 1)
        return value

    def comparison(self) -> Value:
        value = self.additive()
        while self.peek() in ("==", "!=", "<", "<=", ">", ">="):
            operator = self.take()
            right = self.additive()
            if value is None or right is None:
                value = None
                continue
            value = int({"==": value == right, "!=": value != right, "<": value < right,
                         "<=": value <= right, ">": value > right, ">=": value >= right}[operator])
        return value

    def additive(self) -> Value:
        value = self.unary()
        while self.peek() in ("+", "-", "*", "/", "%"):
            operator = self.take()
            right = self.unary()
            if value is None or right is None or (operator in "/%" and right == 0):
                value = None
            else:
                value = {"+": value + right, "-": value - right, "*": value * right,
                         "/": value // right, "%": value % right}[operator]
        return value

    def unary(self) -> Value:
        token = self.take()
        if token == "!":
            inner = self.unary()
            return None if inner is None else int(not inner)
        if token == "-":
            inner = self.unary()
            return None if inner is None else -inner
        if token == "(":
            value = self.ternary()
            if self.take() != ")":
                raise ValueError("unbalanced parentheses")
            return value
        if token == "defined":
            parenthesized = self.peek() == "("
            if parenthesized:
                self.take()
            name = self.take()
            if parenthesized and self.take() != ")":
                raise ValueError("defined( without )")
            return self.defined(name)
        if token[0].isdigit():
            return int(_INT_SUFFIX.sub("", token), 0)
        return self.value(token)

    def defined(self, name: str) -> Value:
        if name in self.macros:
            return 1
        return 0 if _ARCH_MACRO.fullmatch(name) else None

    def value(self, name: str) -> Value:
        if name in self.macros:
            return self.macros[name]
        return 0 if _ARCH_MACRO.fullmatch(name) else None


def evaluate(condition: str, macros: dict[str, int]) -> Value:
    """The condition's value for a target whose arch macros are ``macros``."""
    tokens: list[str] = []
    position = 0
    text = condition.replace("\\\n", " ")
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            return None  # something this reader does not know (a string, a cast): unknown
        tokens.append(match.group(1))
        position = match.end()
    try:
        return _Parser(tokens, macros).parse()
    except (ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Branch:
    """One ``#if``/``#ifdef``/``#ifndef``/``#elif`` branch of a file."""

    directive: str
    """``if``, ``ifdef``, ``ifndef`` or ``elif``."""
    condition: str
    """As a ``#if`` expression (``#ifdef X`` -> ``defined(X)``)."""
    line: int
    start: int
    """Offset of the ``#`` in the file's text."""
    condition_start: int
    condition_end: int
    """The condition's text (continuations included) in the file's text."""
    body: str
    """The branch's text up to the next directive of the same level (comments blanked)."""


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)", re.MULTILINE)


def _logical_line_end(code: str, start: int) -> int:
    """End of the (backslash-continued) line that starts at ``start``."""
    end = code.find("\n", start)
    while end > 0 and code[end - 1] == "\\":
        end = code.find("\n", end + 1)
    return len(code) if end < 0 else end


def branches(text: str) -> list[Branch]:
    """Every conditional branch of a C/C++/CUDA file, in order."""
    code = strip_comments(text)
    directives = []
    for match in _DIRECTIVE.finditer(code):
        end = _logical_line_end(code, match.start())
        directives.append((match.group(1), match.start(), match.end(), end))
    found: list[Branch] = []
    for number, (name, start, head_end, end) in enumerate(directives):
        if name not in ("if", "ifdef", "ifndef", "elif"):
            continue
        depth, body_end = 0, len(code)
        for other, other_start, _, _ in directives[number + 1:]:
            if other in ("if", "ifdef", "ifndef"):
                depth += 1
            elif other == "endif" and depth:
                depth -= 1
            elif depth == 0 and other in ("elif", "else", "endif"):
                body_end = other_start
                break
        raw = code[head_end:end]
        condition = " ".join(raw.replace("\\\n", " ").split())
        if name == "ifdef":
            condition = f"defined({condition})"
        elif name == "ifndef":
            condition = f"!defined({condition})"
        found.append(Branch(name, condition, text.count("\n", 0, start) + 1, start,
                            head_end, end, code[end:body_end]))
    return found


_TUNING_LINE = re.compile(r"^\s*(#|__launch_bounds__|(static\s+)?constexpr\b|$)")


def is_tuning(body: str) -> bool:
    """A branch that only sets numbers (``#define``s, launch bounds, constexpr tables)."""
    lines = [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]
    return bool(lines) and all(_TUNING_LINE.match(line) for line in lines)
