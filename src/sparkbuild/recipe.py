"""Recipes: one TOML file that pins everything a build needs.

A recipe names the source (and its commit or sha256), the patch series, the target
architectures and platform, build settings and the wheel pins.  Its tables and keys are
declared once, in :mod:`sparkbuild.recipe_model` (re-exported here); unknown keys, wrong
types and values out of their declared bounds are errors that name the key and its line.
A branch ref is resolved to a commit once and recorded in a lock file beside the recipe
(``NAME.lock.json``), together with what the fetched tree itself requires of each pinned project.

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
from sparkbuild.recipe_keys import Rule, required_keys
from sparkbuild.recipe_model import ARCH as ARCH
from sparkbuild.recipe_model import BACKENDS as BACKENDS
from sparkbuild.recipe_model import BY_TABLE as BY_TABLE
from sparkbuild.recipe_model import COMMIT as COMMIT
from sparkbuild.recipe_model import DTYPES as DTYPES
from sparkbuild.recipe_model import KV_DTYPES as KV_DTYPES
from sparkbuild.recipe_model import KV_PAGE_SIZES as KV_PAGE_SIZES
from sparkbuild.recipe_model import MODEL_FIELDS as MODEL_FIELDS
from sparkbuild.recipe_model import PLAIN_SM121 as PLAIN_SM121
from sparkbuild.recipe_model import PROJECT_NAME as PROJECT_NAME
from sparkbuild.recipe_model import PYTHON_VERSION as PYTHON_VERSION
from sparkbuild.recipe_model import QUANTIZATIONS as QUANTIZATIONS
from sparkbuild.recipe_model import SHA256 as SHA256
from sparkbuild.recipe_model import SPARK_ARCH as SPARK_ARCH
from sparkbuild.recipe_model import TOP_TABLES as TOP_TABLES
from sparkbuild.recipe_model import BuildSettings as BuildSettings
from sparkbuild.recipe_model import FlashinferSettings as FlashinferSettings
from sparkbuild.recipe_model import JitCacheInput as JitCacheInput
from sparkbuild.recipe_model import ModelSettings as ModelSettings
from sparkbuild.recipe_model import NodeSettings as NodeSettings
from sparkbuild.recipe_model import Pin as Pin
from sparkbuild.recipe_model import SourcePin as SourcePin
from sparkbuild.recipe_model import StandIn as StandIn
from sparkbuild.recipe_model import Target as Target
from sparkbuild.recipe_model import VendorSettings as VendorSettings
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
class TreeRequirements:
    """What a fetched source tree itself requires of each pinned project (the lock file's)."""

    commit: str
    origin: str
    """The requirement files read, relative to the tree."""
    requirements: dict[str, tuple[str, ...]]
    """Pinned project (canonical name) -> the tree's requirement lines on it (maybe none)."""


def check_model_field(name: str, value: Any, label: str, where: str | None) -> Any:
    """``value`` of the ``[model]`` field ``name`` as :data:`MODEL_FIELDS` holds it, or a
    :class:`RecipeError` that names ``label`` (``model.head_dim``, or a ``config.json``'s
    key) and ``where`` (the recipe's line, or the config's path)."""
    rule = MODEL_FIELDS[name]
    checked = rule.checked(value)
    if checked is None:
        raise _out_of_bounds(label, rule, value, where, "[model]")
    return checked


def _out_of_bounds(label: str, rule: Rule, value: Any, where: str | None,
                   heading: str) -> RecipeError:
    """``LABEL must be WHAT, not VALUE``: a key's value its declaration refuses."""
    return RecipeError(f"{label} {rule.problem(value) or 'is refused'}", where=where,
                       hint=f"docs/recipes.md lists each {heading} key and what it takes")


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


Types = dict[str, tuple[type, ...]]


def _types(name: str) -> Types:
    """The TOML types each key of the table ``name`` takes, from its declaration."""
    return {key: rule.python_types for key, rule in BY_TABLE[name].rules.items()}


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


def _check_table(path: Path, text: str, name: str, table: Any, schema: Types) -> dict[str, Any]:
    """``table`` as the table ``name``: no unknown key, each of its type and, for a
    declared table (:data:`~sparkbuild.recipe_model.TABLES`), within its bounds; a top
    table's required keys given."""
    if not isinstance(table, dict):
        raise RecipeError(f"[{name}] must be a table", where=_where(path, text, None, name))
    declared = BY_TABLE.get(name)
    for key, value in table.items():
        if key not in schema:
            raise RecipeError(
                f"unknown key {name}.{key}",
                where=_where(path, text, name, key),
                hint=f"known keys of [{name}]: {', '.join(sorted(schema))}",
            )
        expected = schema[key]
        if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
            names = "/".join(kind.__name__ for kind in expected)
            raise RecipeError(
                f"{name}.{key} must be {names}, not {type(value).__name__}",
                where=_where(path, text, name, key),
            )
        rule = declared.rules[key] if declared is not None else None
        if rule is not None and rule.problem(value) is not None:
            raise _out_of_bounds(f"{name}.{key}", rule, value, _where(path, text, name, key),
                                 declared.heading if declared else name)
    required = required_keys(declared.model) if declared in TOP_TABLES else ()
    for key in required:
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
        table = _check_table(path, text, "pins", entry, _types("pins"))
        for key in required_keys(Pin):
            if key not in table:
                raise RecipeError(f"a [[pins]] entry lacks `{key}`", where=str(path))
        if not PROJECT_NAME.fullmatch(table["name"]):
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


_KNOWN_BAD_KEYS: Types = {"name": (str,), "version": (str,), "reason": (str,), "source": (str,)}


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


def check_known_bad(name: str, version: str, *, what: str = "pin",
                    where: str | None = None) -> None:
    """Refuse ``name==version`` when the known-bad list names it (PinRefusedError);
    ``what``: what the message calls it (``pin``, ``locked requirement``)."""
    path = known_bad_path()
    for entry in load_known_bad(path):
        if entry.matches(name, version):
            raise PinRefusedError(
                f"refusing {what} {name}=={version}: {entry.reason}",
                where=where,
                hint=f"{name} {version} is listed in {path} (source: {entry.source}); "
                "pin another version in the recipe's [[pins]]",
            )


def refuse_known_bad(pin: Pin, *, where: str | None = None) -> None:
    check_known_bad(pin.name, pin.version, what="pin", where=where)


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




def _parse_stand_ins(path: Path, text: str, raw: list[Any]) -> tuple[StandIn, ...]:
    found: list[StandIn] = []
    for entry in raw:
        table = _check_table(path, text, "vendor.stand_in", entry, _types("vendor.stand_in"))
        where = _where(path, text, "vendor.stand_in", "url")
        missing = [key for key in required_keys(StandIn) if not str(table.get(key, "")).strip()]
        if missing:
            raise RecipeError(f"a [[vendor.stand_in]] entry lacks {', '.join(missing)}",
                              where=where, hint='give url, pinned (the tree\'s commit), used '
                              '(the commit built instead) and reason = "WHY"')
        pinned, used = table["pinned"].strip().lower(), table["used"].strip().lower()
        for key, value in (("pinned", pinned), ("used", used)):
            if not COMMIT.fullmatch(value):
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


def _parse_jit_cache(path: Path, text: str, table: Any) -> JitCacheInput | None:
    if table is None:
        return None
    where = _where(path, text, "flashinfer", "jit_cache")
    checked = _check_table(path, text, "flashinfer.jit_cache", table,
                           _types("flashinfer.jit_cache"))
    sha256 = str(checked.get("sha256", "")).lower()
    if not SHA256.fullmatch(sha256):
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


SERVER_MEMORY_HINT = ("give each build server's memory in GiB, as its `doctor --dist URL "
                      "--build-server DIR` prints it, such as 119.2")


def check_job_memory_gib(value: object, *, where: str | None,
                         error: type[SparkbuildError] = RecipeError,
                         name: str = "build.job_memory_gib",
                         hint: str = "give the memory one nvcc job may take, such as 6 (the "
                         "default)") -> float:
    """A memory budget per compile job (or another size named ``name``): a finite number
    of GiB above 0."""
    number = float(value) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else math.nan
    if not math.isfinite(number) or number <= 0:
        raise error(f"{name} must be a number of GiB above 0, not {value!r}", where=where,
                    hint=hint)
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
        if not isinstance(arch, str) or not ARCH.fullmatch(arch):
            raise RecipeError(f"target.cuda_archs: {arch!r} is not a CUDA arch", where=where,
                              hint=f'write MAJOR.MINOR with an optional a, f or +PTX, such '
                              f'as "{SPARK_ARCH}" (the DGX Spark)')
    return tuple(value)


def _parse_python(path: Path, text: str, value: Any) -> str:
    if value is None:
        return Target.python
    if not PYTHON_VERSION.fullmatch(value):
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
    known = {table.name for table in TOP_TABLES}
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
    for name in (t.name for t in TOP_TABLES if not t.array and required_keys(t.model)):
        if name not in data:
            raise RecipeError(
                f"missing table [{name}]", where=str(path), hint=f"add a [{name}] table"
            )
    tables = {
        table.name: _check_table(path, text, table.name, data.get(table.name, {}),
                                 _types(table.name))
        for table in TOP_TABLES if not table.array
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
            jobs=None if build.get("jobs", "auto") == "auto" else build["jobs"],
            job_memory_gib=check_job_memory_gib(
                build.get("job_memory_gib", BuildSettings.job_memory_gib),
                where=_where(path, text, "build", "job_memory_gib")),
            nvcc_threads=build.get("nvcc_threads"),
            env=_build_env(path, text, build.get("env", {})),
            compile_cache=build.get("compile_cache"),
            dist=build.get("dist"),
            dist_server_memory_gib=None if build.get("dist_server_memory_gib") is None
            else check_job_memory_gib(build["dist_server_memory_gib"], where=_where(
                path, text, "build", "dist_server_memory_gib"),
                name="build.dist_server_memory_gib", hint=SERVER_MEMORY_HINT),
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
