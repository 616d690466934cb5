"""Variable values as a CMake scan sees them: the scan's state and ``${VAR}`` expansion.

Split from :mod:`sparkbuild.build.cmake_reader.scan`:
:class:`ValueResolver` holds the value side of the
evaluator (expanding ``${VAR}``/``$ENV{VAR}`` into every value a variable may have, and
answering
:class:`~sparkbuild.build.cmake_reader.conditions.Variables` questions for conditions), so the
evaluator there is left with control flow and the commands that matter.
:mod:`sparkbuild.build.cmake_reader.scan` re-exports the public names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkbuild.build.cmake_reader.conditions import Unknown, is_override_name
from sparkbuild.build.cmake_reader.lexer import Arg, split_list

MAX_ALTERNATIVES = 8
"""A variable set in undecided branches keeps at most this many possible values."""

_VAR_REF = re.compile(r"\$(ENV)?\{([^${}]*)\}")


@dataclass(frozen=True)
class Declaration:
    """One FetchContent_Declare or FetchContent_Populate as the configure would see it."""

    name: str
    method: str
    """``declare`` or ``populate`` (the full signature, which bypasses FetchContent's
    FETCHCONTENT_SOURCE_DIR_<NAME> override)."""
    options: dict[str, tuple[str, ...]]
    """Keyword -> values, variables expanded (GIT_REPOSITORY, GIT_TAG, URL, URL_HASH...)."""
    file: Path
    line: int
    conditions: tuple[str, ...]
    """The if() conditions around it, outermost first (text as written)."""
    certain: bool
    """False when an undecided condition encloses it: the build may or may not fetch it."""
    reached: bool = True
    """False for a declaration found only by the static sweep (e.g. a CPU-only file)."""

    def first(self, key: str) -> str | None:
        values = self.options.get(key)
        return values[0] if values else None


@dataclass
class ScanState:
    tree: Path
    variables: dict[str, tuple[str, ...]]
    env: dict[str, str]
    declarations: list[Declaration] = field(default_factory=list)
    made_available: set[str] = field(default_factory=set)
    visited: set[tuple[Path, int]] = field(default_factory=set)
    files: list[Path] = field(default_factory=list)


class ValueResolver:
    """The values side of the evaluator: what a variable or an argument may expand to."""

    def __init__(self, state: ScanState) -> None:
        self.state = state

    # -- expansion -----------------------------------------------------------------------

    def expand(
        self, text: str, current_dir: Path, list_file: Path, *, strict: bool = False
    ) -> tuple[str, ...]:
        """All possible values of ``text`` after variable references are replaced.

        ``strict``: a reference to a variable the scan knows nothing about raises
        :class:`Unknown` instead of expanding to "" (conditions must not guess).
        """
        results = [text]
        for _ in range(16):  # nested references resolve from the inside out
            progressed = False
            next_results: list[str] = []
            for value in results:
                match = _VAR_REF.search(value)
                if match is None:
                    next_results.append(value)
                    continue
                progressed = True
                for replacement in self._lookup(match, current_dir, list_file, strict):
                    next_results.append(value[: match.start()] + replacement + value[match.end():])
            results = list(dict.fromkeys(next_results))[:MAX_ALTERNATIVES]
            if not progressed:
                break
        return tuple(results)

    def _lookup(
        self, match: re.Match[str], current_dir: Path, list_file: Path, strict: bool
    ) -> tuple[str, ...]:
        name = match.group(2)
        if match.group(1):
            return (self.state.env.get(name, ""),)
        builtin = {
            "CMAKE_CURRENT_LIST_DIR": str(list_file.parent),
            "CMAKE_CURRENT_LIST_FILE": str(list_file),
            "CMAKE_CURRENT_SOURCE_DIR": str(current_dir),
            "CMAKE_SOURCE_DIR": str(self.state.tree),
            "PROJECT_SOURCE_DIR": str(self.state.tree),
        }
        if name in builtin:
            return (builtin[name],)
        if name in self.state.variables:
            return self.state.variables[name]
        if strict and not is_override_name(name):
            raise Unknown(name)
        return ("",)

    # -- what conditions may ask (cmakecond.Variables) ----------------------------------

    @property
    def tree(self) -> Path:
        return self.state.tree

    def value(self, name: str) -> str | None:
        values = self.state.variables.get(name)
        if values is None:
            if is_override_name(name):
                return None
            raise Unknown(name)
        if len(set(values)) != 1:
            raise Unknown(name)
        return values[0]

    def env(self, name: str) -> str | None:
        return self.state.env.get(name)

    def expand_args(self, args: tuple[Arg, ...], current_dir: Path, list_file: Path) -> list[str]:
        """Arguments as CMake passes them: unquoted ones split on ``;``."""
        values: list[str] = []
        for arg in args:
            if arg.bracket:
                values.append(arg.text)
                continue
            expanded = self.expand(arg.text, current_dir, list_file)[0]
            if arg.quoted:
                values.append(expanded.replace("\\;", ";"))
            else:
                values.extend(part for part in split_list(expanded) if part != "")
        return values

    def _value_alternatives(
        self, args: tuple[Arg, ...], list_file: Path, current_dir: Path
    ) -> tuple[str, ...]:
        alternatives: list[str] = [""]
        for arg in args:
            options = (arg.text,) if arg.bracket else self.expand(arg.text, current_dir, list_file)
            alternatives = [
                (prefix + ";" + option) if prefix else option
                for prefix in alternatives
                for option in options
            ][:MAX_ALTERNATIVES]
        return tuple(dict.fromkeys(alternatives))
