"""Read CMake files the way CMake would, far enough to find what a configure fetches.

vLLM's configure needs a CUDA build of torch and nvcc, so it cannot run on every machine
that wants to know what the build will download.  This module reads the CMake language
itself: the commands as
:mod:`sparkbuild.build.cmake_reader.lexer` reads them, run by a small evaluator
that follows ``include()`` and ``add_subdirectory()``, tracks ``set()``/``unset()``/
``list(APPEND)``, expands ``${VAR}``/``$ENV{VAR}``, and decides ``if()`` conditions
where it knows enough.  A
condition it cannot decide (a compiler version, a ``find_package`` result it was not told)
makes *both* branches possible: vendoring a superset is safe, missing a source is not.
Every ``FetchContent_Declare``/``FetchContent_Populate`` met on the way is recorded with
its arguments resolved, its file and line, and the if-conditions around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkbuild.build.cmake_reader.conditions import Condition, Token, Unknown, truthy
from sparkbuild.build.cmake_reader.declarations import (
    MAX_ALTERNATIVES,
    Declaration,
    ScanState,
    ValueResolver,
)
from sparkbuild.build.cmake_reader.lexer import Arg, Command, parse_cmake, split_list

# -- the evaluator ---------------------------------------------------------------------


@dataclass
class _Block:
    """One if/elseif/else chain: whether the current branch runs, and the chain so far."""

    active: bool | None
    """True: this branch runs; False: it does not; None: it may."""
    any_taken: bool | None
    condition: str
    parent_active: bool | None


# FetchContent options whose value is one word; the rest may take several.
_SINGLE_VALUE = {
    "GIT_REPOSITORY", "GIT_TAG", "GIT_SHALLOW", "GIT_PROGRESS", "URL_HASH", "URL_MD5",
    "SOURCE_DIR", "BINARY_DIR", "SUBBUILD_DIR", "SOURCE_SUBDIR", "DOWNLOAD_NAME",
    "GIT_SUBMODULES_RECURSE", "EXCLUDE_FROM_ALL", "SYSTEM", "OVERRIDE_FIND_PACKAGE",
    "DOWNLOAD_EXTRACT_TIMESTAMP", "TLS_VERIFY", "GIT_REMOTE_NAME", "QUIET",
}
_MULTI_VALUE = {
    "URL", "GIT_SUBMODULES", "GIT_CONFIG", "CONFIGURE_COMMAND", "BUILD_COMMAND",
    "INSTALL_COMMAND", "TEST_COMMAND", "PATCH_COMMAND", "UPDATE_COMMAND",
    "FIND_PACKAGE_ARGS", "CMAKE_ARGS",
}
_KEYWORDS = _SINGLE_VALUE | _MULTI_VALUE


def _options(values: list[str]) -> dict[str, tuple[str, ...]]:
    options: dict[str, list[str]] = {}
    key: str | None = None
    for value in values:
        if value in _KEYWORDS:
            key = value
            options.setdefault(key, [])
        elif key is not None:
            options[key].append(value)
            if key in _SINGLE_VALUE:
                key = None
    return {k: tuple(v) for k, v in options.items()}


class Evaluator(ValueResolver):
    """Runs the commands of a tree's CMake files in order, as far as they are known."""

    def __init__(self, state: ScanState, *, static: bool = False) -> None:
        super().__init__(state)
        self.static = static
        """Static sweep: every condition is undecided, includes are not followed."""

    # -- running files -------------------------------------------------------------------

    def run_file(self, path: Path, current_dir: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        if path not in self.state.files:
            self.state.files.append(path)
        self.run_commands(parse_cmake(text), path, current_dir)

    def run_commands(self, commands: list[Command], list_file: Path, current_dir: Path) -> None:
        blocks: list[_Block] = []
        skip_depth = 0  # inside function()/macro() bodies: defined, not run
        for command in commands:
            name = command.name
            if name in ("function", "macro"):
                skip_depth += 1
                continue
            if name in ("endfunction", "endmacro"):
                skip_depth = max(0, skip_depth - 1)
                continue
            if skip_depth:
                continue
            if self._flow(command, blocks, list_file, current_dir):
                continue
            active = _combined(blocks)
            if active is False:
                continue
            if name == "return" and active is True:
                return
            self._command(command, active, blocks, list_file, current_dir)

    def _flow(
        self, command: Command, blocks: list[_Block], list_file: Path, current_dir: Path
    ) -> bool:
        name = command.name
        if name not in ("if", "elseif", "else", "endif", "foreach", "endforeach", "while",
                        "endwhile", "block", "endblock"):
            return False
        verdict: bool | None
        if name == "if":
            parent = _combined(blocks)
            verdict = False
            if parent is not False:
                verdict = self._decide(command, list_file, current_dir)
            blocks.append(_Block(verdict, verdict, _condition_text(command), parent))
        elif name in ("elseif", "else") and blocks:
            block = blocks[-1]
            if block.any_taken is True:
                verdict = False
            elif name == "else":
                verdict = True if block.any_taken is False else None
            else:
                decided = self._decide(command, list_file, current_dir)
                verdict = None if (decided is not False and block.any_taken is None) else decided
            block.active = verdict
            block.any_taken = _or(block.any_taken, verdict)
            block.condition = ("NOT (" + block.condition + ")") if name == "else" else (
                _condition_text(command)
            )
        elif name in ("foreach", "while"):
            # Loop bodies run with unknown loop variables: treat them as may-run blocks.
            parent = _combined(blocks)
            blocks.append(_Block(None, None, f"{name}(...)", parent))
        elif name == "block":
            blocks.append(_Block(True, True, "block()", _combined(blocks)))
        elif blocks:
            blocks.pop()
        return True

    def _decide(self, command: Command, list_file: Path, current_dir: Path) -> bool | None:
        if self.static:
            return None
        try:
            verdicts = {
                Condition(tokens, self).evaluate()
                for tokens in self._condition_tokens(command.args, current_dir, list_file)
            }
        except Unknown:
            return None
        return verdicts.pop() if len(verdicts) == 1 else None

    def _condition_tokens(
        self, args: tuple[Arg, ...], current_dir: Path, list_file: Path
    ) -> list[list[Token]]:
        """Every possible token list of a condition (variables may have several values)."""
        alternatives: list[list[Token]] = [[]]
        for arg in args:
            if arg.bracket:
                options = [[Token(arg.text, True)]]
            else:
                options = []
                for value in self.expand(arg.text, current_dir, list_file, strict=True):
                    expanded = value != arg.text
                    if arg.quoted:
                        options.append([Token(value, True)])
                    else:
                        options.append(
                            [Token(p, False, expanded) for p in split_list(value) if p != ""]
                        )
            alternatives = [a + o for a in alternatives for o in options][:MAX_ALTERNATIVES]
        return alternatives

    # -- the commands that matter --------------------------------------------------------

    def _command(
        self,
        command: Command,
        active: bool | None,
        blocks: list[_Block],
        list_file: Path,
        current_dir: Path,
    ) -> None:
        name = command.name
        if name == "set":
            self._set(command, active, list_file, current_dir)
        elif name == "unset" and command.args:
            if active is True:
                self.state.variables.pop(command.args[0].text, None)
        elif name == "list":
            self._list(command, active, list_file, current_dir)
        elif name == "include" and not self.static:
            self._include(command, list_file, current_dir)
        elif name == "add_subdirectory" and not self.static:
            self._add_subdirectory(command, list_file, current_dir)
        elif name in ("fetchcontent_declare", "fetchcontent_populate"):
            self._record(command, active, blocks, list_file, current_dir)
        elif name == "fetchcontent_makeavailable":
            for dep in self.expand_args(command.args, current_dir, list_file):
                self.state.made_available.add(dep.lower())

    def _assign(self, name: str, values: tuple[str, ...], active: bool | None) -> None:
        if active is True:
            self.state.variables[name] = values
        else:  # may or may not run: keep the old possibilities too
            old = self.state.variables.get(name, ())
            merged = tuple(dict.fromkeys(old + values))
            self.state.variables[name] = merged[:MAX_ALTERNATIVES]

    def _set(
        self, command: Command, active: bool | None, list_file: Path, current_dir: Path
    ) -> None:
        if not command.args:
            return
        name = self.expand(command.args[0].text, current_dir, list_file)[0]
        rest = command.args[1:]
        words = [arg.text for arg in rest]
        if "PARENT_SCOPE" in words:
            return  # function results: not modelled
        if "CACHE" in words:
            cut = words.index("CACHE")
            force = "FORCE" in words[cut:]
            if name in self.state.variables and not force:
                return  # -D on the command line (or an earlier set) wins over the default
            rest = rest[:cut]
        values = self._value_alternatives(rest, list_file, current_dir)
        self._assign(name, values, active)

    def _list(
        self, command: Command, active: bool | None, list_file: Path, current_dir: Path
    ) -> None:
        words = self.expand_args(command.args, current_dir, list_file)
        if len(words) < 2 or words[0] not in ("APPEND", "PREPEND"):
            return
        name, items = words[1], words[2:]
        old = self.state.variables.get(name, ("",))
        joined = ";".join(items)
        values = tuple(
            ";".join(p for p in ((o, joined) if words[0] == "APPEND" else (joined, o)) if p)
            for o in old
        )
        self._assign(name, values, active)

    def _include(self, command: Command, list_file: Path, current_dir: Path) -> None:
        words = self.expand_args(command.args, current_dir, list_file)
        if not words:
            return
        target = Path(words[0])
        if not target.suffix:  # a CMake module such as FetchContent
            return
        path = target if target.is_absolute() else current_dir / target
        self._follow(path.resolve(), current_dir, command, list_file)

    def _add_subdirectory(self, command: Command, list_file: Path, current_dir: Path) -> None:
        words = self.expand_args(command.args, current_dir, list_file)
        if not words:
            return
        directory = Path(words[0])
        directory = (directory if directory.is_absolute() else current_dir / directory).resolve()
        saved = dict(self.state.variables)  # a subdirectory gets its own scope
        self._follow(directory / "CMakeLists.txt", directory, command, list_file)
        self.state.variables = saved

    def _follow(self, path: Path, current_dir: Path, command: Command, list_file: Path) -> None:
        key = (list_file, command.line)
        if key in self.state.visited or not path.is_file():
            return
        if not path.is_relative_to(self.state.tree):
            return  # only the tree's own files: dependencies are read after they are fetched
        self.state.visited.add(key)
        self.run_file(path, current_dir)

    def _record(
        self,
        command: Command,
        active: bool | None,
        blocks: list[_Block],
        list_file: Path,
        current_dir: Path,
    ) -> None:
        words = self.expand_args(command.args, current_dir, list_file)
        if not words:
            return
        options = _options(words[1:])
        method = "declare" if command.name == "fetchcontent_declare" else "populate"
        if method == "populate" and not options:
            return  # FetchContent_Populate(name): populates an earlier declaration
        self.state.declarations.append(
            Declaration(
                name=words[0],
                method=method,
                options=options,
                file=list_file,
                line=command.line,
                conditions=tuple(b.condition for b in blocks),
                certain=active is True,
                reached=not self.static,
            )
        )


def _combined(blocks: list[_Block]) -> bool | None:
    state: bool | None = True
    for block in blocks:
        if block.active is False:
            return False
        if block.active is None:
            state = None
    return state


def _or(left: bool | None, right: bool | None) -> bool | None:
    if left is True or right is True:
        return True
    if left is False and right is False:
        return False
    return None


def _condition_text(command: Command) -> str:
    return " ".join(
        f'"{arg.text}"' if arg.quoted and not arg.bracket else arg.text for arg in command.args
    )


def scan_tree(
    tree: Path, *, defines: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> ScanState:
    """Evaluate ``tree``/CMakeLists.txt, then sweep the other CMake files statically.

    ``defines`` are -D values (they win over ``set(... CACHE ...)`` defaults), ``env`` the
    environment the configure would see.  Declarations in files the evaluation never
    reached (or in function bodies) are added with ``reached=False``.
    """
    tree = tree.resolve()
    state = ScanState(
        tree=tree,
        variables={key: (value,) for key, value in (defines or {}).items()},
        env=dict(env or {}),
    )
    top = tree / "CMakeLists.txt"
    Evaluator(state).run_file(top, tree)
    seen = {(d.file, d.line) for d in state.declarations}
    for path in _cmake_files(tree):
        static = ScanState(tree=tree, variables={}, env=state.env)
        text = path.read_text(encoding="utf-8", errors="replace")
        commands = parse_cmake(text)
        Evaluator(static, static=True).run_commands(_unwrap_functions(commands), path, path.parent)
        for declaration in static.declarations:
            if (declaration.file, declaration.line) not in seen:
                state.declarations.append(declaration)
    return state


def _unwrap_functions(commands: list[Command]) -> list[Command]:
    """Function and macro bodies, inlined: the static sweep must see into them too."""
    return [c for c in commands if c.name not in ("function", "endfunction", "macro", "endmacro")]


_SKIP_DIRS = {".git", ".deps", "build", "_deps", "node_modules", ".sparkbuild", "tests"}


def _cmake_files(tree: Path) -> list[Path]:
    """CMakeLists.txt and *.cmake files of the tree itself (not build outputs or tests)."""
    found: list[Path] = []
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree).parts
        if any(part in _SKIP_DIRS for part in relative[:-1]):
            continue
        if (path.name == "CMakeLists.txt" or path.suffix == ".cmake") and path.is_file():
            found.append(path)
    return found


__all__ = [
    "MAX_ALTERNATIVES",
    "Arg",
    "Command",
    "Declaration",
    "Evaluator",
    "ScanState",
    "ValueResolver",
    "parse_cmake",
    "scan_tree",
    "truthy",
]
