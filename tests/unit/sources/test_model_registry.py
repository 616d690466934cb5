"""A vLLM tree's model registry and attention backends, read with ``ast``
(sparkbuild.sources.model_registry): made-up registry files shaped as vLLM's."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.sources.model_registry import (
    BACKEND_REGISTRY,
    MODEL_REGISTRY,
    backend_module,
    model_entries,
    model_modules,
)

MODELS = '''\
_TEXT_GENERATION_MODELS = {
    "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
    "Qwen3NextForCausalLM": ("qwen3_next", "Qwen3NextForCausalLM"),
    "Glm4MoeForCausalLM": ("glm4_moe", "Glm4MoeForCausalLM"),
    "Qwen4ExpForCausalLM": ("vllm.models.qwen4_exp", "Qwen4ExpForCausalLM"),
    "NotAPair": ("only_one",),
    "NotStrings": (1, 2),
    NAME: ("computed", "Key"),
}
_SPECULATIVE_DECODING_MODELS = {
    "Qwen3NextMTP": ("qwen3_next_mtp", "Qwen3NextMTP"),
    "Glm4MoeMTPModel": ("glm4_moe_mtp", "Glm4MoeMTP"),
    "Glm4MoeLiteMTPModel": ("glm4_moe_lite_mtp", "Glm4MoeLiteMTP"),
    "Qwen4ExpMTP": ("vllm.models.qwen4_exp", "Qwen4ExpMTP"),
}
'''

BACKENDS = '''\
import enum


class AttentionBackendEnum(enum.Enum):
    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
    FLASHINFER_MLA = (
        "vllm.v1.attention.backends.mla."
        "flashinfer_mla.FlashInferMLABackend"
    )
    NO_DOT = "flashinfer"
    COMPUTED = make("x.y.Z")
'''


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for relative, text in ((MODEL_REGISTRY, MODELS), (BACKEND_REGISTRY, BACKENDS)):
        path = tmp_path / "vllm" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_every_string_pair_entry_is_read_with_its_module_and_line(tree: Path) -> None:
    entries = {entry.name: entry for entry in model_entries(tree, "vllm")}
    assert entries["Qwen3NextForCausalLM"].module == "vllm.model_executor.models.qwen3_next"
    assert entries["Qwen3NextForCausalLM"].where == f"vllm/{MODEL_REGISTRY}:3"
    # a whole dotted name is kept as it is
    assert entries["Qwen4ExpForCausalLM"].module == "vllm.models.qwen4_exp"
    assert not {"NotAPair", "NotStrings", "computed"} & set(entries)


def test_the_architecture_alone_without_a_draft(tree: Path) -> None:
    names = [e.name for e in model_modules(tree, "vllm", "Qwen3NextForCausalLM", draft=False)]
    assert names == ["Qwen3NextForCausalLM"]


def test_the_draft_is_the_stem_followed_by_mtp(tree: Path) -> None:
    found = model_modules(tree, "vllm", "Qwen3NextForCausalLM", draft=True)
    assert [(e.name, e.module) for e in found] == [
        ("Qwen3NextForCausalLM", "vllm.model_executor.models.qwen3_next"),
        ("Qwen3NextMTP", "vllm.model_executor.models.qwen3_next_mtp")]


def test_another_models_draft_that_shares_the_stem_is_not_taken(tree: Path) -> None:
    # Qwen3 is the start of Qwen3NextMTP's name; Glm4Moe of Glm4MoeLiteMTPModel's
    qwen3 = model_modules(tree, "vllm", "Qwen3ForCausalLM", draft=True)
    assert [e.name for e in qwen3] == ["Qwen3ForCausalLM"]
    glm = model_modules(tree, "vllm", "Glm4MoeForCausalLM", draft=True)
    assert [e.name for e in glm] == ["Glm4MoeForCausalLM", "Glm4MoeMTPModel"]


def test_an_architecture_the_registry_lacks_has_no_entries(tree: Path) -> None:
    assert model_modules(tree, "vllm", "MadeUpForCausalLM", draft=True) == []


def test_the_backend_module_is_the_class_path_without_its_class(tree: Path) -> None:
    found = backend_module(tree, "vllm", "FLASHINFER")
    assert found is not None
    assert found.module == "vllm.v1.attention.backends.flashinfer"
    assert found.where == f"vllm/{BACKEND_REGISTRY}:6"
    mla = backend_module(tree, "vllm", "FLASHINFER_MLA")  # implicitly joined strings
    assert mla is not None and mla.module == "vllm.v1.attention.backends.mla.flashinfer_mla"


@pytest.mark.parametrize("name", ["NO_DOT", "COMPUTED", "MISSING", "FLASHINFE"])
def test_a_backend_without_a_dotted_class_path_is_none(tree: Path, name: str) -> None:
    assert backend_module(tree, "vllm", name) is None


def test_missing_or_broken_registries_read_as_empty(tmp_path: Path) -> None:
    assert model_entries(tmp_path, "vllm") == []
    assert backend_module(tmp_path, "vllm", "FLASHINFER") is None
    path = tmp_path / "vllm" / MODEL_REGISTRY
    path.parent.mkdir(parents=True)
    path.write_text("_MODELS = {\n", encoding="utf-8")
    assert model_entries(tmp_path, "vllm") == []
