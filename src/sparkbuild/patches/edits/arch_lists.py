"""Structured edit ``cuda-arch-lists``: the tree's arch arithmetic gives the Spark its own code.

vLLM's CMake lists, per kernel family and per CUDA-version branch, the archs it compiles
(``CUDA_SUPPORTED_ARCHS``, ``SCALED_MM_ARCHS``, ``FP4_SM120_ARCHS``, QuTLASS's in
``cmake/external_projects``, ``cuda_archs_sm90plus``'s in ``cmake/utils.cmake``...).  The
criterion, for the recipe's target (``12.1a``) at each CUDA version the tree distinguishes
(:mod:`sparkbuild.toolchain.arch_eval`, the tree's own arithmetic through ``cmake -P``):

* ``CUDA_ARCHS`` (the supported list of the branch taken, cut by the target) holds native
  12.1 code, not a 12.0 stand-in;
* every list with an arch- or family-specific SM12x entry (``12.0a``, ``12.0f``...) gives
  ``12.1a``, ``12.1f`` or ``12.0f`` -- code with the SM12x features (block-scaled MMA, the
  E2M1 conversion) that runs on sm_121 -- and never plain ``12.0`` or ``12.1``, for which
  CUTLASS compiles its FP4 kernels to a trap; a list with plain SM12x entries only gives
  native 12.1.  For a plain target (``12.1`` with ``allow_plain_sm121``) every list need only
  give native 12.1: such a build knowingly loses the arch-specific kernels.

* every other list that gives the target anything gives native 12.1 code: a list such as
  vLLM's ``MARLIN_ARCHS "8.0+PTX"`` (the tree's helper lets a ``+PTX`` entry match across
  majors) gives ``8.0+PTX`` at 12.1a -- PTX only, JIT-compiled by the driver on every node
  at first use.  Such a list gets the recipe's target (``12.1a``) appended, which every
  helper seen matches exactly (old ones by version, new ones by suffix), so its kernels get
  SASS for the Spark.  ``keep_ptx`` (the edit's TOML) names
  lists left PTX-only on purpose, each with the reason (a kernel that does not compile for
  the target); those need ``allow_jit``.

Where a list misses, the edit adds the 12.1 twin of each of its family-base entries (``12.0``
-> ``12.1``, ``12.0a`` -> ``12.1a``, ``12.0f`` -> ``12.1f``), supported lists first (they
move ``CUDA_ARCHS``), evaluates again, and refuses the edit if anything still misses.  Lists
that give the target nothing (``9.0a``) are never touched.  An empty plan (the criterion
already holds) is the already-applied test.  ``details`` reports every SM12x list's value and
every list that gave the target no native code, before and after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import PatchError, RecipeError
from sparkbuild.patches.edits.edit_plan import EditContext, EditPlan, FileChange, Params
from sparkbuild.toolchain.arch_eval import (
    Evaluation,
    Verdicts,
    distinct_verdicts,
    evaluate_tree,
    version_key,
)
from sparkbuild.toolchain.archs import (
    ArchList,
    TreeLists,
    entry_for,
    is_native,
    parse_entry,
    tree_arch_lists,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

KIND = "cuda-arch-lists"
MAX_ROUNDS = 3
"""Supported lists first, then the lists their new CUDA_ARCHS still misses, then a check."""


def insertions(arch_list: ArchList, target: str) -> list[tuple[int, str]]:
    """(offset, text) pairs that add ``target`` entries mirroring the list's family base.

    The family base is the lowest arch of the target's major in the list (12.0 for 12.1);
    each of its entries gets a twin with the target arch and the same suffix.  A list with
    no such entry gets the plain target appended.
    """
    target_entry = parse_entry(target)
    assert target_entry is not None
    family = [e for e in arch_list.entries if e.major == target_entry.major]
    if not family:  # no entry of the target's major: the plain target, appended
        return appended(arch_list, target)
    base = min((e.base for e in family), key=version_key)
    present = set(arch_list.values)
    result = []
    for entry in family:
        if entry.base != base:
            continue
        twin = target + entry.text[len(entry.base):]
        if twin not in present:
            result.append((entry.start + len(entry.text), ";" + twin))
            present.add(twin)
    if not result:
        last = arch_list.entries[-1]
        result.append((last.start + len(last.text), ";" + target))
    return result


def appended(arch_list: ArchList, entry: str) -> list[tuple[int, str]]:
    """(offset, text) that appends ``entry`` to a list (``"8.0+PTX"`` -> ``"8.0+PTX;12.1a"``)."""
    last = arch_list.entries[-1]
    return [(last.start + len(last.text), ";" + entry)]


def insert(text: str, edits: list[tuple[int, str]]) -> str:
    for offset, addition in sorted(edits, reverse=True):
        text = text[:offset] + addition + text[offset:]
    return text


def spark_target(targets: Sequence[str], base: str) -> str:
    """The recipe's entry for ``base`` (``12.1a`` of ``["9.0a", "12.1a"]``), without +PTX."""
    found = entry_for(targets, base)
    if found is not None:
        return found
    raise PatchError(
        f"the recipe's targets ({', '.join(targets) or 'none'}) hold no {base} arch",
        hint=f"this series builds for DGX Spark: target {base}a (cuda_archs under [target])",
    )


