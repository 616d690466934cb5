"""Structured edit ``sm12x-family-guards``: kernel guards that let SM120 in let SM121 in too.

The arch lists are not the only gate.  vLLM 0.11.0 wraps its SM120 blockwise FP8 GEMM in
``enable_sm120_only``, whose body is compiled only ``#if defined __CUDA_ARCH__ &&
__CUDA_ARCH__ == 1200``: built for sm_121a (``__CUDA_ARCH__`` 1210) the kernel is empty or a
trap, with every arch list right.  Upstream later moved to an SM12x-family guard
(``__CUDA_ARCH__ >= 1200 && __CUDA_ARCH__ < 1300``, ``enable_sm120_family``).

The edit reads every ``#if``/``#elif``/``#ifdef`` under ``search`` (:mod:`.preprocessor`) and
evaluates it with the macros nvcc defines for sm_120a and for sm_121a.  A branch that holds
for sm_120a (or may: it also reads configuration macros) and not for sm_121a is a guard that
shuts the Spark out.  When the branch's body is code, its SM120 tests are widened to the
family:

* ``__CUDA_ARCH__ == 1200`` -> ``(__CUDA_ARCH__ >= 1200 && __CUDA_ARCH__ < 1300)``, and the
  same for ``__CUDA_ARCH_FAMILY_SPECIFIC__``;
* ``__CUDA_ARCH_SPECIFIC__ == 1200`` -> ``(... == 1200 || ... == 1210)``;
* ``defined(__CUDA_ARCH_FEAT_SM120_ALL)`` -> ``(defined(...SM120_ALL) || defined(...SM121_ALL))``;

and the widened condition is evaluated again (it must now hold for sm_121a).  When the body
only sets numbers (``#define``, ``__launch_bounds__``, ``constexpr`` tables) it is a tuning
table: performance, not correctness, so it is listed in ``details`` and left alone, as is
every tuning branch keyed on ``__CUDA_ARCH__ == 1200``.  Nothing to widen is the
already-applied test; the note names the family guards the tree already has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits.edit_plan import (
    C_SUFFIXES,
    SKIP_DIRS,
    EditContext,
    EditPlan,
    FileChange,
    Params,
)
from sparkbuild.patches.edits.preprocessor import (
    SM120A,
    SM121A,
    Branch,
    branches,
    evaluate,
    is_tuning,
)
from sparkbuild.records import Record, as_json
from sparkbuild.store.files import walk_files

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

KIND = "sm12x-family-guards"
MARKER = "/* sparkbuild: SM12x family, sm_121 too */"
_SM120_TEST = re.compile(r"__CUDA_ARCH\w*\s*[=!<>]=?\s*1200\b|__CUDA_ARCH_FEAT_SM120")
"""A test of an arch macro against SM120 (configuration macros like ENABLE_NVFP4_SM120 are not)."""
_KEYED_ON_1200 = re.compile(r"__CUDA_ARCH\w*\s*==\s*1200\b")
_WIDENINGS = (
    (re.compile(r"\b(__CUDA_ARCH__|__CUDA_ARCH_FAMILY_SPECIFIC__)\s*==\s*1200\b"),
     r"(\1 >= 1200 && \1 < 1300)"),
    (re.compile(r"\b__CUDA_ARCH_SPECIFIC__\s*==\s*1200\b"),
     r"(__CUDA_ARCH_SPECIFIC__ == 1200 || __CUDA_ARCH_SPECIFIC__ == 1210)"),
    (re.compile(r"\bdefined\s*\(?\s*__CUDA_ARCH_FEAT_SM120_ALL\b\s*\)?"),
     r"(defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL))"),
)


def shuts_out_sm121(condition: str) -> bool:
    """Holds (or may hold) for sm_120a and does not hold for sm_121a."""
    return evaluate(condition, SM120A) != 0 and evaluate(condition, SM121A) == 0


def admits_family(condition: str) -> bool:
    """An SM120 test that holds for sm_120a and sm_121a alike: a family guard."""
    return (_SM120_TEST.search(condition) is not None
            and evaluate(condition, SM120A) not in (0, None)
            and evaluate(condition, SM121A) not in (0, None))


def widen(condition: str) -> str:
    for pattern, replacement in _WIDENINGS:
        condition = pattern.sub(replacement, condition)
    return condition


@dataclass(frozen=True)
class Finding(Record):
    file: str
    branch: Branch = field(metadata=as_json(skip=True))

    @property
    def where(self) -> str:
        return f"{self.file}:{self.branch.line}"

    def json_extra(self) -> dict[str, Any]:
        return {"line": self.branch.line, "condition": self.branch.condition}


def _rewrite(text: str, branch: Branch, where: str) -> str:
    """The file with ``branch``'s condition widened (``#ifdef`` becomes ``#if``)."""
    head = text[branch.start:branch.condition_start]
    condition = text[branch.condition_start:branch.condition_end]
    if branch.directive in ("ifdef", "ifndef"):
        head = head[: head.rfind(branch.directive)] + ("if" if branch.directive == "ifdef"
                                                        else "if !")
        condition = (" defined(" if branch.directive == "ifdef" else "defined(") + \
            condition.strip() + ")"
    widened = widen(condition)
    if shuts_out_sm121(" ".join(widened.replace("\\\n", " ").split())):
        raise PatchError(
            f"a kernel guard lets sm_120 in and keeps sm_121 out, and this edit cannot widen "
            f"it: #{branch.directive} {branch.condition}",
            where=where,
            hint="widen it to the SM12x family by hand (__CUDA_ARCH__ >= 1200 && "
            "__CUDA_ARCH__ < 1300), or extend sparkbuild.patches.edits.family_guards",
        )
    return (text[:branch.start] + head + widened.rstrip() + " " + MARKER
            + text[branch.condition_end:])


