"""Finding arch lists (with their if() branches) in CMake files, and judging what they give."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits.arch_lists import insert, insertions, list_problem, spark_target
from sparkbuild.toolchain.arch_eval import (
    Verdicts,
    candidate_versions,
    conjuncts,
    next_minor,
    reads_version_only,
    supported_value,
    version_conjuncts,
    version_thresholds,
)
from sparkbuild.toolchain.archs import (
    ArchList,
    Guard,
    cmake_files,
    find_arch_lists,
    is_native,
    parse_entry,
    supported_variable,
    tree_arch_lists,
)

if TYPE_CHECKING:
    from pathlib import Path

CMAKE = """\
set(HIP_SUPPORTED_ARCHS "gfx906;gfx1200;gfx1201")
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  set(CUDA_SUPPORTED_ARCHS "7.5;8.0;9.0;10.0;11.0;12.0")
else()
  set(CUDA_SUPPORTED_ARCHS "7.0;7.5;8.0;8.6;9.0")
endif()
cuda_archs_loose_intersection(CUDA_ARCHS
  "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")
# cuda_archs_loose_intersection(OLD_ARCHS "12.0" "${CUDA_ARCHS}")
cuda_archs_loose_intersection(SCALED_MM_ARCHS "12.0;12.0a" "${CUDA_ARCHS}")
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
  cuda_archs_loose_intersection(FP4_SM120_ARCHS "12.0f" "${CUDA_ARCHS}")
else()
  cuda_archs_loose_intersection(FP4_SM120_ARCHS "12.0a;12.1a" "${CUDA_ARCHS}")
endif()
cuda_archs_loose_intersection(MARLIN_ARCHS
    "8.0+PTX;9.0a;" "${CUDA_ARCHS}")
