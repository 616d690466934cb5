"""The arch edit's criterion, judged by real CMake in script mode (``cmake -P``).

No nvcc: these run the tree's own ``cuda_archs_loose_intersection`` on generated trees.  The
helper is the mini-vllm example's ``cmake/utils.cmake`` (written for sparkbuild, with the
suffix rules of recent vLLM: exact, cross-suffix and family matches, the target's spelling
kept), so the fixtures cover what real trees do: a CUDA 13 branch with family lists
(``12.0f``), a CUDA 12.8/12.9 branch with arch-specific lists (``12.0a;12.1a``), lists in an
included ``cmake/external_projects`` file and in a function of ``cmake/utils.cmake``, and
lists the edit must leave alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corpus.builders import tree_digest, write_series
from sparkbuild.errors import PatchError
from sparkbuild.patches.edits import EditContext
from sparkbuild.patches.edits.arch_lists import ArchListsEdit
from sparkbuild.patches.engine import apply_series, revert_series, series_status
from sparkbuild.patches.report import ALREADY, APPLIED, FAILED, NOT_APPLIED
from sparkbuild.recipe import REPO_ROOT, Target
from sparkbuild.toolchain.arch_eval import distinct_verdicts, evaluate, evaluate_tree
from sparkbuild.toolchain.archs import tree_arch_lists
from support.flashlike import DEPENDENCY, OLD_HELPER

UTILS = (REPO_ROOT / "examples" / "mini-vllm" / "cmake" / "utils.cmake").read_text()
SM90PLUS = """
function(sm90plus_archs OUT TGT)
  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
    cuda_archs_loose_intersection(_archs "9.0a;10.0f;12.0f" "${TGT}")
  else()
    cuda_archs_loose_intersection(_archs "9.0a;10.0a;12.0a" "${TGT}")
  endif()
  set(${OUT} ${_archs} PARENT_SCOPE)
