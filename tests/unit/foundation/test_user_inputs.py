"""What users hand sparkbuild is read without a traceback: TOML and JSON nested beyond the
reader, and a SOURCE_DATE_EPOCH a wheel's zip cannot hold, are named errors."""

from __future__ import annotations

import json
import tomllib
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import RecipeError, UsageError
from sparkbuild.recipe import ZIP_FIRST_EPOCH, ZIP_LAST_EPOCH, check_source_date_epoch, load_recipe
from sparkbuild.store.user_files import parse_json, parse_toml

if TYPE_CHECKING:
    from pathlib import Path

DEEP = 50_000
RECIPE = '[source]\nspec = "."\n[series]\npath = "s"\n'


@pytest.mark.parametrize("text", [
    "x = " + "[" * DEEP + "]" * DEEP,
    "x = " + "{a = " * DEEP + "1" + "}" * DEEP,
])
def test_toml_nested_too_deeply_is_a_decode_error(text: str) -> None:
    with pytest.raises(tomllib.TOMLDecodeError, match="nested too deeply"):
        parse_toml(text)


def test_json_nested_too_deeply_is_a_decode_error() -> None:
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        parse_json("[" * DEEP + "]" * DEEP)
    assert parse_json('{"a": [1]}') == {"a": [1]}


def test_a_recipe_nested_too_deeply_is_a_recipe_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(RECIPE + "[build]\nenv = " + "[" * DEEP + "]" * DEEP + "\n")
    with pytest.raises(RecipeError, match="recipe is not valid TOML: nested too deeply"):
        load_recipe(path)


def test_a_lock_file_nested_too_deeply_is_a_recipe_error(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(RECIPE)
    (tmp_path / "r.lock.json").write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(RecipeError, match="lock file is not valid JSON: nested too deeply"):
        load_recipe(path).locked_commit()


@pytest.mark.parametrize("raw", ["-1", "0", str(ZIP_FIRST_EPOCH - 1), str(ZIP_LAST_EPOCH + 1),
                                 "99999999999", "1.7e9", "yesterday", "0x10", "1 2"])
def test_a_source_date_epoch_a_zip_cannot_hold_is_refused(raw: str) -> None:
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH must be whole seconds from "
                                         "315532800 \\(1980-01-01\\) to 4354819199"):
        check_source_date_epoch(raw)


@pytest.mark.parametrize(("raw", "value"), [(None, None), ("", None), (" ", None),
                                            (str(ZIP_FIRST_EPOCH), ZIP_FIRST_EPOCH),
                                            (str(ZIP_LAST_EPOCH), ZIP_LAST_EPOCH),
                                            (" 1700000000\n", 1700000000)])
def test_a_source_date_epoch_in_range_is_taken(raw: str | None, value: int | None) -> None:
    assert check_source_date_epoch(raw) == value


def test_the_recipe_s_build_env_source_date_epoch_is_checked_on_load(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(RECIPE + '[build]\nenv = { SOURCE_DATE_EPOCH = "-1" }\n')
    with pytest.raises(RecipeError, match="SOURCE_DATE_EPOCH must be whole seconds") as refused:
        load_recipe(path)
    assert refused.value.where == f"{path}:6"
