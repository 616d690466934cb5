"""The recipe's tables and keys, declared once: one frozen dataclass per table.

Each field is one key, its annotation its type and its :func:`~sparkbuild.recipe_keys.declare`
metadata its meaning, bounds and choices.  :data:`TABLES` names the tables in the order of
docs/recipes.md; the loader (:mod:`sparkbuild.recipe`) checks unknown keys, types and bounds
from them, and :mod:`sparkbuild.recipe_schema` writes the JSON schema (``sparkbuild
recipe-schema``) and docs/recipes.md's key tables from them.  ``[model]``'s fields
(:class:`ModelFields`) are checked by the same rules whether the recipe or a ``config.json``
gives them (:data:`MODEL_FIELDS`), and :func:`model_precedence` says which wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from sparkbuild.recipe_keys import Rule, declare, rules_of
from sparkbuild.records import Record

SPARK_ARCH = "12.1a"
"""The DGX Spark's target: arch-specific sm_121a (``12.1f``, family-specific, also serves)."""

PLAIN_SM121 = frozenset({"12.1", "12.1+PTX"})
"""Targets that compile CUTLASS's FP4 kernels to printf + trap (no block-scaled MMA)."""

ARCH = re.compile(r"\d+\.\d+[af]?(\+PTX)?")
"""One entry of TORCH_CUDA_ARCH_LIST: ``12.1a``, ``12.1f``, ``9.0``, ``8.6+PTX``."""
PYTHON_VERSION = re.compile(r"3\.\d+")
PROJECT_NAME = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
"""A valid project name (PEP 508)."""
COMMIT = re.compile(r"[0-9a-f]{7,40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class RecipeInfo:
    """``[recipe]``: what the recipe is called and which package it builds."""

    name: str | None = field(default=None, metadata=declare(
        "the recipe's name: the work directory's, the bundle's and the summary's",
        default="the file's name without `.toml`"))
    description: str | None = field(default=None, metadata=declare(
        "one line for people; sparkbuild does not read it"))
    package: str = field(default="vllm", metadata=declare(
        "the project the source builds, as its wheel is named"))


@dataclass(frozen=True)
class SourcePin:
    """``[source]``: the tree the build starts from, pinned."""

    spec: str = field(metadata=declare(
        "a source spec: `git+URL@REF`, a path (relative to the recipe), `PATH#sha256=HEX` or "
        "`pypi:NAME==VERSION`; a git ref is resolved to a commit once and kept in "
        "`NAME.lock.json` beside the recipe", required=True))
    sha256: str | None = field(default=None, metadata=declare(
        "the sha256 of an archive or sdist source"))
    branch: str | None = field(default=None, metadata=declare(
        "the branch the ref belongs to, for the record"))
    not_in_wheel: tuple[str, ...] = field(default=(), metadata=declare(
        "projects the tree's requirement files list but its build leaves out of the wheel's "
        "Requires-Dist (vLLM's setup.py drops flashinfer-cubin): `lock` and a bundle's "
        "closure, which read the files, leave them out too"))


@dataclass(frozen=True)
class SeriesInfo:
    """``[series]``: the patch series applied to the tree."""

    path: str = field(metadata=declare(
        "the series file, relative to the recipe ([sources-and-series.md]"
        "(sources-and-series.md))", required=True))


@dataclass(frozen=True)
class Target:
    """``[target]``: the GPUs, platform and Python the wheels are for."""

    cuda_archs: tuple[str, ...] = field(default=(SPARK_ARCH,), metadata=declare(
        "the archs, which become `TORCH_CUDA_ARCH_LIST` ([targets.md](targets.md)); plain "
        "`12.1` is refused unless `allow_plain_sm121`", low=1, pattern=ARCH,
        pattern_text="CUDA archs (MAJOR.MINOR with an optional a, f or +PTX)",
        checked_by="_parse_archs"))
    platform: str = field(default="manylinux_2_39_aarch64", metadata=declare(
        "the nodes' wheel platform tag"))
    python: str = field(default="3.12", metadata=declare(
        "the nodes' Python, `X.Y`", pattern=PYTHON_VERSION, pattern_text="a version X.Y",
        checked_by="_parse_python"))
    allow_plain_sm121: bool = field(default=False, metadata=declare(
        "opt-in for PTX-portable builds that knowingly lose the tensor-core FP4 kernels"))
    allow_jit: bool = field(default=False, metadata=declare(
        "accept kernels that reach the target as PTX only (the driver JIT-compiles them at "
        "load); the manifest lists them as `jit_kernels`. Without it they fail the build"))

    @property
    def torch_cuda_arch_list(self) -> str:
        return ";".join(self.cuda_archs)


@dataclass(frozen=True)
class BuildSettings:
    """``[build]``: how the tree is compiled."""

    jobs: int | None = field(default=None, metadata=declare(
        "vLLM's parallel compile jobs (`MAX_JOBS` and `wheel --jobs` override it)",
        types=("integer", "string"), low=1, choices=("auto",),
        default='"auto": doctor\'s plan from memory and cores'))
    job_memory_gib: float = field(default=6.0, metadata=declare(
        "the memory one nvcc job may take, which the job plan divides the memory by",
        above=0, unit="GiB", checked_by="check_job_memory_gib"))
    nvcc_threads: int | None = field(default=None, metadata=declare(
        "vLLM's `nvcc --threads` (`NVCC_THREADS` overrides it)", low=1,
        default="doctor's plan"))
    env: dict[str, str] = field(default_factory=dict, metadata=declare(
        "what the build runs with, `{ NAME = \"VALUE\" }`: a shell name, a value on one "
        "line; a `SOURCE_DATE_EPOCH` a zip cannot hold is refused"))
    compile_cache: str | None = field(default=None, metadata=declare(
        "a shared compile cache (sccache): `redis://HOST:PORT[/DB]`, `s3://BUCKET/PREFIX` or "
        "a directory (relative to the recipe); `wheel --compile-cache` overrides it "
        "([team.md](team.md))"))
    dist: str | None = field(default=None, metadata=declare(
        "a team's sccache-dist scheduler, `http://HOST:PORT`: the build's compiles are spread "
        "over its build servers; `wheel --dist` overrides it. The client token never goes in "
        "a recipe"))
    dist_server_memory_gib: float | None = field(default=None, metadata=declare(
        "each build server's memory (what its `doctor --dist URL --build-server DIR` "
        "prints): the heavy pool's depth with dist; `--dist-server-memory` overrides it",
        above=0, unit="GiB", checked_by="check_job_memory_gib",
        default="the build host's usable memory, as if each server were like it"))


def _same_url(url: str) -> str:
    """A git URL as compared for a stand-in: no trailing ``.git`` or ``/``, any case."""
    url = url.strip().rstrip("/").lower()
    return url[:-4] if url.endswith(".git") else url


@dataclass(frozen=True)
class StandIn(Record):
    """``[[vendor.stand_in]]``: a source the tree pins at ``pinned``, built from ``used``."""

    url: str = field(metadata=declare(
        "the source's git URL as the tree's CMake names it (compared without a trailing "
        "`.git` or `/`, in any case; a `[vendor] mirrors` rule still decides where it is "
        "fetched from)", required=True, one_line=True, checked_by="_parse_stand_ins"))
    pinned: str = field(metadata=declare(
        "the commit the tree pins, 7 to 40 hex digits (abbreviated either way: `06bdd47c` "
        "matches a full pin)", required=True, pattern=COMMIT, case="lower",
        checked_by="_parse_stand_ins"))
    used: str = field(metadata=declare(
        "the commit built instead, 7 to 40 hex digits; not the pin itself nor an "
        "abbreviation of it", required=True, pattern=COMMIT, case="lower",
        checked_by="_parse_stand_ins"))
    reason: str = field(metadata=declare(
        "why, on one line: printed with every report of the source", required=True,
        one_line=True, checked_by="_parse_stand_ins"))

    def matches(self, url: str, ref: str | None) -> bool:
        """This entry is for the source at ``url`` pinned at ``ref``: a commit (7 to 40 hex
        digits) that ``pinned`` abbreviates or that abbreviates it.  A tag, a branch or an
        empty ref is never a commit's prefix, whatever its letters."""
        if ref is None or not self.same_url(url):
            return False
        ref = ref.strip().lower()
        if not COMMIT.fullmatch(ref):
            return False
        return ref.startswith(self.pinned) or self.pinned.startswith(ref)

    def same_url(self, url: str) -> bool:
        """``url`` is this entry's, but for a trailing ``.git`` or ``/`` and case."""
        return _same_url(url) == _same_url(self.url)



@dataclass(frozen=True)
class VendorSettings:
    """``[vendor]``: where sources may come from, and what the build may do without
    ([offline.md](offline.md#the-vendor-table-of-a-recipe))."""

    mirrors: tuple[str, ...] = field(default=(), metadata=declare(
        "URL rewrites `BASE=REPLACEMENT` (git's insteadOf), for git sources and downloads"))
    submodules: dict[str, tuple[str, ...]] = field(default_factory=dict, metadata=declare(
        "per source: only these submodules (CMake's `GIT_SUBMODULES`), e.g. no ROCm ones"))
    exclude: tuple[str, ...] = field(default=(), metadata=declare(
        "sources the build gets an empty directory for (reported, never silent)"))
    sparse: bool = field(default=False, metadata=declare(
        "fetch git sources without what a build never reads"))
    crates: bool = field(default=True, metadata=declare(
        "`false`: the tree's Cargo crates are not vendored (a build host without crates.io); "
        "the build then goes without the Rust extensions, which must be optional in the "
        "tree"))
    stand_ins: tuple[StandIn, ...] = field(default=(), metadata=declare(
        "sources built from another commit than the tree's pin, each named with its reason "
        "(below): a source at another commit is refused unless an entry names it",
        toml="stand_in"))

    def stand_in_for(self, url: str, ref: str | None) -> StandIn | None:
        return next((entry for entry in self.stand_ins if entry.matches(url, ref)), None)


@dataclass(frozen=True)
class JitCacheInput:
    """``[flashinfer] jit_cache = { url = ..., sha256 = ... }``: a prebuilt jit-cache
    wheel (sparkbuild.flashinfer.jit_cache)."""

    sha256: str = field(metadata=declare(
        "the wheel's sha256, 64 hex digits: a prebuilt jit-cache is taken only pinned by hash",
        required=True, pattern=SHA256, case="lower", checked_by="_parse_jit_cache"))
    url: str | None = field(default=None, metadata=declare(
        "where to fetch it (a `[vendor] mirrors` rule may serve it); give `url` or `path`"))
    path: Path | None = field(default=None, metadata=declare(
        "a wheel file beside the recipe (a symbolic link is followed)"))
    cut_to_model: bool = field(default=False, metadata=declare(
        "keep only the modules of the model's set in the wheel the node gets"))


@dataclass(frozen=True)
class FlashinferSettings:
    """``[flashinfer]``: flashinfer's kernels built ahead (sparkbuild.flashinfer.builder)."""

    aot: bool = field(default=False, metadata=declare(
        "`true`: build flashinfer's kernel modules for the recipe's target with the pinned "
        "flashinfer-python wheel's own builder, offline, and ship them as a "
        "`flashinfer-jit-cache` wheel (`<flashinfer version>+cu<CUDA>`) in the wheelhouse. "
        "Needs a `[[pins]]` entry for flashinfer-python. The modules are the model's set "
        "(`[model]`, below) unless `aot_args` are given"))
    aot_args: tuple[str, ...] = field(default=(), metadata=declare(
        "given (not empty), they **override the model's set**: flashinfer's own default set "
        "(`flashinfer.aot`), narrowed by its options as they are (e.g. `python -m "
        "flashinfer.aot --fa2-head-dim 128,128 --f16-dtype bfloat16 --add-moe false`), plus "
        "sparkbuild's `--only GLOB` (repeatable: keep the modules whose name matches). The "
        "output and build directories are sparkbuild's"))
    jit_cache: JitCacheInput | None = field(default=None, metadata=declare(
        "`{ url = \"...\", sha256 = \"...\" }` or `{ path = \"FILE.whl\", sha256 = \"...\" }`, "
        "optionally `cut_to_model = true`: take a prebuilt `flashinfer-jit-cache` wheel "
        "(flashinfer publishes them for cu130 aarch64 on its own index) instead of building. "
        "See [a prebuilt jit-cache](#a-prebuilt-jit-cache-instead-of-building)"))


@dataclass(frozen=True)
class ModelSettings:
    """``[model]`` as read: ``config`` (a Hugging Face ``config.json``, no weights) and the
    fields the table gives, each checked by :data:`MODEL_FIELDS`
    (sparkbuild.flashinfer.model_config resolves them, module_set maps them)."""

    config: Path | None = None
    fields: dict[str, Any] = field(default_factory=dict)


DTYPES = ("bfloat16", "float16")
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3")
QUANTIZATIONS = ("nvfp4", "fp8-block", "none")
BACKENDS = ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION")
KV_PAGE_SIZES = (16, 32, 64)
"""The block sizes vLLM's FLASHINFER backend pages the KV cache in: the XQA page sizes
(sparkbuild.flashinfer.module_set)."""
_HEADS = {"low": 1, "high": 1024}


@dataclass(frozen=True)
class ModelFields:
    """``[model]``: what the node serves, for flashinfer's module set.  Every field but
    ``config`` may come from the recipe or from the config (``config``), checked by the same
    rule; :func:`model_precedence` says which wins."""

    config: str | None = field(default=None, metadata=declare(
        "a Hugging Face `config.json` (no weights), relative to the recipe; the recipe's "
        "fields override what it says", one_line=True, checked_by="_parse_model"))
    architecture: str | None = field(default=None, metadata=declare(
        "the model's class, for the record and the tree's model registry",
        config="`architectures[0]`", pattern=CLASS_NAME,
        pattern_text="a name of letters, digits and _", resolved="unknown"))
    dtype: str | None = field(default=None, metadata=declare(
        "the weights' dtype", config="`torch_dtype`", choices=DTYPES, case="lower",
        resolved="bfloat16"))
    kv_cache_dtype: str | None = field(default=None, metadata=declare(
        "the KV cache's dtype (`auto`: the model's dtype)", choices=KV_DTYPES, case="lower",
        resolved="auto"))
    head_dim: int | None = field(default=None, metadata=declare(
        "the full-attention layers' head size", config="`head_dim`, else `hidden_size / "
        "num_attention_heads` (a `text_config` is read)", **_HEADS))
    head_dim_vo: int | None = field(default=None, metadata=declare(
        "the value/output head size", default="`head_dim`", **_HEADS))
    num_attention_heads: int | None = field(default=None, metadata=declare(
        "query heads; a multiple of `num_key_value_heads`", config="the same name",
        **_HEADS))
    num_key_value_heads: int | None = field(default=None, metadata=declare(
        "KV heads", config="the same name", **_HEADS))
    quantization: str | None = field(default=None, metadata=declare(
        "the weights' scheme", config="`quantization_config`: `quant_algo` NVFP4 → `nvfp4`, "
        "FP8 with `weight_block_size` → `fp8-block`", choices=QUANTIZATIONS, case="lower",
        resolved="none"))
    quantization_ignore: tuple[str, ...] | None = field(default=None, metadata=declare(
        "module name patterns left unquantized: they decide whether the experts and the "
        "dense layers are quantized", config="`quantization_config`'s `ignore` / "
        "`exclude_modules`", low=0, high=4096, one_line=True, resolved=()))
    experts: int | None = field(default=None, metadata=declare(
        "the MoE's routed experts", config="`num_experts` / `n_routed_experts` / "
        "`num_local_experts`", low=0, high=65536, resolved=0))
    experts_per_token: int | None = field(default=None, metadata=declare(
        "the experts a token is routed to: at most `experts` (0 without experts)",
        config="`num_experts_per_tok`", low=0, high=1024, resolved=0))
    moe_intermediate_size: int | None = field(default=None, metadata=declare(
        "each expert's intermediate size", config="`moe_intermediate_size`", low=0,
        high=1 << 20, resolved=0))
    sliding_window: int | None = field(default=None, metadata=declare(
        "the attention's sliding window (0: none)", config="`sliding_window` (unless "
        "`use_sliding_window` is false)", low=0, high=1 << 30, resolved=0))
    logits_soft_cap: float | None = field(default=None, metadata=declare(
        "the attention's logits soft cap (0: none)", config="`final_logit_softcapping` / "
        "`attn_logit_softcapping`", low=0, high=1e6, resolved=0.0))
    tensor_parallel_size: int | None = field(default=None, metadata=declare(
        "TP size: it divides `num_attention_heads`, and divides or is divided by "
        "`num_key_value_heads` (vLLM splits the KV heads over the ranks or copies them to "
        "each); TP slices each expert's intermediate size unless expert parallel is on, and "
        "an intermediate per rank whose doubled size is not a multiple of 128 is named "
        "(vLLM's FLASHINFER_CUTLASS refuses it)", low=1, high=1024, resolved=1))
    expert_parallel: bool | None = field(default=None, metadata=declare(
        "`vllm serve --enable-expert-parallel`", resolved=False))
    attention_backend: str | None = field(default=None, metadata=declare(
        "vLLM's attention backend: only FLASHINFER uses flashinfer's attention modules",
        choices=BACKENDS, case="upper", resolved="FLASHINFER"))
    speculative_tokens: int | None = field(default=None, metadata=declare(
        "MTP's `num_speculative_tokens`: XQA modules for 1 to N+1 query tokens (each adds "
        "one XQA module per page size)", low=0, high=16, resolved=0))
    kv_page_sizes: tuple[int, ...] | None = field(default=None, metadata=declare(
        "the FLASHINFER page sizes to build XQA for (FLASHINFER's block sizes; a hybrid "
        "model's page follows its mamba state)", low=1, high=len(KV_PAGE_SIZES),
        choices=KV_PAGE_SIZES, unique=True, default="16, 32, 64", resolved=()))
    flashinfer_sampler: bool | None = field(default=None, metadata=declare(
        "`false` when the node sets `VLLM_USE_FLASHINFER_SAMPLER=0`", resolved=True))
    mtp_layers: int | None = field(default=None, metadata=declare(
        "how many MTP layers the model has; MTP layers whose experts the ignore list leaves "
        "unquantized (`mtp.*`) take the bf16 MoE path, which `fused_moe_120` serves beside "
        "the NVFP4 experts (or alone, for an unquantized model)",
        config="`num_nextn_predict_layers` / `mtp_num_hidden_layers`", low=0, high=64,
        resolved=0))
    shared_experts: bool | None = field(default=None, metadata=declare(
        "`true`: an MoE model with a shared expert, a dense MLP the ignore list may leave "
        "quantized (then NVFP4's GEMM module is built for it)",
        config="`shared_expert_intermediate_size` / `n_shared_experts` above 0",
        resolved=False))
    hybrid: bool | None = field(default=None, metadata=declare(
        "`true`: linear-attention layers beside full attention (Qwen3-Next's Gated "
        "DeltaNet); their projections count among the dense layers the ignore list is "
        "matched against, and flashinfer's GDN kernel is named as not used on sm_12x",
        config="`layer_types` naming linear (mamba-like) layers, or a "
        "`full_attention_interval`", resolved=False))


MODEL_FIELDS: dict[str, Rule] = {name: rule for name, rule in rules_of(ModelFields).items()
                                 if name != "config"}
"""Every ``[model]`` field but ``config``: a recipe's value and a ``config.json``'s are both
checked by its rule (sparkbuild.recipe.check_model_field)."""


def model_precedence(config: Mapping[str, Any], recipe: Mapping[str, Any]) -> dict[str, Any]:
    """Every ``[model]`` field's value: the recipe's, else the config's, else the declared
    one (:attr:`~sparkbuild.recipe_keys.Key.resolved`; None where the field has none)."""
    declared = {name: rule.key.resolved for name, rule in MODEL_FIELDS.items()}
    return {**declared, **config, **recipe}


@dataclass(frozen=True)
class NodeSettings:
    """``[node]``: the node profile's entries the recipe adds (``env``) or drops (``drop``),
    and the modules every start of the package imports (``start_modules``), from which
    ``install`` follows the package's imports (sparkbuild.node.start_check)."""

    env: dict[str, str] = field(default_factory=dict, metadata=declare(
        "entries the node profile adds or replaces, `{ KEY = \"VALUE\" }`: a shell name, a "
        "value on one line ([node.md](node.md))"))
    drop: tuple[str, ...] = field(default=(), metadata=declare(
        "default entries the profile leaves out (e.g. `VLLM_HAS_FLASHINFER_CUBIN` on an "
        "SM100 node without flashinfer-cubin)"))
    start_modules: tuple[str, ...] = field(default=(), metadata=declare(
        "modules every start imports that nothing imports statically "
        "(`vllm.platforms.cuda`): `install` follows the package's imports from them"))


@dataclass(frozen=True)
class Pin:
    """``[[pins]]``: one project of the wheelhouse at one version."""

    name: str = field(metadata=declare(
        "the project, as on the package index (`flashinfer-python`)", required=True,
        pattern=PROJECT_NAME, pattern_text="a project name", checked_by="_parse_pins"))
    version: str = field(metadata=declare(
        "the version shipped; a known-bad one is refused", required=True))
    sha256: str | None = field(default=None, metadata=declare(
        "the wheel's sha256"))
    override: str | None = field(default=None, metadata=declare(
        "why this pin may contradict a requirement of the wheels it ships beside (below)"))

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass(frozen=True)
class Table:
    """One table of the recipe: its name (``vendor.stand_in``), its dataclass, and whether
    it is an array of tables (``[[pins]]``)."""

    name: str
    model: type
    array: bool = False

    @property
    def heading(self) -> str:
        return f"[[{self.name}]]" if self.array else f"[{self.name}]"

    @property
    def rules(self) -> dict[str, Rule]:
        return rules_of(self.model)


TABLES: tuple[Table, ...] = (
    Table("recipe", RecipeInfo), Table("source", SourcePin), Table("series", SeriesInfo),
    Table("target", Target), Table("build", BuildSettings), Table("vendor", VendorSettings),
    Table("vendor.stand_in", StandIn, array=True), Table("flashinfer", FlashinferSettings),
    Table("flashinfer.jit_cache", JitCacheInput), Table("model", ModelFields),
    Table("node", NodeSettings), Table("pins", Pin, array=True),
)
"""Every table of a recipe; ``vendor.stand_in`` and ``flashinfer.jit_cache`` sit inside
their parents' tables, the others at the top."""
BY_TABLE = {table.name: table for table in TABLES}
TOP_TABLES = tuple(table for table in TABLES if "." not in table.name)
