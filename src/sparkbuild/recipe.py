"""Recipes: one TOML file that pins everything a build needs.

A recipe names the source (and its commit or sha256), the patch series, the target
architectures and platform, build settings and the wheel pins.  Unknown keys and wrong
types are errors that name the key and its line.  A branch ref is resolved to a commit
once and recorded in a lock file beside the recipe (``NAME.lock.json``), together with what
the fetched tree itself requires of each pinned project.

A pin that contradicts a requirement of the wheels it ships beside must say so:
``override = "REASON"`` in its ``[[pins]]`` table.  Versions that must never ship are data,
``recipes/known_bad.toml`` (each with a reason and a source), checked here for the pins and
by ``lock``, ``wheel`` and ``install`` for every file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sparkbuild.console import unsafe_characters
from sparkbuild.errors import PinRefusedError, RecipeError, SparkbuildError, UsageError
from sparkbuild.resources import recipes_dir, resource_root
from sparkbuild.store.user_files import parse_json, parse_toml, read_user_text

REPO_ROOT = resource_root()
"""The checkout's root, or the installed wheel's resource tree (see sparkbuild.resources)."""
DEFAULT_RECIPE = recipes_dir() / "qwen38next.toml"
KNOWN_BAD_NAME = "known_bad.toml"
"""The list of versions that must never ship, in ``recipes/`` (shipped with sparkbuild)."""


# -- the limits of the files a recipe names (read by sparkbuild.store.user_files) ---------

RECIPE_LIMIT = 4 << 20
"""The largest recipe, series file or model config read (the shipped ones are a few KiB)."""
PATCH_LIMIT = 64 << 20
"""The largest patch file read."""
LOCK_LIMIT = 16 << 20
"""The largest lock file read (a commit and the tree's requirement lines)."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str | None = None
    override: str | None = None
    """Why this pin may contradict a requirement of the wheels it ships beside."""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass(frozen=True)
class TreeRequirements:
    """What a fetched source tree itself requires of each pinned project (the lock file's)."""

    commit: str
    origin: str
    """The requirement files read, relative to the tree."""
    requirements: dict[str, tuple[str, ...]]
    """Pinned project (canonical name) -> the tree's requirement lines on it (maybe none)."""


@dataclass(frozen=True)
class SourcePin:
    spec: str
    """A source spec: ``git+URL@REF``, a path, ``PATH#sha256=HEX`` or ``pypi:NAME==VERSION``."""
    sha256: str | None = None
    branch: str | None = None
    not_in_wheel: tuple[str, ...] = ()
    """Projects the tree's requirement files list but its build leaves out of the wheel's
    Requires-Dist (vLLM's setup.py drops flashinfer-cubin): ``lock`` and a bundle's closure,
    which read the files, leave them out too."""


SPARK_ARCH = "12.1a"
"""The DGX Spark's target: arch-specific sm_121a (``12.1f``, family-specific, also serves)."""

PLAIN_SM121 = frozenset({"12.1", "12.1+PTX"})
"""Targets that compile CUTLASS's FP4 kernels to printf + trap (no block-scaled MMA)."""


@dataclass(frozen=True)
class Target:
    cuda_archs: tuple[str, ...] = (SPARK_ARCH,)
    platform: str = "manylinux_2_39_aarch64"
    python: str = "3.12"
    allow_plain_sm121: bool = False
    """Opt-in for PTX-portable builds that knowingly lose the tensor-core FP4 kernels."""
    allow_jit: bool = False
    """Opt-in for kernels that reach the target as PTX only (the driver JIT-compiles them at
    load); the manifest lists them as ``jit_kernels``.  Without it they fail the build."""

    @property
    def torch_cuda_arch_list(self) -> str:
        return ";".join(self.cuda_archs)


@dataclass(frozen=True)
class BuildSettings:
    jobs: int | None = None
    """None: let doctor choose from memory and cores."""
    job_memory_gib: float = 6.0
    nvcc_threads: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    compile_cache: str | None = None
    """A shared compile cache (sccache): ``redis://HOST:PORT[/DB]``, ``s3://BUCKET/PREFIX``
    or a directory (relative to the recipe); ``wheel --compile-cache`` overrides it."""
    dist: str | None = None
    """A team's sccache-dist scheduler, ``http://HOST:PORT``: the build's compiles are
    spread over its build servers (sparkbuild.team.dist_client); ``wheel --dist`` overrides
    it.  The client token never goes in a recipe."""


@dataclass(frozen=True)
class StandIn:
    """``[[vendor.stand_in]]``: a source the tree pins at ``pinned``, built from ``used``."""

    url: str
    """The source's URL as the tree's CMake names it."""
    pinned: str
    """The commit the tree pins (GIT_TAG), full or abbreviated."""
    used: str
    """The commit built instead."""
    reason: str

    def matches(self, url: str, ref: str | None) -> bool:
        """This entry is for the source at ``url`` pinned at ``ref``: a commit (7 to 40 hex
        digits) that ``pinned`` abbreviates or that abbreviates it.  A tag, a branch or an
        empty ref is never a commit's prefix, whatever its letters."""
        if ref is None or not self.same_url(url):
            return False
        ref = ref.strip().lower()
        if not _COMMIT.fullmatch(ref):
            return False
        return ref.startswith(self.pinned) or self.pinned.startswith(ref)

    def same_url(self, url: str) -> bool:
        """``url`` is this entry's, but for a trailing ``.git`` or ``/`` and case."""
        return _same_url(url) == _same_url(self.url)

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "pinned": self.pinned, "used": self.used,
                "reason": self.reason}


