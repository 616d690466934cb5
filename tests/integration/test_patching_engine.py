"""The patch engine on small generated trees: git apply, all or nothing, idempotence, revert.

Every test builds its own tree and series under tmp_path; ``tree_digest`` hashes paths,
modes and bytes of the whole tree, so "left as it was" means byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from corpus.builders import tree_digest, write_series
from sparkbuild.cli import main
from sparkbuild.errors import PatchError
from sparkbuild.patches import engine
from sparkbuild.patches.engine import apply_series, revert_series, series_status, touched_files
from sparkbuild.patches.report import (
    ALREADY,
    APPLIED,
    APPLIED_HERE,
    FAILED,
    NOT_APPLIED,
    UPSTREAM,
    PatchOutcome,
)
from sparkbuild.recipe import Recipe


def lines(count: int, prefix: str) -> str:
    return "".join(f"{prefix} {n}\n" for n in range(1, count + 1))


def make_tree(root: Path) -> Path:
    tree = root / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "app.c").write_text(lines(30, "app"))
    (tree / "src" / "lib.c").write_text(lines(30, "lib"))
    (tree / "README").write_text("readme\n")
    return tree


EDIT_APP = """\
diff --git a/src/app.c b/src/app.c
--- a/src/app.c
+++ b/src/app.c
@@ -2,3 +2,4 @@
 app 2
 app 3
+app 3.5
 app 4
@@ -20,3 +21,3 @@
 app 20
-app 21
+APP 21
 app 22
"""

CREATE_NEW = """\
diff --git a/gen/deep/new.h b/gen/deep/new.h
new file mode 100644
--- /dev/null
+++ b/gen/deep/new.h
@@ -0,0 +1,2 @@
+// created by the series
+int created;
"""

EDIT_LIB = """\
diff --git a/src/lib.c b/src/lib.c
--- a/src/lib.c
+++ b/src/lib.c
@@ -10,3 +10,3 @@
 lib 10
-lib 11
+LIB 11
 lib 12
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path)


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    return write_series(
        tmp_path / "patches",
        {"edit-app.diff": EDIT_APP, "create-new.diff": CREATE_NEW, "edit-lib.diff": EDIT_LIB},
    )


def statuses(outcomes: list[PatchOutcome]) -> list[str]:
    return [outcome.status for outcome in outcomes]


def test_apply_then_reapply_then_revert(tree: Path, recipe: Recipe) -> None:
    pristine = tree_digest(tree)
    assert statuses(series_status(tree, recipe).patches) == [NOT_APPLIED] * 3
    assert tree_digest(tree) == pristine

    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [APPLIED] * 3 and report.error is None
    assert "app 3.5\n" in (tree / "src/app.c").read_text()
    assert (tree / "gen/deep/new.h").read_text() == "// created by the series\nint created;\n"
    assert "LIB 11\n" in (tree / "src/lib.c").read_text()
    assert touched_files(tree, recipe) == [tree / "src/app.c", tree / "gen/deep/new.h",
                                           tree / "src/lib.c"]
    patched = tree_digest(tree)

    again = apply_series(tree, recipe)
    assert statuses(again.patches) == [ALREADY] * 3
    assert tree_digest(tree) == patched
    assert statuses(series_status(tree, recipe).patches) == [ALREADY] * 3

    reverted = revert_series(tree, recipe)
    assert statuses(reverted.patches) == [NOT_APPLIED] * 3
    assert tree_digest(tree) == pristine
    assert touched_files(tree, recipe) == []


