"""Ask a tree's own CMake what its arch lists give, for a target and a CUDA version.

The arithmetic is the tree's: ``build_tools/arch_eval.cmake`` ``include()``s the tree's
``cmake/utils.cmake`` and calls its ``cuda_archs_loose_intersection``, in script mode
(``cmake -P``), the way the configure would:

1. the supported list of the branch the CUDA version takes (``CUDA_SUPPORTED_ARCHS``) cuts
   the target (TORCH_CUDA_ARCH_LIST without ``+PTX``, as vLLM's
   ``extract_unique_cuda_archs_ascending`` reads it) into ``CUDA_ARCHS``;
2. every other list live at that CUDA version is cut by ``CUDA_ARCHS``.

Which lists are live is decided by CMake too: each ``if()`` condition around a list is split
at its top-level ``AND``; the parts that test ``CMAKE_CUDA_COMPILER_VERSION`` alone are
evaluated with that version set, and any other part (``VLLM_GPU_LANG STREQUAL "CUDA"``,
``SCALED_MM_ARCHS``...) is taken as possibly true.  The CUDA versions tried are the tree's
own thresholds and the minor release after each (at least the first CUDA that targets
sm_121), plus the toolchain's; versions that take the same branches everywhere count once.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.errors import PatchError, ToolchainError
from sparkbuild.proc import run
from sparkbuild.toolchain.archs import (
    ARCH_EVAL_SCRIPT,
    UTILS_CMAKE,
    VERSION_VARIABLE,
    ArchList,
    TreeLists,
)
from sparkbuild.toolchain.tools import MIN_NVCC_FOR_SM121, find_cmake

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

_OUTPUT = re.compile(r"^sparkbuild-arch (cond|archs|list) (\d+):(.*)$", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONDITION_WORDS = frozenset({
    "AND", "OR", "NOT", "DEFINED", "EQUAL", "LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL",
    "STREQUAL", "STRLESS", "STRGREATER", "VERSION_EQUAL", "VERSION_LESS", "VERSION_GREATER",
    "VERSION_LESS_EQUAL", "VERSION_GREATER_EQUAL", "MATCHES", "TRUE", "FALSE", "ON", "OFF",
    VERSION_VARIABLE,
})


def version_thresholds(conditions: Sequence[str]) -> list[str]:
    """The CUDA versions the tree's conditions compare ``CMAKE_CUDA_COMPILER_VERSION`` with."""
    found: set[str] = set()
    pattern = re.compile(r"VERSION_\w+\s+\"?(\d+(?:\.\d+)*)")
    for condition in conditions:
        if VERSION_VARIABLE in condition:
            found.update(pattern.findall(condition))
    return sorted(found, key=version_key)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def next_minor(version: str) -> str:
    """``12.8`` -> ``12.9``, ``13.0`` -> ``13.1``: a version just past a threshold."""
    parts = [*(int(part) for part in version.split(".")[:2]), 0]
    return f"{parts[0]}.{parts[1] + 1}"


def cmake_program() -> str:
    """The cmake doctor would pick: the venv's (pip's, newest) before the one on PATH."""
    tool = find_cmake()
    if tool is None:
        raise ToolchainError(
            "cmake not found", hint="pip install cmake (or put cmake >= 3.20 on PATH)"
        )
    return str(tool.path)


# -- conditions ----------------------------------------------------------------------------


def conjuncts(condition: str) -> list[str]:
    """``condition`` split at its top-level ``AND`` (parentheses and quotes respected)."""
    parts: list[str] = []
    depth, start, index = 0, 0, 0
    quoted = False
    while index < len(condition):
        char = condition[index]
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif (not quoted and depth == 0 and condition.startswith("AND", index)
              and (index == 0 or not condition[index - 1].isalnum())
              and not condition[index + 3:index + 4].isalnum()
              and condition[index + 3:index + 4] != "_"):
            parts.append(condition[start:index].strip())
            start = index + 3
            index += 3
            continue
        index += 1
    parts.append(condition[start:].strip())
    return [part for part in parts if part]


def reads_version_only(conjunct: str) -> bool:
    """True when the part reads nothing but ``CMAKE_CUDA_COMPILER_VERSION`` and constants."""
    if VERSION_VARIABLE not in conjunct:
        return False
    words = set(_WORD.findall(re.sub(r'"[^"]*"', "", conjunct)))
    return words <= _CONDITION_WORDS


