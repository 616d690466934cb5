"""Runs are named by their date and what they measured, never by the work session that made
them, and BENCHMARKS.md opens with its headline figures.

The scan reads every file under the repository root, .git, the venv and what .gitignore
leaves out excepted; a file with a NUL byte in its first 8 KiB is binary and not read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from support.docs_check import anchors

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "BENCHMARKS.md"

WORD = "sess" + "ion"
"""Spelled in two pieces so that this file's own examples are no finding."""
RUN_BY_NUMBER = re.compile(WORD + r"s?[-_\s]{0,3}(?:no\.\s*|#)?\d+", re.IGNORECASE)
"""The word or its plural, at most three separators (spaces, a line break, ``-`` or ``_``),
then a number: the forms the bench folders and the prose used (a folder named with ``-`` and
the number, two numbers joined by "and", a number on the next line)."""

SKIPPED_AT_ROOT = frozenset({".git", ".venv", "wheelhouse", "build", "dist", ".whl", ".cache",
                             ".devaot"})
"""Not the repository's files: git's own, the venv, and .gitignore's anchored entries."""
SKIPPED_ANYWHERE = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})

HEADLINES = ("Full build, projected", "Team of Sparks, projected",
             "flashinfer for the model, measured", "Full build, measured",
             "Warm rebuild", "Pools ratio", "First start", "E2M1", "check --all")
"""BENCHMARKS.md's headline block: one line each, in this order."""
DATE = re.compile(r"(?<![-#\w])20\d\d-\d\d-\d\d(?![-\w])")
"""A date in the prose: one inside a link's anchor does not count."""
LINK = re.compile(r"\]\(#([^)\s]+)\)")


def run_names_by_number(text: str) -> list[str]:
    """Each place in ``text`` that names a run by a work session's number."""
    return [" ".join(m.group(0).split()) for m in RUN_BY_NUMBER.finditer(text)]


def _skipped(name: str, at_root: bool) -> bool:
    if at_root and (name in SKIPPED_AT_ROOT or name.startswith(".devrun")):
        return True
    return name in SKIPPED_ANYWHERE or name.endswith(".egg-info")


def repository_files(root: Path) -> Iterator[Path]:
    """Every plain file under ``root``, in order; skipped folders are not walked at all."""
    for folder, dirs, files in os.walk(root):
        at_root = Path(folder) == root
        dirs[:] = sorted(d for d in dirs if not _skipped(d, at_root))
        for name in sorted(files):
            path = Path(folder) / name
            if not _skipped(name, at_root) and not path.is_symlink():
                yield path


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def findings(root: Path) -> list[str]:
    """``path: what names a run by a session number``, for every file under ``root``."""
    found: list[str] = []
    for path in repository_files(root):
        relative = path.relative_to(root).as_posix()
        found += [f"{relative}: the path itself" for _ in run_names_by_number(relative)]
        text = text_of(path)
        if text is not None:
            found += [f"{relative}: {m}" for m in run_names_by_number(text)]
    return found


def headline_problems(page: Path) -> list[str]:
    """What keeps ``page`` from opening with the headline block, one line per figure, each
    dated and linked to a section of the page."""
    lines = page.read_text(encoding="utf-8").splitlines()
    headings = [(i, line) for i, line in enumerate(lines) if line.startswith("## ")]
    if not lines or lines[0] != "# Benchmarks":
        return ["the page does not start with '# Benchmarks'"]
    if not headings or headings[0][1] != "## Headline figures":
        return ["the first section is not '## Headline figures'"]
    start = headings[0][0] + 1
    end = headings[1][0] if len(headings) > 1 else len(lines)
    if len(headings) < 2 or headings[1][1] != "## History":
        return ["the headline block is not followed by '## History'"]
    block = lines[start:end]
    items = [line for line in block if line.startswith("- ")]
    labels = tuple(re.sub(r"^- \*\*(.+?):\*\*.*", r"\1", line) for line in items)
    problems: list[str] = []
    if labels != HEADLINES:
        problems.append(f"headline lines {labels}, expected {HEADLINES}")
    known = anchors(page)
    for line in items:
        if not DATE.search(line):
            problems.append(f"no date: {line[:60]}")
        targets = LINK.findall(line)
        if not targets or any(t not in known for t in targets):
            problems.append(f"no link to a section of the page: {line[:60]}")
    first = next((i for i, line in enumerate(block) if line.startswith("- ")), len(block))
    problems += [f"a headline runs over one line: {line[:60]}"
                 for line in block[first:] if line.strip() and not line.startswith("- ")]
    return problems


