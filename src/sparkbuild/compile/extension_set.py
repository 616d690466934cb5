"""Which of a tree's extensions a build needs, for the recipe's model and target, and why.

vLLM's setup.py lists every extension it can build, and its CMake fetches every external
project's source whether or not the build needs it.  A Spark serving one model needs few of
them.  The set is decided from the tree itself, each choice with its reason:

* **what CMake compiles at the target** (the tree's CMake recorded in script mode,
  fetched projects that define extension targets read too): a target whose CUDA units the
  arch lists give no ``-gencode`` for the target (vllm-flash-attn's ``_vllm_fa3_C`` at
  12.1a), or an empty target (``_flashmla_C`` where FlashMLA's arch list has no entry),
  compiles nothing a Spark can run;
* **what the served model imports** (:mod:`sparkbuild.sources.package_reach`): the modules a
  start loads from the recipe's start modules, the model's modules in the tree's registry
  (its draft's too, with speculative tokens) and the attention backend's module, each
  followed through its module-level imports.  An extension one of them imports is built; one
  imported only inside functions of modules the start does not reach (Kimi-K3's FlashKDA
  prefill, DeepGEMM behind ``importlib``) is left out, and so is the second of two
  extensions a module needs "one of" (``vllm_flash_attn`` needs ``_vllm_fa2_C`` or
  ``_vllm_fa3_C``) once the first serves.

An external project whose CMake file names only left-out extensions needs no source at its
pin: the build gets a placeholder (:mod:`sparkbuild.vendoring.placeholders`) holding what
the tree's CMake reads of it, recorded in the build's settings.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.checks.check_plan import gencodes
from sparkbuild.checks.code_forecast import followed_projects
from sparkbuild.checks.ext_targets import required_targets
from sparkbuild.checks.start_imports import setup_extensions
from sparkbuild.checks.target_code import ArchFact, target_arch_fact
from sparkbuild.console import info
from sparkbuild.errors import SparkbuildError, UsageError, VerifyError
from sparkbuild.records import Record, as_json
from sparkbuild.sources.model_registry import backend_module, model_modules
from sparkbuild.sources.module_imports import import_refusals
from sparkbuild.sources.package_reach import (
    ImportSite,
    PackageImports,
    Reach,
    reached,
    read_package,
    strongest,
)
from sparkbuild.vendoring.placeholders import Placeholder

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sparkbuild.recipe import Recipe
    from sparkbuild.store.context import RunContext
    from sparkbuild.toolchain.cmake_recorder import BuildRecord

_OUT_BY_ARCH: frozenset[ArchFact] = frozenset({"no_code", "empty", "undefined"})
SHOWN_SITES = 3


@dataclass(frozen=True)
class ExtensionChoice(Record):
    json_order: ClassVar[tuple[str, ...]] = ("name", "target")

    name: str
    """The dotted extension name of setup.py (``vllm.vllm_flash_attn._vllm_fa2_C``)."""
    built: bool
    reason: str
    arch: ArchFact
    units: int = 0
    """CUDA units of its target."""
    native_units: int = 0

    @property
    def target(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    def json_extra(self) -> dict[str, Any]:
        return {"target": self.target}


@dataclass(frozen=True)
class ModelRoots:
    """The served model's modules and the attention backend's, found in the tree."""

    architecture: str
    attention_backend: str
    modules: tuple[str, ...]
    notes: tuple[str, ...] = ()


@dataclass
class ExtensionSet(Record):
    json_order: ClassVar[tuple[str, ...]] = ("archs", "model", "targets")

    archs: tuple[str, ...]
    model: ModelRoots | None
    choices: list[ExtensionChoice] = field(metadata=as_json("extensions"))
    left_out_sources: list[Placeholder] = field(default_factory=list)
    """Sources only left-out extensions use: placeholders, not fetched."""
    notes: list[str] = field(default_factory=list)

    @property
    def targets(self) -> tuple[str, ...]:
        """The built extensions' last names, as ``--targets`` takes them."""
        return tuple(choice.target for choice in self.choices if choice.built)

    @property
    def error(self) -> SparkbuildError | None:
        """Built extensions that would compile no code for the target (every extension of
        a recipe without ``[model]`` is built), refused before the first compile."""
        refused = self.refused
        if not refused:
            return None
        named = ", ".join(f"{c.target} ({c.units} CUDA units)" for c in refused)
        return VerifyError(
            f"{named}: the tree's arch lists give no unit of it a -gencode for "
            f"{', '.join(self.archs)}, so it would compile no code a GPU of the target runs",
            hint="give the recipe a [model] (the extensions it needs are chosen), or name "
            "the extensions to build with --targets")

    @property
    def refused(self) -> list[ExtensionChoice]:
        """Built extensions whose units the arch lists give no code for the target."""
        return [choice for choice in self.choices if choice.built and choice.arch == "no_code"]

    def json_extra(self) -> dict[str, Any]:
        return {"targets": self.targets}

    def summary(self) -> list[str]:
        head = (f"for {self.model.architecture} ({self.model.attention_backend} attention) at "
                if self.model else "for every extension (the recipe has no [model]) at ")
        lines = [f"extensions {head}{', '.join(self.archs)}: {len(self.targets)} built of "
                 f"{len(self.choices)}"]
        for choice in self.choices:
            mark = "built" if choice.built else "left out"
            lines.append(f"  {mark:<8} {choice.target}: {choice.reason}")
        for source in self.left_out_sources:
            lines.append(f"  source {source.name}: not fetched ({source.reason}); a "
                         f"placeholder of {len(source.files)} file(s)")
        return lines + [f"  note: {note}" for note in self.notes]