endfunction()
"""
CMAKELISTS = """\
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0;11.0;12.0")
elseif(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0;12.0")
else()
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0")
endif()
cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
  cuda_archs_loose_intersection(FP4_SM120_ARCHS "12.0f" "${CUDA_ARCHS}")
else()
  cuda_archs_loose_intersection(FP4_SM120_ARCHS "12.0a" "${CUDA_ARCHS}")
endif()
cuda_archs_loose_intersection(SCALED_MM_ARCHS "12.0;12.0a" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(DONE_ARCHS "12.0a;12.1a" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(SM90_ONLY_ARCHS "9.0a" "${CUDA_ARCHS}")
if(VLLM_GPU_LANG STREQUAL "CUDA")
  include(cmake/external_projects/qlike.cmake)
endif()
cuda_archs_loose_intersection(MARLIN_ARCHS "8.0+PTX" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(MM2X_ARCHS "7.5;8.0;8.9+PTX" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(OLD_ARCHS "7.5;8.0" "${CUDA_ARCHS}")
"""
QLIKE = """\
set(QLIKE_SUPPORT_ARCHS)
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
  list(APPEND QLIKE_SUPPORT_ARCHS "10.0f" "12.0f")
elseif(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.9)
  list(APPEND QLIKE_SUPPORT_ARCHS "10.0a" "12.0a")
endif()
cuda_archs_loose_intersection(QLIKE_ARCHS "${QLIKE_SUPPORT_ARCHS}" "${CUDA_ARCHS}")
"""
EDIT = 'kind = "cuda-arch-lists"\nfile = "CMakeLists.txt"\ntarget = "12.1"\n'
PLAIN = Target(cuda_archs=("12.1",), allow_plain_sm121=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "cmake" / "external_projects").mkdir(parents=True)
    (root / "cmake" / "utils.cmake").write_text(UTILS + SM90PLUS)
    (root / "cmake" / "external_projects" / "qlike.cmake").write_text(QLIKE)
    (root / "CMakeLists.txt").write_text(CMAKELISTS)
    return root


def _results(tree: Path, targets: tuple[str, ...], cuda: str) -> dict[str, list[str]]:
    """Variable (file:line) -> what it gives at ``cuda``; CUDA_ARCHS under its own name."""
    found = tree_arch_lists(tree)
    verdicts = [v for v in distinct_verdicts(tree, found.lists, cuda) if v.cuda == cuda]
    (evaluation,) = evaluate_tree(tree, found, targets, verdicts)
    results = {"CUDA_ARCHS": list(evaluation.cuda_archs)}
    for index, value in evaluation.results.items():
        results[f"{found.lists[index].variable}@{found.lists[index].where}"] = list(value)
    return results


def test_the_helper_keeps_the_targets_spelling() -> None:
    tree_root = REPO_ROOT / "examples" / "mini-vllm"
    assert evaluate(tree_root, [["12.0f"], ["12.0;12.0a"], ["12.0a;12.1a"], ["8.0;12.1"],
                                ["9.0a"]], ["12.1a"]) == [
        ["12.1a"], ["12.0"], ["12.1a"], ["12.1a"], []]
    assert evaluate(tree_root, [["12.0f"], ["12.0a;12.1a"]], ["12.1"]) == [["12.1"], ["12.1a"]]


@pytest.mark.parametrize("cuda", ["12.9", "13.0"])
def test_before_the_edit_the_spark_gets_a_12_0_stand_in(tree: Path, cuda: str) -> None:
    results = _results(tree, ("12.1a",), cuda)
    assert results["CUDA_ARCHS"] == ["12.0"]
    assert results["SCALED_MM_ARCHS@CMakeLists.txt:17"] == ["12.0a"]  # sm_120a code
    assert results["SM90_ONLY_ARCHS@CMakeLists.txt:19"] == []
    assert results["MARLIN_ARCHS@CMakeLists.txt:23"] == ["8.0+PTX"]  # PTX only: JIT on the node
    assert results["MM2X_ARCHS@CMakeLists.txt:24"] == ["8.9+PTX"]
    assert results["OLD_ARCHS@CMakeLists.txt:25"] == []  # no PTX: nothing crosses majors
    if cuda == "13.0":
        assert results["FP4_SM120_ARCHS@CMakeLists.txt:13"] == ["12.0f"]
        assert "FP4_SM120_ARCHS@CMakeLists.txt:15" not in results  # the other branch
        (in_utils,) = [v for k, v in results.items() if k.startswith("_archs@cmake/utils")]
        assert in_utils == ["12.0f"]
    else:
        assert results["FP4_SM120_ARCHS@CMakeLists.txt:15"] == ["12.0a"]
        assert results["QLIKE_SUPPORT_ARCHS@cmake/external_projects/qlike.cmake:5"] == ["12.0a"]


def test_the_edit_gives_12_1a_everywhere_at_every_cuda_version(
    tree: Path, tmp_path: Path
) -> None:
    recipe = write_series(tmp_path / "patches", {"archs.toml": EDIT})
    pristine = tree_digest(tree)
    report = apply_series(tree, recipe)
    (outcome,) = report.patches
    assert outcome.status == APPLIED, outcome.detail
    for cuda in ("12.9", "13.0", "13.1"):
        results = _results(tree, ("12.1a",), cuda)
        assert results["CUDA_ARCHS"] == ["12.1a"], (cuda, results)
        family = {k: v for k, v in results.items()
                  if k.split("@")[0] not in ("CUDA_ARCHS", "SM90_ONLY_ARCHS", "OLD_ARCHS")}
        assert all(v == ["12.1a"] for v in family.values()), (cuda, family)
        assert results["SM90_ONLY_ARCHS@CMakeLists.txt:19"] == []
    cmake = (tree / "CMakeLists.txt").read_text()
    assert 'set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0;11.0;12.0;12.1")' in cmake
    assert 'set(CUDA_SUPPORTED_ARCHS "8.0;9.0")' in cmake  # no SM12x entry: untouched
    assert '"12.0;12.1;12.0a;12.1a"' in cmake and '"9.0a"' in cmake
    assert 'FP4_SM120_ARCHS "12.0f"' in cmake  # 12.0f already gives 12.1a: left alone
    assert 'MARLIN_ARCHS "8.0+PTX;12.1a"' in cmake and 'MM2X_ARCHS "7.5;8.0;8.9+PTX;12.1a"' in cmake
    assert 'OLD_ARCHS "7.5;8.0"' in cmake  # gives the target nothing: untouched
    qlike = (tree / "cmake" / "external_projects" / "qlike.cmake").read_text()
    assert '"10.0a" "12.0a;12.1a")' in qlike and '"10.0f" "12.0f")' in qlike
    details = outcome.to_dict()["details"]
    assert details["targets"] == ["12.1a"]
    assert {"12.9", "13.0"} <= set(details["cuda_versions"])
    assert [row["after"] for row in details["cuda_archs"]] == [["12.1a"]]
    scaled = next(row for row in details["lists"] if row["variable"] == "SCALED_MM_ARCHS")
    assert (scaled["source"], scaled["source_after"]) == ("12.0;12.0a", "12.0;12.1;12.0a;12.1a")
    assert (scaled["before"], scaled["after"]) == (["12.0a"], ["12.1a"])
    assert all(row["variable"] not in ("SM90_ONLY_ARCHS", "OLD_ARCHS")
               for row in details["lists"])
    marlin = next(row for row in details["lists"] if row["variable"] == "MARLIN_ARCHS")
    assert (marlin["source"], marlin["source_after"]) == ("8.0+PTX", "8.0+PTX;12.1a")
    assert (marlin["before"], marlin["after"]) == (["8.0+PTX"], ["12.1a"])

    again = series_status(tree, recipe).patches[0]
    assert again.status == ALREADY and "gives 12.1a code" in again.detail
    assert again.details["lists"]  # status reports the lists on a patched tree too
    assert [p.status for p in revert_series(tree, recipe).patches] == [NOT_APPLIED]
    assert tree_digest(tree) == pristine


def test_a_plain_target_with_the_opt_in_gets_native_plain_code(
    tree: Path, tmp_path: Path
) -> None:
    recipe = write_series(tmp_path / "patches", {"archs.toml": EDIT})
    plain = dataclasses.replace(recipe, target=PLAIN)
    assert apply_series(tree, plain).patches[0].status == APPLIED
    results = _results(tree, ("12.1",), "13.0")
    assert results["CUDA_ARCHS"] == ["12.1"]
    assert results["FP4_SM120_ARCHS@CMakeLists.txt:13"] == ["12.1"]  # the trap CUTLASS gets
    assert results["SCALED_MM_ARCHS@CMakeLists.txt:17"] == ["12.1a"]


def test_the_toolchains_cuda_version_stands_for_its_branch(tree: Path) -> None:
    found = tree_arch_lists(tree)
    assert [v.cuda for v in distinct_verdicts(tree, found.lists, "13.2")] == ["12.9", "13.2"]
    assert [v.cuda for v in distinct_verdicts(tree, found.lists, None)] == ["12.9", "13.0"]


def test_arithmetic_the_edit_cannot_satisfy_is_refused(tree: Path, tmp_path: Path) -> None:
    helper = tree / "cmake" / "utils.cmake"
    helper.write_text(helper.read_text().replace(
        'set(${OUT_CUDA_ARCHS} "${_result}" PARENT_SCOPE)',
        'list(FILTER _result EXCLUDE REGEX "^12\\\\.1")\n'
        '  set(${OUT_CUDA_ARCHS} "${_result}" PARENT_SCOPE)'))
    edit = ArchListsEdit("CMakeLists.txt", "12.1", EditContext(("12.1a",), "13.0"))
    with pytest.raises(PatchError, match=r"even with 12\.1 entries added"):
        edit.plan(tree)
    recipe = write_series(tmp_path / "patches", {"archs.toml": EDIT})
    before = tree_digest(tree)
    (outcome,) = apply_series(tree, recipe).patches
    assert outcome.status == FAILED, outcome.detail
    assert "CUDA_SUPPORTED_ARCHS" in outcome.detail and "CUDA_ARCHS is nothing" in outcome.detail
    assert tree_digest(tree) == before


def test_a_recipe_without_a_12_1_target_is_refused(tree: Path) -> None:
    edit = ArchListsEdit("CMakeLists.txt", "12.1", EditContext(("9.0a",), "13.0"))
    with pytest.raises(PatchError, match="hold no 12"):
        edit.plan(tree)


def test_a_list_kept_ptx_on_purpose_stays_ptx_and_says_why(tree: Path, tmp_path: Path) -> None:
    edit = EDIT + 'keep_ptx = { MARLIN_ARCHS = "does not compile for sm_121a (test)" }\n'
    recipe = write_series(tmp_path / "patches", {"archs.toml": edit})
    (outcome,) = apply_series(tree, recipe).patches
    assert outcome.status == APPLIED, outcome.detail
    results = _results(tree, ("12.1a",), "13.0")
    assert results["MARLIN_ARCHS@CMakeLists.txt:23"] == ["8.0+PTX"]
    assert results["MM2X_ARCHS@CMakeLists.txt:24"] == ["12.1a"]
    details = outcome.to_dict()["details"]
    assert details["kept_ptx"] == {"MARLIN_ARCHS": "does not compile for sm_121a (test)"}
    marlin = next(row for row in details["lists"] if row["variable"] == "MARLIN_ARCHS")
    assert marlin["after"] == ["8.0+PTX"]


def test_an_old_helper_without_suffix_rules_gets_12_1a_too(tmp_path: Path) -> None:
    """The shape of vllm-flash-attn's CMake: its own, older helper (only 9.0a/10.0a known),
    CUDA_SUPPORTED_ARCHS grown by list(APPEND) per CUDA branch, FA2_ARCHS "8.0+PTX"."""
    root = tmp_path / "dep"
    (root / "cmake").mkdir(parents=True)
    (root / "cmake" / "utils.cmake").write_text(OLD_HELPER)
    (root / "CMakeLists.txt").write_text(DEPENDENCY)
    edit = ArchListsEdit("CMakeLists.txt", "12.1", EditContext(("12.1a",), "13.0"),
                         root_is_optional=True)
    plan = edit.plan(root)
    rows = {row["variable"]: row for row in plan.details["lists"]}
    assert rows["FA2_ARCHS"]["before"] == ["8.0+PTX"] and rows["FA2_ARCHS"]["after"] == ["12.1a"]
    assert [row["before"] for row in plan.details["cuda_archs"]] == [["12.0"]]
    (change,) = plan.changes
    assert 'FA2_ARCHS "8.0+PTX;12.1a"' in change.new


def test_a_dependency_without_cuda_lists_is_nothing_to_do(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    root.mkdir()
    (root / "CMakeLists.txt").write_text('set(HIP_SUPPORTED_ARCHS "gfx906;gfx90a")\n')
    edit = ArchListsEdit("CMakeLists.txt", "12.1", EditContext(("12.1a",), "13.0"),
                         root_is_optional=True)
    plan = edit.plan(root)
    assert plan.changes == () and plan.details["lists"] == []