def list_problem(arch_list: ArchList, result: Sequence[str], target: str) -> str | None:
    """Why ``result`` (what ``arch_list`` gives at one CUDA version) misses the criterion."""
    wanted = parse_entry(target)
    assert wanted is not None
    gives = ";".join(result) or "nothing"
    if not (wanted.specific and arch_list.has_specific(wanted.major)):
        if is_native(result, wanted.base):
            return None
        return f"gives {gives}, no native {wanted.base} code"
    family = [e for e in (parse_entry(r) for r in result) if e and e.major == wanted.major]
    good = [e for e in family if e.specific and (
        e.base == wanted.base or (e.suffix == "f" and version_key(e.base) <= version_key(
            wanted.base)))]
    plain = [e.text for e in family if not e.specific]
    if plain:
        return (f"gives plain {', '.join(plain)}: CUTLASS compiles its arch-specific kernels "
                "to a trap there")
    if not good:
        return f"gives {gives}, not {wanted.base}a, {wanted.base}f or {wanted.major}.0f"
    return None


@dataclass(frozen=True)
class Miss:
    index: int
    """Index into TreeLists.lists; for a CUDA_ARCHS miss, the supported list's."""
    cuda: str
    problem: str
    add: str | None = None
    """For a list without an SM12x entry: the entry to append, the recipe's (``12.1a``)."""


def jit_only(result: Sequence[str], base: str) -> bool:
    """True when a list gives the target something, but no native ``base`` code."""
    return bool(result) and not is_native(result, base)


def misses(found: TreeLists, evaluations: Sequence[Evaluation], target: str, base: str,
           keep_ptx: Sequence[str] = ()) -> list[Miss]:
    found_misses = []
    for evaluation in evaluations:
        if not is_native(evaluation.cuda_archs, base):
            archs = ";".join(evaluation.cuda_archs) or "nothing"
            where = evaluation.supported if evaluation.supported is not None else -1
            found_misses.append(Miss(where, evaluation.cuda,
                                     f"CUDA_ARCHS is {archs}: no native {base} code"))
        major = int(base.split(".")[0])
        for index, result in evaluation.results.items():
            arch_list = found.lists[index]
            if arch_list.has_major(major):
                problem = list_problem(arch_list, result, target)
                if problem is not None:
                    found_misses.append(Miss(index, evaluation.cuda, problem))
            elif jit_only(result, base) and arch_list.variable not in keep_ptx:
                found_misses.append(Miss(
                    index, evaluation.cuda,
                    f"gives {';'.join(result)}: no native {base} code, the driver "
                    "JIT-compiles its PTX on the node",
                    target))
    return found_misses


