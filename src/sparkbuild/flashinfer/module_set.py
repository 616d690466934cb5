"""The flashinfer modules vLLM reaches on sm_12x for a model: the model's set, each with why.

Read from vllm 0.29.0's and flashinfer-python 0.6.18's code (the public release that pins
flashinfer 0.6.18 and torch 2.13.0; ``VL/`` and ``FI/`` below are their trees), for targets
of the Spark's family (12.0, 12.1).  Every module is a call of one of flashinfer's own
generators (``FI/jit/...``), named as flashinfer names it, with the route that loads it:

* ``default``: what vLLM loads for this model as it starts by default on sm_12x;
* ``gated``: loaded when a runtime gate of vLLM's opens (named in the reason);
* ``nvfp4``: NVFP4's own quantize/layout module, which flashinfer's NVFP4 helpers load on
  this arch (the reason says where vLLM calls them).

What the issue lists but vLLM does not reach with flashinfer on sm_12x (norm, RoPE,
activation, the TP allreduce, the GDN linear attention, FP8 block-scale) is listed as
excluded, each with the code that says so.  A recipe's ``[flashinfer] aot_args`` overrides
the whole set (flashinfer's own default set, narrowed by its switches).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.console import shown
from sparkbuild.errors import RecipeError
from sparkbuild.flashinfer.unreachable_stubs import rules_for
from sparkbuild.recipe import KV_PAGE_SIZES
from sparkbuild.records import Record, as_json

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sparkbuild.flashinfer.model_config import ModelFacts
    from sparkbuild.recipe import Recipe

READ_AGAINST = {"vllm": "0.29.0", "flashinfer-python": "0.6.18"}
"""The versions whose code the mapping cites; another flashinfer is refused by the driver
when a module's name differs (the generators' names are checked before anything compiles)."""

TAGS = {"bfloat16": "bf16", "float16": "f16", "fp8_e4m3": "e4m3", "int32": "i32"}
TORCH = {"bfloat16": "bfloat16", "float16": "float16", "fp8_e4m3": "float8_e4m3fn",
         "int32": "int32"}
XQA_PAGE_SIZES = KV_PAGE_SIZES
"""FLASHINFER's kernel block sizes (VL/vllm/v1/attention/backends/flashinfer.py:422-441):
the recipe's ``kv_page_sizes`` choose among them."""
XQA_HEAD_DIMS = (64, 128, 256)
XQA_GROUP_RATIOS = (1, 2, 4, 8)
"""What flashinfer's own AOT set builds of XQA (FI/aot.py:411-472)."""
PREFILL_HEAD_DIMS = (64, 128, 256, 512)
"""FlashInferBackend.get_supported_head_sizes (VL/.../backends/flashinfer.py:501-503)."""

HEADERS_BY_MODULE = {
    "fused_moe_": ("cublas", "curand"), "fp4_quantization_": ("cublas", "curand"),
    "sampling": ("curand",), "fp4_gemm_cutlass_sm120": ("curand",),
    "gemm_sm120": ("curand",), "norm": ("cublas", "curand"), "topk": ("curand",),
    "gemm": ("cublas", "curand"),
}
"""Which toolkit headers a module's sources include (cuBLAS: ``cublasLt.h``; cuRAND:
``curand_kernel.h``), by name prefix: preprocessed with and without them here."""


@dataclass(frozen=True)
class ModuleSpec(Record):
    json_order: ClassVar[tuple[str, ...]] = ("name", "route", "reason", "generator")

    name: str
    gen: str = field(metadata=as_json("generator"))
    """``module:function`` of flashinfer's generator."""
    reason: str
    route: str = "default"
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def headers(self) -> tuple[str, ...]:
        for prefix, needed in HEADERS_BY_MODULE.items():
            if self.name.startswith(prefix):
                return needed
        return ()

    @property
    def libraries(self) -> tuple[str, ...]:
        """Libraries its link names beyond libcuda (FI/jit/fused_moe.py:225: -lnvrtc;
        FI/jit/gemm/core.py:67: -lcublas -lcublasLt)."""
        if self.name.startswith("fused_moe_"):
            return ("nvrtc",)
        return ("cublas", "cublasLt") if self.name == "gemm" else ()

    def plan_item(self) -> dict[str, Any]:
        """What the driver calls (sparkbuild.flashinfer.driver)."""
        return {"name": self.name, "gen": self.gen, "args": list(self.args),
                "kwargs": dict(self.kwargs)}

    def json_extra(self) -> dict[str, Any]:
        return {"headers": self.headers, "unreachable_stubs": rules_for(self.name)}