# The repository ------------------------------------------------------------------------


def test_no_file_names_a_run_by_a_session_number() -> None:
    assert findings(ROOT) == []


def test_the_scan_reads_the_bench_folders_and_the_docs() -> None:
    scanned = {p.relative_to(ROOT).as_posix() for p in repository_files(ROOT)}
    assert {"BENCHMARKS.md", "bench/first-start/README.md", "docs/node.md",
            "bench/full-build/2026-12-03-moe-pools/wheel.json"} <= scanned
    assert not any(s.startswith((".git/", ".venv/")) for s in scanned)


def test_benchmarks_opens_with_the_headline_figures() -> None:
    assert headline_problems(BENCHMARKS) == []


# The checks can fail ---------------------------------------------------------------------


def test_the_scan_finds_every_form_of_a_session_number() -> None:
    text = "\n".join([
        f"measured in {WORD} 12, on the GPU machine",
        f"{WORD.capitalize()}s 16 and 17 had all cores",
        f"bench/full-build/{WORD}-20-pools/wheel.json",
        f"the {WORD}_19 record",
        f"as the {WORD}\n15 run showed",
        f"{WORD.upper()} #9",
    ])
    assert run_names_by_number(text) == [f"{WORD} 12", f"{WORD.capitalize()}s 16",
                                         f"{WORD}-20", f"{WORD}_19", f"{WORD} 15",
                                         f"{WORD.upper()} #9"]


def test_the_scan_leaves_other_uses_of_the_word_alone() -> None:
    text = (f"each child runs in a {WORD} of its own; start_new_{WORD}=True; "
            f"the sccache {WORD}; bench/full-build/2026-12-03-moe-pools; a hold of 1800 s")
    assert run_names_by_number(text) == []


def test_a_file_or_a_folder_named_by_a_session_number_is_found(tmp_path: Path) -> None:
    (tmp_path / "bench" / f"{WORD}-12").mkdir(parents=True)
    (tmp_path / "bench" / f"{WORD}-12" / "machine.txt").write_text("16 cores\n")
    (tmp_path / "notes.md").write_text(f"see {WORD} 7\n")
    (tmp_path / "blob.bin").write_bytes(b"\0" + f"{WORD} 8".encode())
    (tmp_path / f"{WORD}-3.tar.gz").write_bytes(b"\0")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "x.py").write_text(f"# {WORD} 9\n")
    (tmp_path / "src" / "__pycache__").mkdir(parents=True)
    (tmp_path / "src" / "__pycache__" / "x.txt").write_text(f"{WORD} 10\n")
    assert findings(tmp_path) == [f"notes.md: {WORD} 7",
                                  f"{WORD}-3.tar.gz: the path itself",
                                  f"bench/{WORD}-12/machine.txt: the path itself"]


def test_a_page_without_the_headline_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\n## E2M1\n\n+6.62 per value\n")
    assert headline_problems(page) == ["the first section is not '## Headline figures'"]


def test_a_headline_without_its_date_or_its_section_is_refused(tmp_path: Path) -> None:
    good = BENCHMARKS.read_text(encoding="utf-8")
    page = tmp_path / "BENCHMARKS.md"
    first = next(line for line in good.splitlines() if line.startswith("- **Warm rebuild:**"))
    undated = DATE.sub("recently", first)
    page.write_text(good.replace(first, undated))
    assert headline_problems(page) == [f"no date: {undated[:60]}"]
    unlinked = LINK.sub("](#nowhere)", first)
    page.write_text(good.replace(first, unlinked))
    assert headline_problems(page) == [f"no link to a section of the page: {unlinked[:60]}"]
    page.write_text(good.replace(first + "\n", ""))
    assert len(headline_problems(page)) == 1
