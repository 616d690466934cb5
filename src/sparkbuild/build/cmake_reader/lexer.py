"""The CMake language's command syntax: enough to read what a project file invokes.

Command invocations with quoted, bracket and unquoted arguments, bracket comments, line
continuations and escaped ``;``; nested parentheses inside arguments come back as
``(``/``)`` arguments (``if()`` needs them).  Nothing is evaluated here: see
:mod:`sparkbuild.build.cmake_reader.scan`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMAND = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(")
_BRACKET_OPEN = re.compile(r"\[(=*)\[")


@dataclass(frozen=True)
class Arg:
    text: str
    quoted: bool
    """Quoted or bracket arguments are never split on ``;`` into several."""
    bracket: bool = False
    """Bracket arguments are not expanded either."""


@dataclass(frozen=True)
class Command:
    name: str
    """Lower-cased, as CMake command names are case-insensitive."""
    args: tuple[Arg, ...]
    line: int


def _skip_space_and_comments(text: str, pos: int) -> int:
    while pos < len(text):
        char = text[pos]
        if char in " \t\r\n":
            pos += 1
        elif char == "#":
            bracket = _BRACKET_OPEN.match(text, pos + 1)
            if bracket:
                end = text.find("]" + bracket.group(1) + "]", bracket.end())
                pos = len(text) if end < 0 else end + len(bracket.group(1)) + 2
            else:
                newline = text.find("\n", pos)
                pos = len(text) if newline < 0 else newline + 1
        else:
            return pos
    return pos


def _read_quoted(text: str, pos: int) -> tuple[str, int]:
    """``pos`` is just after the opening quote; returns the value and the position after."""
    out: list[str] = []
    while pos < len(text):
        char = text[pos]
        if char == "\\" and pos + 1 < len(text):
            nxt = text[pos + 1]
            if nxt == "\n":  # line continuation
                pos += 2
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r", ";": "\\;"}.get(nxt, nxt))
            pos += 2
        elif char == '"':
            return "".join(out), pos + 1
        else:
            out.append(char)
            pos += 1
    return "".join(out), pos


def _read_unquoted(text: str, pos: int) -> tuple[str, int]:
    out: list[str] = []
    depth = 0
    while pos < len(text):
        char = text[pos]
        if char == "\\" and pos + 1 < len(text):
            out.append(text[pos : pos + 2] if text[pos + 1] == ";" else text[pos + 1])
            pos += 2
        elif char == "$" and text.startswith(("${", "$ENV{"), pos):
            end = _matching_brace(text, text.index("{", pos))
            out.append(text[pos:end])
            pos = end
        elif char in " \t\r\n#" or (char == ")" and depth == 0):
            break
        elif char == '"':  # legacy unquoted argument with embedded quotes: a="b c"
            value, pos = _read_quoted(text, pos + 1)
            out.append(value)
        else:
            depth += char == "("
            depth -= char == ")"
            out.append(char)
            pos += 1
    return "".join(out), pos


def _matching_brace(text: str, open_pos: int) -> int:
    depth = 0
    for index in range(open_pos, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


def _read_args(text: str, pos: int) -> tuple[list[Arg], int]:
    """Arguments after a command's ``(``; nested parentheses become ``(``/``)`` args."""
    args: list[Arg] = []
    depth = 0
    while pos < len(text):
        pos = _skip_space_and_comments(text, pos)
        if pos >= len(text):
            break
        char = text[pos]
        bracket = _BRACKET_OPEN.match(text, pos)
        if char == ")":
            if depth == 0:
                return args, pos + 1
            depth -= 1
            args.append(Arg(")", False))
            pos += 1
        elif char == "(":
            depth += 1
            args.append(Arg("(", False))
            pos += 1
        elif char == '"':
            value, pos = _read_quoted(text, pos + 1)
            args.append(Arg(value, True))
        elif bracket:
            close = "]" + bracket.group(1) + "]"
            end = text.find(close, bracket.end())
            end = len(text) if end < 0 else end
            body = text[bracket.end() : end]
            args.append(Arg(body[1:] if body.startswith("\n") else body, True, bracket=True))
            pos = end + len(close)
        else:
            value, pos = _read_unquoted(text, pos)
            args.append(Arg(value, False))
    return args, pos


def parse_cmake(text: str) -> list[Command]:
    """The command invocations of a CMake file, in order, with their line numbers."""
    commands: list[Command] = []
    pos = 0
    while True:
        pos = _skip_space_and_comments(text, pos)
        if pos >= len(text):
            return commands
        match = _COMMAND.match(text, pos)
        if match is None:  # not a command: skip the rest of the line
            newline = text.find("\n", pos)
            pos = len(text) if newline < 0 else newline + 1
            continue
        line = text.count("\n", 0, pos) + 1
        args, pos = _read_args(text, match.end())
        commands.append(Command(match.group(1).lower(), tuple(args), line))


def split_list(value: str) -> list[str]:
    """Split a CMake list on unescaped ``;``."""
    parts: list[str] = []
    current: list[str] = []
    index = 0
    while index < len(value):
        if value.startswith("\\;", index):
            current.append(";")
            index += 2
        elif value[index] == ";":
            parts.append("".join(current))
            current = []
            index += 1
        else:
            current.append(value[index])
            index += 1
    parts.append("".join(current))
    return parts


__all__ = ["Arg", "Command", "parse_cmake", "split_list"]