ALL_HEADERS = ("cublas", "curand")
ALL_LIBRARIES = ("cublas", "cublasLt", "nvrtc")


def needed_headers(modules: Iterable[ModuleSpec]) -> tuple[str, ...]:
    """The headers a set's sources include; flashinfer's default set (no modules) all."""
    modules = list(modules)
    if not modules:
        return ALL_HEADERS
    return tuple(sorted({h for m in modules for h in m.headers}))


def needed_libraries(modules: Iterable[ModuleSpec]) -> tuple[str, ...]:
    """The libraries a set's links name beyond libcuda; the default set's all."""
    modules = list(modules)
    if not modules:
        return ALL_LIBRARIES
    return tuple(sorted({lib for m in modules for lib in m.libraries}))


@dataclass(frozen=True)
class Excluded(Record):
    what: str
    reason: str


@dataclass
class ModuleSet(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "arch", "read_against", "count", "modules", "excluded", "notes", "headers", "model",
    )

    model: ModelFacts
    arch: str
    modules: list[ModuleSpec]
    excluded: list[Excluded]
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.modules]

    @property
    def headers(self) -> tuple[str, ...]:
        return tuple(sorted({h for m in self.modules for h in m.headers}))

    def json_extra(self) -> dict[str, Any]:
        return {"read_against": READ_AGAINST, "count": len(self.modules),
                "headers": self.headers}

    @property
    def error(self) -> None:
        return None

    def summary(self) -> list[str]:
        routes = {r: sum(m.route == r for m in self.modules) for r in ("default", "gated",
                                                                        "nvfp4")}
        lines = [f"flashinfer's modules for {shown(self.model.architecture)} at {self.arch}: "
                 f"{len(self.modules)} ({', '.join(f'{n} {r}' for r, n in routes.items() if n)})"
                 f"; read against vllm {READ_AGAINST['vllm']} and flashinfer "
                 f"{READ_AGAINST['flashinfer-python']}"]
        said: set[str] = set()
        for module in self.modules:
            lines.append(f"  {module.name}  [{module.route}]")
            lines += [f"      guard stubs accepted, never launched on sm_12x: {rule.describe()}"
                      for rule in rules_for(module.name)]
            family = _reason_family(module)
            if family not in said:
                said.add(family)
                lines.append(f"      {module.reason}")
        if self.excluded:
            lines.append("  not in the set:")
            lines += [f"    {e.what}: {e.reason}" for e in self.excluded]
        lines += [f"  note: {n}" for n in self.notes]
        return lines


def _reason_family(module: ModuleSpec) -> str:
    """XQA's modules differ by page and query length only: their reason is said once."""
    return module.gen if module.gen.endswith(":gen_xqa_module") else module.name


def _dtype(name: str) -> dict[str, str]:
    return {"dtype": TORCH[name]}


def spark_family(arch: str) -> str:
    """``12.1a`` -> ``121``: the sm_12x arch flashinfer's per-arch modules are named by."""
    number = arch.rstrip("af").replace(".", "")
    if number not in ("120", "121"):
        raise RecipeError(
            f"the model's module set is read for sm_12x targets, not {arch}",
            hint="give [flashinfer] aot_args (flashinfer's own default set) for this target")
    return number + ("f" if arch.endswith("f") and number == "120" else "")


def _quantized(model: ModelFacts, module: str) -> bool:
    """Whether ``module`` (a representative module name) is quantized: not ignored."""
    return model.quantization != "none" and not any(
        fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module + ".weight", pattern)
        for pattern in model.quantization_ignore)


ATTENTION_LINEARS = ("model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
                     "lm_head")
DENSE_MLP = ("model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.down_proj")
SHARED_EXPERT = ("model.layers.0.mlp.shared_expert.gate_up_proj",
                 "model.layers.0.mlp.shared_expert.down_proj")
HYBRID_LINEARS = ("model.layers.0.linear_attn.in_proj_qkvz",
                  "model.layers.0.linear_attn.out_proj")
"""Representative names of a model's dense linear layers, as the ignore list matches them."""


