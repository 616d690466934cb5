"""sparkbuild.sources.requirements: the one reader of requirement files."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from packaging.version import Version

from sparkbuild.errors import RecipeError
from sparkbuild.sources.requirements import exact_pin, logical_lines, read_requirements

if TYPE_CHECKING:
    from pathlib import Path


def test_comments_continuations_and_url_fragments(tmp_path: Path) -> None:
    (tmp_path / "common.txt").write_text("numpy>=2  # arrays\n# only a comment\n")
    (tmp_path / "cuda.txt").write_text(
        "-r common.txt\n"
        "--extra-index-url https://download.example/whl\n"
        "torch==2.10.0 \\\n"
        "    ; platform_machine == 'x86_64'\n"
        "wheelpkg @ https://host/wheelpkg-1.0-py3-none-any.whl#sha256=abc\n"
    )
    lines = read_requirements(tmp_path / "cuda.txt")
    assert [line.text for line in lines] == [
        "numpy>=2",
        "torch==2.10.0      ; platform_machine == 'x86_64'",
        "wheelpkg @ https://host/wheelpkg-1.0-py3-none-any.whl#sha256=abc",
    ]
    assert lines[0].where.endswith("common.txt:1")
    assert lines[1].where.endswith("cuda.txt:3")


def test_include_cycles_are_read_once(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("-r b.txt\nsix\n")
    (tmp_path / "b.txt").write_text("--requirement=a.txt\nrich\n")
    assert [line.text for line in read_requirements(tmp_path / "a.txt")] == ["rich", "six"]


def test_a_bad_line_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("six\nnot a requirement!!\n")
    with pytest.raises(RecipeError, match="not a requirement") as caught:
        read_requirements(tmp_path / "r.txt")
    assert caught.value.where is not None and caught.value.where.endswith("r.txt:2")


def test_exact_pin_compares_versions_not_text() -> None:
    assert exact_pin(["torch==2.9.1", "torch==2.10.0", "numpy"], "torch") == Version("2.10.0")
    assert exact_pin(["Torch == 2.11.0"], "torch") == Version("2.11.0")
    assert exact_pin(["torch>=2.9", "torch==2.*"], "torch") is None
    assert exact_pin(["numpy==2.0"], "torch") is None


def test_logical_lines_keep_the_first_line_number() -> None:
    assert logical_lines("a \\\n  b\n\n#x\nc # y\n") == [(1, "a    b"), (5, "c")]