def version_conjuncts(lists: Iterable[ArchList]) -> list[str]:
    found: dict[str, None] = {}
    for arch_list in lists:
        for guard in arch_list.guards:
            for condition in (*guard.previous, guard.condition or ""):
                for part in conjuncts(condition):
                    if reads_version_only(part):
                        found[part] = None
    return list(found)


@dataclass(frozen=True)
class Verdicts:
    """What each version-only condition part gives at one CUDA version."""

    cuda: str
    values: dict[str, bool]

    def possible(self, condition: str) -> bool:
        return all(self.values[p] for p in conjuncts(condition) if reads_version_only(p))

    def certain(self, condition: str) -> bool:
        parts = conjuncts(condition)
        return bool(parts) and all(reads_version_only(p) and self.values[p] for p in parts)

    def live(self, arch_list: ArchList) -> bool:
        """Whether the branches around ``arch_list`` may be taken at this CUDA version."""
        for guard in arch_list.guards:
            if guard.condition is not None and not self.possible(guard.condition):
                return False
            if any(self.certain(previous) for previous in guard.previous):
                return False
        return True


# -- running cmake -------------------------------------------------------------------------


def _bracket(text: str) -> str:
    equals = "="
    while f"]{equals}]" in text:
        equals += "="
    return f"[{equals}[{text}]{equals}]"


def tree_utils(tree: Path, utils: Path | None = None) -> Path:
    """The helper file to evaluate ``tree``'s lists with: its own cmake/utils.cmake, else
    ``utils`` (the including tree's, for a vendored dependency that uses its helper)."""
    own = tree / UTILS_CMAKE
    return utils if utils is not None and not own.is_file() else own


def _run(tree: Path, requests: list[str], utils_file: Path | None = None
         ) -> list[tuple[str, int, list[str]]]:
    utils = tree_utils(tree, utils_file)
    if not utils.is_file():
        raise PatchError(
            "the tree has no cmake/utils.cmake to evaluate its arch lists with",
            where=str(utils),
            hint="is this a vLLM source tree?",
        )
    with tempfile.TemporaryDirectory(prefix="sparkbuild-archs-") as scratch:
        request_file = Path(scratch) / "requests.cmake"
        request_file.write_text("\n".join(requests) + "\n", encoding="utf-8")
        result = run(
            [cmake_program(), f"-DUTILS={utils}", f"-DREQUESTS={request_file}", "-P",
             str(ARCH_EVAL_SCRIPT)],
            echo=False, check=False, timeout=120,
        )
    if result.returncode != 0:
        raise PatchError(
            "cmake could not evaluate the tree's arch lists",
            where=str(utils),
            hint=f"cmake said:\n{result.output.strip()[-2000:]}",
        )
    return [(kind, int(number), [e for e in value.strip().split(",") if e])
            for kind, number, value in _OUTPUT.findall(result.output)]


def _verdicts(tree: Path, parts: list[str], versions: list[str], utils: Path | None = None
              ) -> list[Verdicts]:
    if not parts:
        return [Verdicts(version, {}) for version in versions]
    requests = []
    for v_index, version in enumerate(versions):
        requests.append(f"sparkbuild_version({_bracket(version)})")
        requests += [f"sparkbuild_condition({v_index * len(parts) + p_index} {_bracket(part)})"
                     for p_index, part in enumerate(parts)]
    found = {number: values == ["1"] for kind, number, values in _run(tree, requests, utils)
             if kind == "cond"}
    if len(found) != len(parts) * len(versions):
        raise PatchError("cmake did not evaluate every condition", where=str(ARCH_EVAL_SCRIPT))
    return [Verdicts(version, {part: found[v * len(parts) + p] for p, part in enumerate(parts)})
            for v, version in enumerate(versions)]


def candidate_versions(lists: Sequence[ArchList], toolchain: str | None) -> list[str]:
    """The CUDA versions worth trying: the tree's thresholds and the release after each."""
    conditions = [c for lst in lists for g in lst.guards for c in (*g.previous, g.condition or "")]
    found = {v for t in version_thresholds(conditions) for v in (t, next_minor(t))}
    if toolchain:
        found.add(toolchain)
    floor = version_key(str(MIN_NVCC_FOR_SM121))
    kept = sorted((v for v in found if version_key(v) >= floor), key=version_key)
    return kept or [toolchain or str(MIN_NVCC_FOR_SM121)]