"""


def test_find_arch_lists_sees_every_cuda_literal_and_nothing_else() -> None:
    found = [(lst.variable, lst.line, lst.values) for lst in find_arch_lists(CMAKE)]
    assert found == [
        ("CUDA_SUPPORTED_ARCHS", 3, ["7.5", "8.0", "9.0", "10.0", "11.0", "12.0"]),
        ("CUDA_SUPPORTED_ARCHS", 5, ["7.0", "7.5", "8.0", "8.6", "9.0"]),
        ("SCALED_MM_ARCHS", 10, ["12.0", "12.0a"]),
        ("FP4_SM120_ARCHS", 12, ["12.0f"]),
        ("FP4_SM120_ARCHS", 14, ["12.0a", "12.1a"]),
        ("MARLIN_ARCHS", 17, ["8.0+PTX", "9.0a"]),
    ]


def test_entry_offsets_point_into_the_text() -> None:
    for arch_list in find_arch_lists(CMAKE):
        for entry in arch_list.entries:
            assert CMAKE[entry.start : entry.start + len(entry.text)] == entry.text


@pytest.mark.parametrize(
    ("text", "base", "suffix", "major"),
    [("12.0f", "12.0", "f", 12), ("9.0a", "9.0", "a", 9), ("8.0+PTX", "8.0", "", 8)],
)
def test_parse_entry(text: str, base: str, suffix: str, major: int) -> None:
    entry = parse_entry(text)
    assert entry is not None
    assert (entry.base, entry.suffix, entry.major) == (base, suffix, major)


def test_parse_entry_rejects_non_cuda_names() -> None:
    assert parse_entry("gfx1200") is None
    assert parse_entry("${CUDA_ARCHS}") is None


@pytest.mark.parametrize(
    ("result", "native"),
    [(["12.1"], True), (["12.1a"], True), (["12.1f+PTX"], True), (["12.0"], False),
     (["12.0f"], False), ([], False), (["9.0a", "12.10"], False)],
)
def test_is_native(result: list[str], native: bool) -> None:
    assert is_native(result, "12.1") is native


def _edited(variable: str, line: int) -> list[str]:
    lists = {(lst.variable, lst.line): lst for lst in find_arch_lists(CMAKE)}
    target = lists[(variable, line)]
    text = insert(CMAKE, insertions(target, "12.1"))
    return {(lst.variable, lst.line): lst for lst in find_arch_lists(text)}[(variable, line)].values


def test_insertions_mirror_each_12_0_entry_with_its_suffix() -> None:
    assert _edited("SCALED_MM_ARCHS", 10) == ["12.0", "12.1", "12.0a", "12.1a"]
    assert _edited("CUDA_SUPPORTED_ARCHS", 3) == ["7.5", "8.0", "9.0", "10.0", "11.0", "12.0",
                                                  "12.1"]
    assert _edited("FP4_SM120_ARCHS", 12) == ["12.0f", "12.1f"]


def test_insertions_only_touch_the_list_they_are_for() -> None:
    lists = find_arch_lists(CMAKE)
    scaled = next(lst for lst in lists if lst.variable == "SCALED_MM_ARCHS")
    edited = insert(CMAKE, insertions(scaled, "12.1"))
    assert edited.replace('"12.0;12.1;12.0a;12.1a"', '"12.0;12.0a"') == CMAKE


def test_insertions_append_when_the_family_has_no_12_0_entry() -> None:
    text = 'cuda_archs_loose_intersection(X_ARCHS "9.0a;12.3" "${CUDA_ARCHS}")\n'
    arch_list = find_arch_lists(text)[0]
    assert insert(text, insertions(arch_list, "12.1")).count('"9.0a;12.3;12.1"') == 1


def test_insertions_append_the_target_to_a_list_without_its_major() -> None:
    # the edit with target 9.0 (the H200's twin) met a supported list with no 9.x entry in
    # vllm-flash-attn: no traceback (min() of nothing)
    text = 'set(CUDA_SUPPORTED_ARCHS "8.0;8.6;10.0")\n'
    arch_list = find_arch_lists(text)[0]
    edited = insert(text, insertions(arch_list, "9.0"))
    assert edited == 'set(CUDA_SUPPORTED_ARCHS "8.0;8.6;10.0;9.0")\n'


# -- guards, appends, includes, the supported list ------------------------------------------

GUARDED = """\
if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  set(CUDA_SUPPORTED_ARCHS "9.0;10.0;12.0")
elseif(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  set(CUDA_SUPPORTED_ARCHS "9.0;10.0;12.0")
else()
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0")  # (no SM12x before 12.8)
endif()
cuda_archs_loose_intersection(CUDA_ARCHS
  "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")
if(VLLM_GPU_LANG STREQUAL "CUDA")
  set(DEMO_ARCHS)
  if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
    list(APPEND DEMO_ARCHS "10.0f" "12.0f")
  else()
    list(APPEND DEMO_ARCHS 12.0a)
  endif()
  list(APPEND VLLM_GPU_FLAGS "-DX=1")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
include(FetchContent)
if(ENABLE_EXTRA)
  include(cmake/external_projects/extra.cmake)
endif()
"""
EXTRA = 'cuda_archs_loose_intersection(EXTRA_ARCHS "12.0a;12.1a" "${CUDA_ARCHS}")\n'


def test_lists_carry_the_if_branches_around_them() -> None:
    lists = find_arch_lists(GUARDED)
    assert [(lst.variable, lst.values) for lst in lists] == [
        ("CUDA_SUPPORTED_ARCHS", ["9.0", "10.0", "12.0"]),
        ("CUDA_SUPPORTED_ARCHS", ["9.0", "10.0", "12.0"]),
        ("CUDA_SUPPORTED_ARCHS", ["8.0", "9.0"]),
        ("DEMO_ARCHS", ["10.0f", "12.0f"]),
        ("DEMO_ARCHS", ["12.0a"]),
    ]
    first, second, third, appended, bare = lists
    version_13 = ("DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION "
                  "VERSION_GREATER_EQUAL 13.0")
    assert first.guards == (Guard((), version_13),)
    assert second.guards == (Guard((version_13,), "CMAKE_CUDA_COMPILER_VERSION "
                                                   "VERSION_GREATER_EQUAL 12.8"),)
    assert third.guards[0].condition is None and len(third.guards[0].previous) == 2
    assert [g.condition for g in appended.guards] == [
        'VLLM_GPU_LANG STREQUAL "CUDA"',
        "${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0"]
    assert bare.guards[1] == Guard(
        ("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0",), None)
    for arch_list in lists:  # every offset points at its entry, quoted or bare
        for entry in arch_list.entries:
            assert GUARDED[entry.start:entry.start + len(entry.text)] == entry.text


def test_the_supported_list_is_found_by_how_cuda_archs_is_cut() -> None:
    assert supported_variable(GUARDED) == "CUDA_SUPPORTED_ARCHS"
    assert supported_variable('cuda_archs_loose_intersection(A "${B}" "${C}")') is None


FLASH_ATTN_SUPPORTED = """set(CUDA_SUPPORTED_ARCHS "8.0;8.6;8.9;9.0")
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
    list(APPEND CUDA_SUPPORTED_ARCHS "10.0" "11.0" "12.0")
endif()
set(CUDA_SUPPORTED_ARCHS "7.5")
list(APPEND CUDA_SUPPORTED_ARCHS "8.0")
cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")
"""


def test_an_append_adds_to_the_supported_list_a_set_replaces_it(tmp_path: Path) -> None:
    # vllm-flash-attn appends 10.0;11.0;12.0 at CUDA 13: the value is the union, so a 9.0a
    # target is supported there (the append alone was taken for the value before)
    (tmp_path / "CMakeLists.txt").write_text(FLASH_ATTN_SUPPORTED)
    found = tree_arch_lists(tmp_path)
    assert [(lst.values, lst.appended) for lst in found.lists] == [
        (["8.0", "8.6", "8.9", "9.0"], False), (["10.0", "11.0", "12.0"], True),
        (["7.5"], False), (["8.0"], True)]
    assert supported_value(found, [0, 1]) == ["8.0", "8.6", "8.9", "9.0", "10.0", "11.0", "12.0"]
    assert supported_value(found, [0]) == ["8.0", "8.6", "8.9", "9.0"]
    assert supported_value(found, [0, 1, 2, 3]) == ["7.5", "8.0"]  # the last set() restarts it
    assert supported_value(found, [1]) == ["10.0", "11.0", "12.0"]


def test_included_files_are_followed_with_their_guards(tmp_path: Path) -> None:
    (tmp_path / "cmake" / "external_projects").mkdir(parents=True)
    (tmp_path / "CMakeLists.txt").write_text(GUARDED)
    (tmp_path / "cmake" / "utils.cmake").write_text("function(f)\nendfunction()\n")
    (tmp_path / "cmake" / "external_projects" / "extra.cmake").write_text(EXTRA)
    files = dict(cmake_files(tmp_path))
    assert list(files) == ["CMakeLists.txt", "cmake/utils.cmake",
                           "cmake/external_projects/extra.cmake"]
    assert files["cmake/external_projects/extra.cmake"] == (Guard((), "ENABLE_EXTRA"),)
    found = tree_arch_lists(tmp_path)
    assert found.supported == "CUDA_SUPPORTED_ARCHS"
    assert [lst.supported for lst in found.lists] == [True, True, True, False, False, False]
    extra = found.lists[-1]
    assert (extra.file, extra.variable, extra.guards) == (
        "cmake/external_projects/extra.cmake", "EXTRA_ARCHS", (Guard((), "ENABLE_EXTRA"),))
    edited = tree_arch_lists(tmp_path, texts={"CMakeLists.txt": GUARDED.replace(
        '"12.0f")', '"12.0f;12.1f")')})
    assert edited.lists[3].values == ["10.0f", "12.0f", "12.1f"]


def test_version_thresholds_and_the_versions_tried() -> None:
    lists = find_arch_lists(GUARDED)
    conditions = [c for lst in lists for g in lst.guards for c in (*g.previous, g.condition or "")]
    assert version_thresholds(conditions) == ["12.8", "13.0"]
    assert candidate_versions(lists, None) == ["12.9", "13.0", "13.1"]
    assert candidate_versions(lists, "13.2") == ["12.9", "13.0", "13.1", "13.2"]
    assert candidate_versions([], None) == ["12.9"]
    assert next_minor("12.8") == "12.9" and next_minor("13.0.1") == "13.1"


@pytest.mark.parametrize(
    ("condition", "parts"),
    [("A AND B", ["A", "B"]), ('X STREQUAL "A AND B" AND Y', ['X STREQUAL "A AND B"', "Y"]),
     ("(A AND B) OR C", ["(A AND B) OR C"]), ("BAND AND ANDY", ["BAND", "ANDY"])],
)
def test_conjuncts_split_only_the_top_level_and(condition: str, parts: list[str]) -> None:
    assert conjuncts(condition) == parts


def test_only_version_tests_are_decided() -> None:
    assert reads_version_only("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0")
    assert reads_version_only("DEFINED CMAKE_CUDA_COMPILER_VERSION")
    assert not reads_version_only("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.8 OR FOO")
    assert not reads_version_only('VLLM_GPU_LANG STREQUAL "CUDA"')


def test_which_lists_are_live_at_a_cuda_version() -> None:
    first, second, third, appended, bare = find_arch_lists(GUARDED)
    parts = version_conjuncts([first, second, third, appended, bare])
    at_13 = Verdicts("13.0", dict.fromkeys(parts, True))
    at_12_9 = Verdicts("12.9", {p: "13.0" not in p for p in parts})
    assert [at_13.live(x) for x in (first, second, third, appended, bare)] == [
        True, False, False, True, False]
    assert [at_12_9.live(x) for x in (first, second, third, appended, bare)] == [
        False, True, False, False, True]


# -- the criterion ---------------------------------------------------------------------------

def _list(text: str) -> ArchList:
    return find_arch_lists(f'cuda_archs_loose_intersection(X_ARCHS "{text}" "${{A}}")')[0]


@pytest.mark.parametrize(
    ("source", "result", "target", "problem"),
    [("12.0f", ["12.1a"], "12.1a", None),
     ("12.0f", ["12.0f"], "12.1a", None),
     ("12.0a;12.1a", ["12.1f"], "12.1f", None),
     ("12.0f", ["12.1"], "12.1a", "plain 12.1"),
     ("12.0;12.0a", ["12.0a"], "12.1a", "not 12.1a, 12.1f or 12.0f"),
     ("12.0a", [], "12.1a", "gives nothing"),
     ("8.0;12.0", ["12.0"], "12.1a", "no native 12.1"),
     ("8.0;12.0", ["12.1a"], "12.1a", None),
     ("12.0f", ["12.1"], "12.1", None),
     ("12.0;12.0a", ["12.0"], "12.1", "no native 12.1")],
)
def test_list_problem(source: str, result: list[str], target: str, problem: str | None) -> None:
    found = list_problem(_list(source), result, target)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_the_spark_target_is_taken_from_the_recipe() -> None:
    assert spark_target(["9.0a", "12.1a+PTX"], "12.1") == "12.1a"
    assert spark_target(["12.1"], "12.1") == "12.1"
    with pytest.raises(PatchError, match=r"hold no 12\.1 arch"):
        spark_target(["9.0a"], "12.1")
