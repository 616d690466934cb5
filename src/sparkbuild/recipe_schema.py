"""The recipe's JSON schema and docs/recipes.md's key tables, written from the declarations.

:func:`recipe_schema` is what ``sparkbuild recipe-schema`` prints (a JSON Schema, draft
2020-12, that an editor checks a recipe's TOML with); :func:`key_table` is the table of one
recipe table's keys as docs/recipes.md shows it, between the markers
``<!-- the keys of [TABLE]: written by ... -->`` and ``<!-- end of the keys -->``.  Both
come from :data:`sparkbuild.recipe_model.TABLES`, and a unit test keeps the page equal to
them (``python -m sparkbuild.recipe_schema docs/recipes.md`` writes the tables anew).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkbuild.doc_tables import CLOSE, rewrite_main, rewritten, tables
from sparkbuild.recipe_keys import Rule, required_keys, rules_of
from sparkbuild.recipe_model import BY_TABLE, TOP_TABLES, Table
from sparkbuild.records import Record, as_json

if TYPE_CHECKING:
    from sparkbuild.errors import SparkbuildError

SCHEMA_ID = "https://sparkbuild.invalid/recipe.schema.json"
"""The schema's ``$id``: a name, not a place to fetch it from (``sparkbuild recipe-schema``
prints it)."""


def _toml_default(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]`"
    return f"`{value}`"


def _default_text(rule: Rule) -> str:
    """What applies while the key is not given, as the page says it."""
    if rule.key.default is not None:
        return rule.key.default
    if rule.key.required:
        return "required"
    value = rule.key.resolved if rule.key.resolved is not None else rule.default
    return "none" if value is None or value == {} or value == () else _toml_default(value)


def _table_schema(model: type, *, described: str = "") -> dict[str, Any]:
    rules = rules_of(model)
    schema: dict[str, Any] = {
        "type": "object", "additionalProperties": False,
        "properties": {name: _key_schema(rule) for name, rule in rules.items()}}
    if described or model.__doc__:
        text = described or " ".join((model.__doc__ or "").split())
        schema["description"] = text.replace("``", "`")
    required = list(required_keys(model))
    if required:
        schema["required"] = required
    return schema


def _scalar_schema(kind: str, rule: Rule, *, entry: bool = False) -> dict[str, Any]:
    key = rule.key
    schema: dict[str, Any] = {"type": kind}
    if kind == "string":
        if key.choices and not key.case:
            schema["enum"] = [c for c in key.choices if isinstance(c, str)]
        if key.pattern is not None:
            schema["pattern"] = f"^(?:{key.pattern.pattern})$"
    if kind in ("integer", "number"):
        if key.choices and entry:
            schema["enum"] = [c for c in key.choices if not isinstance(c, str)]
        if key.low is not None and not entry:
            schema["minimum"] = key.low
        if key.high is not None and not entry:
            schema["maximum"] = key.high
        if key.above is not None:
            schema["exclusiveMinimum"] = key.above
    return schema


def _key_schema(rule: Rule) -> dict[str, Any]:
    """One key's schema: its type, bounds and choices, and its meaning."""
    key = rule.key
    kind = rule.types[0]
    schema: dict[str, Any]
    if rule.table is not None and kind == "array":
        schema = {"type": "array", "items": _table_schema(rule.table)}
    elif rule.table is not None:
        schema = _table_schema(rule.table)
    elif kind == "array":
        schema = {"type": "array",
                  "items": _scalar_schema(rule.item or "string", rule, entry=True)}
        if key.low:
            schema["minItems"] = int(key.low)
        if key.high is not None:
            schema["maxItems"] = int(key.high)
        if key.unique:
            schema["uniqueItems"] = True
    elif kind == "object":
        values: dict[str, Any] = {"type": rule.item or "string"}
        if rule.item == "array":
            values = {"type": "array", "items": {"type": "string"}}
        schema = {"type": "object", "additionalProperties": values}
    elif len(rule.types) > 1:
        schema = {"anyOf": [_scalar_schema(t, rule) for t in rule.types]}
        for choice in schema["anyOf"]:
            if choice["type"] == "string" and key.choices:
                choice["enum"] = list(key.choices)
    else:
        schema = _scalar_schema(kind, rule)
    return {**schema, "description": key.doc}


def recipe_schema() -> dict[str, Any]:
    """The JSON schema of a recipe, from :data:`~sparkbuild.recipe_model.TABLES`."""
    properties: dict[str, Any] = {}
    for table in TOP_TABLES:
        inner = _table_schema(table.model)
        properties[table.name] = ({"type": "array", "items": inner,
                                   "description": inner.get("description", "")}
                                  if table.array else inner)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "sparkbuild recipe", "type": "object", "additionalProperties": False,
            "required": [t.name for t in TOP_TABLES if not t.array and required_keys(t.model)],
            "properties": properties}


@dataclass(frozen=True)
class RecipeSchema(Record):
    """``sparkbuild recipe-schema``'s result: the schema, printed as one JSON object."""

    schema: dict[str, Any] = field(default_factory=recipe_schema, metadata=as_json(skip=True))

    def json_extra(self) -> dict[str, Any]:
        return self.schema

    def summary(self) -> list[str]:
        tables = ", ".join(self.schema["properties"])
        return [f"the recipe's JSON schema: tables {tables}"]

    @property
    def error(self) -> SparkbuildError | None:
        return None


# -- docs/recipes.md's tables ---------------------------------------------------------------

TABLE_START = "<!-- the keys of "
TABLE_END = "<!-- end of the keys -->"
WRITER = "python -m sparkbuild.recipe_schema docs/recipes.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def key_table(table: Table) -> str:
    """The table of ``table``'s keys as docs/recipes.md shows it: each key, what it takes,
    what applies without it and what it means; ``[model]``'s with what a config gives."""
    model = table.name == "model"
    head = ["key", "takes", "unset", *(["from a config.json"] if model else []), "meaning"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rule in table.rules.items():
        takes = rule.describe() if rule.table is None else (
            "tables (below)" if rule.types[0] == "array" else "a table (below)")
        cells = [f"`{name}`", takes, _default_text(rule),
                 *([rule.key.config or "–"] if model else []), rule.key.doc]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(rows)


def _marker(table: Table) -> str:
    """The text of ``table``'s start marker, after ``TABLE_START``, its line's end included."""
    return f"{table.heading}: written by `{WRITER}` {CLOSE}"


def page_tables(page: str) -> dict[str, str]:
    """Each generated table of ``page`` by its heading (``[build]``), as the page has it."""
    return {marker.partition(":")[0]: table
            for marker, table in tables(page, TABLE_START, TABLE_END)}


def written_page(page: str) -> str:
    """``page`` with each generated table replaced by the declarations' own."""
    headings = {table.heading: table for table in BY_TABLE.values()}

    def table_for(marker: str) -> str:
        table = headings[marker.partition(":")[0]]
        return _marker(table) + key_table(table) + "\n"

    return rewritten(page, TABLE_START, TABLE_END, table_for)


def main(argv: list[str]) -> int:
    """``python -m sparkbuild.recipe_schema PAGE``: write the page's key tables anew."""
    return rewrite_main(argv, WRITER, written_page)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
