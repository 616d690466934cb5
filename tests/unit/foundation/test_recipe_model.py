"""The recipe's keys, declared once (sparkbuild.recipe_model): the loader, the JSON schema
and docs/recipes.md's key tables all follow from the declarations."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from sparkbuild import cli
from sparkbuild.errors import RecipeError
from sparkbuild.flashinfer.model_config import ModelFacts
from sparkbuild.recipe import load_recipe
from sparkbuild.recipe_model import MODEL_FIELDS, TABLES, model_precedence
from sparkbuild.recipe_schema import key_table, page_tables, recipe_schema, written_page

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "recipes.md"
NOT_RECIPES = {"known_bad.toml", "cmake-sm90-archs.toml", "flashinfer-tiny-moe-interim.toml",
               "flashinfer-interim.toml"}
"""TOML files beside the recipes that are no recipe (a known-bad list, a bench's inputs)."""


def shipped_recipes() -> list[Path]:
    found = [*(ROOT / "recipes").glob("*.toml"), *(ROOT / "bench").rglob("*.toml"),
             ROOT / "examples" / "mini-vllm" / "recipe.toml"]
    return sorted(path for path in found if path.name not in NOT_RECIPES)


def test_the_page_shows_exactly_the_declarations() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert page_tables(page) == {table.heading: key_table(table) for table in TABLES}, \
        "run: python -m sparkbuild.recipe_schema docs/recipes.md"
    assert written_page(page) == page


def test_a_table_that_differs_from_the_declarations_is_seen() -> None:
    page = PAGE.read_text(encoding="utf-8")
    stale = page.replace("| `job_memory_gib` | a number of GiB above 0 |",
                         "| `job_memory_gib` | a number of GiB above 1 |")
    assert stale != page
    assert page_tables(stale)["[build]"] != key_table(dict((t.name, t) for t in TABLES)["build"])
    assert written_page(stale) == page


def test_the_schema_is_a_valid_json_schema_every_shipped_recipe_meets() -> None:
    schema = recipe_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    recipes = shipped_recipes()
    assert len(recipes) >= 8
    for path in recipes:
        load_recipe(path)
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        assert [error.message for error in validator.iter_errors(data)] == [], path


@pytest.mark.parametrize(("lines", "refusal"), [
    ("[build]\njobz = 3\n", "unknown key build.jobz"),
    ("[target]\npython = 3.12\n", "target.python must be str, not float"),
    ("[build]\nnvcc_threads = 0\n", "build.nvcc_threads must be a positive integer, not 0"),
    ("[build]\njobs = 0\n", 'build.jobs must be a positive integer or "auto", not 0'),
    ('[build]\njobs = "fast"\n', 'build.jobs must be a positive integer or "auto"'),
    ("[model]\nhead_dim = 0\n", "model.head_dim must be an integer from 1 to 1024, not 0"),
    ("[model]\nhybrid = 1\n", "model.hybrid must be bool, not int"),
])
def test_what_the_schema_refuses_the_loader_refuses_naming_the_key(
        tmp_path: Path, lines: str, refusal: str) -> None:
    text = f'[source]\nspec = "."\n[series]\npath = "s"\n{lines}'
    (tmp_path / "r.toml").write_text(text)
    with pytest.raises(RecipeError) as caught:
        load_recipe(tmp_path / "r.toml")
    assert caught.value.what.startswith(refusal)
    assert caught.value.where == f"{tmp_path / 'r.toml'}:6"
    validator = jsonschema.Draft202012Validator(recipe_schema())
    assert list(validator.iter_errors(tomllib.loads(text))) != []


def test_recipe_schema_prints_the_schema_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["recipe-schema"]) == 0
    assert json.loads(capsys.readouterr().out) == recipe_schema()


def test_the_model_is_resolved_from_the_declared_fields() -> None:
    resolved = {spec.name for spec in dataclasses.fields(ModelFacts)} - {"config", "sources"}
    assert resolved == set(MODEL_FIELDS)


def test_the_recipe_wins_over_the_config_and_the_config_over_the_declared_value() -> None:
    config: dict[str, Any] = {"hybrid": True, "experts": 8, "dtype": "float16"}
    merged = model_precedence(config, {"experts": 16})
    assert (merged["experts"], merged["hybrid"], merged["dtype"]) == (16, True, "float16")
    assert (merged["attention_backend"], merged["flashinfer_sampler"]) == ("FLASHINFER", True)
    assert merged["head_dim"] is None and set(merged) == set(MODEL_FIELDS)
