"""A record's JSON from its fields: conversions, metadata, extra keys and their order."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from sparkbuild.records import EMPTY, NONE, Record, as_json, one_of, rounded, to_json


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Inner(Record):
    name: str
    where: Path | None = None


@dataclass
class Plain:
    size: int


@dataclass
class Outer(Record):
    json_order: ClassVar[tuple[str, ...]] = ("count", "inner")

    inner: Inner
    items: tuple[Inner, ...] = ()
    by_name: dict[str, Inner] = field(default_factory=dict)
    colour: Colour = Colour.RED
    seconds: float = field(default=1.23456, metadata=as_json("wall_s", dump=rounded(2)))
    secret: str = field(default="s", metadata=as_json(skip=True))
    note: str | None = field(default=None, metadata=as_json(omit=NONE))
    tags: list[str] = field(default_factory=list, metadata=as_json(omit=EMPTY))
    plain: Plain = field(default_factory=lambda: Plain(3))

    def json_extra(self) -> dict[str, Any]:
        return {"count": len(self.items)}


def test_fields_give_the_json_in_order_with_their_metadata() -> None:
    record = Outer(Inner("a", Path("/x")), items=(Inner("b"),), by_name={"c": Inner("c")})
    assert json.dumps(record.to_dict()) == json.dumps({
        "count": 1, "inner": {"name": "a", "where": "/x"},
        "items": [{"name": "b", "where": None}],
        "by_name": {"c": {"name": "c", "where": None}}, "colour": "red", "wall_s": 1.23,
        "plain": {"size": 3}})


def test_an_omitted_key_shows_once_it_has_a_value() -> None:
    data = Outer(Inner("a"), note="n", tags=["t"]).to_dict()
    assert (data["note"], data["tags"]) == ("n", ["t"])
    assert "secret" not in data


def test_rounded_keeps_none_and_to_json_leaves_scalars() -> None:
    assert rounded(1)(None) is None
    assert rounded(1)(2.25) == 2.2
    assert to_json(3) == 3
    assert to_json((Path("/a"), {"k": Colour.RED})) == ["/a", {"k": "red"}]


@dataclass
class Flat(Record):
    inner: Inner | None = field(default=None, metadata=as_json(flatten=True))
    size: int = 0


def test_a_flattened_record_gives_its_keys_in_its_place() -> None:
    assert list(Flat(Inner("a")).to_dict()) == ["name", "where", "size"]
    assert Flat().to_dict() == {"size": 0}


@dataclass
class Around(Record):
    json_order: ClassVar[tuple[str, ...]] = ("size", "...", "count")

    inner: Inner = field(metadata=as_json(flatten=True))
    size: int = 0

    def json_extra(self) -> dict[str, Any]:
        return {"count": 2}


def test_the_keys_an_order_does_not_name_stand_at_its_rest_mark() -> None:
    assert list(Around(Inner("a")).to_dict()) == ["size", "name", "where", "count"]


def test_one_of_gives_the_choice_a_text_read_back_is_and_none_for_any_other() -> None:
    choices = ("clear", "lacking")
    assert one_of("lacking", choices) == "lacking"
    assert one_of("Lacking", choices) is None
    assert one_of(None, choices) is None
    assert one_of(1, choices) is None
