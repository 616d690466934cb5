"""`patch apply` through the CLI, as a CI log sees it: each kind of command echoed once,
every one of them with -v."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.builders import write_series
from sparkbuild.cli import main


def diff(n: int) -> str:
    return (f"diff --git a/f{n}.c b/f{n}.c\n--- a/f{n}.c\n+++ b/f{n}.c\n"
            f"@@ -1 +1 @@\n-int v{n} = 0;\n+int v{n} = 1;\n")


def apply_series(tmp_path: Path, name: str, *flags: str) -> str:
    tree = tmp_path / name
    tree.mkdir()
    for n in range(4):
        (tree / f"f{n}.c").write_text(f"int v{n} = 0;\n", encoding="utf-8")
    recipe = write_series(tmp_path / f"{name}-patches", {f"{n}.diff": diff(n) for n in range(4)})
    assert main(["patch", "apply", str(tree), "--recipe", str(recipe.path), *flags]) == 0
    return str(tree)


def test_without_a_terminal_git_apply_is_echoed_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = apply_series(tmp_path, "quiet")
    err = capsys.readouterr().err
    assert err.count("+ git apply") == 1, err
    assert err.count(f"env GIT_CEILING_DIRECTORIES={Path(tree).parent}") == 1, err
    assert "(further `git apply` commands are not echoed; -v echoes them all)" in err


def test_v_echoes_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = apply_series(tmp_path, "loud", "-v")
    err = capsys.readouterr().err
    assert err.count("+ git apply") == 4, err  # one apply per patch (checks are not echoed)
    assert err.count("+ git apply") == err.count(
        f"env GIT_CEILING_DIRECTORIES={Path(tree).parent}")
    assert "not echoed" not in err