# -- what CMake compiles ---------------------------------------------------------------------


def _arch_reason(fact: ArchFact, units: int, archs: str) -> str:
    return {
        "no_code": f"the tree's arch lists give none of its {units} CUDA unit(s) a -gencode "
                   f"for {archs}: it compiles no code a GPU of the target runs",
        "empty": f"the tree's CMake makes it an empty target at {archs}: nothing compiles",
        "undefined": "the tree's CMake defines no target of that name for a CUDA build",
    }.get(fact, "")


# -- what the model imports ------------------------------------------------------------------


def _extension_modules(name: str, target: str, record: BuildRecord,
                       imports: PackageImports) -> set[str]:
    """The extension's own module, and the packages its component installs that the tree's
    package does not hold (DeepGEMM's ``vllm.third_party.deep_gemm``)."""
    found = {name}
    for destination in record.installs.get(target, []):
        dotted = destination.strip("/").replace("/", ".")
        if dotted and "." in dotted and dotted not in imports.modules:
            found.add(dotted)
    return found


def _counted(site: ImportSite, reach: Reach) -> bool:
    """An import that runs when the start loads its module: module-level, or inside a
    function of a root (the platform's ``import_kernels``, the model's own methods)."""
    return site.module in reach.via and (site.kind != "lazy" or site.module in reach.roots)


def _sites_text(sites: Sequence[ImportSite]) -> str:
    places = list(dict.fromkeys(site.where for site in sites))
    shown = ", ".join(places[:SHOWN_SITES])
    return shown + (f" and {len(places) - SHOWN_SITES} more" if len(places) > SHOWN_SITES
                    else "")


