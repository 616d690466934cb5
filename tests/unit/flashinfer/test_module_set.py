"""The model's module set: the default recipe's model maps to the SM12x modules vLLM 0.29.0
reaches (the NVFP4 MoE, FP4 quantization, the bf16 head-256 prefill, XQA, sampling), each
with a reason, and what the fields change is what vLLM's code changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild import cli
from sparkbuild.errors import RecipeError
from sparkbuild.flashinfer.model_config import ModelFacts, resolve_model
from sparkbuild.flashinfer.module_set import model_set, recipe_set, select, spark_family
from sparkbuild.recipe import ModelSettings, load_recipe
from sparkbuild.resources import recipes_dir

DEFAULT = recipes_dir() / "qwen38next.toml"


def _facts(**fields: object) -> ModelFacts:
    base: dict[str, object] = {"head_dim": 128, "num_attention_heads": 32,
                               "num_key_value_heads": 8}
    return resolve_model(ModelSettings(None, {**base, **fields}), "test")


def test_the_default_recipes_set_has_the_sm12x_modules_each_with_a_reason() -> None:
    chosen = recipe_set(load_recipe(DEFAULT))
    assert chosen is not None
    names = chosen.names
    assert "fused_moe_120" in names and "fp4_quantization_121" in names
    assert len(names) < 60 and len(set(names)) == len(names)
    assert all(len(m.reason) > 40 and m.route in ("default", "gated", "nvfp4")
               for m in chosen.modules)
    prefill = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_"
               "i32_head_dim_qk_256_head_dim_vo_256_posenc_0_use_swa_False_use_logits_cap_False"
               "_f16qk_False")
    assert prefill in names and "sampling" in names
    xqa = [n for n in names if n.startswith("xqa_")]  # 3 page sizes x MTP's 1..4 queries
    assert len(xqa) == 12 and all("head_group_ratio_8" in n for n in xqa)
    assert {n.rsplit("_", 1)[1] for n in xqa} == {"1", "2", "3", "4"}
    assert chosen.model.head_group_ratio == 8  # 16:2 heads over TP 2
    excluded = " ".join(e.what for e in chosen.excluded)
    assert "fp4_gemm_cutlass_sm120" in excluded and "allreduce" in excluded


def test_the_vllm_0_29_0_recipe_maps_the_same_model() -> None:
    ours = recipe_set(load_recipe(recipes_dir() / "vllm-0.29.0.toml"))
    default = recipe_set(load_recipe(DEFAULT))
    assert ours is not None and default is not None and ours.names == default.names


def test_list_json_names_the_set_with_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["flashinfer-aot", "--recipe", str(DEFAULT), "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == len(listed["modules"]) < 60
    assert {"fused_moe_120", "fp4_quantization_121"} <= {m["name"] for m in listed["modules"]}
    assert all(m["reason"] for m in listed["modules"])
    assert listed["model"]["experts"] == 512 and listed["model"]["moe_intermediate_size"] == 640
    stubs = {m["name"]: m["unreachable_stubs"] for m in listed["modules"]}
    assert [rule["selected_for"] for rule in stubs["fused_moe_120"]] == [[75, 80]]
    assert not any(v for name, v in stubs.items() if name != "fused_moe_120")


def test_list_only_narrows_and_an_unknown_glob_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["flashinfer-aot", "--recipe", str(DEFAULT), "--list", "--json",
                     "--only", "fp4_*"]) == 0
    assert [m["name"] for m in json.loads(capsys.readouterr().out)["modules"]] == [
        "fp4_quantization_121"]
    assert cli.main(["flashinfer-aot", "--recipe", str(DEFAULT), "--list", "--json",
                     "--only", "nope_*"]) != 0


def test_aot_args_override_the_models_set(tmp_path: Path) -> None:
    text = DEFAULT.read_text().replace('aot_args = []', 'aot_args = ["--add-moe", "false"]')
    text = text.replace('config = "qwen38next-model.json"',
                        f'config = "{recipes_dir() / "qwen38next-model.json"}"')
    text = text.replace('path = "../patches/series"',
                        f'path = "{(recipes_dir() / "../patches/series").resolve()}"')
    (tmp_path / "r.toml").write_text(text)
    assert recipe_set(load_recipe(tmp_path / "r.toml")) is None


def test_no_experts_no_moe_module_and_no_nvfp4_without_quantization() -> None:
    chosen = model_set(_facts(), "12.1a")
    assert not [n for n in chosen.names if n.startswith(("fused_moe", "fp4_"))]
    assert chosen.names[0].startswith("batch_prefill") and chosen.names[-1] == "sampling"


def test_sliding_window_soft_cap_and_fp8_kv_change_the_prefill_module() -> None:
    chosen = model_set(_facts(sliding_window=4096, logits_soft_cap=30.0,
                              kv_cache_dtype="fp8"), "12.1a")
    prefill = [n for n in chosen.names if n.startswith("batch_prefill")]
    assert len(prefill) == 2  # full-attention layers beside the sliding ones
    assert all("dtype_kv_e4m3" in n and "use_logits_cap_True" in n for n in prefill)
    assert {"use_swa_True" in n for n in prefill} == {True, False}
    assert not [n for n in chosen.names if n.startswith("xqa_")]  # XQA has no soft-cap


def test_another_attention_backend_leaves_attention_out_and_says_why() -> None:
    chosen = model_set(_facts(attention_backend="FLASH_ATTN"), "12.1a")
    assert chosen.names == ["sampling"]
    assert any("FLASH_ATTN" in e.reason for e in chosen.excluded)


def test_a_head_size_the_backend_lacks_is_refused() -> None:
    with pytest.raises(RecipeError, match="head sizes"):
        model_set(_facts(head_dim=96), "12.1a")


def test_nvfp4_dense_layers_add_the_fp4_gemm() -> None:
    chosen = model_set(_facts(quantization="nvfp4", quantization_ignore=["lm_head"]), "12.1a")
    assert "fp4_gemm_cutlass_sm120" in chosen.names and "fp4_quantization_121" in chosen.names


def test_tp_without_expert_parallel_names_the_padding_refusal() -> None:
    chosen = model_set(_facts(quantization="nvfp4", experts=512, experts_per_token=10,
                              moe_intermediate_size=640, tensor_parallel_size=4), "12.1a")
    assert any("160 per rank" in note and "expert_parallel" in note for note in chosen.notes)
    ep = model_set(_facts(quantization="nvfp4", experts=512, moe_intermediate_size=640,
                          tensor_parallel_size=4, expert_parallel=True), "12.1a")
    assert not any("per rank" in note for note in ep.notes)


def test_fp8_block_experts_take_no_flashinfer_moe_on_sm12x() -> None:
    chosen = model_set(_facts(quantization="fp8-block", experts=64), "12.1a")
    assert "fused_moe_120" not in chosen.names
    assert any("FP8 block-scale" in e.what for e in chosen.excluded)


def test_bf16_experts_take_the_cutlass_moe_module() -> None:
    chosen = model_set(_facts(experts=64, experts_per_token=8), "12.1a")
    assert "fused_moe_120" in chosen.names and "fp4_quantization_121" not in chosen.names


def test_only_sm12x_targets_and_the_families_modules() -> None:
    assert spark_family("12.1a") == "121" and spark_family("12.0f") == "120f"
    assert "fp4_quantization_120" in model_set(_facts(quantization="nvfp4", experts=8),
                                               "12.0a").names
    with pytest.raises(RecipeError, match="sm_12x"):
        spark_family("9.0a")


def test_select_refuses_a_glob_that_matches_nothing() -> None:
    modules = model_set(_facts(), "12.1a").modules
    assert [m.name for m in select(modules, ("samp*",))] == ["sampling"]
    with pytest.raises(RecipeError, match="matches none"):
        select(modules, ("gemm*",))


def test_the_set_names_the_headers_and_libraries_it_needs() -> None:
    chosen = recipe_set(load_recipe(DEFAULT))
    assert chosen is not None
    assert chosen.headers == ("cublas", "curand")
    moe = next(m for m in chosen.modules if m.name == "fused_moe_120")
    assert moe.libraries == ("nvrtc",) and moe.headers == ("cublas", "curand")
    assert next(m for m in chosen.modules if m.name.startswith("xqa_")).headers == ()