def _same_url(url: str) -> str:
    """A git URL as compared for a stand-in: no trailing ``.git`` or ``/``, any case."""
    url = url.strip().rstrip("/").lower()
    return url[:-4] if url.endswith(".git") else url


@dataclass(frozen=True)
class VendorSettings:
    """``[vendor]``: where sources may come from, and what the build may do without."""

    mirrors: tuple[str, ...] = ()
    """URL rewrites ``BASE=REPLACEMENT`` (git's insteadOf); see sparkbuild.sources.mirrors."""
    submodules: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per source: only these submodules (CMake's GIT_SUBMODULES), e.g. no ROCm ones."""
    exclude: tuple[str, ...] = ()
    """Sources the build gets an empty directory for (reported, never silent)."""
    sparse: bool = False
    """Fetch git sources without what a build never reads (sparkbuild.vendoring.unread)."""
    crates: bool = True
    """False: the tree's Cargo crates are not vendored (a build host without crates.io);
    the build then goes without the Rust extensions, which must be optional in the tree."""
    stand_ins: tuple[StandIn, ...] = ()
    """Sources built from another commit than the tree's pin, each named with its reason:
    a source at another commit is refused unless an entry names it."""

    def stand_in_for(self, url: str, ref: str | None) -> StandIn | None:
        return next((entry for entry in self.stand_ins if entry.matches(url, ref)), None)


@dataclass(frozen=True)
class FlashinferSettings:
    """``[flashinfer]``: flashinfer's kernels built ahead (sparkbuild.flashinfer.builder)."""

    aot: bool = False
    aot_args: tuple[str, ...] = ()
    """flashinfer's own builder options (``--add-moe false``, ``--fa2-head-dim 128,128``),
    and sparkbuild's ``--only GLOB`` (keep only the modules whose name matches): given, they
    override the model's set (sparkbuild.flashinfer.module_set)."""
    jit_cache: JitCacheInput | None = None
    """A prebuilt flashinfer-jit-cache wheel taken instead of building (its ``url``, or a
    ``path`` beside the recipe, pinned by ``sha256``)."""


@dataclass(frozen=True)
class JitCacheInput:
    """``[flashinfer] jit_cache = { url = ..., sha256 = ... }``
    (sparkbuild.flashinfer.jit_cache)."""

    sha256: str
    url: str | None = None
    path: Path | None = None
    cut_to_model: bool = False
    """Keep only the modules of the model's set in the wheel the node gets."""


@dataclass(frozen=True)
class ModelSettings:
    """``[model]``: what the node serves, for flashinfer's module set
    (sparkbuild.flashinfer.model_config resolves it, module_set maps it).  ``config`` is a
    Hugging Face ``config.json`` (no weights); every other key overrides what it says."""

    config: Path | None = None
    fields: dict[str, Any] = field(default_factory=dict)


# -- [model]: each field's type and bounds ----------------------------------------------

DTYPES = ("bfloat16", "float16")
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3")
QUANTIZATIONS = ("nvfp4", "fp8-block", "none")
BACKENDS = ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION")
KV_PAGE_SIZES = (16, 32, 64)
"""The block sizes vLLM's FLASHINFER backend pages the KV cache in: the XQA page sizes
(sparkbuild.flashinfer.module_set)."""
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class ModelField:
    """One field of ``[model]`` (or what a ``config.json`` gives for it): its type (a bool
    is never an integer), its bounds (a list's: how many entries) and its choices."""

    kind: type
    """``int``, ``float``, ``bool``, ``str`` or ``list``."""
    low: float | None = None
    high: float | None = None
    choices: tuple[str | int, ...] = ()
    """A string's (compared after ``case``), or each entry's of a list."""
    item: type | None = None
    """A list's entries: ``str`` or ``int``."""
    case: str = ""
    """``lower`` or ``upper``: how a string is compared with the choices, and kept."""
    unique: bool = False
    """A list names each entry once."""

    @property
    def schema_type(self) -> type | tuple[type, ...]:
        """The TOML type the recipe's table check takes for it."""
        return (int, float) if self.kind is float else self.kind

    def describe(self) -> str:
        """What a value must be: ``an integer from 1 to 1024``, ``one of nvfp4, none``."""
        bounds = "" if self.low is None or self.high is None else (
            f" from {_number(self.low)} to {_number(self.high)}")
        if self.kind is bool:
            return "true or false"
        if self.kind is int:
            return "an integer" + bounds
        if self.kind is float:
            return "a finite number" + bounds
        if self.kind is str:
            return ("one of " + ", ".join(map(str, self.choices)) if self.choices
                    else "a name of letters, digits and _")
        entries = ", ".join(map(str, self.choices)) if self.choices else (
            "strings" if self.item is str else "integers")
        count = (f" ({_number(self.low or 0)} to {_number(self.high)} entries)"
                 if self.high is not None else "")
        return f"a list of {entries}{', each once' if self.unique else ''}{count}"

    def checked(self, value: Any) -> Any | None:
        """``value`` as the field holds it (a string in its case), or None when it breaks
        the field's type, bounds or choices."""
        if self.kind is list:
            return self._checked_list(value)
        if self.kind is bool:
            return value if isinstance(value, bool) else None
        if self.kind is str:
            if not isinstance(value, str) or unsafe_characters(value):
                return None
            text = value.upper() if self.case == "upper" else (
                value.lower() if self.case == "lower" else value)
            fits = text in self.choices if self.choices else bool(_CLASS_NAME.fullmatch(text))
            return text if fits else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if self.kind is int and not isinstance(value, int):
            return None
        number = float(value)
        if not math.isfinite(number) or not self._within(number):
            return None
        return value if self.kind is int else number

    def _within(self, number: float) -> bool:
        return ((self.low is None or number >= self.low)
                and (self.high is None or number <= self.high))

    def _checked_list(self, value: Any) -> list[Any] | None:
        if not isinstance(value, list) or not self._within(len(value)):
            return None
        for entry in value:
            if isinstance(entry, bool) or not isinstance(entry, self.item or str):
                return None
            if self.choices and entry not in self.choices:
                return None
            if isinstance(entry, str) and unsafe_characters(entry):
                return None
        if self.unique and len(set(value)) != len(value):
            return None
        return list(value)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


MODEL_FIELDS: dict[str, ModelField] = {
    "architecture": ModelField(str),
    "dtype": ModelField(str, choices=DTYPES, case="lower"),
    "kv_cache_dtype": ModelField(str, choices=KV_DTYPES, case="lower"),
    "head_dim": ModelField(int, 1, 1024),
    "head_dim_vo": ModelField(int, 1, 1024),
    "num_attention_heads": ModelField(int, 1, 1024),
    "num_key_value_heads": ModelField(int, 1, 1024),
    "quantization": ModelField(str, choices=QUANTIZATIONS, case="lower"),
    "quantization_ignore": ModelField(list, 0, 4096, item=str),
    "experts": ModelField(int, 0, 65536),
    "experts_per_token": ModelField(int, 0, 1024),
    "moe_intermediate_size": ModelField(int, 0, 1 << 20),
    "sliding_window": ModelField(int, 0, 1 << 30),
    "logits_soft_cap": ModelField(float, 0, 1e6),
    "tensor_parallel_size": ModelField(int, 1, 1024),
    "expert_parallel": ModelField(bool),
    "attention_backend": ModelField(str, choices=BACKENDS, case="upper"),
    "speculative_tokens": ModelField(int, 0, 16),
    "kv_page_sizes": ModelField(list, 1, len(KV_PAGE_SIZES), choices=KV_PAGE_SIZES, item=int,
                                unique=True),
    "flashinfer_sampler": ModelField(bool),
    "mtp_layers": ModelField(int, 0, 64),
    "shared_experts": ModelField(bool),
    "hybrid": ModelField(bool),
}
"""Every ``[model]`` field but ``config`` (docs/recipes.md lists them); a recipe's value and a
``config.json``'s are both checked by it (:func:`check_model_field`)."""


def check_model_field(name: str, value: Any, label: str, where: str | None) -> Any:
    """``value`` of the ``[model]`` field ``name`` as :data:`MODEL_FIELDS` holds it, or a
    :class:`RecipeError` that names ``label`` (``model.head_dim``, or a ``config.json``'s
    key) and ``where`` (the recipe's line, or the config's path)."""
    rule = MODEL_FIELDS[name]
    checked = rule.checked(value)
    if checked is None:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise RecipeError(f"{label} must be {rule.describe()}, not {shown}", where=where,
                          hint="docs/recipes.md lists each [model] field and what it takes")
    return checked


@dataclass(frozen=True)
class NodeSettings:
    """``[node]``: the node profile's entries the recipe adds (``env``) or drops (``drop``),
    and the modules every start of the package imports (``start_modules``), from which
    ``install`` follows the package's imports (sparkbuild.node.start_check)."""

    env: dict[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    start_modules: tuple[str, ...] = ()


MODEL_CONFIG = "model.config"
JIT_CACHE = "flashinfer.jit_cache"


@dataclass(frozen=True)
class ReferencedFile:
    """A file the recipe names beside its series and lock: ``[model] config`` (a Hugging Face
    config.json) or a ``[flashinfer] jit_cache`` given by ``path`` (a prebuilt wheel).  A
    bundle carries each (:mod:`sparkbuild.bundle.write`), and ``wheel --bundle`` reads the
    bundle's copies (:meth:`Recipe.with_files`)."""

    key: str
    """:data:`MODEL_CONFIG` or :data:`JIT_CACHE`."""
    path: Path
    what: str
    """The recipe's words for it, for a message: ``[model] config``."""


@dataclass(frozen=True)
class Recipe:
    path: Path
    name: str
    source: SourcePin
    series: Path
    target: Target
    build: BuildSettings
    pins: tuple[Pin, ...]
    package: str = "vllm"
    vendor: VendorSettings = field(default_factory=VendorSettings)
    flashinfer: FlashinferSettings = field(default_factory=FlashinferSettings)
    node: NodeSettings = field(default_factory=NodeSettings)
    model: ModelSettings | None = None

    def referenced_files(self) -> tuple[ReferencedFile, ...]:
        """Every file the recipe names but its series and lock (:class:`ReferencedFile`)."""
        files = []
        if self.model is not None and self.model.config is not None:
            files.append(ReferencedFile(MODEL_CONFIG, self.model.config, "[model] config"))
        jit_cache = self.flashinfer.jit_cache
        if jit_cache is not None and jit_cache.path is not None:
            files.append(ReferencedFile(JIT_CACHE, jit_cache.path,
                                        "[flashinfer] jit_cache path"))
        return tuple(files)

    def with_files(self, paths: Mapping[str, Path]) -> Recipe:
        """This recipe reading each file of :meth:`referenced_files` at ``paths[key]``
        instead (a bundle's copies); a key the recipe does not reference is refused."""
        named = {file.key for file in self.referenced_files()}
        unknown = sorted(set(paths) - named)
        if unknown:
            raise RecipeError(f"the recipe names no {', '.join(unknown)} to read elsewhere",
                              where=str(self.path))
        recipe = self
        if MODEL_CONFIG in paths and self.model is not None:
            recipe = replace(recipe, model=replace(self.model, config=paths[MODEL_CONFIG]))
        jit_cache = self.flashinfer.jit_cache
        if JIT_CACHE in paths and jit_cache is not None:
            recipe = replace(recipe, flashinfer=replace(
                self.flashinfer, jit_cache=replace(jit_cache, path=paths[JIT_CACHE])))
        return recipe

    @property
    def lock_path(self) -> Path:
        """Beside the recipe; for a recipe in a read-only place (an installed sparkbuild),
        in the user's config directory."""
        beside = self.path.with_name(self.path.stem + ".lock.json")
        if beside.exists() or os.access(self.path.parent, os.W_OK):
            return beside
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return config / "sparkbuild" / "locks" / beside.name

    def _read_lock(self) -> dict[str, Any]:
        """The lock file's data for this recipe's source spec; {} when none is recorded."""
        if not self.lock_path.is_file():
            return {}
        hint = "delete it to record the commit again"
        text = read_user_text(self.lock_path, "the recipe's lock file", LOCK_LIMIT, hint=hint)
        try:
            data = parse_json(text)
        except json.JSONDecodeError as exc:
            raise RecipeError(
                f"the recipe's lock file is not valid JSON: {exc.msg}",
                where=str(self.lock_path),
                hint=hint,
            ) from exc
        return data if isinstance(data, dict) and data.get("spec") == self.source.spec else {}

    def _write_lock(self, payload: dict[str, Any]) -> None:
        # A name of this process's own: two runs recording at once must not share one.
        # (store.files.write_text_atomic lies a layer above the recipe.)
        tmp = self.lock_path.with_name(f".{self.lock_path.name}.{os.getpid()}.tmp")
        try:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
            tmp.replace(self.lock_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise RecipeError(
                f"cannot record the resolved commit: {exc.strerror}",
                where=str(self.lock_path),
                hint="copy the recipe somewhere writable and pass it with --recipe",
            ) from exc

    def locked_commit(self) -> str | None:
        """The commit recorded for the source's ref on first fetch, if any."""
        commit = self._read_lock().get("commit")
        return commit if isinstance(commit, str) else None

    def record_commit(self, commit: str) -> None:
        payload: dict[str, Any] = {"spec": self.source.spec, "commit": commit}
        recorded = self._read_lock().get("tree_requirements")
        if isinstance(recorded, dict) and recorded.get("commit") == commit:
            payload["tree_requirements"] = recorded
        self._write_lock(payload)

    def record_tree_requirements(self, found: TreeRequirements) -> None:
        """Record what the tree at ``found.commit`` requires of each pinned project."""
        payload = self._read_lock() or {"spec": self.source.spec}
        payload["tree_requirements"] = {
            "commit": found.commit, "from": found.origin,
            "requirements": {k: list(v) for k, v in sorted(found.requirements.items())}}
        self._write_lock(payload)

    def tree_requirements(self) -> TreeRequirements | None:
        """The recorded requirements of the tree at the locked commit, if recorded."""
        data = self._read_lock()
        recorded = data.get("tree_requirements")
        if not isinstance(recorded, dict):
            return None
        if data.get("commit") not in (None, recorded.get("commit")):
            return None  # recorded for another commit than the locked one
        requirements = recorded.get("requirements")
        if not isinstance(requirements, dict):
            return None
        return TreeRequirements(
            str(recorded.get("commit", "")), str(recorded.get("from", "")),
            {str(k): tuple(str(line) for line in v) for k, v in requirements.items()
             if isinstance(v, list)})


_SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "recipe": {"name": str, "description": str, "package": str},
    "source": {"spec": str, "sha256": str, "branch": str, "not_in_wheel": list},
    "series": {"path": str},
    "target": {"cuda_archs": list, "platform": str, "python": str, "allow_plain_sm121": bool,
               "allow_jit": bool},
    "build": {"jobs": (int, str), "job_memory_gib": (int, float), "nvcc_threads": int, "env": dict,
              "compile_cache": str, "dist": str},
    "vendor": {"mirrors": list, "submodules": dict, "exclude": list, "sparse": bool,
               "crates": bool, "stand_in": list},
    "flashinfer": {"aot": bool, "aot_args": list, "jit_cache": dict},
    "model": {"config": str, **{name: rule.schema_type for name, rule in MODEL_FIELDS.items()}},
    "node": {"env": dict, "drop": list, "start_modules": list},
}
_REQUIRED = {"source": ("spec",), "series": ("path",)}
_PIN_SCHEMA: dict[str, type] = {"name": str, "version": str, "sha256": str, "override": str}


def _line_of(text: str, table: str | None, key: str) -> int | None:
    """Best-effort line number of ``key`` (inside ``[table]`` when given)."""
    in_table = table is None
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?", line)
        if header:
            if header.group(1) == key and table is None:
                return number
            in_table = table is None or header.group(1) == table
            continue
        if in_table and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return None


def _where(path: Path, text: str, table: str | None, key: str) -> str:
    line = _line_of(text, table, key)
    return f"{path}:{line}" if line else str(path)


def _check_table(
    path: Path, text: str, name: str, table: Any, schema: dict[str, type | tuple[type, ...]]
) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise RecipeError(f"[{name}] must be a table", where=_where(path, text, None, name))
    for key, value in table.items():
        if key not in schema:
            raise RecipeError(
                f"unknown key {name}.{key}",
                where=_where(path, text, name, key),
                hint=f"known keys of [{name}]: {', '.join(sorted(schema))}",
            )
        expected = schema[key]
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            names = expected.__name__ if isinstance(expected, type) else "/".join(
                t.__name__ for t in expected
            )
            raise RecipeError(
                f"{name}.{key} must be {names}, not {type(value).__name__}",
                where=_where(path, text, name, key),
            )
    for key in _REQUIRED.get(name, ()):
        if key not in table:
            raise RecipeError(
                f"missing key {name}.{key}",
                where=_where(path, text, None, name),
                hint=f"add `{key} = ...` under [{name}]",
            )
    return table


def _parse_pins(path: Path, text: str, raw: Any) -> tuple[Pin, ...]:
    if not isinstance(raw, list):
        raise RecipeError("pins must be an array of tables ([[pins]])", where=str(path))
    pins = []
    for entry in raw:
        table = _check_table(path, text, "pins", entry, dict(_PIN_SCHEMA))
        for key in ("name", "version"):
            if key not in table:
                raise RecipeError(f"a [[pins]] entry lacks `{key}`", where=str(path))
        if not _PROJECT_NAME.fullmatch(table["name"]):
            raise RecipeError(f"pins: {table['name']!r} is not a project name",
                              where=pin_where(path, table["name"]),
                              hint="a project name is letters, digits, and . _ - inside, as "
                              "on the package index (such as flashinfer-python)")
        override = table.get("override")
        if override is not None and not override.strip():
            raise RecipeError(f"the override of pin {table['name']} gives no reason",
                              where=_where(path, text, "pins", "override"),
                              hint='say why the pin may contradict: override = "REASON"')
        pin = Pin(table["name"], table["version"], table.get("sha256"), override)
        refuse_known_bad(pin, where=_where(path, text, "pins", "version"))
        pins.append(pin)
    return tuple(pins)


# -- known-bad versions ------------------------------------------------------------------


@dataclass(frozen=True)
class KnownBad:
    """A version that must never ship: ``recipes/known_bad.toml``."""

    name: str
    version: str
    reason: str
    source: str

    def matches(self, name: str, version: str) -> bool:
        if canonicalize_name(name) != canonicalize_name(self.name):
            return False
        try:
            return Version(version) == Version(self.version)
        except InvalidVersion:
            return version == self.version


_KNOWN_BAD_KEYS = {"name": str, "version": str, "reason": str, "source": str}


def known_bad_path() -> Path:
    return recipes_dir() / KNOWN_BAD_NAME


def load_known_bad(path: Path) -> tuple[KnownBad, ...]:
    """Every entry of a known-bad list; each names its project, version, reason and source."""
    hint = "reinstall sparkbuild, or fix the file"
    text = read_user_text(path, "the known-bad list", RECIPE_LIMIT, hint=hint)
    try:
        data = parse_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"cannot read the known-bad list: {exc}", where=str(path),
                          hint=hint) from exc
    unknown = set(data) - {"known_bad"}
    if unknown:
        raise RecipeError(f"unknown key `{sorted(unknown)[0]}` in the known-bad list",
                          where=str(path), hint="entries are [[known_bad]] tables")
    entries = []
    for entry in data.get("known_bad", []):
        _check_table(path, text, "known_bad", entry, dict(_KNOWN_BAD_KEYS))
        missing = [key for key in _KNOWN_BAD_KEYS if not str(entry.get(key, "")).strip()]
        if missing:
            raise RecipeError(f"a [[known_bad]] entry lacks `{missing[0]}`", where=str(path),
                              hint="each entry needs name, version, reason and source")
        entries.append(KnownBad(entry["name"], entry["version"], entry["reason"],
                                entry["source"]))
    return tuple(entries)


def check_known_bad(name: str, version: str, *, role: str = "pin",
                    where: str | None = None) -> None:
    """Refuse ``name==version`` when the known-bad list names it (PinRefusedError)."""
    path = known_bad_path()
    for entry in load_known_bad(path):
        if entry.matches(name, version):
            raise PinRefusedError(
                f"refusing {role} {name}=={version}: {entry.reason}",
                where=where,
                hint=f"{name} {version} is listed in {path} (source: {entry.source}); "
                "pin another version in the recipe's [[pins]]",
            )


def refuse_known_bad(pin: Pin, *, where: str | None = None) -> None:
    check_known_bad(pin.name, pin.version, role="pin", where=where)


def _strings(path: Path, text: str, key: str, value: Any, *,
             table: str = "vendor") -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RecipeError(f"{table}.{key} must be a list of strings",
                          where=_where(path, text, table, key))
    return tuple(value)


def _parse_vendor(path: Path, text: str, table: dict[str, Any]) -> VendorSettings:
    submodules = {}
    for name, paths in table.get("submodules", {}).items():
        submodules[str(name)] = _strings(path, text, "submodules", paths)
    mirrors = _strings(path, text, "mirrors", table.get("mirrors", []))
    for rule in mirrors:  # the rule --mirror's parser (sources.mirrors) applies, read early
        base, sep, replacement = rule.partition("=")
        if not sep or not base.strip() or not replacement.strip():
            raise RecipeError(f"vendor.mirrors: {rule!r} must read BASE=REPLACEMENT",
                              where=_where(path, text, "vendor", "mirrors"),
                              hint='for example "https://github.com/=file:///srv/git/"')
    return VendorSettings(mirrors=mirrors, submodules=submodules,
                          exclude=_strings(path, text, "exclude", table.get("exclude", [])),
                          sparse=bool(table.get("sparse", False)),
                          crates=bool(table.get("crates", True)),
                          stand_ins=_parse_stand_ins(path, text, table.get("stand_in", [])))


_STAND_IN_KEYS: dict[str, type | tuple[type, ...]] = {
    "url": str, "pinned": str, "used": str, "reason": str}
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _parse_stand_ins(path: Path, text: str, raw: list[Any]) -> tuple[StandIn, ...]:
    found: list[StandIn] = []
    for entry in raw:
        table = _check_table(path, text, "vendor.stand_in", entry, _STAND_IN_KEYS)
        where = _where(path, text, "vendor.stand_in", "url")
        missing = [key for key in _STAND_IN_KEYS if not str(table.get(key, "")).strip()]
        if missing:
            raise RecipeError(f"a [[vendor.stand_in]] entry lacks {', '.join(missing)}",
                              where=where, hint='give url, pinned (the tree\'s commit), used '
                              '(the commit built instead) and reason = "WHY"')
        pinned, used = table["pinned"].strip().lower(), table["used"].strip().lower()
        for key, value in (("pinned", pinned), ("used", used)):
            if not _COMMIT.fullmatch(value):
                raise RecipeError(f"vendor.stand_in.{key}: {value!r} is not a commit",
                                  where=_where(path, text, "vendor.stand_in", key),
                                  hint="7 to 40 hex digits of a git commit")
        if pinned.startswith(used) or used.startswith(pinned):
            raise RecipeError("a [[vendor.stand_in]] entry uses the commit it stands in for",
                              where=where, hint="a source at its pin needs no stand-in")
        unsafe = unsafe_characters(table["reason"]) + unsafe_characters(table["url"])
        if unsafe:
            raise RecipeError(f"vendor.stand_in holds {', '.join(unsafe)}", where=where,
                              hint="a URL and a reason on one line, no control characters")
        stand_in = StandIn(table["url"].strip(), pinned, used, table["reason"].strip())
        if any(other.matches(stand_in.url, pinned) for other in found):
            raise RecipeError(f"two [[vendor.stand_in]] entries for {stand_in.url} at {pinned}",
                              where=where, hint="keep one")
        found.append(stand_in)
    return tuple(found)


_JIT_CACHE_KEYS: dict[str, type | tuple[type, ...]] = {
    "url": str, "path": str, "sha256": str, "cut_to_model": bool}


def _parse_jit_cache(path: Path, text: str, table: Any) -> JitCacheInput | None:
    if table is None:
        return None
    where = _where(path, text, "flashinfer", "jit_cache")
    checked = _check_table(path, text, "flashinfer.jit_cache", table, _JIT_CACHE_KEYS)
    sha256 = str(checked.get("sha256", "")).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise RecipeError("flashinfer.jit_cache needs sha256 = the wheel's 64 hex digits",
                          where=where, hint="a prebuilt jit-cache is taken only pinned by hash")
    if ("url" in checked) == ("path" in checked):
        raise RecipeError("flashinfer.jit_cache needs one of url or path", where=where,
                          hint='url = "https://..." (a [vendor] mirror may serve it) or '
                          'path = "FILE.whl" beside the recipe')
    # absolute, a symbolic link kept: the wheel is named by the path the recipe gives
    local = (path.parent / checked["path"]).absolute() if "path" in checked else None
    return JitCacheInput(sha256, checked.get("url"), local,
                         bool(checked.get("cut_to_model", False)))


def _parse_model(path: Path, text: str, table: Any) -> ModelSettings | None:
    """``[model]``: each field through :func:`check_model_field`, naming its line."""
    if table is None:
        return None
    fields = dict(table)
    config = fields.pop("config", None)
    if config is not None and (not config.strip() or unsafe_characters(config)):
        raise RecipeError("model.config must name a config.json",
                          where=_where(path, text, "model", "config"),
                          hint='config = "config.json" (relative to the recipe)')
    checked = {key: check_model_field(key, value, f"model.{key}",
                                      _where(path, text, "model", key))
               for key, value in fields.items()}
    return ModelSettings((path.parent / config).resolve() if config else None, checked)


def _build_env(path: Path, text: str, table: dict[str, Any]) -> dict[str, str]:
    """``[build] env``: what the build runs with, each entry through :func:`_env_table`; a
    SOURCE_DATE_EPOCH the wheel's zip cannot hold is refused here, before any work."""
    env = _env_table(path, text, "build.env", table)
    check_source_date_epoch(env.get("SOURCE_DATE_EPOCH"), error=RecipeError,
                            where=_where(path, text, "build", "env"))
    return env


def _parse_jobs(path: Path, text: str, value: Any) -> int | None:
    if value is None or value == "auto":
        return None
    if isinstance(value, int) and value > 0:
        return value
    raise RecipeError(
        'build.jobs must be a positive integer or "auto"',
        where=_where(path, text, "build", "jobs"),
    )


_ARCH = re.compile(r"\d+\.\d+[af]?(\+PTX)?")
"""One entry of TORCH_CUDA_ARCH_LIST: ``12.1a``, ``12.1f``, ``9.0``, ``8.6+PTX``."""
_PROJECT_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)
"""A valid project name (PEP 508)."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An environment variable's name, as the shell and systemd take it."""