@dataclass(frozen=True)
class FamilyGuardsEdit:
    search: str

    def sources(self, tree: Path) -> list[Path]:
        root = tree / self.search
        if not root.is_dir():
            raise PatchError(f"no {self.search}/ directory in the tree", where=str(root))
        return [p for p in walk_files(root, SKIP_DIRS) if p.suffix in C_SUFFIXES]

    def plan(self, tree: Path) -> EditPlan:
        changes: list[FileChange] = []
        widened: list[dict[str, Any]] = []
        family: list[Finding] = []
        tuning: list[dict[str, Any]] = []
        for path in self.sources(tree):
            data = path.read_bytes()
            if b"1200" not in data and b"SM120" not in data:
                continue
            text = data.decode("utf-8", errors="replace")
            relative = path.relative_to(tree).as_posix()
            new_text = text
            for branch in reversed(branches(text)):
                finding = Finding(relative, branch)
                if not _SM120_TEST.search(branch.condition):
                    continue
                if is_tuning(branch.body):
                    if not _KEYED_ON_1200.search(branch.condition):
                        continue
                    tuning.append({**finding.to_dict(),
                                   "covers_sm121": evaluate(branch.condition, SM121A) != 0})
                elif shuts_out_sm121(branch.condition):
                    new_text = _rewrite(new_text, branch, finding.where)
                    widened.append({**finding.to_dict(), "after": widen(branch.condition)})
                elif admits_family(branch.condition):
                    family.append(finding)
            if new_text != text:
                changes.append(FileChange(relative, text, new_text))
        widened.sort(key=lambda item: (item["file"], item["line"]))
        tuning.sort(key=lambda item: (item["file"], item["line"]))
        details = {"widened": widened, "family_guards": [f.to_dict() for f in family],
                   "tuning_left_alone": tuning}
        if changes:
            notes = tuple(f"{w['file']}:{w['line']} #if {w['condition']} -> {w['after']}"
                          for w in widened)
            return EditPlan(tuple(changes), notes + _tuning_note(tuning), details)
        if family:
            places = ", ".join(sorted({f.where for f in family}))
            note = f"the tree already guards its SM12x kernels by family ({places})"
        else:
            note = f"no kernel guard under {self.search}/ lets sm_120 in and keeps sm_121 out"
        return EditPlan((), (note, *_tuning_note(tuning)), details)


def _tuning_note(tuning: list[dict[str, Any]]) -> tuple[str, ...]:
    if not tuning:
        return ()
    places = ", ".join(f"{t['file']}:{t['line']}" for t in tuning)
    return (f"tuning keyed on SM120, left alone: {places}",)


def from_params(params: Mapping[str, object], base: Path, origin: str,
                context: EditContext) -> FamilyGuardsEdit:
    del base, context  # the guards are judged for sm_121a, the Spark's own target
    search = Params(params, origin, {"search"}).string("search", "csrc")
    if search.startswith("/") or ".." in search.split("/"):
        raise PatchError(f"search must be a directory in the tree, not {search!r}", where=origin)
    return FamilyGuardsEdit(search)
