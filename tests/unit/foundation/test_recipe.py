from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild import recipe as recipe_module
from sparkbuild.errors import PinRefusedError, RecipeError
from sparkbuild.recipe import (
    DEFAULT_RECIPE,
    KNOWN_BAD_NAME,
    REPO_ROOT,
    TreeRequirements,
    check_known_bad,
    known_bad_path,
    load_known_bad,
    load_recipe,
    require_spark_target,
)
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
    assert default.target.torch_cuda_arch_list == "12.1a"
    assert default.build.job_memory_gib == 8.7  # bench/NVCC_MEMORY_RESULTS.md, at sm_121a
    require_spark_target(default)
    flashinfer = {pin.name: pin for pin in default.pins}["flashinfer-python"]
    assert flashinfer.version == "0.6.18"
    assert flashinfer.sha256 == "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
    assert flashinfer.override is None  # the branch's own requirement decides (its lock)
    release = load_recipe(recipes_dir() / "vllm-0.33.0.toml")
    assert release.source.spec == "pypi:vllm==0.33.0"
    assert release.series == default.series
    # what vllm 0.33.0 itself requires (requirements/cuda.txt), by the wheel's sha256
    (pin,) = release.pins
    assert (pin.name, pin.version, pin.override) == ("flashinfer-python", "0.7.2.post1", None)
    assert pin.sha256 == "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
    assert release.target.cuda_archs == ("12.1a",) and release.build.job_memory_gib == 8.7
    example = load_recipe(REPO_ROOT / "examples" / "mini-vllm" / "recipe.toml")
    assert example.target.cuda_archs == ("12.1a",) and not example.target.allow_plain_sm121


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


def test_flashinfer_0_6_17_is_refused_with_the_reason_from_the_list(tmp_path: Path) -> None:
    (entry,) = [e for e in load_known_bad(known_bad_path()) if e.name == "flashinfer-python"]
    assert entry.version == "0.6.17" and "NVFP4 MoE fallback kernel on GB10" in entry.reason
    assert "forum post" in entry.source and "0.6.17 crashes" in entry.source
    text = MINIMAL + '\n[[pins]]\nname = "flashinfer_python"\nversion = "0.6.17.0"\n'
    path = write(tmp_path, text)
    with pytest.raises(PinRefusedError) as refused:
        load_recipe(path)
    assert refused.value.what == f"refusing pin flashinfer_python==0.6.17.0: {entry.reason}"
    assert refused.value.exit_code == 14 and refused.value.where == f"{path}:9"
    assert entry.source in str(refused.value.hint)
    # the override of a contradiction does not reach a known-bad version
    with pytest.raises(PinRefusedError):
        load_recipe(write(tmp_path, text + 'override = "I know"\n'))


def test_the_known_bad_list_is_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = tmp_path / "known_bad.toml"
    listed.write_text('[[known_bad]]\nname = "six"\nversion = "1.16.0"\n'
                      'reason = "breaks the test"\nsource = "this test"\n')
    monkeypatch.setattr(recipe_module, "known_bad_path", lambda: listed)
    with pytest.raises(PinRefusedError, match=r"refusing wheel Six==1\.16: breaks the test"):
        check_known_bad("Six", "1.16", what="wheel")
    check_known_bad("six", "1.17.0")
    check_known_bad("flashinfer-python", "0.6.17")  # not on this list
    listed.write_text('[[known_bad]]\nname = "six"\nversion = "1.16.0"\nreason = "r"\n')
    with pytest.raises(RecipeError, match="lacks `source`"):
        load_known_bad(listed)
    listed.write_text('[[known_bad]]\nname = "six"\nversions = ["1"]\n')
    with pytest.raises(RecipeError, match=r"unknown key known_bad\.versions") as caught:
        load_known_bad(listed)
    assert caught.value.where == f"{listed}:3"


def test_override_needs_a_reason(tmp_path: Path) -> None:
    pin = '\n[[pins]]\nname = "six"\nversion = "1.17.0"\n'
    recipe = load_recipe(write(tmp_path, MINIMAL + pin + 'override = "vLLM asks 1.16"\n'))
    assert recipe.pins[0].override == "vLLM asks 1.16"
    with pytest.raises(RecipeError, match="gives no reason"):
        load_recipe(write(tmp_path, MINIMAL + pin + 'override = "  "\n'))
    with pytest.raises(RecipeError, match=r"pins\.override must be str"):
        load_recipe(write(tmp_path, MINIMAL + pin + "override = true\n"))


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


def test_the_lock_records_what_the_tree_requires_of_the_pins(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, MINIMAL + '[[pins]]\nname = "six"\nversion = "1"\n'))
    assert recipe.tree_requirements() is None
    recipe.record_commit("a" * 40)
    found = TreeRequirements("a" * 40, "requirements/cuda.txt", {"six": ("six>=2",)})
    recipe.record_tree_requirements(found)
    assert recipe.tree_requirements() == found
    recipe.record_commit("a" * 40)  # the same commit again keeps the record
    assert recipe.tree_requirements() == found
    assert json.loads(recipe.lock_path.read_text())["tree_requirements"]["requirements"] == {
        "six": ["six>=2"]}
    recipe.record_commit("b" * 40)  # another commit: the record was the old tree's
    assert recipe.tree_requirements() is None
    assert "tree_requirements" not in json.loads(recipe.lock_path.read_text())


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
    shipped = sorted(p.name for p in recipes_dir().glob("*.toml") if p.name != KNOWN_BAD_NAME)
    assert shipped and "qwen38next.toml" in shipped
    assert all(name in hint for name in shipped), hint
    assert KNOWN_BAD_NAME not in hint  # the known-bad list is no recipe
    assert str(recipes_dir()) in hint


@pytest.mark.parametrize(("table", "line", "said"), [
    ("node.env", '"A=1;touch x;B" = "1"', "node.env: 'A=1;touch x;B' is not an environment"),
    ("node.env", '"A B" = "1"', "'A B' is not an environment variable name"),
    ("node.env", '1X = "1"', "'1X' is not"),
    ("node.env", 'X = "1\\nLD_PRELOAD=/tmp/x.so"', "the value of X holds U+000A"),
    ("node.env", 'X = "\\u202e"', "U+202E"),
    ("build.env", '"A=B" = "1"', "build.env: 'A=B' is not"),
])
def test_an_environment_entry_is_checked_where_the_recipe_is_read(
        tmp_path: Path, table: str, line: str, said: str) -> None:
    with pytest.raises(RecipeError) as refused:
        load_recipe(write(tmp_path, MINIMAL + f"\n[{table}]\n{line}\n"))
    assert said in refused.value.what


def test_plain_environment_entries_load(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, MINIMAL + '\n[node.env]\nNCCL_IB_HCA = "=mlx5_0:1"\n'
                                         '_X9 = "a b $c"\n'))
    assert recipe.node.env == {"NCCL_IB_HCA": "=mlx5_0:1", "_X9": "a b $c"}
