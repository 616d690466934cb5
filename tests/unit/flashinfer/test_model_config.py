"""``[model]`` over a Hugging Face config: what the file says, what the table overrides, and
what is refused with the field named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparkbuild.errors import RecipeError
from sparkbuild.flashinfer.model_config import read_config, resolve_model
from sparkbuild.recipe import ModelSettings, load_recipe
from sparkbuild.resources import recipes_dir


def test_the_default_recipes_config_reads_as_the_seeds_model() -> None:
    recipe = load_recipe(recipes_dir() / "qwen38next.toml")
    assert recipe.model is not None and recipe.model.config is not None
    facts = resolve_model(recipe.model, str(recipe.path))
    assert (facts.architecture, facts.experts, facts.experts_per_token,
            facts.moe_intermediate_size) == ("Qwen3NextForCausalLM", 512, 10, 640)
    assert (facts.head_dim, facts.num_attention_heads, facts.num_key_value_heads) == (256, 16, 2)
    assert facts.quantization == "nvfp4" and facts.kv_cache_dtype == "bfloat16"
    assert facts.quantization_ignore == ("mtp.*", "*.self_attn.*", "*.linear_attn.*",
                                         "*.mlp.gate*", "*.mlp.shared_expert.*", "lm_head")
    assert facts.hybrid and facts.mtp_layers == 1 and facts.shared_experts
    assert (facts.tensor_parallel_size, facts.expert_parallel, facts.speculative_tokens) == (
        2, True, 3)
    assert facts.sources["experts"] == "config.json"
    assert facts.sources["tensor_parallel_size"] == "recipe"


def _write(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_a_multimodal_configs_text_config_and_hidden_size_give_the_head_dim(
        tmp_path: Path) -> None:
    path = _write(tmp_path, {"architectures": ["X"], "text_config": {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "torch_dtype": "float16", "sliding_window": 4096, "use_sliding_window": False},
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                                "exclude_modules": ["lm_head"]}})
    read = read_config(path)
    assert read["head_dim"] == 128 and read["dtype"] == "float16"
    assert "sliding_window" not in read  # use_sliding_window false
    assert read["quantization"] == "fp8-block" and read["quantization_ignore"] == ["lm_head"]


def test_the_table_overrides_the_config(tmp_path: Path) -> None:
    path = _write(tmp_path, {"num_attention_heads": 16, "num_key_value_heads": 2,
                             "head_dim": 256})
    facts = resolve_model(ModelSettings(path, {"head_dim": 128, "kv_cache_dtype": "fp8"}), "r")
    assert facts.head_dim == 128 and facts.kv_cache_dtype == "fp8_e4m3"
    assert facts.sources["head_dim"] == "recipe"


@pytest.mark.parametrize(("fields", "says"), [
    ({"num_attention_heads": 8, "num_key_value_heads": 8}, "does not give head_dim"),
    ({"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 8,
      "quantization": "int4"}, "quantization"),
    ({"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 8,
      "kv_cache_dtype": "int8"}, "kv_cache_dtype"),
    ({"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 8,
      "tensor_parallel_size": 0}, "tensor_parallel_size"),
    ({"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 8,
      "attention_backend": "MAGIC"}, "attention_backend"),
])
def test_a_bad_field_is_refused_naming_it(fields: dict[str, object], says: str) -> None:
    with pytest.raises(RecipeError, match=says):
        resolve_model(ModelSettings(None, fields), "recipe.toml")


def test_a_missing_or_broken_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="cannot read the model's config"):
        read_config(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(RecipeError, match="not valid JSON"):
        read_config(tmp_path / "bad.json")


def test_a_recipes_unknown_model_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text(
        '[source]\nspec = "."\n[series]\npath = "s"\n[model]\nheads = 8\n')
    with pytest.raises(RecipeError, match=r"unknown key model\.heads"):
        load_recipe(tmp_path / "r.toml")


GOOD = {"architectures": ["LlamaForCausalLM"], "head_dim": 128, "num_attention_heads": 8,
        "num_key_value_heads": 8}


@pytest.mark.parametrize(("fields", "says"), [
    ({"architectures": "LlamaForCausalLM"}, "architectures must be a list of model class"),
    ({"architectures": {"a": 1}}, "architectures must be a list"),
    ({"head_dim": None, "hidden_size": "big"}, "hidden_size must be an integer"),
    ({"head_dim": None, "hidden_size": 4096, "num_attention_heads": "0"},
     "num_attention_heads must be an integer from 1 to 1024, not '0'"),
    ({"head_dim": None, "hidden_size": 4000, "num_attention_heads": 24},
     "hidden_size 4000 is not a multiple of num_attention_heads 24"),
    ({"head_dim": True}, "head_dim must be an integer"),
    ({"layer_types": 7}, "layer_types must be a list"),
    ({"final_logit_softcapping": "x"}, "final_logit_softcapping must be a finite number"),
    ({"quantization_config": "nvfp4"}, "quantization_config must be an object"),
    ({"quantization_config": {"quant_algo": "NVFP4", "ignore": "lm_head"}},
     "quantization_config.ignore must be a list"),
    ({"quantization_config": {"quant_method": "awq"}},
     "quantization_config.quant_method must be one of nvfp4, fp8-block, none, not 'awq'"),
    ({"use_sliding_window": "no", "sliding_window": 4096}, "use_sliding_window must be true"),
    ({"text_config": []}, "text_config must be an object"),
])
def test_a_configs_wrong_value_names_its_key_and_file(tmp_path: Path, fields: dict[str, object],
                                                      says: str) -> None:
    config = {k: v for k, v in {**GOOD, **fields}.items() if v is not None}
    path = _write(tmp_path, config)
    with pytest.raises(RecipeError, match=f"^config.json: {re.escape(says)}") as caught:
        resolve_model(ModelSettings(path, {}), "recipe.toml")
    assert caught.value.where == str(path)


def test_a_field_of_the_table_overrides_a_configs_value_it_would_refuse(
        tmp_path: Path) -> None:
    path = _write(tmp_path, {**GOOD, "torch_dtype": "float32"})
    with pytest.raises(RecipeError, match=r"config\.json: torch_dtype must be one of"):
        resolve_model(ModelSettings(path, {}), "recipe.toml")
    facts = resolve_model(ModelSettings(path, {"dtype": "bfloat16"}), "recipe.toml")
    assert facts.dtype == "bfloat16" and facts.architecture == "LlamaForCausalLM"


@pytest.mark.parametrize(("fields", "says"), [
    ({"num_key_value_heads": 3}, "is not a multiple of num_key_value_heads 3"),
    ({"tensor_parallel_size": 3}, "does not divide over tensor_parallel_size 3"),
    ({"num_key_value_heads": 4, "tensor_parallel_size": 8, "num_attention_heads": 8},
     None),
    ({"num_key_value_heads": 2, "tensor_parallel_size": 4, "num_attention_heads": 8},
     None),
    ({"num_key_value_heads": 4, "tensor_parallel_size": 8, "num_attention_heads": 16,
      "head_dim": 128}, None),
    ({"experts_per_token": 2}, "experts_per_token 2 is given without experts"),
    ({"experts": 8, "experts_per_token": 10}, "is more than the model's 8 experts"),
])
def test_the_fields_must_describe_one_model(fields: dict[str, object], says: str | None
                                            ) -> None:
    given = {"head_dim": 128, "num_attention_heads": 8, "num_key_value_heads": 8, **fields}
    if says is None:
        resolve_model(ModelSettings(None, given), "recipe.toml")
        return
    with pytest.raises(RecipeError, match=re.escape(says)):
        resolve_model(ModelSettings(None, given), "recipe.toml")


@pytest.mark.parametrize(("line", "says"), [
    ("kv_page_sizes = [true]", "model.kv_page_sizes must be a list of 16, 32, 64, each once"),
    ("kv_page_sizes = [16, 16]", "model.kv_page_sizes must be"),
    ("kv_page_sizes = []", "model.kv_page_sizes must be"),
    ("speculative_tokens = 30000000", "model.speculative_tokens must be an integer from 0 to"),
    ("logits_soft_cap = inf", "model.logits_soft_cap must be a finite number"),
    ("quantization_ignore = [1]", "model.quantization_ignore must be a list of strings"),
    ('architecture = "Llama\\u202eX"', "model.architecture must be a name"),
    ("hybrid = 1", "model.hybrid must be bool"),
    ('config = ""', "model.config must name a config.json"),
])
def test_a_recipes_model_field_out_of_bounds_names_its_line(tmp_path: Path, line: str,
                                                            says: str) -> None:
    (tmp_path / "r.toml").write_text(
        f'[source]\nspec = "."\n[series]\npath = "s"\n[model]\n{line}\n')
    with pytest.raises(RecipeError, match=re.escape(says)) as caught:
        load_recipe(tmp_path / "r.toml")
    assert caught.value.where == f"{tmp_path / 'r.toml'}:6"


def test_hybrid_shared_experts_and_mtp_layers_are_fields(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text(
        '[source]\nspec = "."\n[series]\npath = "s"\n[model]\nhead_dim = 128\n'
        "num_attention_heads = 8\nnum_key_value_heads = 8\nhybrid = true\n"
        "shared_experts = true\nmtp_layers = 2\n")
    model = load_recipe(tmp_path / "r.toml").model
    assert model is not None
    facts = resolve_model(model, "r.toml")
    assert facts.hybrid and facts.shared_experts and facts.mtp_layers == 2
    assert facts.sources["hybrid"] == "recipe"


def _listed(tmp_path: Path, name: str, model: str) -> dict[str, object]:
    """``flashinfer-aot --list --json`` of a recipe with this ``[model]`` (its model's own
    record left out: it says where each field came from)."""
    from sparkbuild.flashinfer.module_set import listing

    path = tmp_path / f"{name}.toml"
    path.write_text('[source]\nspec = "."\n[series]\npath = "s"\n[model]\n' + model)
    listed = listing(load_recipe(path), ()).to_dict()
    return {key: value for key, value in listed.items() if key != "model"}


def test_hybrid_in_the_recipe_changes_the_listing_as_the_config_does(tmp_path: Path) -> None:
    shape = ("head_dim = 128\nnum_attention_heads = 8\nnum_key_value_heads = 8\n"
             'quantization = "nvfp4"\nquantization_ignore = ["*.self_attn.*"]\n')
    _write(tmp_path, {"layer_types": ["linear_attention", "full_attention"]})
    plain = _listed(tmp_path, "plain", shape)
    from_recipe = _listed(tmp_path, "recipe", shape + "hybrid = true\n")
    from_config = _listed(tmp_path, "config", shape + 'config = "config.json"\n')
    assert from_recipe == from_config
    assert from_recipe != plain
    assert "GDN linear attention" in json.dumps(from_recipe["excluded"])
    assert "GDN linear attention" not in json.dumps(plain["excluded"])
