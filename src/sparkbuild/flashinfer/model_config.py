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

Every value, the config's and the table's, is checked by the recipe's ``MODEL_FIELDS``
(sparkbuild.recipe_model declares each field once, with the value it takes while neither
gives it, and ``model_precedence`` says which wins) (its
type, a bool never an integer, its bounds and choices), and the whole for consistency (the
heads over the KV heads and the ranks, the experts a token is routed to): a wrong one is a
:class:`~sparkbuild.errors.RecipeError` naming the config's key and file, or the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import RecipeError
from sparkbuild.recipe import MODEL_FIELDS, RECIPE_LIMIT, check_model_field
from sparkbuild.recipe_model import model_precedence
from sparkbuild.records import Record
from sparkbuild.store.user_files import parse_json, read_user_text

if TYPE_CHECKING:
    from sparkbuild.recipe import ModelSettings

@dataclass(frozen=True)
class ModelFacts(Record):
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

    def json_extra(self) -> dict[str, Any]:
        return {"head_group_ratio": self.head_group_ratio}


CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "dtype": ("torch_dtype", "dtype"),
    "head_dim": ("head_dim",),
    "num_attention_heads": ("num_attention_heads",),
    "num_key_value_heads": ("num_key_value_heads",),
    "experts": ("num_experts", "n_routed_experts", "num_local_experts"),
    "experts_per_token": ("num_experts_per_tok",),
    "moe_intermediate_size": ("moe_intermediate_size",),
    "logits_soft_cap": ("final_logit_softcapping", "attn_logit_softcapping"),
    "mtp_layers": ("num_nextn_predict_layers", "mtp_num_hidden_layers"),
}
"""The ``[model]`` fields a config gives as they are: each from the first of its keys the
config sets (not null).  Checked, as the recipe's fields are, by ``MODEL_FIELDS``."""

HIDDEN_SIZE_LIMIT = 1 << 20
CONFIG_HINT = ("[model] config names a Hugging Face config.json; a field of [model] "
               "overrides what it says")