def dense_linears(model: ModelFacts) -> tuple[str, ...]:
    """The dense layers the model has: an MoE model's MLPs are its experts (and a shared
    expert where it has one), a hybrid one adds its linear attention's projections."""
    mlp = (SHARED_EXPERT if model.shared_experts else ()) if model.experts else DENSE_MLP
    return (*ATTENTION_LINEARS, *mlp, *(HYBRID_LINEARS if model.hybrid else ()))
EXPERTS = "model.layers.0.mlp.experts.0.gate_up_proj"
MTP_EXPERTS = "mtp.layers.0.mlp.experts.0.gate_up_proj"


def _moe(model: ModelFacts, family: str, notes: list[str], excluded: list[Excluded]
         ) -> list[ModuleSpec]:
    if not model.experts:
        return []
    out: list[ModuleSpec] = []
    name = "fused_moe_120"
    gen = "flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm120_module"
    routed = _quantized(model, EXPERTS)
    if routed and model.quantization == "nvfp4":
        out.append(ModuleSpec(name, gen, route="default", reason=(
            f"{model.experts} NVFP4 experts (top-{model.experts_per_token}): the NVFP4 MoE "
            "oracle (VL/vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:196-206) skips "
            "TRTLLM/CUTEDSL (family 100 only) and takes FLASHINFER_CUTLASS: FlashInferExperts"
            " supports family 120 (experts/flashinfer_cutlass_moe.py:128-140) and "
            "(kNvfp4Static, kNvfp4Dynamic) at capability >= 10.0 (:147-182); "
            "flashinfer.fused_moe.cutlass_fused_moe loads arch 121 as fused_moe_120 "
            "(FI/fused_moe/core.py:585-588,1413-1414)")))
        per_rank = model.moe_intermediate_per_rank
        if per_rank and (2 * per_rank) % 128:
            notes.append(
                f"MoE intermediate {model.moe_intermediate_size} over TP "
                f"{model.tensor_parallel_size} without expert parallel is {per_rank} per rank:"
                " the swizzled block scales pad 2x that to a multiple of 128 and vLLM's "
                "FLASHINFER_CUTLASS refuses it (quantization/utils/flashinfer_fp4_moe.py:"
                "418-426, 'Intermediate size padding for w1 and w3'); set expert_parallel")
    elif routed and model.quantization == "fp8-block":
        excluded.append(Excluded("fused_moe_120 (FP8 block-scale experts)", (
            "FlashInferExperts takes (kFp8Static128BlockSym, kFp8Dynamic128Sym) only on "
            "capability 9.0 (experts/flashinfer_cutlass_moe.py:164-171): vLLM's own "
            "kernels serve sm_12x")))
    bf16_experts = not routed or (model.mtp_layers and not _quantized(model, MTP_EXPERTS))
    if bf16_experts and not out:
        which = "the MTP layers' bf16 experts" if routed else "bf16 experts"
        out.append(ModuleSpec(name, gen, route="default", reason=(
            f"{which}: the unquantized MoE oracle (oracle/unquantized.py:67-73) takes "
            "FLASHINFER_CUTLASS, which accepts (None, None) at capability >= 9.0 "
            "(experts/flashinfer_cutlass_moe.py:153-163); same module as arch 121's "
            "cutlass_fused_moe (FI/fused_moe/core.py:585-588)")))
    elif bf16_experts:
        out[0] = ModuleSpec(name, gen, route="default", reason=out[0].reason + (
            "; also the MTP layers' bf16 experts (unquantized oracle, oracle/unquantized.py:"
            "67-73; flashinfer_cutlass_moe.py:153-163)"))
    return out


