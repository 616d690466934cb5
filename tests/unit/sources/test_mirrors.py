"""URL rewrites for vendoring from mirrors: git's insteadOf rules, longest base first."""

from __future__ import annotations

import pytest

from sparkbuild.errors import UsageError
from sparkbuild.sources.mirrors import Mirrors, parse_mirror


def test_a_rule_rewrites_the_prefix_and_keeps_the_rest() -> None:
    mirrors = Mirrors.parse(["https://github.com/=file:///srv/git/"])
    assert mirrors.rewrite("https://github.com/NVIDIA/cutlass.git") == (
        "file:///srv/git/NVIDIA/cutlass.git")
    assert mirrors.rewrite("https://gitlab.com/x/y.git") == "https://gitlab.com/x/y.git"


def test_the_longest_matching_base_wins_as_in_git() -> None:
    mirrors = Mirrors.parse([
        "https://github.com/=file:///srv/git/",
        "https://github.com/deepseek-ai/DeepGEMM.git=file:///srv/forks/sgl-DeepGEMM",
    ])
    assert mirrors.rewrite("https://github.com/deepseek-ai/DeepGEMM.git") == (
        "file:///srv/forks/sgl-DeepGEMM")
    assert mirrors.rewrite("https://github.com/fmtlib/fmt.git") == "file:///srv/git/fmtlib/fmt.git"


def test_git_config_args_reach_submodules() -> None:
    mirrors = Mirrors.parse(["https://github.com/=file:///srv/git/"])
    assert mirrors.git_config_args() == [
        "-c", "url.file:///srv/git/.insteadOf=https://github.com/",
        "-c", "protocol.file.allow=always"]
    remote = Mirrors.parse(["https://github.com/=https://git.corp/mirror/"])
    assert remote.git_config_args() == [
        "-c", "url.https://git.corp/mirror/.insteadOf=https://github.com/"]
    assert Mirrors().git_config_args() == []
    assert not Mirrors()


@pytest.mark.parametrize("text", ["https://github.com/", "=file:///x", "https://a/=", ""])
def test_a_rule_without_both_sides_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="BASE=REPLACEMENT"):
        parse_mirror(text)


def test_command_line_rules_come_before_the_recipe_s() -> None:
    cli = Mirrors.parse(["https://github.com/=file:///cli/"])
    recipe = Mirrors.parse(["https://github.com/=file:///recipe/",
                            "https://gitlab.com/=file:///lab/"])
    merged = cli.merged(recipe)
    assert merged.rewrite("https://github.com/a/b") == "file:///cli/a/b"
    assert merged.rewrite("https://gitlab.com/a/b") == "file:///lab/a/b"
    assert merged.to_list() == ["https://github.com/=file:///cli/",
                                "https://gitlab.com/=file:///lab/"]
