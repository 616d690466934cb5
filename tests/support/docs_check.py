"""The docs stay true: every sparkbuild command and flag the Markdown names exists in the CLI,
and every relative link (images and reference definitions too) resolves.

What counts as a mention (the rules the pages are written to):

- in a fenced code block (any language but toml, json, ini, text, diff), every
  ``sparkbuild`` word (``python -m sparkbuild``, ``.venv/bin/sparkbuild``) starts an
  invocation: the command after it, and every ``-x``/``--xx`` flag up to ``|``, ``&&``,
  ``;``, ``>`` or a ``#`` comment;
- inline code that holds the word ``sparkbuild``, or starts with a command's name
  (```wheel --offline --bundle```), is an invocation too;
- inline code that starts with a flag (```--json```) names flags of some command;
- inline code that starts with a plain word and holds a flag, where the word is neither a
  sparkbuild command nor a program of :data:`FOREIGN` (```teleport-kernels --out DIR```),
  names a command that does not exist.  Another program's flag is written with its
  program (```pip install --no-deps```).

``[--x]``, ``{a,b}`` and ``ARG]...`` are read as usage syntax.  A mention followed by
``(pending`` in prose, or a code line whose comment says ``pending``, names what is not in
the CLI yet: it must not exist (once it does, the mark has to go), and nothing else is
asked of it.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

FOREIGN = frozenset({
    "python", "python3", "pip", "uv", "git", "cmake", "ninja", "nvcc", "ptxas", "cuobjdump",
    "cargo", "sccache", "ccache", "pytest", "sha256sum", "rm", "unshare", "redis-server",
    "docker", "actionlint", "gh", "tar", "curl", "ssh", "rsync", "ls", "cp", "env", "sudo",
    "apt-get", "bash", "make", "gcc", "ulimit", "nvidia-smi", "systemctl", "vllm",
})
"""Programs other than sparkbuild whose flags the pages may name."""

SKIPPED_FENCES = frozenset({"toml", "json", "ini", "text", "diff"})
OPERATORS = frozenset({"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "<", "&"})
FLAG = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9-]*")
WORD = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
INLINE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)")
HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Cli:
    """What ``sparkbuild --help`` and each ``sparkbuild COMMAND --help`` offer."""

    top: frozenset[str]
    commands: dict[str, frozenset[str]]
    choices: dict[str, tuple[frozenset[str] | None, ...]]
    """Per command, its positionals in order: the values each allows (None: any)."""

    @classmethod
    def from_parser(cls, parser: argparse.ArgumentParser) -> Cli:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands: dict[str, frozenset[str]] = {}
        choices: dict[str, tuple[frozenset[str] | None, ...]] = {}
        for name, command in sub._name_parser_map.items():
            options = set(command._option_string_actions)
            for nested in command._actions:  # a command group (`team scheduler|server`):
                if isinstance(nested, argparse._SubParsersAction):  # its roles' flags
                    for role in nested._name_parser_map.values():
                        options |= set(role._option_string_actions)
            commands[name] = frozenset(options)
            choices[name] = tuple(
                frozenset(str(c) for c in a.choices) if a.choices else None
                for a in command._actions if not a.option_strings
            )
        return cls(frozenset(parser._option_string_actions), commands, choices)

    @property
    def every_flag(self) -> frozenset[str]:
        return self.top.union(*self.commands.values())


@dataclass(frozen=True)
class Mention:
    """One command line, or a few flags, as a page writes it."""

    where: str
    text: str
    command: str | None
    """None: flags named without their command (any command's will do)."""
    flags: tuple[str, ...]
    words: tuple[tuple[str, ...], ...]
    """The positionals after the command, each as its alternatives (``{a,b}``)."""
    top_flags: tuple[str, ...] = ()
    pending: bool = False
    foreign_command: bool = False

    def problems(self, cli: Cli) -> list[str]:
        found = self._problems(cli)
        if self.pending:
            return [] if found else [
                f"{self.where}: `{self.text}` is marked pending but the CLI has it: drop the mark"
            ]
        return found

    def _problems(self, cli: Cli) -> list[str]:
        here = f"{self.where}: `{self.text}`"
        if self.foreign_command:
            return [f"{here}: sparkbuild has no command {self.command!r} (another program? "
                    "add it to docs_check.FOREIGN)"]
        found = [f"{here}: sparkbuild has no option {flag}" for flag in self.top_flags
                 if flag not in cli.top]
        if self.command is None:
            return found + [f"{here}: no sparkbuild command has {flag} (another program's? "
                            "write it with its program)" for flag in self.flags
                            if flag not in cli.every_flag]
        if self.command not in cli.commands:
            return [*found, f"{here}: sparkbuild has no command {self.command!r}"]
        offered = cli.commands[self.command]
        found += [f"{here}: `sparkbuild {self.command}` has no {flag}" for flag in self.flags
                  if flag not in offered]
        for slot, alternatives in zip(cli.choices[self.command], self.words, strict=False):
            if slot is not None:
                found += [f"{here}: `sparkbuild {self.command}` takes no {word!r} "
                          f"(only {', '.join(sorted(slot))})"
                          for word in alternatives if word not in slot]
        return found


def _clean(token: str) -> list[str]:
    """A usage token's words: ``[--tree`` -> ``--tree``, ``{a,b}`` -> ``a``, ``b``."""
    token = token.strip("[](),").removesuffix("...").strip("[]")
    if token.startswith("{") and token.endswith("}"):
        return [t for t in token[1:-1].split(",") if t]
    return [token] if token else []


def _is_flag(token: str) -> bool:
    return FLAG.fullmatch(token.split("=", 1)[0]) is not None


def _invocation(tokens: list[str], where: str, text: str, pending: bool) -> Mention | None:
    """The mention ``tokens`` (what follows the word ``sparkbuild``) make, if any."""
    top: list[str] = []
    command: str | None = None
    flags: list[str] = []
    words: list[tuple[str, ...]] = []
    for raw in tokens:
        if raw in OPERATORS or raw.startswith("#"):
            break
        cleaned = _clean(raw)
        if not cleaned:
            continue
        if len(cleaned) == 1 and _is_flag(cleaned[0]):
            (top if command is None else flags).append(cleaned[0].split("=", 1)[0])
        elif command is None:
            command = cleaned[0]
        else:
            words.append(tuple(cleaned))
    if command is None and not top:
        return None
    return Mention(where, text, command, tuple(flags), tuple(words), tuple(top), pending)


def _is_sparkbuild(token: str) -> bool:
    return token == "sparkbuild" or token.endswith("/bin/sparkbuild")


def _code_line(line: str, where: str) -> list[Mention]:
    """The invocations on one line of a code block."""
    code, comment = line, ""
    match = re.search(r"(?:^|\s)#(.*)$", line)
    if match:
        code, comment = line[: match.start()], match.group(1)
    pending = "pending" in comment
    tokens = code.split()
    found: list[Mention] = []
    for i, token in enumerate(tokens):
        if _is_sparkbuild(token):
            mention = _invocation(tokens[i + 1:], where, code.strip(), pending)
            if mention is not None:
                found.append(mention)
    return found


def _inline(span: str, where: str, pending: bool, cli: Cli) -> Mention | None:
    raw = span.replace("\\|", "|").split()
    tokens = [word for token in raw for word in _clean(token)]
    if not tokens:
        return None
    for i, token in enumerate(raw):
        if _is_sparkbuild(token):
            return _invocation(raw[i + 1:], where, span, pending)
    first = tokens[0]
    if raw[0] in cli.commands:
        return _invocation(raw, where, span, pending)
    flags = tuple(t.split("=", 1)[0] for t in tokens if _is_flag(t))
    if _is_flag(first):
        return Mention(where, span, None, flags, (), (), pending)
    if WORD.fullmatch(raw[0]) and first not in FOREIGN and flags:
        return Mention(where, span, first, flags, (), (), pending, foreign_command=True)
    return None


def mentions(path: Path, cli: Cli, name: str | None = None) -> list[Mention]:
    """Every command and flag ``path`` names, in the order written."""
    label = name or path.name
    found: list[Mention] = []
    fence: str | None = None
    skip = False
    pending_line = ""
    paragraph: list[tuple[int, str]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        where = f"{label}:{number}"
        opening = FENCE.match(line)
        if fence is None and opening:
            fence, skip = opening.group(1), opening.group(2).lower() in SKIPPED_FENCES
            continue
        if fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence, pending_line = None, ""
            elif not skip:
                joined = pending_line + line
                if joined.rstrip().endswith("\\"):
                    pending_line = joined.rstrip()[:-1] + " "
                    continue
                pending_line = ""
                found += _code_line(joined, where)
            continue
        paragraph.append((number, line))
        if number == len(lines) or not lines[number].strip() or FENCE.match(lines[number]):
            found += _prose(paragraph, label, cli)
            paragraph = []
    return found


def _prose(paragraph: list[tuple[int, str]], label: str, cli: Cli) -> list[Mention]:
    """The mentions in the inline code of one paragraph (a span may cross a line break)."""
    text = "\n".join(line for _, line in paragraph)
    found: list[Mention] = []
    for match in INLINE.finditer(text):
        number = paragraph[0][0] + text.count("\n", 0, match.start())
        pending = re.match(r"\s*\(pending\b", text[match.end():]) is not None
        span = match.group(2).replace("\n", " ").strip()
        mention = _inline(span, f"{label}:{number}", pending, cli)
        if mention is not None:
            found.append(mention)
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        opening = FENCE.match(line)
        if opening and (fence is None or opening.group(1)[0] == fence[0]):
            fence = None if fence is not None else opening.group(1)
            continue
        match = HEADING.match(line)
        if fence is None and match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            seen.setdefault(f"{base}-{count}" if count else base, 1)
    return set(seen)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside code."""
    found: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        opening = FENCE.match(line)
        if opening and (fence is None or opening.group(1)[0] == fence[0]):
            fence = None if fence is not None else opening.group(1)
            continue
        if fence is None:
            prose = INLINE.sub("", line)
            found += [(number, m.group(1)) for m in LINK.finditer(prose)]
            definition = DEFINITION.match(line)
            if definition:
                found.append((number, definition.group(1)))
    return found


def link_problems(path: Path, name: str | None = None) -> list[str]:
    """Every relative link of ``path`` that names no file, or no heading of its file."""
    label = name or path.name
    problems: list[str] = []
    for number, target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto: ...: not this checker's to reach
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        if not destination.exists():
            problems.append(f"{label}:{number}: link to {target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{label}:{number}: link to {target}: no heading #{anchor}")
    return problems


def check(paths: list[Path], cli: Cli, root: Path | None = None) -> list[str]:
    """Every problem of ``paths``: names the CLI lacks, stale pending marks, dead links."""
    problems: list[str] = []
    for path in paths:
        name = str(path.relative_to(root)) if root else path.name
        for mention in mentions(path, cli, name):
            problems += mention.problems(cli)
        problems += link_problems(path, name)
    return problems