def _nvfp4(model: ModelFacts, family: str, excluded: list[Excluded]) -> list[ModuleSpec]:
    if model.quantization != "nvfp4":
        return []
    suffix = "sm121" if family == "121" else ("sm120f" if family == "120f" else "sm120")
    out = [ModuleSpec(
        f"fp4_quantization_{family}",
        f"flashinfer.jit.fp4_quantization:gen_fp4_quantization_{suffix}_module", route="nvfp4",
        reason=(
            f"NVFP4 on sm_{family}: flashinfer's NVFP4 quantize and scale-layout functions "
            f"(fp4_quantize, nvfp4_quantize, nvfp4_block_scale_interleave) load "
            f"fp4_quantization_{family} (FI/quantization/fp4_quantization.py:1007,1191,1259); "
            "vLLM calls them from scaled_fp4_quant's TRTLLM layout (VL/vllm/_custom_ops.py:"
            "1638-1642) and the TRTLLM/MXFP4 weight preparation (quantization/utils/"
            "flashinfer_fp4_moe.py:204, oracle/mxfp4.py:852). The FLASHINFER_CUTLASS route "
            "quantizes with vLLM's own op (_custom_ops.py:1646-1660) and swizzles in torch "
            "(flashinfer_fp4_moe.py:418-434): built so a switched backend does not JIT"))]
    dense = [m for m in dense_linears(model) if _quantized(model, m)]
    if dense:
        layers = ", ".join(d.removeprefix("model.layers.0.") for d in dense)
        out.append(ModuleSpec(
            "fp4_gemm_cutlass_sm120",
            "flashinfer.jit.gemm:gen_gemm_sm120_module_cutlass_fp4", route="default",
            reason=(f"NVFP4 dense layers ({layers}): the "
                    "NVFP4 linear kernels are tried in order (VL/vllm/model_executor/kernels/"
                    "linear/__init__.py:531-544); CuteDSL needs family 100, FlashInferCutlass "
                    "takes capability >= 10.0 (kernels/linear/nvfp4/flashinfer.py:105-119) and "
                    "mm_fp4(backend='cutlass') loads it on sm_12x (FI/gemm/gemm_base.py:1975)")))
    else:
        excluded.append(Excluded("fp4_gemm_cutlass_sm120 (NVFP4 GEMM)", (
            "every dense layer is in the quantization ignore list "
            f"({', '.join(model.quantization_ignore) or '-'}): no NVFP4 linear layer, "
            "no flashinfer mm_fp4")))
    return out


def _prefill_name(model: ModelFacts, swa: bool, cap: bool) -> str:
    q, kv = TAGS[model.dtype], TAGS[model.kv_cache_dtype]
    return (f"batch_prefill_with_kv_cache_dtype_q_{q}_dtype_kv_{kv}_dtype_o_{q}_dtype_idx_i32_"
            f"head_dim_qk_{model.head_dim}_head_dim_vo_{model.head_dim_vo}_posenc_0_"
            f"use_swa_{swa}_use_logits_cap_{cap}_f16qk_False")


def _attention(model: ModelFacts, excluded: list[Excluded], notes: list[str]
               ) -> list[ModuleSpec]:
    if model.attention_backend != "FLASHINFER":
        excluded.append(Excluded("attention (prefill, decode, XQA)", (
            f"attention backend {model.attention_backend}: flashinfer's attention modules "
            "load only under --attention-backend FLASHINFER; on major 12 vLLM's default is "
            "FLASH_ATTN (VL/vllm/platforms/cuda.py:156-163)")))
        return []
    if model.head_dim not in PREFILL_HEAD_DIMS:
        raise RecipeError(
            f"head_dim {model.head_dim}: vLLM's FLASHINFER backend supports head sizes "
            f"{'/'.join(map(str, PREFILL_HEAD_DIMS))} (backends/flashinfer.py:501-503)",
            hint="choose another attention_backend in [model]")
    cap = model.logits_soft_cap > 0
    variants = [False, True] if model.sliding_window else [False]
    out = []
    for swa in variants:
        out.append(ModuleSpec(
            _prefill_name(model, swa, cap), "flashinfer.jit.attention:gen_batch_prefill_module",
            route="default",
            args=("fa2", _dtype(model.dtype), _dtype(model.kv_cache_dtype), _dtype(model.dtype),
                  _dtype("int32"), model.head_dim, model.head_dim_vo, 0, swa, cap, False),
            reason=(
                f"full attention, head dim {model.head_dim}, q {model.dtype}, KV "
                f"{model.kv_cache_dtype}{', sliding window' if swa else ''}"
                f"{', logits soft-cap' if cap else ''}: FlashInferMetadataBuilder's prefill "
                "wrapper (VL/vllm/v1/attention/backends/flashinfer.py:1109-1177) plans fa2 on "
                "sm_12x (auto -> fa2 off sm90a, FI/utils.py:545-600; FI/prefill.py:2505-2531)"
                "; its decode wrapper is built with use_tensor_cores=True (backends/"
                "flashinfer.py:1207), which plans this same prefill module (FI/decode.py:"
                "1670-1708), and MTP's verify queries run as prefill (:857-870)")))
    ratio = model.head_group_ratio
    if model.head_dim in XQA_HEAD_DIMS and ratio in XQA_GROUP_RATIOS and not cap:
        pages = model.kv_page_sizes or XQA_PAGE_SIZES
        queries = range(1, model.speculative_tokens + 2)
        for page in pages:
            for q in queries:
                spec = q > 1
                name = (f"xqa_input_{TAGS[model.dtype]}_kv_cache_{TAGS[model.kv_cache_dtype]}_"
                        f"output_{TAGS[model.dtype]}_page_size_{page}_head_dim_"
                        f"{model.head_dim}_head_group_ratio_{ratio}_use_sliding_window_False_"
                        f"use_spec_dec_{spec}_spec_q_seq_len_{q}")
                out.append(ModuleSpec(
                    name, "flashinfer.jit.xqa:gen_xqa_module", route="gated",
                    args=(_dtype(model.dtype), _dtype(model.kv_cache_dtype), page,
                          model.head_dim, ratio, False, _dtype(model.dtype)),
                    kwargs={"q_seq_len": q},
                    reason=(
                        f"XQA decode, pages of {', '.join(map(str, pages))}, 1 to "
                        f"{len(queries)} query token(s) per request (MTP's verify as decode), "
                        f"{ratio} q heads per KV "
                        "head per rank: family 120 decodes with XQA (backends/flashinfer.py:"
                        "799-845, 2403-2419) when supports_trtllm_attention holds, i.e. "
                        "has_nvidia_artifactory() (VL/vllm/utils/flashinfer.py:466-489: "
                        "flashinfer-cubin installed, VLLM_HAS_FLASHINFER_CUBIN=1 or the "
                        "artifactory reachable); flashinfer.xqa loads it by "
                        "(dtype, page, head dim, ratio, q_seq_len) (FI/xqa.py:359-405)")))
        if not model.kv_page_sizes:
            notes.append(
                "XQA page sizes 16, 32 and 64: vLLM takes the largest of FLASHINFER's block "
                "sizes that divides the KV manager's block (VL/vllm/v1/worker/utils.py:310-376)"
                ", which for a hybrid model follows the mamba state's page (VL/vllm/platforms/"
                "interface.py:883-917); give [model] kv_page_sizes to keep one")
    else:
        excluded.append(Excluded("XQA decode", (
            f"head dim {model.head_dim}, {ratio} q heads per KV head"
            f"{', logits soft-cap' if cap else ''}: not a combination flashinfer's XQA "
            "builds (FI/aot.py:411-472); decode runs on the prefill module")))
    return out