@dataclass(frozen=True)
class ConfigValue:
    """A value a config gives for a ``[model]`` field, and the config's key it came from."""

    value: Any
    key: str


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class _ConfigReader:
    """A config's object read key by key: a value of the wrong type or outside its bounds
    is a :class:`RecipeError` naming the key and the file, never a Python error."""

    path: Path
    data: dict[str, Any]

    def refuse(self, key: str, must: str, value: Any) -> RecipeError:
        return RecipeError(f"{self.path.name}: {key} must be {must}, not {_shown(value)}",
                           where=str(self.path), hint=CONFIG_HINT)

    def integer(self, key: str, low: int, high: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.refuse(key, f"an integer from {low} to {high}", value)
        return value

    def flag(self, key: str) -> bool | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.refuse(key, "true or false", value)
        return value

    def strings(self, key: str, what: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.refuse(key, f"a list of {what}", value)
        return value

    def table(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            raise self.refuse(key, "an object", value)
        return value


def _load(path: Path) -> dict[str, Any]:
    text = read_user_text(path, "the model's config", RECIPE_LIMIT, hint=CONFIG_HINT)
    try:
        raw = parse_json(text)
    except ValueError as exc:
        raise RecipeError(f"the model's config is not valid JSON: {exc}",
                          where=str(path)) from exc
    if not isinstance(raw, dict):
        raise RecipeError("the model's config is not a JSON object", where=str(path),
                          hint=CONFIG_HINT)
    return raw


def _quantization(top: _ConfigReader) -> dict[str, ConfigValue]:
    """``quantization_config``: the scheme (``quant_algo``, else ``quant_method``) and the
    patterns of the modules left unquantized (``ignore``, else ``exclude_modules``)."""
    quant = top.table("quantization_config")
    if quant is None:
        return {}
    inner = _ConfigReader(top.path, {f"quantization_config.{k}": v for k, v in quant.items()})
    algo_key = "quant_algo" if quant.get("quant_algo") else "quant_method"
    algo = quant.get(algo_key)
    if algo is not None and not isinstance(algo, str):
        raise top.refuse(f"quantization_config.{algo_key}", "a string", algo)
    ignore_key = "ignore" if quant.get("ignore") else "exclude_modules"
    ignore = inner.strings(f"quantization_config.{ignore_key}", "module name patterns")
    block = quant.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or not block or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in block)):
        raise top.refuse("quantization_config.weight_block_size", "a list of positive integers",
                         block)
    scheme = (algo or "").lower()
    if "nvfp4" in scheme:
        scheme = "nvfp4"
    elif "fp8" in scheme and block:
        scheme = "fp8-block"
    found = {"quantization_ignore": ConfigValue(
        list(ignore or []), f"quantization_config.{ignore_key}")}
    if scheme:
        found["quantization"] = ConfigValue(scheme, f"quantization_config.{algo_key}")
    return found


def _read_config(path: Path) -> dict[str, ConfigValue]:
    """What the config at ``path`` gives for each ``[model]`` field (module docstring), with
    the key each came from; the keys read only to derive a field are checked here."""
    raw = _load(path)
    top = _ConfigReader(path, raw)
    text = top.table("text_config")
    config = _ConfigReader(path, {**raw, **text} if text else raw)
    found = {name: ConfigValue(config.data[key], key) for name, keys in CONFIG_KEYS.items()
             for key in reversed(keys) if config.data.get(key) is not None}
    architectures = top.strings("architectures", "model class names")
    if architectures:
        found["architecture"] = ConfigValue(architectures[0], "architectures[0]")
    hidden = config.integer("hidden_size", 1, HIDDEN_SIZE_LIMIT)
    heads = found.get("num_attention_heads")
    if "head_dim" not in found and hidden is not None and heads is not None:
        count = check_model_field("num_attention_heads", heads.value,
                                  f"{path.name}: {heads.key}", str(path))
        if hidden % count:
            raise RecipeError(f"{path.name}: hidden_size {hidden} is not a multiple of "
                              f"num_attention_heads {count}, and no head_dim is given",
                              where=str(path), hint="give head_dim in [model]")
        found["head_dim"] = ConfigValue(hidden // count, "hidden_size / num_attention_heads")
    if config.flag("use_sliding_window") is not False and config.data.get(
            "sliding_window") is not None:
        found["sliding_window"] = ConfigValue(config.data["sliding_window"], "sliding_window")
    found.update(_quantization(top))
    shared = [config.integer(key, 0, HIDDEN_SIZE_LIMIT)
              for key in ("shared_expert_intermediate_size", "n_shared_experts")]
    found["shared_experts"] = ConfigValue(any(shared), "shared_expert_intermediate_size")
    layer_types = config.strings("layer_types", "layer type names") or []
    interval = config.integer("full_attention_interval", 1, HIDDEN_SIZE_LIMIT)
    found["hybrid"] = ConfigValue(
        any("linear" in t or "mamba" in t for t in layer_types) or interval is not None,
        "layer_types" if layer_types else "full_attention_interval")
    return found


def read_config(path: Path) -> dict[str, Any]:
    """The fields a Hugging Face ``config.json`` gives (module docstring), as given: each is
    checked when the model is resolved, where a field of ``[model]`` may override it."""
    return {name: found.value for name, found in _read_config(path).items()}


def _merged(settings: ModelSettings, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Every field's value by :func:`~sparkbuild.recipe_model.model_precedence` (the
    recipe's, else the config's, else the declared one), each given value checked by its
    field's rule (naming the config's key and file, or the recipe's field); and where each
    given one came from (the config's only where the recipe does not override it)."""
    recipe: dict[str, Any] = {}
    for name, value in settings.fields.items():
        if name not in MODEL_FIELDS:
            raise RecipeError(f"unknown key model.{name}", where=where,
                              hint=f"known keys of [model]: config, {', '.join(MODEL_FIELDS)}")
        recipe[name] = check_model_field(name, value, f"model.{name}", where)
    config: dict[str, Any] = {}
    sources: dict[str, str] = {}
    path = settings.config
    found = _read_config(path) if path is not None else {}
    file = path.name if path is not None else ""
    for name, given in found.items():
        sources[name] = "recipe" if name in recipe else "config.json"
        if name not in recipe:  # a field the recipe overrides is not the config's to judge
            config[name] = check_model_field(name, given.value, f"{file}: {given.key}", str(path))
    sources.update((name, "recipe") for name in recipe)
    return model_precedence(config, recipe), sources


def _inconsistency(facts: ModelFacts) -> str | None:
    """Why the resolved fields cannot describe one model served one way; None when they can."""
    heads, kv, tp = facts.num_attention_heads, facts.num_key_value_heads, \
        facts.tensor_parallel_size
    if heads % kv:
        return (f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}: "
                "each KV head serves a whole group of query heads")
    if heads % tp:
        return (f"num_attention_heads {heads} does not divide over tensor_parallel_size {tp}:"
                " vLLM gives every rank the same number of query heads")
    if kv % tp and tp % kv:
        return (f"num_key_value_heads {kv} and tensor_parallel_size {tp}: vLLM splits the KV "
                "heads over the ranks, or copies them to each, and neither divides the other")
    if facts.experts_per_token and not facts.experts:
        return f"experts_per_token {facts.experts_per_token} is given without experts"
    if facts.experts_per_token > facts.experts:
        return (f"experts_per_token {facts.experts_per_token} is more than the model's "
                f"{facts.experts} experts")
    return None


FIELDS_OF = {"num_attention_heads", "num_key_value_heads", "tensor_parallel_size", "experts",
             "experts_per_token"}


def resolve_model(settings: ModelSettings, where: str) -> ModelFacts:
    """``[model]`` resolved: its config's fields, then the table's over them; every value
    checked by ``MODEL_FIELDS`` and the whole for consistency."""
    merged, sources = _merged(settings, where)
    missing = [k for k in ("head_dim", "num_attention_heads", "num_key_value_heads")
               if merged[k] is None]
    if missing:
        raise RecipeError(f"[model] does not give {', '.join(missing)}", where=where,
                          hint="name a config.json (config = ...) or give the fields")
    kv = merged["kv_cache_dtype"]
    merged["kv_cache_dtype"] = merged["dtype"] if kv == "auto" else (
        "fp8_e4m3" if kv == "fp8" else kv)
    if merged["head_dim_vo"] is None:
        merged["head_dim_vo"] = merged["head_dim"]
    for name in ("quantization_ignore", "kv_page_sizes"):
        merged[name] = tuple(merged[name])
    facts = ModelFacts(**merged, config=str(settings.config) if settings.config else None,
                       sources=sources)
    problem = _inconsistency(facts)
    if problem is not None:
        named = [name for name in sorted(FIELDS_OF) if name in sources and name in problem]
        given = ", ".join(f"{name} from "
                          f"{'the recipe' if sources[name] == 'recipe' else sources[name]}"
                          for name in named)
        from_config = any(sources[name] == "config.json" for name in named)
        raise RecipeError(f"[model] {problem}", where=where, hint=(
            f"{given}: " + ("correct the config or override the field in [model]"
                            if from_config else "correct the fields in [model]")
            if given else "correct the fields in [model]"))
    return facts
