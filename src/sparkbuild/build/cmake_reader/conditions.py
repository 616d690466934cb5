"""CMake ``if()`` conditions in three-valued logic: true, false, or not known here.

:mod:`sparkbuild.build.cmake_reader.scan` reads a tree's CMake files without running a configure, so
many variables (compiler versions, ``find_package`` results) have no value.  A condition
that depends on one of them is *unknown*, and the scanner then treats both branches as
possible.  ``NOT``/``AND``/``OR`` follow Kleene logic, so ``FALSE AND <unknown>`` is
still decided.  Variables named like user overrides (``*_SRC_DIR``,
``FETCHCONTENT_SOURCE_DIR_*``) are known to be unset: sparkbuild sets them only for the
build itself, so at scan time the branch that fetches from upstream is the one taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_TRUE = {"1", "ON", "YES", "TRUE", "Y"}
_FALSE = {"0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND", ""}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*")
_OVERRIDE = re.compile(r"(.*_SRC_DIR|FETCHCONTENT_SOURCE_DIR_.*)")

_UNARY = {"EXISTS", "COMMAND", "DEFINED", "POLICY", "TARGET", "TEST", "IS_DIRECTORY",
          "IS_SYMLINK", "IS_ABSOLUTE", "IS_READABLE", "IS_WRITABLE", "IS_EXECUTABLE"}
_BINARY = {"EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "STREQUAL", "STRLESS",
           "STRLESS_EQUAL", "STRGREATER", "STRGREATER_EQUAL", "VERSION_EQUAL", "VERSION_LESS",
           "VERSION_LESS_EQUAL", "VERSION_GREATER", "VERSION_GREATER_EQUAL", "MATCHES",
           "IN_LIST", "IS_NEWER_THAN", "PATH_EQUAL"}
_RESERVED = _UNARY | _BINARY | {"NOT", "AND", "OR", "(", ")"}


class Unknown(Exception):
    """The condition depends on something the scanner does not know."""


def is_override_name(name: str) -> bool:
    return _OVERRIDE.fullmatch(name) is not None


def truthy(value: str) -> bool:
    """CMake's truth of a constant or a variable's value."""
    upper = value.upper()
    if upper in _TRUE:
        return True
    if upper in _FALSE or upper.endswith("-NOTFOUND"):
        return False
    try:
        return float(value) != 0
    except ValueError:
        return True


@dataclass(frozen=True)
class Token:
    text: str
    quoted: bool
    expanded: bool = False
    """Produced by a ${VAR} expansion: used as a literal unless it names a variable."""


class Variables(Protocol):
    """What a condition may ask: a variable's value (None: known to be unset)."""

    def value(self, name: str) -> str | None:
        """Raises :class:`Unknown` when the scanner cannot tell."""

    def env(self, name: str) -> str | None: ...

    @property
    def tree(self) -> Path: ...