def _always_excluded(model: ModelFacts) -> list[Excluded]:
    out = [
        Excluded("norm, rope, activation (silu_and_mul)", (
            "vLLM's RMSNorm, rotary embedding and SiluAndMul are its own custom ops "
            "(model_executor/layers/layernorm.py and activation.py import no flashinfer; "
            "rotary_embedding/base.py:36-47 leaves use_flashinfer off except DeepSeek's "
            "scaling rope)")),
        Excluded("page (append_paged_kv_cache), cascade", (
            "vLLM writes the KV cache with its own reshape_and_cache_flash, and the "
            "FLASHINFER backend's cascade attention is off (backends/flashinfer.py:1723-1730)")),
    ]
    if model.tensor_parallel_size > 1:
        out.append(Excluded("allreduce (trtllm_comm, vllm_comm)", (
            f"TP {model.tensor_parallel_size}: FlashInferAllReduce disables itself when "
            "default_fi_allreduce_fusion_max_size_mb has no entry for the capability "
            "(VL/vllm/distributed/device_communicators/flashinfer_all_reduce.py:376-390), "
            "which lists 9.0 and 10.x only (compilation/passes/fusion/allreduce_rms_fusion.py:"
            "104-127); the AR+norm fusion needs family 100 or 90 (config/vllm.py:177-185)")))
    if model.hybrid:
        out.append(Excluded("GDN linear attention", (
            "flashinfer's gated delta net runs on sm90 or family 100 only "
            "(VL/vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:93-139); "
            "sm_12x takes the Triton/FLA kernels")))
    if model.expert_parallel and model.tensor_parallel_size > 1:
        out.append(Excluded("MoE all-to-all (comm, mnnvl_moe_alltoall)", (
            "expert parallel with DP 1 uses no all2all kernels (fused_moe/config.py:1060-1063"
            "; all2all_utils.py:173-200)")))
    return out


