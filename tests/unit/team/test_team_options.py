"""The shared cache, the scheduler and the token's file resolved once, for ``wheel`` and
``doctor`` alike (sparkbuild.team.team_options): the flag, else the recipe, else none."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.compile.doctor import DoctorOptions
from sparkbuild.errors import UsageError
from sparkbuild.pipeline import WheelOptions
from sparkbuild.recipe import Recipe, load_recipe
from sparkbuild.team.team_options import TeamOptions, resolve_team

BODY = '[source]\nspec = "."\n[series]\npath = "series"\n[build]\n'


def _recipe(folder: Path, build: str = "") -> Recipe:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "r.toml"
    path.write_text(BODY + build)
    return load_recipe(path)


def _flags(recipe: Recipe | None, *, compile_cache: str | None = None, dist: str | None = None,
           dist_token_file: Path | None = None) -> DoctorOptions:
    return DoctorOptions(recipe=recipe, compile_cache=compile_cache, dist=dist,
                         dist_token_file=dist_token_file)


def test_without_a_flag_or_a_key_nothing_is_shared(tmp_path: Path) -> None:
    team = resolve_team(_flags(_recipe(tmp_path)))
    assert team == TeamOptions() and not team.shared
    assert resolve_team(_flags(None)) == TeamOptions()


def test_the_recipe_names_the_cache_relative_to_its_folder(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path / "recipes", 'compile_cache = "objects"\n')
    team = resolve_team(_flags(recipe))
    assert team.cache is not None and team.cache.backend == "local"
    assert team.cache.location == str(tmp_path / "recipes" / "objects")
    assert team.shared and team.dist is None


def test_the_flag_wins_over_the_recipe_and_is_relative_to_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = _recipe(tmp_path / "recipes", 'compile_cache = "redis://cache:6379"\n'
                                           'dist = "http://recipe:10600"\n')
    monkeypatch.chdir(tmp_path)
    team = resolve_team(_flags(recipe, compile_cache="here", dist="http://flag:10600"))
    assert team.cache is not None and team.cache.location == str(tmp_path / "here")
    assert team.dist == "http://flag:10600"
    from_recipe = resolve_team(_flags(recipe))
    assert from_recipe.cache is not None and from_recipe.cache.backend == "redis"
    assert from_recipe.dist == "http://recipe:10600"


def test_a_token_file_needs_a_scheduler(tmp_path: Path) -> None:
    token = tmp_path / "token"
    with pytest.raises(UsageError, match="needs a scheduler"):
        resolve_team(_flags(_recipe(tmp_path), dist_token_file=token))
    with_dist = _recipe(tmp_path / "d", 'dist = "http://recipe:10600"\n')
    assert resolve_team(_flags(with_dist, dist_token_file=token)).token_file == token


def test_an_unreadable_cache_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        resolve_team(_flags(_recipe(tmp_path), compile_cache="memcached://host:11211"))


@pytest.mark.parametrize("build", ["", 'compile_cache = "objects"\ndist = "http://r:1"\n'])
@pytest.mark.parametrize(("compile_cache", "dist", "token"), [
    (None, None, None),
    ("redis://flag:6379", None, None),
    (None, "http://flag:10600", Path("t")),
    ("flagged", "http://flag:10600", None),
])
def test_doctor_and_wheel_resolve_the_same_inputs_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: str, compile_cache: str | None,
        dist: str | None, token: Path | None) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = _recipe(tmp_path / "recipes", build)
    doctor = DoctorOptions(recipe=recipe, compile_cache=compile_cache, dist=dist,
                           dist_token_file=token)
    wheel = WheelOptions(recipe=recipe, compile_cache=compile_cache, dist=dist,
                         dist_token_file=token)
    assert resolve_team(doctor) == resolve_team(wheel)
    assert resolve_team(wheel).shared == bool(build or compile_cache or dist)


def test_each_servers_memory_is_the_flag_else_the_recipes(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, 'dist = "http://r:1"\ndist_server_memory_gib = 64\n')
    from_recipe = resolve_team(DoctorOptions(recipe=recipe)).server_memory
    assert from_recipe is not None and from_recipe.size_bytes == 64 * 2**30
    assert "dist_server_memory_gib" in from_recipe.by
    flagged = resolve_team(WheelOptions(recipe=recipe, dist_server_memory_gib=119.2))
    assert flagged.server_memory is not None and flagged.server_memory.by == (
        "--dist-server-memory")
    assert resolve_team(DoctorOptions(recipe=_recipe(tmp_path / "bare"))).server_memory is None
    with pytest.raises(UsageError, match="--dist-server-memory must be a number of GiB"):
        resolve_team(DoctorOptions(recipe=recipe, dist_server_memory_gib=0.0))
