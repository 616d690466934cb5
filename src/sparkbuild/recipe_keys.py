"""How a recipe key is declared: a dataclass field whose metadata is a :class:`Key`.

The recipe's tables are frozen dataclasses (:mod:`sparkbuild.recipe_model`); each field is
one key, declared with ``field(..., metadata=declare("what it means", low=1, ...))``.  The
field's annotation gives the key's TOML type (``int | None`` is an integer, ``tuple[str,
...]`` an array of strings, ``dict[str, str]`` a table of strings, a dataclass a table of
its own), the :class:`Key` its meaning, bounds and choices.  :func:`rules_of` reads a
dataclass into one :class:`Rule` per key, from which the loader's checks, the JSON schema
and the key tables of docs/recipes.md all follow (:mod:`sparkbuild.recipe_schema`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkbuild.console import unsafe_characters

METADATA = "sparkbuild.recipe"
"""The key of a field's metadata that holds its :class:`Key`."""

PYTHON_NAMES = {"string": "str", "integer": "int", "number": "int/float", "boolean": "bool",
                "array": "list", "object": "dict"}
"""A TOML type as the loader's messages name it (``target.python must be str, not float``)."""
PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,)}


@dataclass(frozen=True)
class Key:
    """What the declaration of one key says beyond its type."""

    doc: str
    """What it means, for docs/recipes.md and the JSON schema."""
    low: float | None = None
    """The least value (inclusive), or an array's fewest entries."""
    high: float | None = None
    """The greatest value (inclusive), or an array's most entries."""
    above: float | None = None
    """A number must be greater than this (exclusive)."""
    choices: tuple[Any, ...] = ()
    """The values it takes (an array's entries)."""
    pattern: re.Pattern[str] | None = None
    """What a string (an array's string entry) must match whole."""
    pattern_text: str = ""
    """The pattern as a message says it: ``a name of letters, digits and _``."""
    case: str | None = None
    """``lower`` or ``upper``: how a string is compared with the choices, and kept."""
    unique: bool = False
    """An array names each entry once."""
    one_line: bool = False
    """A string (an array's entries) holds no control or bidirectional character."""
    unit: str = ""
    """What a number counts, as a message says it: ``GiB``."""
    types: tuple[str, ...] = ()
    """The TOML types it takes, where the annotation does not say (``jobs``: an integer or
    ``"auto"``)."""
    toml: str | None = None
    """Its name in the recipe, where the field's differs (``stand_in`` for ``stand_ins``)."""
    required: bool = False
    default: str | None = None
    """What applies while it is not given, as the docs say it; None: the field's default."""
    config: str = ""
    """A ``[model]`` field: what a Hugging Face ``config.json`` gives for it."""
    resolved: Any = None
    """A ``[model]`` field: its value while neither the recipe nor the config gives it."""
    checked_by: str = ""
    """The loader's function that checks its bounds with a message of its own; the generic
    check (:meth:`Rule.problem`) leaves it to that function."""


def declare(doc: str, **rules: Any) -> dict[str, Key]:
    """A field's metadata: ``field(default=..., metadata=declare("...", low=1))``."""
    return {METADATA: Key(doc, **rules)}


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


