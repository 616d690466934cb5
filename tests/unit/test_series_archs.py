"""Finding arch-list literals in a CMakeLists.txt and computing the 12.1 entries to add."""

from __future__ import annotations

import pytest

from sparkbuild.patches.edits.arch_lists import insert, insertions
from sparkbuild.toolchain.archs import find_arch_lists, is_native, parse_entry

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
