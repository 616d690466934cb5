"""What the node serves, resolved: a recipe's ``[model]`` over its Hugging Face config.

``[model] config = "PATH"`` names a ``config.json`` (no weights); every other key of the
table overrides what the file says, and the deployment's own choices (tensor/expert
parallel size, the attention backend, MTP's speculative tokens, the KV cache's dtype) are
only the table's.  What is read from a config (the names vLLM's own configs read):

* ``architectures[0]``; a multimodal config's ``text_config`` is read for the rest;
* ``head_dim`` (else ``hidden_size / num_attention_heads``), ``num_attention_heads``,
  ``num_key_value_heads``; ``torch_dtype`` / ``dtype``;
* MoE: ``num_experts`` / ``n_routed_experts`` / ``num_local_experts``,
  ``num_experts_per_tok``, ``moe_intermediate_size``;
* ``sliding_window`` (when ``use_sliding_window`` is not false), ``final_logit_softcapping``
  / ``attn_logit_softcapping``;
* ``quantization_config``: ``quant_algo`` (or ``quant_method``) NVFP4 / FP8 with a
  ``weight_block_size`` (fp8-block), and its ``ignore`` / ``exclude_modules`` patterns;
* MTP: ``num_nextn_predict_layers`` / ``mtp_num_hidden_layers`` (that the model has
  MTP layers; how many tokens it speculates is the deployment's ``speculative_tokens``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import RecipeError
from sparkbuild.recipe import parse_json

if TYPE_CHECKING:
    from sparkbuild.recipe import ModelSettings

QUANTIZATIONS = ("nvfp4", "fp8-block", "none")
DTYPES = ("bfloat16", "float16")
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3")
BACKENDS = ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION")


@dataclass(frozen=True)
class ModelFacts:
    """The model as the module set reads it (every field resolved)."""

    architecture: str
    dtype: str
    kv_cache_dtype: str
    """``bfloat16``, ``float16`` or ``fp8_e4m3`` (``auto`` resolved to ``dtype``)."""
    head_dim: int
    head_dim_vo: int
    num_attention_heads: int
    num_key_value_heads: int
    quantization: str
    quantization_ignore: tuple[str, ...] = ()
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    sliding_window: int = 0
    logits_soft_cap: float = 0.0
    tensor_parallel_size: int = 1
    expert_parallel: bool = False
    attention_backend: str = "FLASHINFER"
    speculative_tokens: int = 0
    kv_page_sizes: tuple[int, ...] = ()
    flashinfer_sampler: bool = True
    """vLLM's ``VLLM_USE_FLASHINFER_SAMPLER`` (on unless the node profile sets it to 0)."""
    mtp_layers: int = 0
    shared_experts: bool = False
    hybrid: bool = False
    """Linear-attention (mamba-like) layers beside full attention (Qwen3-Next's GDN)."""
    config: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    """Each field: ``config.json`` or ``recipe``."""

    @property
    def heads_per_rank(self) -> int:
        return max(1, self.num_attention_heads // self.tensor_parallel_size)

    @property
    def kv_heads_per_rank(self) -> int:
        return max(1, self.num_key_value_heads // self.tensor_parallel_size)

    @property
    def head_group_ratio(self) -> int:
        return max(1, self.heads_per_rank // self.kv_heads_per_rank)

    @property
    def moe_intermediate_per_rank(self) -> int:
        """Expert parallel deals whole experts out; tensor parallel slices each one."""
        if self.expert_parallel or self.tensor_parallel_size <= 1:
            return self.moe_intermediate_size
        return self.moe_intermediate_size // self.tensor_parallel_size

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["quantization_ignore"] = list(self.quantization_ignore)
        data["kv_page_sizes"] = list(self.kv_page_sizes)
        data["head_group_ratio"] = self.head_group_ratio
        return data


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _first(config: dict[str, Any], *names: str) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return None


def _quantization(config: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return None, ()
    algo = str(quant.get("quant_algo") or quant.get("quant_method") or "").lower()
    ignore = quant.get("ignore") or quant.get("exclude_modules") or []
    patterns = tuple(str(p) for p in ignore) if isinstance(ignore, list) else ()
    if "nvfp4" in algo:
        return "nvfp4", patterns
    if "fp8" in algo and quant.get("weight_block_size"):
        return "fp8-block", patterns
    return algo or None, patterns


def read_config(path: Path) -> dict[str, Any]:
    """The fields a Hugging Face ``config.json`` gives (module docstring)."""
    try:
        raw = parse_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecipeError(f"cannot read the model's config: {exc.strerror}", where=str(path),
                          hint="[model] config names a Hugging Face config.json") from exc
    except ValueError as exc:
        raise RecipeError(f"the model's config is not valid JSON: {exc}",
                          where=str(path)) from exc
    if not isinstance(raw, dict):
        raise RecipeError("the model's config is not a JSON object", where=str(path))
    config = _text_config(raw)
    heads = _first(config, "num_attention_heads")
    head_dim = _first(config, "head_dim")
    if head_dim is None and heads and config.get("hidden_size"):
        head_dim = int(config["hidden_size"]) // int(heads)
    architectures = raw.get("architectures") or []
    quantization, ignore = _quantization(raw)
    swa = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    layer_types = config.get("layer_types") or []
    out: dict[str, Any] = {
        "architecture": architectures[0] if architectures else None,
        "dtype": _first(config, "torch_dtype", "dtype"),
        "head_dim": head_dim, "num_attention_heads": heads,
        "num_key_value_heads": _first(config, "num_key_value_heads"),
        "experts": _first(config, "num_experts", "n_routed_experts", "num_local_experts"),
        "experts_per_token": _first(config, "num_experts_per_tok"),
        "moe_intermediate_size": _first(config, "moe_intermediate_size"),
        "sliding_window": swa,
        "logits_soft_cap": _first(config, "final_logit_softcapping", "attn_logit_softcapping"),
        "quantization": quantization, "quantization_ignore": list(ignore),
        "mtp_layers": _first(config, "num_nextn_predict_layers", "mtp_num_hidden_layers"),
        "shared_experts": bool(_first(config, "shared_expert_intermediate_size",
                                      "n_shared_experts")),
        "hybrid": any("linear" in str(t) or "mamba" in str(t) for t in layer_types)
        or config.get("full_attention_interval") is not None,
    }
    return {k: v for k, v in out.items() if v is not None}


def _int(value: Any, name: str, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RecipeError(f"model.{name} must be an integer >= {minimum}, not {value!r}",
                          where=where)
    return value


def _choice(value: Any, name: str, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise RecipeError(f"model.{name} = {value!r} is not one of {', '.join(choices)}",
                          where=where)
    return str(value)


def resolve_model(settings: ModelSettings, where: str) -> ModelFacts:
    """``[model]`` resolved: its config's fields, then the table's over them."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if settings.config is not None:
        for key, value in read_config(settings.config).items():
            merged[key], sources[key] = value, "config.json"
    for key, value in settings.fields.items():
        merged[key], sources[key] = value, "recipe"
    missing = [k for k in ("head_dim", "num_attention_heads", "num_key_value_heads")
               if k not in merged]
    if missing:
        raise RecipeError(f"[model] does not give {', '.join(missing)}", where=where,
                          hint="name a config.json (config = ...) or give the fields")
    dtype = _choice(str(merged.get("dtype", "bfloat16")), "dtype", DTYPES, where)
    kv = _choice(str(merged.get("kv_cache_dtype", "auto")), "kv_cache_dtype", KV_DTYPES, where)
    kv = dtype if kv == "auto" else ("fp8_e4m3" if kv == "fp8" else kv)
    quant = str(merged.get("quantization") or "none").lower()
    if quant not in QUANTIZATIONS:
        raise RecipeError(f"model.quantization = {quant!r} is not one of "
                          f"{', '.join(QUANTIZATIONS)}", where=where,
                          hint="the mapping knows NVFP4, FP8 block-scale and unquantized")
    head_dim = _int(merged["head_dim"], "head_dim", where, minimum=1)
    tp = _int(merged.get("tensor_parallel_size", 1), "tensor_parallel_size", where, minimum=1)
    pages = merged.get("kv_page_sizes", [])
    if not isinstance(pages, list) or not all(isinstance(p, int) and p > 0 for p in pages):
        raise RecipeError("model.kv_page_sizes must be a list of positive integers",
                          where=where)
    return ModelFacts(
        architecture=str(merged.get("architecture", "unknown")), dtype=dtype,
        kv_cache_dtype=kv, head_dim=head_dim,
        head_dim_vo=_int(merged.get("head_dim_vo", head_dim), "head_dim_vo", where, minimum=1),
        num_attention_heads=_int(merged["num_attention_heads"], "num_attention_heads", where,
                                 minimum=1),
        num_key_value_heads=_int(merged["num_key_value_heads"], "num_key_value_heads", where,
                                 minimum=1),
        quantization=quant,
        quantization_ignore=tuple(str(p) for p in merged.get("quantization_ignore", [])),
        experts=_int(merged.get("experts", 0), "experts", where),
        experts_per_token=_int(merged.get("experts_per_token", 0), "experts_per_token", where),
        moe_intermediate_size=_int(merged.get("moe_intermediate_size", 0),
                                   "moe_intermediate_size", where),
        sliding_window=_int(merged.get("sliding_window", 0) or 0, "sliding_window", where),
        logits_soft_cap=float(merged.get("logits_soft_cap", 0.0) or 0.0),
        tensor_parallel_size=tp, expert_parallel=bool(merged.get("expert_parallel", False)),
        attention_backend=_choice(str(merged.get("attention_backend", "FLASHINFER")).upper(),
                                  "attention_backend", BACKENDS, where),
        speculative_tokens=_int(merged.get("speculative_tokens", 0), "speculative_tokens",
                                where),
        kv_page_sizes=tuple(pages),
        flashinfer_sampler=bool(merged.get("flashinfer_sampler", True)),
        mtp_layers=_int(merged.get("mtp_layers", 0) or 0, "mtp_layers", where),
        shared_experts=bool(merged.get("shared_experts", False)),
        hybrid=bool(merged.get("hybrid", False)),
        config=str(settings.config) if settings.config else None, sources=sources)
