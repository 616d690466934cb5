"""Structured edit ``cuda-arch-lists``: every SM12x arch list compiles native 12.1.

vLLM's CMakeLists.txt lists, per kernel family and per CUDA-version branch, the archs it
compiles (``CUDA_SUPPORTED_ARCHS``, ``SCALED_MM_ARCHS``, ``FP4_SM120_ARCHS``...).  Where a
list names the SM12x family but no 12.1 entry, a TORCH_CUDA_ARCH_LIST=12.1 build quietly
compiles 12.0 code as a stand-in.  The lists differ between releases and branches, so a
line diff cannot carry this change; the edit instead:

1. finds every literal arch list with an entry of the target's major (12);
2. evaluates each with the tree's own ``cuda_archs_loose_intersection`` for the target
   (``sparkbuild.toolchain.archs.evaluate``, i.e. ``cmake -P``);
3. where the result is not native 12.1, inserts a 12.1 entry after each 12.0 entry with
   the same suffix (``12.0`` -> ``12.1``, ``12.0a`` -> ``12.1a``, ``12.0f`` -> ``12.1f``),
   so the 12.1 build gets what a 12.0 build gets;
4. evaluates the edited lists again and refuses the edit if any is still not native.

Lists with no SM12x entry are left alone: 12.1 does not belong in SM90- or SM100-only
kernels.  An empty plan (every SM12x list already native) is the already-applied test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbuild.errors import PatchError, RecipeError
from sparkbuild.patches.edits import EditPlan, FileChange, Params
from sparkbuild.toolchain.archs import ArchList, evaluate, find_arch_lists, is_native, parse_entry

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

KIND = "cuda-arch-lists"


def insertions(arch_list: ArchList, target: str) -> list[tuple[int, str]]:
    """(offset, text) pairs that add ``target`` entries mirroring the list's family base.

    The family base is the lowest arch of the target's major in the list (12.0 for 12.1);
    each of its entries gets a twin with the target arch and the same suffix.  A list with
    no such entry gets the plain target appended.
    """
    target_entry = parse_entry(target)
    assert target_entry is not None
    family = [e for e in arch_list.entries if e.major == target_entry.major]
    base = min((e.base for e in family), key=lambda b: tuple(int(p) for p in b.split(".")))
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


def insert(text: str, edits: list[tuple[int, str]]) -> str:
    for offset, addition in sorted(edits, reverse=True):
        text = text[:offset] + addition + text[offset:]
    return text


@dataclass(frozen=True)
class ArchListsEdit:
    file: str
    target: str

    def family_lists(self, text: str) -> list[ArchList]:
        target_entry = parse_entry(self.target)
        assert target_entry is not None
        return [lst for lst in find_arch_lists(text) if lst.has_major(target_entry.major)]

    def plan(self, tree: Path) -> EditPlan:
        path = tree / self.file
        if not path.is_file():
            raise PatchError(f"{self.file} not found in the tree", where=str(path))
        text = path.read_text(encoding="utf-8")
        lists = self.family_lists(text)
        if not lists:
            raise PatchError(
                f"no CUDA arch list in {self.file} names the SM{self.target[:2]}x family",
                where=str(path),
                hint="this tree predates SM12x support; the series cannot add it",
            )
        results = evaluate(tree, [lst.values for lst in lists], self.target)
        stale = [lst for lst, res in zip(lists, results, strict=True)
                 if not is_native(res, self.target)]
        if not stale:
            return EditPlan((), (f"all {len(lists)} SM12x arch lists already build {self.target}",))
        new_text = insert(text, [ins for lst in stale for ins in insertions(lst, self.target)])
        edited = self._verify(tree, new_text, {lst.line for lst in stale})
        notes = tuple(
            f"{self.file}:{old.line} {old.variable} \"{';'.join(old.values)}\" -> "
            f"\"{';'.join(new.values)}\""
            for old, new in zip(stale, edited, strict=True)
        )
        return EditPlan((FileChange(self.file, text, new_text),), notes)

    def _verify(self, tree: Path, new_text: str, lines: set[int]) -> list[ArchList]:
        """The edited lists, each checked to evaluate to native ``target`` now."""
        edited = [lst for lst in self.family_lists(new_text) if lst.line in lines]
        results = evaluate(tree, [lst.values for lst in edited], self.target)
        for lst, result in zip(edited, results, strict=True):
            if not is_native(result, self.target):
                raise PatchError(
                    f"{lst.describe()} still gives {';'.join(result) or 'nothing'} "
                    f"for {self.target} after adding {self.target} entries",
                    where=f"{tree / self.file}:{lst.line}",
                    hint="the tree's cuda_archs_loose_intersection has rules this edit "
                    "does not know; extend sparkbuild.patches.edits.arch_lists",
                )
        return edited


def from_params(params: Mapping[str, object], base: Path, origin: str) -> ArchListsEdit:
    del base  # the edit reads nothing beside its TOML file
    checked = Params(params, origin, {"file", "target"})
    target = checked.string("target", "12.1")
    entry = parse_entry(target)
    if entry is None or entry.suffix or entry.text != entry.base:
        raise RecipeError(f"target must be a plain arch like 12.1, not {target!r}", where=origin)
    return ArchListsEdit(file=checked.string("file", "CMakeLists.txt"), target=target)