def _key(found: TreeLists, index: int) -> tuple[str, int]:
    """A list's identity across edits: its file and its rank in that file."""
    arch_list = found.lists[index]
    rank = [lst for lst in found.lists if lst.file == arch_list.file].index(arch_list)
    return arch_list.file, rank


@dataclass(frozen=True)
class ArchListsEdit:
    file: str
    base: str
    """The Spark's arch, 12.1: its native code is what the lists must give."""
    context: EditContext
    keep_ptx: dict[str, str] = field(default_factory=dict)
    """List variable -> why its kernels stay PTX-only at the target (they do not compile)."""
    root_is_optional: bool = False
    """For a vendored dependency: a tree with no SM12x list is nothing to do, not an error."""
    utils: Path | None = None
    """The helper to evaluate with when the tree has no cmake/utils.cmake of its own."""

    def plan(self, tree: Path) -> EditPlan:
        if not (tree / self.file).is_file():
            raise PatchError(f"{self.file} not found in the tree", where=str(tree / self.file))
        target = spark_target(self.context.targets, self.base)
        major = int(self.base.split(".")[0])
        found = tree_arch_lists(tree, self.file)
        if self.root_is_optional and not any(lst.has_major(major) for lst in found.lists) and (
                not any("+PTX" in ";".join(lst.values) for lst in found.lists)):
            return EditPlan((), ("no CUDA arch list to give the target code",),
                            {"targets": list(self.context.targets), "lists": []})
        if not any(lst.has_major(major) for lst in found.lists):
            raise PatchError(
                f"no CUDA arch list in {self.file} or the files it includes names the "
                f"SM{major}x family",
                where=str(tree / self.file),
                hint="this tree predates SM12x support; the series cannot add it",
            )
        verdicts = distinct_verdicts(tree, found.lists, self.context.toolchain_cuda(),
                                     utils=self.utils)
        targets = self.context.targets
        before = evaluate_tree(tree, found, targets, verdicts, utils=self.utils)
        after_found, after = self._fix(tree, found, before, verdicts, target)
        details = report(found, before, after_found, after, targets, verdicts, self.base)
        if self.keep_ptx:
            details["kept_ptx"] = dict(self.keep_ptx)
        cudas = ", ".join(v.cuda for v in verdicts)
        if after_found is found:
            return EditPlan((), (f"every SM{major}x arch list gives {target} code "
                                 f"(CUDA {cudas})",), details)
        changes = tuple(FileChange(name, found.texts[name], text)
                        for name, text in after_found.texts.items()
                        if text != found.texts[name])
        notes = tuple(
            f"{new.where} {new.variable} \"{';'.join(old.values)}\" -> \"{';'.join(new.values)}\""
            for old, new in zip(found.lists, after_found.lists, strict=True)
            if old.values != new.values
        )
        return EditPlan(changes, notes, details)

    def _fix(self, tree: Path, found: TreeLists, evaluations: list[Evaluation],
             verdicts: Sequence[Verdicts], target: str) -> tuple[TreeLists, list[Evaluation]]:
        twinned: set[tuple[str, int]] = set()
        current, current_evals = found, evaluations
        for _ in range(MAX_ROUNDS):
            missed = misses(current, current_evals, target, self.base, tuple(self.keep_ptx))
            if not missed:
                return current, current_evals
            supported = [m for m in missed if m.index >= 0 and current.lists[m.index].supported]
            chosen = supported or [m for m in missed if m.index >= 0]
            fresh = {m.index for m in chosen if _key(current, m.index) not in twinned}
            if not fresh:
                self._refuse(tree, current, missed)
            texts = dict(current.texts)
            native = {m.index: m.add for m in chosen if m.add is not None}
            for name in {current.lists[i].file for i in fresh}:
                edits = [ins for i in sorted(fresh) if current.lists[i].file == name
                         for ins in (appended(current.lists[i], native[i]) if i in native
                                     else insertions(current.lists[i], self.base))]
                texts[name] = insert(texts[name], edits)
            twinned |= {_key(current, i) for i in fresh}
            current = tree_arch_lists(tree, self.file, texts=texts)
            current_evals = evaluate_tree(tree, current, self.context.targets, verdicts,
                                          utils=self.utils)
        missed = misses(current, current_evals, target, self.base, tuple(self.keep_ptx))
        if missed:
            self._refuse(tree, current, missed)
        return current, current_evals

    def _refuse(self, tree: Path, current: TreeLists, missed: list[Miss]) -> None:
        first = missed[0]
        if first.index < 0:
            raise PatchError(
                f"at CUDA {first.cuda}, {first.problem}, and the tree has no supported list "
                "to add it to", where=str(tree / self.file),
                hint="the tree cuts CUDA_ARCHS in a way this edit does not know",
            )
        arch_list = current.lists[first.index]
        raise PatchError(
            f"at CUDA {first.cuda}, {arch_list.describe()}: {first.problem}, even with "
            f"{self.base} entries added",
            where=str(tree / arch_list.where),
            hint="the tree's cuda_archs_loose_intersection has rules this edit does not know; "
            "extend sparkbuild.patches.edits.arch_lists",
        )


