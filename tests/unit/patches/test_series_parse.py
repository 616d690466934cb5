"""The series file and diff patches are parsed and checked before any tree is touched."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import HashMismatchError, PatchError, RecipeError
from sparkbuild.patches.edits.arch_lists import ArchListsEdit
from sparkbuild.patches.edits.family_guards import FamilyGuardsEdit
from sparkbuild.patches.edits.shuffle_guard_edit import ShuffleRowsGuardEdit
from sparkbuild.patches.series import (
    DiffPatch,
    EditPatch,
    SeriesEntry,
    load_series,
    parse_diff,
    parse_series_line,
    safe_relative_path,
)
from sparkbuild.recipe import REPO_ROOT
from sparkbuild.store.hashing import sha256_bytes

if TYPE_CHECKING:
    from pathlib import Path

GOOD = """\
diff --git a/src/a.txt b/src/a.txt
--- a/src/a.txt
+++ b/src/a.txt
@@ -1,3 +1,3 @@ section
 one
-two
+TWO
 three
@@ -10,2 +10,3 @@
 ten
+ten and a half
 eleven
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
"""


def test_parse_diff_reads_files_changes_and_hunks() -> None:
    files = parse_diff(GOOD, origin="good.diff")
    assert [(f.path, f.change, len(f.hunks)) for f in files] == [
        ("src/a.txt", "modify", 2),
        ("new.txt", "create", 1),
    ]
    assert files[0].hunks[1].source_start == 10
    assert files[0].hunks[0].header == "@@ -1,3 +1,3 @@ section"


def test_render_round_trips_and_can_be_aimed_elsewhere() -> None:
    files = parse_diff(GOOD, origin="good.diff")
    again = parse_diff("".join(f.render() for f in files), origin="again")
    assert again == files
    moved = files[0].at("other/place/a.txt").render()
    assert "--- a/other/place/a.txt\n+++ b/other/place/a.txt\n" in moved
    assert moved.endswith(files[0].hunks[-1].text)


def test_hunk_at_maps_gits_line_number_to_the_hunk() -> None:
    file = parse_diff(GOOD, origin="good.diff")[0]
    assert file.hunk_at(10) == (2, file.hunks[1])
    assert file.hunk_at(1) == (1, file.hunks[0])
    assert file.hunk_at(5) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("--- a/x\n+++ b/x\n@@ -1,3 +1,2 @@\n a\n-b\n", "malformed"),
        ("this is not a diff at all\n", "no file changes"),
        ("--- a/x\n+++ b/x\n", "no hunks"),
        ("--- x\n+++ x\n@@ -1 +1 @@\n-a\n+b\n", "prefix"),
        ("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "outside"),
        ("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "outside"),
        ("--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n", "outside"),
        ("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "renames"),
        (
            "diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n"
            "--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n",
            "renames",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -5 +5 @@\n-c\n+d\n",
            "twice",
        ),
        (
            "diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1b2c3d4\n--- /dev/null\n"
            "+++ b/l\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
            "declares a symbolic link",
        ),
        (
            "diff --git a/l b/l\ndeleted file mode 120000\n--- a/l\n+++ /dev/null\n"
            "@@ -1 +0,0 @@\n-x\n",
            "declares a symbolic link",
        ),
        (
            "diff --git a/l b/l\nindex 1b2c3d4..5e6f7a8 120000\n--- a/l\n+++ b/l\n"
            "@@ -1 +1 @@\n-x\n+/etc\n",
            "declares a symbolic link",
        ),
        (
            "diff --git a/m b/m\nnew file mode 160000\n--- /dev/null\n+++ b/m\n"
            "@@ -0,0 +1 @@\n+Subproject commit 1b2c3d4\n",
            "declares a submodule",
        ),
        (
            "diff --git a/run.sh b/run.sh\nnew file mode 100755\n--- /dev/null\n+++ b/run.sh\n"
            "@@ -0,0 +1 @@\n+echo hi\n",
            "declares an executable file",
        ),
    ],
)
def test_bad_diffs_are_refused(text: str, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        parse_diff(text, origin="bad.diff")


@pytest.mark.parametrize(
    "raw", ["a/../../b", "/abs", "./x", "x/./y", "", ".sparkbuild/applied/x", "sub/.git/config"]
)
def test_safe_relative_path_refuses(raw: str) -> None:
    with pytest.raises(PatchError):
        safe_relative_path(raw, origin="t")


def test_an_executable_file_may_be_changed_and_deleted() -> None:
    """Its mode stays as it is: only a mode the series would have to write is refused."""
    changed = ("diff --git a/run.sh b/run.sh\nindex 1b2c3d4..5e6f7a8 100755\n--- a/run.sh\n"
               "+++ b/run.sh\n@@ -1 +1 @@\n-a\n+b\n")
    deleted = ("diff --git a/run.sh b/run.sh\ndeleted file mode 100755\n--- a/run.sh\n"
               "+++ /dev/null\n@@ -1 +0,0 @@\n-a\n")
    assert parse_diff(changed, origin="c")[0].change == "modify"
    assert parse_diff(deleted, origin="d")[0].change == "delete"


def test_safe_relative_path_normalises() -> None:
    assert safe_relative_path("csrc//moe/x.cu", origin="t") == "csrc/moe/x.cu"


def _series(tmp_path: Path, lines: str, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    series = tmp_path / "series"
    series.write_text(lines, encoding="utf-8")
    return series


def test_load_series_keeps_order_names_hashes_and_checks(tmp_path: Path) -> None:
    diff = "# note\nSparkbuild-Applied-Check: shuffle-rows-bounds-guard\n\n" + GOOD
    series = _series(
        tmp_path,
        "# comment\n\nsecond.diff  # trailing comment\nfirst.patch\n",
        {"second.diff": diff, "first.patch": GOOD},
    )
    loaded = load_series(series)
    assert [p.name for p in loaded.patches] == ["second", "first"]
    second, first = loaded.patches
    assert isinstance(second, DiffPatch) and isinstance(first, DiffPatch)
    assert second.applied_check == "shuffle-rows-bounds-guard"
    assert first.applied_check is None
    assert second.sha256 != first.sha256 and len(first.sha256) == 64


@pytest.mark.parametrize(
    ("lines", "files", "message"),
    [
        ("missing.diff\n", {}, "missing patch file"),
        ("x.txt\n", {"x.txt": GOOD}, "unknown patch file type"),
        ("a.diff -p1\n", {"a.diff": GOOD}, "unknown option on the series line of a.diff"),
        ("../a.diff\n", {}, "does not start with a patch file name"),
        ("a.diff\na.toml\n", {"a.diff": GOOD, "a.toml": 'kind = "cuda-arch-lists"\n'}, "twice"),
        ("a.toml\n", {"a.toml": 'kind = "no-such-kind"\n'}, "unknown structured edit kind"),
        ("a.toml\n", {"a.toml": 'file = "x"\n'}, "lacks `kind"),
        ("a.toml\n", {"a.toml": 'kind = "cuda-arch-lists"\nbogus = 1\n'}, "unknown parameter"),
        ("a.toml\n", {"a.toml": 'kind = "cuda-arch-lists"\ntarget = "12.1a"\n'}, "plain arch"),
        ("a.toml\n", {"a.toml": "kind = [\n"}, "not valid TOML"),
    ],
)
def test_bad_series_entries_are_recipe_errors(
    tmp_path: Path, lines: str, files: dict[str, str], message: str
) -> None:
    with pytest.raises(RecipeError, match=message):
        load_series(_series(tmp_path, lines, files))


def test_unknown_applied_check_is_refused(tmp_path: Path) -> None:
    series = _series(tmp_path, "a.diff\n", {"a.diff": "Sparkbuild-Applied-Check: nope\n" + GOOD})
    with pytest.raises(PatchError, match="unknown Sparkbuild-Applied-Check"):
        load_series(series)


def test_malformed_diff_in_series_is_a_patch_error(tmp_path: Path) -> None:
    series = _series(tmp_path, "a.diff\n", {"a.diff": "--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n"})
    with pytest.raises(PatchError, match="malformed"):
        load_series(series)


def test_the_projects_series_has_the_four_patches_in_order() -> None:
    loaded = load_series(REPO_ROOT / "patches" / "series")
    assert [p.name for p in loaded.patches] == [
        "cmake-sm121-archs",
        "nvfp4-software-e2m1",
        "moe-shuffle-rows-bounds-guard",
        "sm12x-family-guards",
    ]
    kinds = [type(p) for p in loaded.patches]
    assert kinds == [EditPatch] * 4
    guard = loaded.patches[2]
    assert isinstance(guard, EditPatch)
    assert isinstance(guard.edit, ShuffleRowsGuardEdit)
    assert guard.edit.search == "csrc"
    family = loaded.patches[3]
    assert isinstance(family, EditPatch) and isinstance(family.edit, FamilyGuardsEdit)
    assert family.edit.search == "csrc"
    archs = loaded.patches[0]
    assert isinstance(archs, EditPatch) and isinstance(archs.edit, ArchListsEdit)
    assert archs.edit.base == "12.1" and archs.edit.context.targets == ("12.1a",)


PIN = "ab" * 32


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        ("a.diff", SeriesEntry("a.diff", None, "s:1")),
        ("  a.diff   # why this patch\n", SeriesEntry("a.diff", None, "s:1")),
        (f"a.toml sha256={PIN}", SeriesEntry("a.toml", PIN, "s:1")),
        (f"a.diff\tsha256={PIN.upper()}  # pinned", SeriesEntry("a.diff", PIN, "s:1")),
        ("", None),
        ("   # only a comment", None),
    ],
)
def test_series_lines_name_a_file_and_optionally_pin_it(
    line: str, entry: SeriesEntry | None
) -> None:
    assert parse_series_line(line, "s:1") == entry


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a.diff sha256=abc", "not 64 hex digits"),
        (f"a.diff sha256={'g' * 64}", "not 64 hex digits"),
        ("a.diff sha256=", "not 64 hex digits"),
        (f"a.diff sha256={PIN} sha256={PIN}", "pinned twice"),
        (f"a.diff sha512={PIN}", "unknown option"),
        (f"a.diff {PIN}", "unknown option"),
        ("a.diff -p1", "unknown option"),
        (f"sha256={PIN} a.diff", "does not start with a patch file name"),
        ("dir/a.diff", "does not start with a patch file name"),
        ("..", "does not start with a patch file name"),
    ],
)
def test_bad_series_lines_are_recipe_errors_naming_the_line(line: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message) as caught:
        parse_series_line(line, "series:3")
    assert caught.value.where == "series:3"


def test_a_pinned_patch_loads_when_its_bytes_match(tmp_path: Path) -> None:
    pin = sha256_bytes(GOOD.encode())
    loaded = load_series(_series(tmp_path, f"a.diff sha256={pin}\n", {"a.diff": GOOD}))
    assert loaded.patches[0].sha256 == pin


@pytest.mark.parametrize("name", ["a.diff", "a.toml"])
def test_a_patch_differing_from_its_pin_is_a_hash_mismatch(tmp_path: Path, name: str) -> None:
    text = GOOD if name.endswith(".diff") else 'kind = "cuda-arch-lists"\n'
    pin = sha256_bytes(text.encode())
    tampered = text + "\n" if name.endswith(".toml") else text.replace("+TWO", "+EVIL")
    series = _series(tmp_path, f"# c\n{name} sha256={pin}\n", {name: tampered})
    with pytest.raises(HashMismatchError) as caught:
        load_series(series)
    error = caught.value
    actual = sha256_bytes(tampered.encode())
    assert f"patch file {name} does not match its pin" in error.what
    assert f"expected sha256 {pin}, got {actual}" in error.what
    assert error.where == f"{tmp_path / name} (pinned at {series}:2)"


def test_a_bad_pin_is_refused_before_any_patch_is_parsed(tmp_path: Path) -> None:
    """The mismatch wins over what the tampered bytes would otherwise be refused for."""
    series = _series(tmp_path, f"a.diff sha256={PIN}\n", {"a.diff": "not a diff\n"})
    with pytest.raises(HashMismatchError):
        load_series(series)


def test_the_projects_series_pins_every_patch() -> None:
    series = REPO_ROOT / "patches" / "series"
    entries = [
        parse_series_line(line, "series")
        for line in series.read_text(encoding="utf-8").splitlines()
    ]
    pins = {e.file: e.sha256 for e in entries if e is not None}
    assert len(pins) == 4 and all(pin is not None for pin in pins.values())
    for patch in load_series(series).patches:  # loads only when every pin matches
        assert pins[patch.path.name] == patch.sha256


def test_a_diff_may_not_change_a_symbolic_link_of_the_tree(tmp_path: Path) -> None:
    """git apply would rewrite where the link points (a diff without a mode line, too)."""
    from sparkbuild.patches.engine import _inside

    (tmp_path / "real.h").write_text("x\n")
    (tmp_path / "link.h").symlink_to("real.h")
    files = list(parse_diff("--- a/link.h\n+++ b/link.h\n@@ -1 +1 @@\n-x\n+y\n", origin="p"))
    with pytest.raises(PatchError, match=r"link\.h, a symbolic link in the tree"):
        _inside(tmp_path, files, "p.diff")
    _inside(tmp_path, [files[0].at("real.h")], "p.diff")