def model_set(model: ModelFacts, arch: str) -> ModuleSet:
    """The modules vLLM reaches for ``model`` at ``arch`` (an sm_12x target)."""
    family = spark_family(arch)
    excluded: list[Excluded] = []
    notes: list[str] = []
    modules = [*_moe(model, family, notes, excluded), *_nvfp4(model, family, excluded),
               *_attention(model, excluded, notes)]
    if model.flashinfer_sampler:
        modules.append(ModuleSpec(
            "sampling", "flashinfer.jit.sampling:gen_sampling_module", route="default",
            reason=("the sampler's top-k/top-p: VLLM_USE_FLASHINFER_SAMPLER defaults on "
                    "(VL/vllm/envs.py:855-860) and flashinfer_sampler_supported holds for "
                    "8.0 <= cc <= 12.1 (v1/sample/ops/topk_topp_sampler.py:28-74,96-101) -> "
                    "top_k_top_p_sampling_from_logits (FI/sampling.py:67-68)")))
    else:
        excluded.append(Excluded("sampling", (
            "flashinfer_sampler = false: VLLM_USE_FLASHINFER_SAMPLER=0 takes the PyTorch/"
            "Triton sampler (VL/vllm/envs.py:855-860)")))
    excluded += _always_excluded(model)
    notes.append(
        "vLLM's has_flashinfer() also needs nvcc on PATH, flashinfer-cubin, or "
        "VLLM_HAS_FLASHINFER_CUBIN=1 (VL/vllm/utils/flashinfer.py:57-84): on a node with "
        "neither, the MoE falls back to VLLM_CUTLASS and this set goes unused")
    return ModuleSet(model, arch, modules, excluded, notes)


def recipe_set(recipe: Recipe) -> ModuleSet | None:
    """The recipe's model set; None when ``aot_args`` override it (flashinfer's default set)
    or the recipe describes no model."""
    from sparkbuild.flashinfer.model_config import resolve_model

    if recipe.flashinfer.aot_args or recipe.model is None:
        return None
    if len(recipe.target.cuda_archs) != 1:
        raise RecipeError("the model's module set is read for one target arch",
                          where=str(recipe.path), hint="give one of cuda_archs, or aot_args")
    return model_set(resolve_model(recipe.model, str(recipe.path)), recipe.target.cuda_archs[0])


def select(modules: Iterable[ModuleSpec], only: tuple[str, ...]) -> list[ModuleSpec]:
    """The modules whose name matches one of ``only`` (all of them without any); a glob
    that matches none is refused, naming the set."""
    modules = list(modules)
    if not only:
        return modules
    chosen = [m for m in modules if any(fnmatch.fnmatchcase(m.name, g) for g in only)]
    unmatched = [g for g in only if not any(fnmatch.fnmatchcase(m.name, g) for m in modules)]
    if unmatched:
        raise RecipeError(f"--only {' '.join(unmatched)} matches none of the model's modules",
                          hint="the set: " + ", ".join(m.name for m in modules))
    return chosen


@dataclass
class DefaultSetListing(Record):
    """``--list`` when ``aot_args`` override the model's set: flashinfer decides the set."""

    json_order: ClassVar[tuple[str, ...]] = ("set", "aot_args", "modules", "note")

    args: tuple[str, ...] = field(metadata=as_json("aot_args"))

    @property
    def error(self) -> None:
        return None

    def json_extra(self) -> dict[str, Any]:
        return {"set": "flashinfer default", "modules": None, "note": DEFAULT_SET_NOTE}

    def summary(self) -> list[str]:
        return [f"[flashinfer] aot_args {' '.join(self.args) or '(none)'} override the model's "
                "set: flashinfer's own default set, narrowed by its switches", DEFAULT_SET_NOTE]


DEFAULT_SET_NOTE = ("flashinfer 0.6.18's default set at 12.1a is 561 modules and 2,318 sources "
                    "(aot.gen_all_modules); its switches cannot leave out attention")


def listing(recipe: Recipe, only: tuple[str, ...]) -> ModuleSet | DefaultSetListing:
    """``sparkbuild flashinfer-aot --list``: the model's set (``only`` narrows it)."""
    chosen = recipe_set(recipe)
    if chosen is None:
        if recipe.model is None and not recipe.flashinfer.aot_args:
            raise RecipeError("the recipe has no [model] and no [flashinfer] aot_args",
                              where=str(recipe.path), hint="describe the model in [model] "
                              "(config = \"config.json\") to get its module set")
        return DefaultSetListing(recipe.flashinfer.aot_args)
    chosen.modules = select(chosen.modules, only)
    return chosen