def report(before_found: TreeLists, before: Sequence[Evaluation], after_found: TreeLists,
           after: Sequence[Evaluation], targets: Sequence[str], verdicts: Sequence[Verdicts],
           base: str = "12.1") -> dict[str, Any]:
    """``details`` of the outcome: CUDA_ARCHS, every SM12x list and every list that gave the
    target no native code (a PTX-only fallback), before and after, per CUDA version
    (versions that give the same are merged)."""
    rows: dict[tuple[Any, ...], list[str]] = {}
    for old, new in zip(before, after, strict=True):
        key: tuple[Any, ...] = ("CUDA_ARCHS", None, None, None, None, old.cuda_archs,
                                new.cuda_archs)
        rows.setdefault(key, []).append(old.cuda)
        for index, result in old.results.items():
            old_list, new_list = before_found.lists[index], after_found.lists[index]
            if not old_list.has_major(12) and not jit_only(result, base) and (
                    not jit_only(new.results.get(index, ()), base)):
                continue
            key = (old_list.variable, old_list.file, old_list.line, ";".join(old_list.values),
                   ";".join(new_list.values), result, new.results.get(index, ()))
            rows.setdefault(key, []).append(old.cuda)
    lists: list[dict[str, Any]] = []
    cuda_archs: list[dict[str, Any]] = []
    for (variable, file, line, source, source_after, value, value_after), cudas in rows.items():
        row: dict[str, Any] = {"cuda": cudas, "before": list(value), "after": list(value_after)}
        if file is None:
            cuda_archs.append(row)
        else:
            lists.append({"variable": variable, "file": file, "line": line, "source": source,
                          "source_after": source_after, **row})
    return {"targets": list(targets), "cuda_versions": [v.cuda for v in verdicts],
            "cuda_archs": cuda_archs, "lists": lists}


def from_params(params: Mapping[str, object], base: Path, origin: str,
                context: EditContext) -> ArchListsEdit:
    del base  # the edit reads nothing beside its TOML file
    checked = Params(params, origin, {"file", "target", "keep_ptx"})
    spark = checked.string("target", "12.1")
    entry = parse_entry(spark)
    if entry is None or entry.suffix or entry.text != entry.base:
        raise RecipeError(f"target must be a plain arch like 12.1, not {spark!r}", where=origin)
    keep = params.get("keep_ptx", {})
    if not isinstance(keep, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in keep.items()):
        raise RecipeError("keep_ptx must be a table of list variable = \"why it stays PTX\"",
                          where=origin)
    return ArchListsEdit(file=checked.string("file", "CMakeLists.txt"), base=spark,
                         context=context, keep_ptx=dict(keep))
