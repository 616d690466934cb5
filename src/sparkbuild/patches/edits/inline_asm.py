"""Reading CUDA inline asm that converts floats to E2M1, and rewriting it into calls.

Used by the ``e2m1-routing`` edit and by the raw-instruction report.  The reader handles the
shape every vLLM release so far uses::

    asm volatile("{ .reg .b8 byte0; ... cvt.rn.satfinite.e2m1x2.f32 byte0, %2, %1; ...
                  mov.b32 %0, {byte0, byte1, byte2, byte3}; }"
                 : "=r"(val) : "f"(array[0]), "f"(array[1]), ...);

From the operands it computes, per output word, which input lands in which nibble (``mov``
packs its first byte lowest; ``cvt d, a, b`` puts ``a`` in the high nibble).  Only when that
order is the array's own element order -- exactly what ``sparkbuild::cvt_f32x8_to_e2m1x8``
and ``cvt_f32x16_to_e2m1x16`` produce -- is the block replaced by a call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkbuild.errors import PatchError

INSTRUCTION = "cvt.rn.satfinite.e2m1x2.f32"
_USE = re.compile(r"cvt\.rn\.satfinite\.e2m1x2\.f32\s+[%$\w]+\s*,")
_ASM = re.compile(r"\basm\s*(?:volatile\s*|__volatile__\s*)?\(")
_CVT = re.compile(r"cvt\.rn\.satfinite\.e2m1x2\.f32\s+(\w+)\s*,\s*%(\d+)\s*,\s*%(\d+)")
_MOV = re.compile(r"mov\.b32\s+%(\d+)\s*,\s*\{([\w\s,]+)\}")
_OPERAND = re.compile(r'\s*"([^"]*)"\s*\((.*)\)\s*', re.DOTALL)
_ELEMENT = re.compile(r"(\w+)\[(\d+)\](?:\.([xy]))?")
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_CALLS = {8: "cvt_f32x8_to_e2m1x8", 16: "cvt_f32x16_to_e2m1x16"}
MARKER = "// sparkbuild: E2M1 via e2m1.cuh (a software path where the target lacks it)"


def _literal_end(text: str, start: int) -> int:
    """Index just past the string or char literal that opens at ``start``."""
    quote = text[start]
    index = start + 1
    while index < len(text) and text[index] not in (quote, "\n"):
        index += 2 if text[index] == "\\" else 1
    return min(index + 1, len(text))


def strip_comments(text: str) -> str:
    """C/C++/CUDA text with comments blanked to spaces; offsets and lines are kept."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            end = _literal_end(text, index)
        elif text.startswith("//", index):
            end = text.find("\n", index)
            end = len(text) if end < 0 else end
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            end = len(text) if end < 0 else end + 2
        else:
            out.append(char)
            index += 1
            continue
        chunk = text[index:end]
        out.append(chunk if char in "\"'" else re.sub(r"[^\n]", " ", chunk))
        index = end
    return "".join(out)


def instruction_lines(text: str, *, python: bool = False) -> list[int]:
    """Lines (1-based) where code -- not a comment -- issues the raw instruction."""
    if python:
        lines = [ln if not ln.lstrip().startswith("#") else "" for ln in text.splitlines()]
    else:
        lines = strip_comments(text).splitlines()
    return [number for number, line in enumerate(lines, start=1) if _USE.search(line)]


def _closing(code: str, open_index: int, origin: str) -> int:
    depth = 0
    index = open_index
    while index < len(code):
        char = code[index]
        if char in "\"'":
            index = _literal_end(code, index)
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return index
        index += 1
    raise PatchError("unbalanced parentheses in an asm statement", where=origin)


def _split_top(text: str, separator: str) -> list[str]:
    """Split at ``separator`` outside literals and parentheses (``::`` is not a colon)."""
    parts, depth, start, index = [], 0, 0, 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            index = _literal_end(text, index)
            continue
        if char == ":" and text.startswith("::", index):
            index += 2
            continue
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
        index += 1
    parts.append(text[start:])
    return parts


@dataclass(frozen=True)
class Conversion:
    """An asm block that packs E2M1 nibbles: outputs, and the inputs in nibble order."""

    outputs: tuple[str, ...]
    nibbles: tuple[str, ...]


def _operands(part: str, constraint: str, where: str) -> list[str]:
    exprs = []
    for raw in _split_top(part, ","):
        match = _OPERAND.fullmatch(raw)
        if match is None or match.group(1) != constraint:
            raise PatchError(f"unexpected asm operand {raw.strip()!r}", where=where)
        exprs.append(re.sub(r"\s+", "", match.group(2)))
    return exprs


def _template(part: str) -> list[str]:
    body = "".join(m.group(1) for m in _STRING.finditer(part))
    body = body.replace("\\n", "\n").replace("\\t", " ").replace('\\"', '"')
    statements = (s.strip() for s in re.split(r"[;\n]", body))
    return [s for s in statements if s not in ("", "{", "}")]