@dataclass(frozen=True)
class Rule:
    """One key of one table, read from its field: its TOML type and its :class:`Key`."""

    name: str
    """The key as the recipe spells it."""
    field: str
    """The dataclass field it fills."""
    types: tuple[str, ...]
    """``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object``."""
    item: str | None
    """An array's entries' type, a table's values' type (None for a sub-table)."""
    table: type | None
    """A sub-table's dataclass (an array of tables' entries' too)."""
    key: Key
    default: Any

    @property
    def python_types(self) -> tuple[type, ...]:
        return tuple(t for kind in self.types for t in PYTHON_TYPES[kind])

    @property
    def type_name(self) -> str:
        return "/".join(PYTHON_NAMES[kind] for kind in self.types) if len(
            self.types) > 1 else PYTHON_NAMES[self.types[0]]

    def describe(self) -> str:
        """What a value must be: ``an integer from 1 to 1024``, ``one of nvfp4, none``."""
        key = self.key
        kind = self.types[0]
        if kind == "boolean":
            return "true or false"
        if kind == "array":
            return self._describe_array()
        if kind == "object":
            return {"string": "a table of strings", "array": "a table of lists of strings"
                    }.get(self.item or "", "a table")
        if kind == "string":
            return self._describe_string()
        text = self._describe_number()
        if "string" in self.types and key.choices:
            text += " or " + " or ".join(f'"{c}"' for c in key.choices)
        return text

    def _describe_number(self) -> str:
        key = self.key
        unit = f" of {key.unit}" if key.unit else ""
        if self.types[0] == "integer" and key.low == 1 and key.high is None:
            return "a positive integer"
        text = ("an integer" if self.types[0] == "integer" else "a finite number") + unit
        if key.above is not None:
            text = f"a number{unit} above {_number(key.above)}"
        if key.low is not None and key.high is not None:
            text += f" from {_number(key.low)} to {_number(key.high)}"
        elif key.low is not None:
            text += f" of at least {_number(key.low)}"
        return text

    def _describe_string(self) -> str:
        key = self.key
        if key.choices:
            return "one of " + ", ".join(map(str, key.choices))
        return key.pattern_text or "a string"

    def _describe_array(self) -> str:
        key = self.key
        entries = ", ".join(map(str, key.choices)) if key.choices else (
            key.pattern_text or {"integer": "integers", "object": "tables"}.get(
                self.item or "", "strings"))
        count = (f" ({_number(key.low or 0)} to {_number(key.high)} entries)"
                 if key.high is not None else
                 (f" (at least {_number(key.low)})" if key.low else ""))
        return f"a list of {entries}{', each once' if key.unique else ''}{count}"

    def checked(self, value: Any) -> Any | None:
        """``value`` as the key holds it (a string in its case), or None when it breaks the
        key's type, bounds or choices."""
        kinds = [kind for kind in self.types if isinstance(value, PYTHON_TYPES[kind]) and (
            kind == "boolean" or not isinstance(value, bool))]
        if not kinds:
            return None
        kind = kinds[0]
        if kind == "array":
            return self._checked_list(value)
        if kind in ("boolean", "object"):
            return value
        if kind == "string":
            return self._checked_string(value)
        number = float(value)
        key = self.key
        if not math.isfinite(number) or not self._within(number) or (
                key.above is not None and number <= key.above):
            return None
        return value if kind == "integer" else number

    def _checked_string(self, value: str) -> str | None:
        key = self.key
        if unsafe_characters(value) and (key.one_line or key.choices or key.pattern):
            return None
        text = value.upper() if key.case == "upper" else (
            value.lower() if key.case == "lower" else value)
        if key.choices:
            return text if text in key.choices else None
        if key.pattern is not None and not key.pattern.fullmatch(text):
            return None
        return text

    def _within(self, number: float) -> bool:
        return ((self.key.low is None or number >= self.key.low)
                and (self.key.high is None or number <= self.key.high))

    def _checked_list(self, value: list[Any]) -> list[Any] | None:
        key = self.key
        if not self._within(len(value)):
            return None
        item_types = PYTHON_TYPES.get(self.item or "string", (str,))
        for entry in value:
            if isinstance(entry, bool) or not isinstance(entry, item_types):
                return None
            if key.choices and entry not in key.choices:
                return None
            if isinstance(entry, str) and (
                    (key.one_line and unsafe_characters(entry))
                    or (key.pattern is not None and not key.pattern.fullmatch(entry))):
                return None
        if key.unique and len(set(value)) != len(value):
            return None
        return list(value)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is out of this key's bounds (``must be ...``), None when it is
        within them or its own function checks them (:attr:`Key.checked_by`)."""
        if self.key.checked_by or self.table is not None or self.checked(value) is not None:
            return None
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return f"must be {self.describe()}, not {shown}"


def _toml_type(hint: Any) -> tuple[str, str | None, type | None]:
    """(TOML type, an array's or table's entries' type, a sub-table's dataclass)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _toml_type(inner)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (tuple, list):
        item, _, table = _toml_type(args[0])
        return "array", item, table
    if origin is dict:
        item, _, table = _toml_type(args[1])
        return "object", item, table
    if dataclasses.is_dataclass(hint):
        return "object", None, typing.cast(type, hint)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}
    return simple[hint], None, None


@functools.cache
def rules_of(table: type) -> dict[str, Rule]:
    """Every declared key of ``table`` (a dataclass), by the name the recipe spells it; a
    field without a :class:`Key` is no key."""
    hints = typing.get_type_hints(table)
    found = {}
    for spec in dataclasses.fields(table):
        key = spec.metadata.get(METADATA)
        if key is None:
            continue
        kind, item, sub = _toml_type(hints[spec.name])
        default = spec.default if spec.default is not dataclasses.MISSING else (
            spec.default_factory() if spec.default_factory is not dataclasses.MISSING
            else None)
        name = key.toml or spec.name
        found[name] = Rule(name, spec.name, key.types or (kind,), item, sub, key, default)
    return found


def required_keys(table: type) -> tuple[str, ...]:
    return tuple(name for name, rule in rules_of(table).items() if rule.key.required)