def env_entry_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` cannot be an entry of an environment sparkbuild writes or sets (the
    node profile, a build's environment); None when it can.  The one check of an
    environment's entries, where the recipe is read (``[node] env``, ``[build] env``) and
    where the manifest is (``build.node_profile``): a key is a shell name (``A=1;touch x;B``
    would run at ``source VENV/bin/activate``), a value holds no control character (a
    newline would add a line such as ``LD_PRELOAD=...`` to ``node.env``)."""
    if not ENV_NAME.fullmatch(key):
        return f"{key!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    unsafe = unsafe_characters(value)
    if unsafe:
        return (f"the value of {key} holds {', '.join(unsafe)} (a control or bidirectional "
                "character)")
    return None


def _env_table(path: Path, text: str, name: str, raw: dict[str, Any]) -> dict[str, str]:
    """``[build] env`` or ``[node] env``, each entry through :func:`env_entry_problem`."""
    env = {str(key): str(value) for key, value in raw.items()}
    for key, value in env.items():
        problem = env_entry_problem(key, value)
        if problem is not None:
            raise RecipeError(f"{name}: {problem}", where=_where(path, text, name, key),
                              hint="an entry is NAME = \"VALUE\": a name of letters, digits "
                              "and _ (not starting with a digit), a value on one line")
    return env


def check_job_memory_gib(value: object, *, where: str | None,
                         error: type[SparkbuildError] = RecipeError,
                         name: str = "build.job_memory_gib") -> float:
    """A memory budget per compile job: a finite number of GiB above 0."""
    number = float(value) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else math.nan
    if not math.isfinite(number) or number <= 0:
        raise error(f"{name} must be a number of GiB above 0, not {value!r}", where=where,
                    hint="give the memory one nvcc job may take, such as 6 (the default)")
    return number


def check_jobs(value: int | None, *, where: str) -> int | None:
    """``--jobs``: None (doctor's choice) or a positive count."""
    if value is not None and value <= 0:
        raise UsageError(f"--jobs must be a positive integer, not {value}", where=where,
                         hint="leave --jobs out to let doctor choose from memory and cores")
    return value


ZIP_FIRST_EPOCH = 315532800
"""1980-01-01 00:00:00 UTC: the earliest time a zip entry can hold."""
ZIP_LAST_EPOCH = 4354819199
"""2107-12-31 23:59:59 UTC: the latest time a zip entry can hold."""


def check_source_date_epoch(raw: str | None, *, where: str = "SOURCE_DATE_EPOCH",
                            error: type[SparkbuildError] = UsageError) -> int | None:
    """``SOURCE_DATE_EPOCH`` (the time every built file carries): None when unset, else whole
    seconds a wheel's zip can hold, 1980 to 2107.  Checked before a build: the build backend
    reads it too, and fails on another value only when it packs the wheel."""
    text = (raw or "").strip()
    if not text:
        return None
    value = int(text) if re.fullmatch(r"[+-]?\d{1,20}", text) else None
    if value is None or not ZIP_FIRST_EPOCH <= value <= ZIP_LAST_EPOCH:
        raise error(
            f"SOURCE_DATE_EPOCH must be whole seconds from {ZIP_FIRST_EPOCH} (1980-01-01) to "
            f"{ZIP_LAST_EPOCH} (2107-12-31), what a wheel's zip entries can hold, not {raw!r}",
            where=where,
            hint="unset it (the source's commit time is used), or give one such as "
            "$(git log -1 --format=%ct)")
    return value


def pin_where(path: Path, name: str) -> str:
    """``RECIPE:LINE`` of the ``name = "NAME"`` line of the pin ``name``."""
    try:
        text = read_user_text(path, "recipe", RECIPE_LIMIT)
    except RecipeError:
        return str(path)
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"""\s*name\s*=\s*["']{re.escape(name)}["']""", line):
            return f"{path}:{number}"
    return str(path)


def _parse_archs(path: Path, text: str, value: Any) -> tuple[str, ...]:
    where = _where(path, text, "target", "cuda_archs")
    if value is None:
        return (SPARK_ARCH,)
    if not value:
        raise RecipeError("target.cuda_archs is empty: the build would target no GPU",
                          where=where, hint=f'name the target: cuda_archs = ["{SPARK_ARCH}"]')
    for arch in value:
        if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
            raise RecipeError(f"target.cuda_archs: {arch!r} is not a CUDA arch", where=where,
                              hint=f'write MAJOR.MINOR with an optional a, f or +PTX, such '
                              f'as "{SPARK_ARCH}" (the DGX Spark)')
    return tuple(value)


def _parse_python(path: Path, text: str, value: Any) -> str:
    if value is None:
        return Target.python
    if not re.fullmatch(r"3\.\d+", value):
        raise RecipeError(f"target.python: {value!r} is not a Python version",
                          where=_where(path, text, "target", "python"),
                          hint='give X.Y, such as "3.12"')
    return str(value)


def shipped_recipes_hint() -> str:
    """Names the recipes sparkbuild ships, for a ``--recipe`` that does not exist."""
    directory = recipes_dir()
    shipped = sorted(p.name for p in directory.glob("*.toml")
                     if p.name != KNOWN_BAD_NAME) if directory.is_dir() else []
    if not shipped:
        return "give the path of a recipe TOML file"
    return (f"give the path of a recipe TOML file; sparkbuild ships {', '.join(shipped)} "
            f"in {directory}")


def load_recipe(path: Path) -> Recipe:
    """Read and validate a recipe file."""
    path = Path(path)
    try:
        text = read_user_text(path, "recipe", RECIPE_LIMIT)
    except RecipeError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            exc.hint = shipped_recipes_hint()
        raise
    try:
        data = parse_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"recipe is not valid TOML: {exc}", where=str(path)) from exc
    known = {*_SCHEMA, "pins"}
    if "known_bad" in data and not set(data) & known:
        raise RecipeError("this is the known-bad list, not a recipe", where=str(path),
                          hint=shipped_recipes_hint())
    for key in data:
        if key not in known:
            raise RecipeError(
                f"unknown table or key `{key}`",
                where=_where(path, text, None, key),
                hint=f"a recipe has: {', '.join(sorted(known))}",
            )
    for name in _REQUIRED:
        if name not in data:
            raise RecipeError(
                f"missing table [{name}]", where=str(path), hint=f"add a [{name}] table"
            )
    tables = {
        name: _check_table(path, text, name, data.get(name, {}), schema)
        for name, schema in _SCHEMA.items()
    }
    source = tables["source"]
    target = tables["target"]
    build = tables["build"]
    archs = _parse_archs(path, text, target.get("cuda_archs"))
    return Recipe(
        path=path.resolve(),
        name=tables["recipe"].get("name", path.stem),
        package=tables["recipe"].get("package", "vllm"),
        source=SourcePin(source["spec"], source.get("sha256"), source.get("branch"),
                         _strings(path, text, "not_in_wheel", source.get("not_in_wheel", []),
                                  table="source")),
        series=(path.parent / tables["series"]["path"]).resolve(),
        target=Target(
            cuda_archs=archs,
            platform=target.get("platform", Target.platform),
            python=_parse_python(path, text, target.get("python")),
            allow_plain_sm121=target.get("allow_plain_sm121", False),
            allow_jit=target.get("allow_jit", False),
        ),
        build=BuildSettings(
            jobs=_parse_jobs(path, text, build.get("jobs")),
            job_memory_gib=check_job_memory_gib(
                build.get("job_memory_gib", BuildSettings.job_memory_gib),
                where=_where(path, text, "build", "job_memory_gib")),
            nvcc_threads=build.get("nvcc_threads"),
            env=_build_env(path, text, build.get("env", {})),
            compile_cache=build.get("compile_cache"),
            dist=build.get("dist"),
        ),
        pins=_parse_pins(path, text, data.get("pins", [])),
        vendor=_parse_vendor(path, text, tables["vendor"]),
        flashinfer=FlashinferSettings(
            aot=bool(tables["flashinfer"].get("aot", False)),
            aot_args=_strings(path, text, "aot_args", tables["flashinfer"].get("aot_args", []),
                              table="flashinfer"),
            jit_cache=_parse_jit_cache(path, text, tables["flashinfer"].get("jit_cache"))),
        model=_parse_model(path, text, data.get("model")),
        node=NodeSettings(
            env=_env_table(path, text, "node.env", tables["node"].get("env", {})),
            drop=_strings(path, text, "drop", tables["node"].get("drop", []), table="node"),
            start_modules=_strings(path, text, "start_modules",
                                   tables["node"].get("start_modules", []), table="node")),
    )


def require_spark_target(recipe: Recipe) -> None:
    """Refuse a plain ``12.1`` target unless the recipe opts in (``wheel``, ``check``, ``doctor``).

    Plain sm_121 has no block-scaled MMA: ptxas rejects the FP4 ``mma ... block_scale``
    instructions for it, and CUTLASS's feature guards then compile each FP4 GEMM kernel to a
    printf and a trap, silently (nvcc exits 0).  The Spark's target is ``12.1a``.
    """
    plain = [arch for arch in recipe.target.cuda_archs if arch in PLAIN_SM121]
    if not plain or recipe.target.allow_plain_sm121:
        return
    try:
        text = read_user_text(recipe.path, "recipe", RECIPE_LIMIT)
    except RecipeError:
        text = ""
    raise RecipeError(
        f"the recipe targets plain {plain[0]}: plain sm_121 compiles CUTLASS's FP4 kernels to "
        "a trap",
        where=_where(recipe.path, text, "target", "cuda_archs"),
        hint=f'use {SPARK_ARCH}: plain sm_121 compiles CUTLASS\'s FP4 kernels to a trap; set '
        'cuda_archs = ["12.1a"] (or "12.1f"), or add `allow_plain_sm121 = true` under [target] '
        "for a PTX-portable build that knowingly loses the tensor-core FP4 kernels",
    )