def parse_conversion(inner: str, where: str) -> Conversion:
    """The operands of an E2M1-packing asm block (text between ``asm(`` and ``)``)."""
    parts = _split_top(inner, ":")
    if len(parts) < 3:
        raise PatchError("asm block without output and input operands", where=where)
    outputs, inputs = _operands(parts[1], "=r", where), _operands(parts[2], "f", where)
    pairs: dict[str, tuple[int, int]] = {}
    words: dict[int, list[str]] = {}
    for statement in _template(parts[0]):
        if statement.startswith(".reg"):
            continue
        if (cvt := _CVT.fullmatch(statement)) is not None:
            pairs[cvt.group(1)] = (int(cvt.group(3)), int(cvt.group(2)))  # (low, high)
        elif (mov := _MOV.fullmatch(statement)) is not None:
            words[int(mov.group(1))] = [r.strip() for r in mov.group(2).split(",")]
        else:
            raise PatchError(f"unrecognised instruction in E2M1 asm: {statement!r}", where=where)
    nibbles: list[str] = []
    for word in range(len(outputs)):
        for register in words.get(word, []):
            if register not in pairs:
                raise PatchError(f"asm packs register {register} that no cvt sets", where=where)
            for operand in pairs[register]:
                if not len(outputs) <= operand < len(outputs) + len(inputs):
                    raise PatchError(f"asm operand %{operand} is not an input", where=where)
                nibbles.append(inputs[operand - len(outputs)])
    return Conversion(tuple(outputs), tuple(nibbles))


def _array_of(conversion: Conversion, code_before: str, where: str) -> str:
    """The array the nibbles come from, checked to be in element order and declared to fit."""
    first = _ELEMENT.fullmatch(conversion.nibbles[0]) if conversion.nibbles else None
    if first is None:
        raise PatchError("asm inputs are not elements of one array", where=where)
    name, pair = first.group(1), first.group(3) is not None
    count = len(conversion.nibbles)
    expected = (
        [f"{name}[{i}].{c}" for i in range(count // 2) for c in "xy"]
        if pair
        else [f"{name}[{i}]" for i in range(count)]
    )
    if list(conversion.nibbles) != expected:
        raise PatchError(
            "asm nibble order is not the array's element order; refusing to guess",
            where=where,
            hint=f"nibbles low to high: {', '.join(conversion.nibbles)}",
        )
    element, length = ("float2", count // 2) if pair else ("float", count)
    declared = rf"\b{element}\s*\(\s*&\s*{name}\s*\)\s*\[\s*{length}\s*\]"
    if re.search(declared, code_before) is None:
        raise PatchError(f"{name} is not declared as {element} (&{name})[{length}]", where=where)
    return name


def render_call(conversion: Conversion, array: str, indent: str, where: str) -> str:
    count = len(conversion.nibbles)
    if count != 8 * len(conversion.outputs) or count not in _CALLS:
        raise PatchError(f"no sparkbuild conversion packs {count} values", where=where)
    call = f"::sparkbuild::{_CALLS[count]}({array})"
    if count == 8:
        return f"{MARKER}\n{indent}{conversion.outputs[0]} = {call};"
    words = [
        f"{indent}  {out} = static_cast<uint32_t>(packed >> {32 * k});"
        for k, out in enumerate(conversion.outputs)
    ]
    return "\n".join(
        [f"{MARKER}", f"{indent}{{", f"{indent}  uint64_t const packed = {call};", *words,
         f"{indent}}}"]
    )


def _function_name(code_before: str) -> str:
    names = re.findall(r"\b(\w+)\s*\(\s*(?:const\s+)?float2?\s*\(\s*&", code_before)
    return names[-1] if names else "?"


def route_conversions(text: str, *, origin: str) -> tuple[str, list[str]]:
    """``text`` with every E2M1-packing asm block replaced by a sparkbuild call.

    Returns the new text and the names of the functions rewritten; refuses (PatchError) a
    block it does not understand and a raw use outside any asm block.
    """
    code = strip_comments(text)
    pieces: list[str] = []
    routed: list[str] = []
    last = 0
    for match in _ASM.finditer(code):
        close = _closing(code, match.end() - 1, origin)
        if match.start() < last or INSTRUCTION not in code[match.end():close]:
            continue
        line = code.count("\n", 0, match.start()) + 1
        where = f"{origin}:{line}"
        conversion = parse_conversion(code[match.end():close], where)
        array = _array_of(conversion, code[: match.start()], where)
        indent = code[code.rfind("\n", 0, match.start()) + 1 : match.start()]
        pieces += [text[last : match.start()], render_call(conversion, array, indent, where)]
        last = code.index(";", close) + 1
        routed.append(_function_name(code[: match.start()]))
    new_text = "".join([*pieces, text[last:]])
    leftover = instruction_lines(new_text)
    if leftover:
        raise PatchError(
            f"raw {INSTRUCTION} outside an asm block this edit can rewrite",
            where=f"{origin}:{leftover[0]}",
            hint="extend sparkbuild.patches.edits.inline_asm for this form",
        )
    return new_text, routed
