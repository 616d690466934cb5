"""``[model]`` over a Hugging Face config: what the file says, what the table overrides, and
what is refused with the field named."""

from __future__ import annotations

import json
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