def test_already_applied_says_applied_here_or_upstream(
    tree: Path, recipe: Recipe, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tree sparkbuild patched (its records in TREE/.sparkbuild/applied/) and a source
    that carries the same change itself are both already-applied, told apart by origin."""
    assert statuses(apply_series(tree, recipe).patches) == [APPLIED] * 3
    here = series_status(tree, recipe).patches
    assert statuses(here) == [ALREADY] * 3
    assert [p.origin for p in here] == [APPLIED_HERE] * 3
    assert [p.to_dict()["origin"] for p in apply_series(tree, recipe).patches] == (
        [APPLIED_HERE] * 3)

    upstream = tmp_path / "upstream"  # the same bytes, shipped that way: no records
    shutil.copytree(tree, upstream, ignore=shutil.ignore_patterns(".sparkbuild"))
    there = series_status(upstream, recipe).patches
    assert statuses(there) == [ALREADY] * 3
    assert [p.origin for p in there] == [UPSTREAM] * 3
    reverted = revert_series(upstream, recipe).patches
    assert [(p.status, p.origin) for p in reverted] == [(ALREADY, UPSTREAM)] * 3

    assert main(["patch", "status", str(upstream), "--recipe", str(recipe.path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [(p["status"], p["origin"]) for p in payload["patches"]] == (
        [("already-applied", "upstream")] * 3)
    assert main(["patch", "status", str(tree), "--recipe", str(recipe.path)]) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert said.count("already-applied (applied-here)") == 3, said


def test_a_conflict_leaves_the_tree_byte_identical(tree: Path, recipe: Recipe) -> None:
    lib = tree / "src/lib.c"
    lib.write_text(lib.read_text().replace("lib 12\n", "lib twelve\n"))
    before = tree_digest(tree)
    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [NOT_APPLIED, NOT_APPLIED, FAILED]
    assert report.patches[0].detail == "undone: edit-lib failed"
    assert report.patches[2].detail == "src/lib.c: hunk #1 (@@ -10,3 +10,3 @@) does not match"
    assert tree_digest(tree) == before
    error = report.error
    assert isinstance(error, PatchError)
    assert error.where == "src/lib.c:10 (hunk #1)"


def test_a_conflict_on_the_cli_is_one_clear_line_and_exit_7(
    tree: Path, recipe: Recipe, capsys: pytest.CaptureFixture[str]
) -> None:
    app = tree / "src/app.c"
    app.write_text(app.read_text().replace("app 21\n", "app twenty-one\n"))
    before = tree_digest(tree)
    code = main(["patch", "apply", str(tree), "--recipe", str(recipe.path)])
    captured = capsys.readouterr()
    assert code == PatchError.exit_code
    errors = [ln for ln in captured.err.splitlines() if ln.startswith("error:")]
    assert errors == ["error: patch edit-app failed: src/app.c: hunk #2 (@@ -20,3 +21,3 @@) "
                      "does not match"]
    assert "Traceback" not in captured.err + captured.out
    assert tree_digest(tree) == before


def test_json_output_lists_patches_in_series_order(
    tree: Path, recipe: Recipe, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["patch", "apply", str(tree), "--recipe", str(recipe.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tree"] == str(tree.resolve())
    assert data["source"] == {"kind": "tree", "path": str(tree.resolve())}
    assert [(p["name"], p["status"]) for p in data["patches"]] == [
        ("edit-app", APPLIED), ("create-new", APPLIED), ("edit-lib", APPLIED)]
    expected = hashlib.sha256((recipe.series.parent / "edit-lib.diff").read_bytes()).hexdigest()
    assert data["patches"][2]["sha256"] == expected
    assert data["raw_instruction_uses"] == []


def test_a_patch_whose_file_moved_is_applied_at_its_new_place(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    old_home = "csrc/quantization/fp4/kern.cu"
    new_home = tree / "csrc/libtorch_stable/quantization/fp4/kern.cu"
    decoy = tree / "csrc/other/kern.cu"
    for path, prefix in ((new_home, "kern"), (decoy, "other")):
        path.parent.mkdir(parents=True)
        path.write_text(lines(12, prefix))
    diff = (f"--- a/{old_home}\n+++ b/{old_home}\n@@ -4,3 +4,3 @@\n kern 4\n-kern 5\n"
            "+KERN 5\n kern 6\n")
    recipe = write_series(tmp_path / "patches", {"moved.diff": diff})
    pristine = tree_digest(tree)
    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [APPLIED]
    assert "csrc/libtorch_stable/quantization/fp4/kern.cu (moved from" in report.patches[0].detail
    assert "KERN 5\n" in new_home.read_text() and "KERN" not in decoy.read_text()
    assert statuses(apply_series(tree, recipe).patches) == [ALREADY]
    assert statuses(revert_series(tree, recipe).patches) == [NOT_APPLIED]
    assert tree_digest(tree) == pristine


def test_a_missing_file_with_no_matching_twin_fails_cleanly(tree: Path, tmp_path: Path) -> None:
    diff = "--- a/gone/app.c\n+++ b/gone/app.c\n@@ -1,2 +1,2 @@\n-nothing 1\n+x\n nothing 2\n"
    recipe = write_series(tmp_path / "patches", {"gone.diff": diff})
    before = tree_digest(tree)
    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [FAILED]
    assert "gone/app.c" in report.patches[0].detail
    assert tree_digest(tree) == before


def test_a_created_file_and_its_directories_are_removed_on_failure(
    tree: Path, tmp_path: Path
) -> None:
    bad = EDIT_LIB.replace(" lib 12\n", " lib 12 (not in the tree)\n")
    recipe = write_series(tmp_path / "patches", {"create-new.diff": CREATE_NEW, "bad.diff": bad})
    before = tree_digest(tree)
    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [NOT_APPLIED, FAILED]
    assert not (tree / "gen").exists() and not (tree / ".sparkbuild").exists()
    assert tree_digest(tree) == before


@pytest.mark.parametrize(
    "path", ["../outside.txt", "/etc/passwd", "src/../../outside.txt", ".git/hooks/pre-commit"]
)
def test_a_path_outside_the_tree_is_refused_before_anything_changes(
    tree: Path, tmp_path: Path, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix_old = "" if path.startswith("/") else "a/"
    prefix_new = "" if path.startswith("/") else "b/"
    diff = f"--- {prefix_old}{path}\n+++ {prefix_new}{path}\n@@ -1 +1 @@\n-x\n+y\n"
    recipe = write_series(tmp_path / "patches", {"ok.diff": EDIT_LIB, "evil.diff": diff})
    before = tree_digest(tree)
    with pytest.raises(PatchError, match="outside the tree"):
        apply_series(tree, recipe)
    assert main(["patch", "apply", str(tree), "--recipe", str(recipe.path)]) == 7
    assert "Traceback" not in capsys.readouterr().err
    assert tree_digest(tree) == before


def test_a_symlink_out_of_the_tree_is_refused(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("x\n")
    (tree / "link").symlink_to(outside)
    diff = "--- a/link/f.txt\n+++ b/link/f.txt\n@@ -1 +1 @@\n-x\n+y\n"
    recipe = write_series(tmp_path / "patches", {"link.diff": diff})
    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [FAILED]
    assert "symbolic link" in report.patches[0].detail
    assert (outside / "f.txt").read_text() == "x\n"


def test_a_malformed_patch_is_refused(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truncated = EDIT_APP[: EDIT_APP.index("+app 3.5")]
    recipe = write_series(tmp_path / "patches", {"ok.diff": EDIT_LIB, "cut.diff": truncated})
    before = tree_digest(tree)
    with pytest.raises(PatchError, match="malformed"):
        apply_series(tree, recipe)
    assert main(["patch", "status", str(tree), "--recipe", str(recipe.path)]) == 7
    captured = capsys.readouterr()
    assert "cut.diff" in captured.err and "Traceback" not in captured.err
    assert tree_digest(tree) == before


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.parametrize("layout", ["tree-is-a-repo", "tree-inside-a-repo"])
def test_git_repositories_around_or_at_the_tree(
    tmp_path: Path, recipe: Recipe, layout: str
) -> None:
    tree = make_tree(tmp_path / "outer")
    repo = tree if layout == "tree-is-a-repo" else tmp_path / "outer"
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    report = apply_series(tree, recipe)
    assert statuses(report.patches) == [APPLIED] * 3
    assert (tree / "gen/deep/new.h").is_file() and not (repo.parent / "gen").exists()
    assert statuses(revert_series(tree, recipe).patches) == [NOT_APPLIED] * 3


def test_revert_refuses_a_tree_changed_since_and_keeps_it(tree: Path, recipe: Recipe) -> None:
    apply_series(tree, recipe)
    lib = tree / "src/lib.c"
    lib.write_text(lib.read_text().replace("LIB 11\n", "LIB eleven\n"))
    before = tree_digest(tree)
    report = revert_series(tree, recipe)
    assert statuses(report.patches) == [ALREADY, ALREADY, FAILED]
    assert report.patches[2].detail.startswith("changed since it was applied")
    assert tree_digest(tree) == before


def test_an_interrupt_mid_series_puts_the_tree_back(
    tree: Path, recipe: Recipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_git_apply = engine.git_apply
    applied: list[str] = []

    def interrupted_after_second(
        where: Path, diff: str, *, reverse: bool = False, check: bool = False
    ) -> tuple[bool, str]:
        result = real_git_apply(where, diff, reverse=reverse, check=check)
        if not check:
            applied.append(diff)
            if len(applied) == 2:
                raise KeyboardInterrupt
        return result

    monkeypatch.setattr(engine, "git_apply", interrupted_after_second)
    before = tree_digest(tree)
    with pytest.raises(KeyboardInterrupt):
        apply_series(tree, recipe)
    assert len(applied) == 2
    assert tree_digest(tree) == before