def distinct_verdicts(tree: Path, lists: Sequence[ArchList], toolchain: str | None,
                      utils: Path | None = None) -> list[Verdicts]:
    """One :class:`Verdicts` per set of branches some CUDA version takes (the toolchain's
    version stands for its set when given, else the lowest)."""
    versions = candidate_versions(lists, toolchain)
    parts = version_conjuncts(lists)
    seen: dict[tuple[bool, ...], Verdicts] = {}
    for verdict in _verdicts(tree, parts, versions, utils):
        key = tuple(verdict.values[p] for p in parts)
        if key not in seen or verdict.cuda == toolchain:
            seen[key] = verdict
    return sorted(seen.values(), key=lambda v: version_key(v.cuda))


@dataclass(frozen=True)
class Evaluation:
    """The tree's arithmetic at one CUDA version."""

    cuda: str
    cuda_archs: tuple[str, ...]
    """What the supported list leaves of the target (the target itself if there is none)."""
    supported: int | None
    """Index of the supported list taken, if any."""
    results: dict[int, tuple[str, ...]]
    """Index of each live list -> what it gives."""


def supported_value(found: TreeLists, live: Sequence[int]) -> list[str]:
    """What the supported variable holds after the live ``set()`` and ``list(APPEND)`` of
    it (indices in file order): the last ``set()`` that runs, then every append after it
    (vllm-flash-attn appends 10.0;11.0;12.0 to 8.0;8.6;8.9;9.0 at CUDA 13)."""
    sets = [i for i in live if not found.lists[i].appended]
    start = live.index(sets[-1]) if sets else 0
    return [value for i in live[start:] for value in found.lists[i].values]


def evaluate_tree(tree: Path, found: TreeLists, targets: Sequence[str],
                  verdicts: Sequence[Verdicts], utils: Path | None = None) -> list[Evaluation]:
    """The tree's arithmetic for ``targets`` at each CUDA version of ``verdicts``; ``utils``:
    the helper when the tree has none of its own (:func:`tree_utils`)."""
    target = [t.removesuffix("+PTX") for t in targets]
    requests: list[str] = []
    plans: list[tuple[Verdicts, int | None, list[int]]] = []
    for number, verdict in enumerate(verdicts):
        live = [i for i, lst in enumerate(found.lists) if verdict.live(lst)]
        supported = [i for i in live if found.lists[i].supported]
        chosen = supported[-1] if supported else None
        others = [i for i in live if not found.lists[i].supported]
        plans.append((verdict, chosen, others))
        requests.append(f"sparkbuild_target({_bracket(';'.join(target))})")
        if chosen is not None:
            values = ";".join(supported_value(found, supported))
            requests.append(f"sparkbuild_supported({number} {_bracket(values)})")
        else:
            requests.append(f"sparkbuild_report_archs({number})")
        requests += [f"sparkbuild_list({number * len(found.lists) + i} "
                     f"{_bracket(';'.join(found.lists[i].values))})" for i in others]
    output = _run(tree, requests, utils) if requests else []
    archs = {n: tuple(v) for kind, n, v in output if kind == "archs"}
    lists = {n: tuple(v) for kind, n, v in output if kind == "list"}
    evaluations = []
    for number, (verdict, chosen, others) in enumerate(plans):
        if number not in archs:
            raise PatchError("cmake did not evaluate every arch list",
                             where=str(ARCH_EVAL_SCRIPT))
        results = {i: lists[number * len(found.lists) + i] for i in others}
        evaluations.append(Evaluation(verdict.cuda, archs[number], chosen, results))
    return evaluations


def evaluate(tree: Path, lists: Sequence[Sequence[str]], targets: Sequence[str]) -> list[list[str]]:
    """Each list cut by ``targets`` directly with the tree's helper (no supported list)."""
    target = ";".join(t.removesuffix("+PTX") for t in targets)
    requests = [f"sparkbuild_target({_bracket(target)})"]
    requests += [f"sparkbuild_list({i} {_bracket(';'.join(values))})"
                 for i, values in enumerate(lists)]
    found = {n: v for kind, n, v in _run(tree, requests) if kind == "list"}
    return [found[i] for i in range(len(lists))]
