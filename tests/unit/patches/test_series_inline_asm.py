"""Reading E2M1 inline asm, checking its nibble order, and rewriting it into calls."""

from __future__ import annotations

import pytest

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits.e2m1_routing import add_include
from sparkbuild.patches.edits.inline_asm import (
    instruction_lines,
    parse_conversion,
    route_conversions,
    strip_comments,
)

# Written for these tests in the shape vLLM's headers use; operands follow PTX's rule
# that `cvt d, a, b` puts a in the high nibble, so each pair is passed swapped.
HEADER = """\
#pragma once
#include <cuda_runtime.h>

namespace demo {
// Convert 8 floats (a comment naming cvt.rn.satfinite.e2m1x2.f32 d, a, b is not a use).
inline __device__ uint32_t pack8(float (&array)[8]) {
  uint32_t val;
  asm volatile(
      "{\\n"
      ".reg .b8 byte0;\\n"
      ".reg .b8 byte1;\\n"
      ".reg .b8 byte2;\\n"
      ".reg .b8 byte3;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte0, %2, %1;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte1, %4, %3;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte2, %6, %5;\\n"
      "cvt.rn.satfinite.e2m1x2.f32   byte3, %8, %7;\\n"
      "mov.b32 %0, {byte0, byte1, byte2, byte3};\\n"
      "}"
      : "=r"(val)
      : "f"(array[0]), "f"(array[1]), "f"(array[2]), "f"(array[3]),
        "f"(array[4]), "f"(array[5]), "f"(array[6]), "f"(array[7]));
  return val;
}

struct two_words { uint32_t lo, hi; };

__device__ __forceinline__ two_words pack16(float2 (&v)[8]) {
  two_words out;
  asm volatile(
      "{\\n .reg .b8 b0, b1, b2, b3, b4, b5, b6, b7;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b0, %3, %2;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b1, %5, %4;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b2, %7, %6;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b3, %9, %8;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b4, %11, %10;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b5, %13, %12;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b6, %15, %14;\\n"
      "cvt.rn.satfinite.e2m1x2.f32 b7, %17, %16;\\n"
      "mov.b32 %0, {b0, b1, b2, b3};\\n"
      "mov.b32 %1, {b4, b5, b6, b7};\\n}"
      : "=r"(out.lo), "=r"(out.hi)
      : "f"(v[0].x), "f"(v[0].y), "f"(v[1].x), "f"(v[1].y),
        "f"(v[2].x), "f"(v[2].y), "f"(v[3].x), "f"(v[3].y),
        "f"(v[4].x), "f"(v[4].y), "f"(v[5].x), "f"(v[5].y),
        "f"(v[6].x), "f"(v[6].y), "f"(v[7].x), "f"(v[7].y));
  return out;
}
}  // namespace demo
"""


def test_route_rewrites_each_block_into_the_matching_call() -> None:
    new, routed = route_conversions(HEADER, origin="demo.cuh")
    assert routed == ["pack8", "pack16"]
    assert "  val = ::sparkbuild::cvt_f32x8_to_e2m1x8(array);\n  return val;" in new
    assert "uint64_t const packed = ::sparkbuild::cvt_f32x16_to_e2m1x16(v);" in new
    assert "out.lo = static_cast<uint32_t>(packed >> 0);" in new
    assert "out.hi = static_cast<uint32_t>(packed >> 32);" in new
    assert instruction_lines(new) == []
    assert "asm" not in strip_comments(new)
    assert new.count("return val;") == 1 and new.count("return out;") == 1


def test_route_leaves_text_without_the_instruction_alone() -> None:
    text = 'inline __device__ float r(float a) { float b; asm("rcp.approx.f32 %0, %1;" '\
           ': "=f"(b) : "f"(a)); return b; }\n'
    assert route_conversions(text, origin="x") == (text, [])


def test_nibble_order_is_computed_from_the_operands() -> None:
    inner = HEADER[HEADER.index("asm volatile(") + len("asm volatile(") : HEADER.index(");")]
    conversion = parse_conversion(inner, "demo")
    assert conversion.outputs == ("val",)
    assert conversion.nibbles == tuple(f"array[{i}]" for i in range(8))


def test_a_block_in_another_nibble_order_is_refused() -> None:
    swapped = HEADER.replace("byte0, %2, %1;", "byte0, %1, %2;")
    with pytest.raises(PatchError, match="nibble order"):
        route_conversions(swapped, origin="demo.cuh")


def test_an_unknown_instruction_in_the_block_is_refused() -> None:
    odd = HEADER.replace('"mov.b32 %0, {byte0, byte1, byte2, byte3};\\n"',
                         '"mov.b32 %0, {byte0, byte1, byte2, byte3};\\n" "add.u32 %0, %0, 1;\\n"')
    with pytest.raises(PatchError, match="unrecognised instruction"):
        route_conversions(odd, origin="demo.cuh")


def test_an_array_not_declared_as_a_fixed_reference_is_refused() -> None:
    pointer = HEADER.replace("pack8(float (&array)[8])", "pack8(const float* array)")
    with pytest.raises(PatchError, match="not declared"):
        route_conversions(pointer, origin="demo.cuh")


def test_a_raw_use_outside_an_asm_statement_is_refused() -> None:
    text = HEADER + 'const char* k = "cvt.rn.satfinite.e2m1x2.f32 r, %1, %2;";\n'
    with pytest.raises(PatchError, match="outside an asm block"):
        route_conversions(text, origin="demo.cuh")


def test_strip_comments_keeps_strings_and_line_numbers() -> None:
    text = 'a = "// not a comment"; // gone\n/* gone\n gone */ b = \'/\';\n'
    stripped = strip_comments(text)
    assert stripped.count("\n") == text.count("\n")
    assert '"// not a comment"' in stripped and "gone" not in stripped
    assert "b = '/';" in stripped


def test_instruction_lines_count_code_not_comments() -> None:
    asm_lines = [n for n, line in enumerate(HEADER.splitlines(), start=1)
                 if line.lstrip().startswith('"cvt.rn')]
    assert len(asm_lines) == 12
    assert instruction_lines(HEADER) == asm_lines
    python = (
        '# cvt.rn.satfinite.e2m1x2.f32 d, a, b in a comment\n'
        '"""Rounds like cvt.rn.satfinite.e2m1x2.f32."""\n'
        'ptx = "cvt.rn.satfinite.e2m1x2.f32 x0, $2, $1;"\n'
    )
    assert instruction_lines(python, python=True) == [3]


def test_add_include_goes_after_the_include_block_once() -> None:
    once = add_include(HEADER, "e2m1.cuh")
    assert once.splitlines()[2] == '#include "e2m1.cuh"'
    assert add_include(once, "e2m1.cuh") == once