class Condition:
    """One ``if()``/``elseif()`` argument list, already expanded into tokens."""

    def __init__(self, tokens: list[Token], variables: Variables) -> None:
        self.tokens = tokens
        self.pos = 0
        self.variables = variables

    def evaluate(self) -> bool | None:
        if not self.tokens:
            return False
        result = self._or()
        if self.pos != len(self.tokens):
            raise Unknown(f"unparsed condition tail: {self.tokens[self.pos:]}")
        return result

    # -- grammar -------------------------------------------------------------------------

    def _peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _keyword(self, *words: str) -> str | None:
        token = self._peek()
        if token is not None and not token.quoted and token.text in words:
            self.pos += 1
            return token.text
        return None

    def _take(self) -> Token:
        token = self._peek()
        if token is None:
            raise Unknown("condition ended early")
        self.pos += 1
        return token

    def _or(self) -> bool | None:
        result = self._and()
        while self._keyword("OR"):
            right = self._and()
            result = True if (result or right) else (None if None in (result, right) else False)
        return result

    def _and(self) -> bool | None:
        result = self._not()
        while self._keyword("AND"):
            right = self._not()
            if result is False or right is False:
                result = False
            else:
                result = None if None in (result, right) else True
        return result

    def _not(self) -> bool | None:
        if self._keyword("NOT"):
            inner = self._not()
            return None if inner is None else not inner
        return self._binary()

    def _binary(self) -> bool | None:
        if self._keyword("("):
            result = self._or()
            if not self._keyword(")"):
                raise Unknown("unbalanced parentheses")
            return result
        unary = self._keyword(*_UNARY)
        if unary:
            return self._unary(unary, self._take())
        left = self._take()
        operator = self._keyword(*_BINARY)
        if operator is None:
            return self._lone(left)
        right = self._take()
        try:
            return self._compare(operator, left, right)
        except Unknown:
            return None

    # -- operands ------------------------------------------------------------------------

    def _operand(self, token: Token) -> str:
        """An operand's value: an unquoted variable name stands for its value."""
        if token.quoted or not _IDENTIFIER.fullmatch(token.text):
            return token.text
        try:
            value = self.variables.value(token.text)
        except Unknown:
            if token.expanded:
                return token.text
            raise
        return token.text if value is None else value

    def _lone(self, token: Token) -> bool | None:
        upper = token.text.upper()
        if token.quoted:
            return upper in _TRUE
        if upper in _TRUE or upper in _FALSE or upper.endswith("-NOTFOUND"):
            return truthy(token.text)
        if _IDENTIFIER.fullmatch(token.text):
            try:
                value = self.variables.value(token.text)
            except Unknown:
                return None
            return False if value is None else truthy(value)
        return truthy(token.text)

    def _unary(self, operator: str, token: Token) -> bool | None:
        if operator == "DEFINED":
            return self._defined(token.text)
        if operator == "IS_ABSOLUTE":
            return Path(token.text).is_absolute()
        if operator in ("EXISTS", "IS_DIRECTORY") and token.text:
            path = Path(token.text)
            if path.is_absolute() and path.is_relative_to(self.variables.tree):
                return path.is_dir() if operator == "IS_DIRECTORY" else path.exists()
        return None

    def _defined(self, name: str) -> bool | None:
        env = re.fullmatch(r"ENV\{(.*)\}", name)
        if env:
            return self.variables.env(env.group(1)) is not None
        cache = re.fullmatch(r"CACHE\{(.*)\}", name)
        try:
            return self.variables.value(cache.group(1) if cache else name) is not None
        except Unknown:
            return None

    def _compare(self, operator: str, left: Token, right: Token) -> bool:
        if operator == "IN_LIST":
            listed = self.variables.value(right.text)
            return self._operand(left) in (listed or "").split(";")
        if operator in ("IS_NEWER_THAN", "PATH_EQUAL"):
            raise Unknown(operator)
        a, b = self._operand(left), self._operand(right)
        if operator == "MATCHES":
            return re.search(b, a) is not None
        if operator.startswith("VERSION_"):
            return _ordered(operator[len("VERSION_"):], _version(a), _version(b))
        if operator.startswith("STR"):
            return _ordered(operator[len("STR"):] or "EQUAL", a, b)
        try:
            return _ordered(operator, float(a), float(b))
        except ValueError:
            return False


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = re.match(r"\d*", piece)
        parts.append(int(digits.group(0)) if digits and digits.group(0) else 0)
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _ordered(relation: str, a: object, b: object) -> bool:
    assert isinstance(a, (str, float, tuple)) and type(a) is type(b)
    lt = a < b  # type: ignore[operator]
    gt = b < a  # type: ignore[operator]
    return {
        "EQUAL": not lt and not gt,
        "LESS": lt,
        "GREATER": gt,
        "LESS_EQUAL": not gt,
        "GREATER_EQUAL": not lt,
    }[relation]


__all__ = ["Condition", "Token", "Unknown", "Variables", "is_override_name", "truthy"]
