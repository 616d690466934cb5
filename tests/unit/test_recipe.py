from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.errors import PinRefusedError, RecipeError
from sparkbuild.recipe import DEFAULT_RECIPE, load_recipe, require_spark_target
from sparkbuild.resources import recipes_dir

MINIMAL = """\
[source]
spec = "pypi:vllm==0.33.0"

[series]
path = "series"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.toml"
    path.write_text(text)
    return path


def test_the_shipped_recipes_load() -> None:
    default = load_recipe(DEFAULT_RECIPE)
    assert default.source.spec == "git+https://github.com/vllm-project/vllm.git@refs/pull/53896/head"
    assert default.target.torch_cuda_arch_list == "12.1"
    flashinfer = {pin.name: pin for pin in default.pins}["flashinfer-python"]
    assert flashinfer.version == "0.6.18"
    assert flashinfer.sha256 == "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
    release = load_recipe(recipes_dir() / "vllm-0.33.0.toml")
    assert release.source.spec == "pypi:vllm==0.33.0"
    assert release.series == default.series


def test_defaults_and_relative_series(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, MINIMAL))
    assert recipe.series == (tmp_path / "series").resolve()
    assert recipe.build.jobs is None
    assert recipe.pins == ()


def test_unknown_key_is_named_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "\n[build]\njobz = 4\n")
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert error.value.what == "unknown key build.jobz"
    assert error.value.where == f"{path}:8"


def test_wrong_type_is_named_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + '\n[target]\ncuda_archs = "12.1"\n')
    with pytest.raises(RecipeError, match=r"target.cuda_archs must be list, not str") as error:
        load_recipe(path)
    assert error.value.where == f"{path}:8"


def test_missing_table_and_key(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"missing table \[series\]"):
        load_recipe(write(tmp_path, '[source]\nspec = "x"\n'))
    with pytest.raises(RecipeError, match=r"missing key source.spec"):
        load_recipe(write(tmp_path, '[source]\nbranch = "x"\n[series]\npath = "s"\n'))


def test_flashinfer_0_6_17_is_refused_with_the_reason(tmp_path: Path) -> None:
    text = MINIMAL + '\n[[pins]]\nname = "flashinfer-python"\nversion = "0.6.17"\n'
    with pytest.raises(PinRefusedError, match=r"crashes the NVFP4 MoE fallback kernel on GB10"):
        load_recipe(write(tmp_path, text))


def test_jobs_must_be_positive_or_auto(tmp_path: Path) -> None:
    assert load_recipe(write(tmp_path, MINIMAL + "[build]\njobs = 3\n")).build.jobs == 3
    with pytest.raises(RecipeError, match=r"build\.jobs must be a positive integer"):
        load_recipe(write(tmp_path, MINIMAL + "[build]\njobs = 0\n"))


def test_the_lock_records_the_commit_for_this_spec_only(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, MINIMAL))
    assert recipe.locked_commit() is None
    recipe.record_commit("a" * 40)
    assert recipe.lock_path == tmp_path / "r.lock.json"
    assert recipe.locked_commit() == "a" * 40
    other = load_recipe(write(tmp_path, MINIMAL.replace("0.33.0", "0.11.0")))
    assert other.locked_commit() is None


def _target_recipe(tmp_path: Path, target: str) -> Path:
    path = tmp_path / "r.toml"
    path.write_text('[source]\nspec = "x"\n[series]\npath = "series"\n[target]\n' + target)
    return path


def test_plain_sm121_is_refused_where_the_recipe_says_it(tmp_path: Path) -> None:
    recipe = load_recipe(_target_recipe(tmp_path, 'cuda_archs = ["12.1"]\n'))
    with pytest.raises(RecipeError, match="plain sm_121 compiles CUTLASS's FP4 kernels to a "
                       "trap") as caught:
        require_spark_target(recipe)
    assert caught.value.where == f"{recipe.path}:6"
    assert caught.value.hint is not None and "use 12.1a" in caught.value.hint


def test_plain_sm121_with_the_opt_in_and_the_spark_targets_pass(tmp_path: Path) -> None:
    opted = load_recipe(_target_recipe(
        tmp_path, 'cuda_archs = ["12.1"]\nallow_plain_sm121 = true\n'))
    assert opted.target.allow_plain_sm121
    require_spark_target(opted)
    for archs in ('["12.1a"]', '["12.1f"]', '["12.1a", "9.0a"]'):
        require_spark_target(load_recipe(_target_recipe(tmp_path, f"cuda_archs = {archs}\n")))


def test_allow_plain_sm121_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="allow_plain_sm121 must be bool"):
        load_recipe(_target_recipe(tmp_path, "allow_plain_sm121 = 1\n"))


def test_missing_recipe_lists_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(tmp_path / "absent.toml")
    hint = caught.value.hint or ""
    shipped = sorted(p.name for p in recipes_dir().glob("*.toml"))
    assert shipped and "qwen38next.toml" in shipped
    assert all(name in hint for name in shipped), hint
    assert str(recipes_dir()) in hint
