"""A record's JSON, derived from its dataclass fields.

Every result a stage returns speaks ``--json`` through ``to_dict()``.  A dataclass that
inherits :class:`Record` gets that method from its fields, in their order: a nested record
becomes its own JSON, a path its string, an enum its value, a tuple a list, and a mapping
keeps its keys with each value converted.  A field says more in its metadata, through
:func:`as_json`:

- ``key``: the JSON key, where it is not the field's name;
- ``skip``: the field is left out of the JSON;
- ``omit``: the key is left out when this holds for the value (:data:`NONE`, :data:`EMPTY`);
- ``flatten``: a nested record's keys stand in the record's own object, in its place
  (nothing for None);
- ``dump``: the value as JSON, before the conversion above (:func:`rounded`, :func:`as_text`,
  ``len``).

A key no field holds (a count, a constant, a property) comes from the record's
:meth:`Record.json_extra`, and ``json_order`` places the keys where the fields' order is
not the JSON's (``"..."`` in it standing for the keys it does not name).

A status, kind, role or backend is a ``Literal``; :func:`one_of` turns a text read back
(from JSON, a tool's output) into one of its values.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, ClassVar, TypeVar, cast

_METADATA = "sparkbuild.json"
_Choice = TypeVar("_Choice", bound=str)


@dataclasses.dataclass(frozen=True)
class JsonField:
    """How one field shows in its record's JSON."""

    key: str | None = None
    skip: bool = False
    omit: Callable[[Any], bool] | None = None
    dump: Callable[[Any], Any] | None = None
    flatten: bool = False


_PLAIN = JsonField()

REST = "..."
"""In ``json_order``: where the keys it does not name stand (a flattened record's)."""


def as_json(key: str | None = None, *, skip: bool = False,
            omit: Callable[[Any], bool] | None = None,
            dump: Callable[[Any], Any] | None = None,
            flatten: bool = False) -> Mapping[str, JsonField]:
    """The metadata of a field that shows in JSON otherwise than by its name and value:
    ``field(metadata=as_json("coverage"))``."""
    return {_METADATA: JsonField(key=key, skip=skip, omit=omit, dump=dump, flatten=flatten)}


def NONE(value: object) -> bool:
    """For ``omit``: the key is left out while the value is None."""
    return value is None


def EMPTY(value: object) -> bool:
    """For ``omit``: the key is left out while the value is empty, zero or None."""
    return not value


def rounded(digits: int) -> Callable[[Any], Any]:
    """For ``dump``: a number rounded to ``digits`` places (None stays None)."""
    def dump(value: float | None) -> float | None:
        return None if value is None else round(value, digits)
    return dump


def as_text(value: object) -> str | None:
    """For ``dump``: a value by its ``str`` (a version), None staying None."""
    return None if value is None else str(value)


def one_of(value: object, choices: Sequence[_Choice]) -> _Choice | None:
    """The member of ``choices`` that ``value`` is, or None: a ``Literal`` from a text read
    back."""
    return next((choice for choice in choices if choice == value), None)


def to_json(value: Any) -> Any:
    """``value`` as JSON holds it: a record by its ``to_dict()``, a dataclass by its fields,
    a path as a string, an enum as its value, a tuple or list as a list, a mapping by its
    values."""
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_dict(value)
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, Mapping):
        return {key: to_json(item) for key, item in value.items()}
    return value


def fields_dict(record: object) -> dict[str, Any]:
    """The JSON object of a dataclass, from its fields and their :func:`as_json`
    metadata, with :meth:`Record.json_extra`'s keys and in ``json_order``."""
    data: dict[str, Any] = {}
    for item in dataclasses.fields(cast(Any, record)):
        spec: JsonField = item.metadata.get(_METADATA, _PLAIN)
        value = getattr(record, item.name)
        if spec.skip or (spec.omit is not None and spec.omit(value)):
            continue
        shown = to_json(value if spec.dump is None else spec.dump(value))
        if spec.flatten:
            data.update(shown or {})
        else:
            data[spec.key or item.name] = shown
    if isinstance(record, Record):
        data.update((key, to_json(value)) for key, value in record.json_extra().items())
        order = type(record).json_order
        if order:
            data = _ordered(data, order)
    return data


def _ordered(data: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    named = set(order)
    rest = {key: value for key, value in data.items() if key not in named}
    if REST not in named:
        order = (*order, REST)
    placed: dict[str, Any] = {}
    for key in order:
        if key == REST:
            placed.update(rest)
        elif key in data:
            placed[key] = data[key]
    return placed


class Record:
    """A dataclass whose ``to_dict()`` is derived from its fields (see the module)."""

    json_order: ClassVar[tuple[str, ...]] = ()
    """The JSON's keys in their order, where the fields' order is not theirs; the keys not
    named stand at :data:`REST` (``"..."``), or follow, in the fields' order."""

    def json_extra(self) -> dict[str, Any]:
        """The keys no field holds, with their values."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """The record as one JSON object (``--json``)."""
        return fields_dict(self)