def _one_of_groups(tree: Path, imports: PackageImports, reach: Reach,
                   lasts: Mapping[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    """(where, extensions) for each reached module that refuses to import without one of
    several extensions (``vllm_flash_attn``'s ``_vllm_fa2_C or _vllm_fa3_C``)."""
    groups = []
    for module in reach.via:
        relative = imports.modules[module]
        try:
            source = (tree / relative).read_bytes()
        except OSError:
            continue
        if b"ImportError" not in source:
            continue
        for line, message in import_refusals(source, relative):
            named = tuple(name for last, name in lasts.items()
                          if re.search(rf"\b{re.escape(last)}\b", message))
            if len(named) > 1:
                groups.append((f"{relative}:{line}", named))
    return groups


def _profile_note(tree: Path, sites: Sequence[ImportSite], profile: Mapping[str, str]) -> str:
    """``; the node profile sets V=0, which FILE reads`` when a lazy importer's file reads a
    variable the profile turns off."""
    off = {key for key, value in profile.items() if value.strip().lower() in ("0", "false")}
    for site in sites:
        try:
            text = (tree / site.path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for key in sorted(off):
            if re.search(rf"\b{re.escape(key)}\b", text):
                return f"; the node profile sets {key}={profile[key]}, which {site.path} reads"
    return ""


@dataclass(frozen=True)
class TreeFacts:
    """What the choice reads of the tree."""

    tree: Path
    record: BuildRecord
    imports: PackageImports


def _importers(name: str, facts: TreeFacts) -> list[ImportSite]:
    """Every import site of the extension (or of the packages its component installs)."""
    target = name.rsplit(".", 1)[-1]
    return facts.imports.importers_of(_extension_modules(name, target, facts.record,
                                                         facts.imports))


def _imported_at_top(name: str, facts: TreeFacts, reach: Reach) -> ImportSite | None:
    """An unguarded module-level import of the extension by a module the start loads:
    that module cannot be imported without it, whatever serves a "one of" refusal."""
    return next((site for site in _importers(name, facts)
                 if site.kind == "top" and _counted(site, reach)), None)


def _model_choice(name: str, facts: TreeFacts, reach: Reach,
                  served: Mapping[str, str], profile: Mapping[str, str]) -> tuple[bool, str]:
    sites = _importers(name, facts)
    counted = [site for site in sites if _counted(site, reach)]
    if name in served:
        return True, served[name]
    site = strongest(counted)
    if site is not None:
        how = {"top": "imports it", "guarded": "imports it (guarded)",
               "lazy": "imports it in a function the start calls"}[site.kind]
        return True, (f"{site.where} {how}; the start reaches {site.module} "
                      f"({' -> '.join(reach.chain(site.module))})")
    if sites:
        return False, (f"imported only where the start does not reach: {_sites_text(sites)}"
                       + _profile_note(facts.tree, sites, profile))
    return False, "no module of the package imports it"


def _served_groups(facts: TreeFacts, reach: Reach, names: Sequence[str],
                   facts_by_name: Mapping[str, ArchFact]
                   ) -> tuple[dict[str, str], dict[str, str]]:
    """For each "one of" refusal the start reaches, the first member that compiles for the
    target serves it, or, where none is known to, the first defined by a fetched project
    whose CMake was not read (not known to compile nothing): (served name -> reason, spare
    member -> why it is not needed)."""
    lasts = {name.rsplit(".", 1)[-1]: name for name in names}
    served: dict[str, str] = {}
    spare: dict[str, str] = {}
    for where, group in _one_of_groups(facts.tree, facts.imports, reach, lasts):
        usable = sorted((name for name in group if facts_by_name.get(name) not in _OUT_BY_ARCH),
                        key=lambda name: facts_by_name.get(name) == "fetched")
        if not usable:
            continue
        first = usable[0].rsplit(".", 1)[-1]
        members = ", ".join(name.rsplit(".", 1)[-1] for name in group)
        how = ("is the first that compiles something at the target"
               if facts_by_name.get(usable[0]) != "fetched" else
               "is the first not known to compile nothing at the target (defined by a "
               "fetched project whose CMake was not read)")
        served.setdefault(usable[0], f"{where} needs one of {members}; {first} {how}")
        for name in group:
            if name != usable[0]:
                spare.setdefault(name, f"{where} needs one of {members}, and {first} serves "
                                 "it")
    return served, {name: why for name, why in spare.items() if name not in served}


def choose_extensions(facts: TreeFacts, archs: tuple[str, ...], model: ModelRoots | None,
                      start_modules: tuple[str, ...], profile: Mapping[str, str]
                      ) -> ExtensionSet:
    """The extension set of the tree for the model (every extension when ``model`` is None)."""
    names = setup_extensions(facts.tree)
    codes = gencodes(facts.record, facts.tree)
    arch_text = ", ".join(archs)
    measured = {name: target_arch_fact(facts.record, facts.tree, name.rsplit(".", 1)[-1], archs,
                                       codes) for name in names}
    facts_by_name = {name: fact for name, (fact, _, _) in measured.items()}
    roots = tuple(dict.fromkeys([*start_modules, *(model.modules if model else ())]))
    reach = reached(facts.imports, roots, follow_lazy_in_roots=True)
    served, spare = (_served_groups(facts, reach, names, facts_by_name) if model
                     else ({}, {}))
    always = set(required_targets(facts.tree, ("",))) - {""}
    choices = []
    for name in names:
        fact, units, native = measured[name]
        if fact == "undefined":
            continue  # not an extension of a CUDA build (CPU or ROCm only)
        if name.rsplit(".", 1)[-1] in always:
            built, reason = True, "the tree's setup.py copies its output in every build"
        elif model is None:
            built, reason = True, "the recipe has no [model]: every extension is built"
            if fact in _OUT_BY_ARCH:
                reason = _arch_reason(fact, units, arch_text) + " (refused before the compile)"
        elif fact in _OUT_BY_ARCH:
            built, reason = False, _arch_reason(fact, units, arch_text)
        elif name in spare and _imported_at_top(name, facts, reach) is None:
            built, reason = False, f"not needed: {spare[name]}"
        else:
            built, reason = _model_choice(name, facts, reach, served, profile)
        choices.append(ExtensionChoice(name, built, reason, fact, units, native))
    return ExtensionSet(archs, model, choices, left_out_sources(facts, choices))


# -- the sources the left-out extensions alone need --------------------------------------------


def _declared_in(where: str) -> Path:
    return Path(where.rsplit(":", 1)[0]) if re.search(r":\d+$", where) else Path(where)


def _placeholder_files(record: BuildRecord, root: str) -> tuple[str, ...]:
    """Tree-relative paths under ``root`` that the recorded CMake reads: sources of its
    targets, and the files it reads (``file(READ)`` of a missing file is recorded)."""
    prefix = root.rstrip("/") + "/"
    paths = {source for source in record.sources() if source.startswith(prefix)}
    for skipped in record.skipped:
        kind, _, path = skipped.partition(": ")
        if kind.startswith("file(") and path.startswith(prefix):
            paths.add(path)
    return tuple(sorted(path[len(prefix):] for path in paths))


def left_out_sources(facts: TreeFacts, choices: Sequence[ExtensionChoice]
                     ) -> list[Placeholder]:
    """The external projects whose declaring CMake file names extensions, all left out."""
    by_target = {choice.target: choice for choice in choices}
    found: list[Placeholder] = []
    seen: set[str] = set()
    for declaration in facts.record.declarations:
        if declaration.name in seen:
            continue
        seen.add(declaration.name)
        path = _declared_in(declaration.where)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        named = [target for target in by_target if re.search(rf"\b{re.escape(target)}\b", text)]
        if not named or any(by_target[target].built for target in named):
            continue
        root = facts.record.fetches.get(declaration.name, {}).get("available", "")
        files = _placeholder_files(facts.record, root) if root else ()
        found.append(Placeholder(
            declaration.name, f"only {', '.join(named)} use it, and the build leaves "
            f"{'it' if len(named) == 1 else 'them'} out", files, tuple(named),
            declaration.where))
    return found


# -- reading the tree for a recipe -----------------------------------------------------------


def model_roots(tree: Path, package: str, recipe: Recipe) -> ModelRoots | None:
    """The served model's modules (registry) and the attention backend's, or None without
    ``[model]``.  What the tree does not map is a note, not a guess."""
    from sparkbuild.flashinfer.model_config import resolve_model

    if recipe.model is None:
        return None
    model = resolve_model(recipe.model, str(recipe.path))
    draft = model.speculative_tokens > 0 or model.mtp_layers > 0
    entries = model_modules(tree, package, model.architecture, draft=draft)
    notes = [f"{entry.name}: {entry.module} ({entry.where})" for entry in entries]
    if not entries:
        notes.append(f"the tree's model registry maps no module to {model.architecture}")
    backend = backend_module(tree, package, model.attention_backend)
    if backend is None:
        notes.append(f"the tree's attention backends name no {model.attention_backend}")
    else:
        notes.append(f"{backend.name} attention: {backend.module} ({backend.where})")
    modules = tuple(entry.module for entry in entries) + ((backend.module,) if backend else ())
    return ModelRoots(model.architecture, model.attention_backend, modules, tuple(notes))


def read_tree(tree: Path, recipe: Recipe, work: Path, *,
              sources: Mapping[str, Path] | None = None) -> TreeFacts:
    """The tree's CMake recorded for the recipe's target (``sources``: fetched projects at
    hand, FetchContent name -> directory; the others read as empty) and its package's
    imports."""
    from dataclasses import replace

    from sparkbuild.checks.check_plan import make_recorder
    from sparkbuild.toolchain import tools
    from sparkbuild.toolchain.cmake_recorder import record_build

    given = dict(sources or {})
    recorder = make_recorder(tools.find_nvcc(), recipe)
    # every target is wanted, so a FATAL_ERROR (qutlass.cmake's, with CUTLASS's headers
    # not at hand) is recorded and the file read on
    inputs = replace(recorder.inputs_any_torch(tree, work / "cmake"),
                     fetch_sources=given, stop_at_fatal=False,
                     follow_fetched=followed_projects(given, setup_extensions(tree)))
    record = record_build(inputs, partial_ok=True)
    return TreeFacts(tree, record, read_package(tree, recipe.package))


def extension_set_for(tree: Path, recipe: Recipe, work: Path, *,
                      profile: Mapping[str, str],
                      sources: Mapping[str, Path] | None = None) -> ExtensionSet:
    """The extension set of ``tree`` for the recipe (see the module docstring)."""
    facts = read_tree(tree, recipe, work, sources=sources)
    return choose_extensions(facts, recipe.target.cuda_archs,
                             model_roots(tree, recipe.package, recipe),
                             recipe.node.start_modules, profile)


def list_targets(recipe: Recipe, tree: Path | None, context: RunContext, *,
                 profile: Mapping[str, str]) -> ExtensionSet:
    """``check --list-targets``: the set for the recipe, on ``tree`` or on the recipe's
    source prepared (series applied) in the cache's work directory, afresh each run (the
    tree an earlier run prepared there is removed first)."""
    work = context.cache().root / "work" / recipe.name / "list-targets"
    if tree is None:
        import shutil

        from sparkbuild.patches.prepare import prepare_tree

        shutil.rmtree(work / "tree", ignore_errors=True)
        prepared = prepare_tree(recipe.source.spec, work / "tree", recipe, context=context)
        if prepared.error is not None:
            raise prepared.error
        tree = prepared.tree
    _refuse_unusable_tree(tree.resolve())
    return extension_set_for(tree.resolve(), recipe, work, profile=profile)


def _refuse_unusable_tree(tree: Path) -> None:
    """A tree the set cannot be read from: not a directory with a CMakeLists.txt, or a
    setup.py that lists no CMake extension (nothing to choose from)."""
    if not (tree / "CMakeLists.txt").is_file():
        raise UsageError("not a source tree with a CMakeLists.txt", where=str(tree),
                         hint="pass the directory `sparkbuild prepare --dest` wrote, or leave "
                         "out --tree: the recipe's source is prepared in the cache")
    if not setup_extensions(tree):
        raise UsageError("the tree's setup.py lists no CMakeExtension: there is no extension "
                         "to choose", where=str(tree / "setup.py"),
                         hint="pass a vLLM tree (its setup.py lists the extensions it builds)")


def placeholders_for(recipe: Recipe, *, profile: Mapping[str, str]
                     ) -> Callable[[Path], tuple[Placeholder, ...]] | None:
    """For ``bundle``: the placeholders of a prepared tree, chosen as ``wheel`` chooses them
    (``profile``: the node profile the recipe declares; None without ``[model]``: every
    source is bundled)."""
    if recipe.model is None:
        return None

    def choose(tree: Path) -> tuple[Placeholder, ...]:
        with tempfile.TemporaryDirectory(prefix="sparkbuild-extensions-") as scratch:
            chosen = extension_set_for(tree, recipe, Path(scratch), profile=profile)
        for line in chosen.summary():
            info(line)
        return tuple(chosen.left_out_sources)

    return choose
