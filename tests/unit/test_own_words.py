"""The product speaks of itself, not of its history or of the team that makes it: no line of
src/, patches/, recipes/ or tests/ holds what :data:`WORDS` finds (the acceptance grep,
``grep -rniE``), save the few lines :data:`ALLOWED` names and says why.  A measurement is
said as a fact, with its figure and its bench record.

Every text file of those folders is read; ``__pycache__`` and files with a NUL byte in
their first 8 KiB are not.  The words are spelled in pieces so that this file is no
finding of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("src", "patches", "recipes", "tests")
S_WORD = "sess" + "ion"
D_WORD = "the dev" + "ice"
T_WORD = "tod" + "ay's"
I_WORD = "iss" + "ue"
WORDS = re.compile(rf"{D_WORD}|{T_WORD}|{S_WORD}|\b{I_WORD}s?\s?#?\d", re.IGNORECASE)

ALLOWED: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("src/sparkbuild/proc.py", re.compile(rf"start_new_{S_WORD}=True"),
     "subprocess.Popen's keyword for setsid: every child's own process group"),
    ("tests/integration/test_proc.py", re.compile(rf"start_new_{S_WORD}=True"),
     "subprocess.Popen's keyword: the driver runs as a shell's foreground job"),
    ("tests/integration/test_killed_run.py", re.compile(rf"start_new_{S_WORD}=True"),
     "subprocess.Popen's keyword: the killed run and the next one in groups of their own"),
    ("tests/integration/conftest.py", re.compile(rf'scope="{S_WORD}"'),
     "pytest's fixture scope: one sdist for the whole test run"),
    ("tests/unit/test_benchmarks_names.py", re.compile(rf"{S_WORD}('s)?[ _]number|work {S_WORD}"),
     "the guard against bench runs named by a work sitting's number names what it looks for"),
)
"""``(path, what the line may hold, why)``: the only findings that stay."""


def scanned_files(root: Path) -> list[Path]:
    """Every plain file under the folders of ``root``, in order, ``__pycache__`` skipped."""
    return sorted(path for folder in FOLDERS if (root / folder).is_dir()
                  for path in (root / folder).rglob("*")
                  if path.is_file() and not path.is_symlink()
                  and "__pycache__" not in path.relative_to(root).parts)


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    return None if b"\0" in data[:8192] else data.decode("utf-8", errors="replace")


def findings(root: Path) -> list[str]:
    """``path:line: text`` for every line of a scanned file that the words match."""
    found: list[str] = []
    for path in scanned_files(root):
        text = _text(path)
        if text is None:
            continue
        relative = path.relative_to(root).as_posix()
        found += [f"{relative}:{number}: {line.strip()}"
                  for number, line in enumerate(text.splitlines(), start=1)
                  if WORDS.search(line)]
    return found


def _allowed(finding: str) -> bool:
    path, _, rest = finding.partition(":")
    line = rest.partition(": ")[2]
    return any(path == where and allowed.search(line) for where, allowed, _ in ALLOWED)


def test_no_line_speaks_of_the_history_or_the_team() -> None:
    assert [f for f in findings(ROOT) if not _allowed(f)] == []


def test_each_allowed_line_is_still_there() -> None:
    kept = findings(ROOT)
    stale = [(where, allowed.pattern) for where, allowed, _ in ALLOWED
             if not any(f.startswith(f"{where}:") and _allowed(f) for f in kept)]
    assert stale == []


def test_the_scan_finds_every_form(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text(
        f"# measured on {D_WORD.upper()}\nx = 1\n# {T_WORD.capitalize()} plan\n"
        f"# each child in a {S_WORD} of its own\n# see {I_WORD.capitalize()} 23\n"
        f"# {I_WORD}#7 and {I_WORD}s 4\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "b.toml").write_text(f"# the work {S_WORD}\n")
    assert findings(tmp_path) == [
        f"src/a.py:1: # measured on {D_WORD.upper()}", f"src/a.py:3: # {T_WORD.capitalize()} plan",
        f"src/a.py:4: # each child in a {S_WORD} of its own",
        f"src/a.py:5: # see {I_WORD.capitalize()} 23", f"src/a.py:6: # {I_WORD}#7 and {I_WORD}s 4",
        f"tests/b.toml:1: # the work {S_WORD}"]


def test_the_scan_skips_caches_binaries_and_other_folders(tmp_path: Path) -> None:
    (tmp_path / "src" / "__pycache__").mkdir(parents=True)
    (tmp_path / "src" / "__pycache__" / "a.txt").write_text(f"{S_WORD}\n")
    (tmp_path / "src" / "blob.bin").write_bytes(b"\0" + S_WORD.encode())
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "notes.md").write_text(f"measured on {D_WORD}\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.toml").write_text(f"# a device node, a t{I_WORD} 3 times\n")
    assert findings(tmp_path) == []


def test_an_allowed_word_elsewhere_in_the_same_file_is_still_found() -> None:
    where = "src/sparkbuild/proc.py"
    assert _allowed(f"{where}:238: start_new_{S_WORD}=True,")
    assert not _allowed(f"{where}:7: every child runs in a {S_WORD} of its own")
    assert not _allowed(f"src/sparkbuild/cli.py:9: start_new_{S_WORD}=True,")
