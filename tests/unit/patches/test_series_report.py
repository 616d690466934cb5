"""SeriesReport's JSON and error, failure descriptions, edit diffs."""

from __future__ import annotations

import json
from pathlib import Path

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits import EditPlan, FileChange, plan_diff
from sparkbuild.patches.journal import Recovery
from sparkbuild.patches.report import (
    ALREADY,
    APPLIED,
    FAILED,
    PatchOutcome,
    SeriesReport,
    describe_failure,
)
from sparkbuild.patches.series import parse_diff

DIFF = """\
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -1,2 +1,2 @@
 a
-b
+c
@@ -120,3 +120,4 @@ function(x)
 one
+inserted
 two
 three
"""


def _report(*outcomes: PatchOutcome) -> SeriesReport:
    return SeriesReport(Path("/t"), list(outcomes), [(Path("csrc/k.cu"), 7)])


def test_to_dict_has_the_documented_shape_and_is_json() -> None:
    report = _report(PatchOutcome("p1", APPLIED, "ok", "a" * 64))
    data = json.loads(json.dumps(report.to_dict()))
    assert data == {
        "tree": "/t",
        "source": {"kind": "tree", "path": "/t"},
        "patches": [{"name": "p1", "status": "applied", "detail": "ok", "sha256": "a" * 64,
                      "details": {}}],
        "raw_instruction_uses": [{"file": "csrc/k.cu", "line": 7}],
        "interrupted_run": None,
    }
    assert report.error is None


def test_an_interrupted_run_found_is_in_the_json() -> None:
    report = _report(PatchOutcome("p1", APPLIED, "ok", "a" * 64))
    report.interrupted_run = Recovery("apply", 42, ("p2",), ("p1",), restored=3, removed=1)
    data = json.loads(json.dumps(report.to_dict()))["interrupted_run"]
    assert data["outcome"] == "restored" and data["in_flight"] == ["p2"]
    assert (data["restored"], data["removed"], data["pid"]) == (3, 1, 42)
    said = data["message"]
    assert said.startswith("found an interrupted run of `patch apply` (pid 42")
    assert said.endswith(": restored 3 files, removed 1 it had created, starting clean")


def test_source_can_be_filled_in_by_prepare() -> None:
    report = _report()
    report.source = {"kind": "pypi", "spec": "pypi:vllm==0.11.0"}
    assert report.to_dict()["source"] == {"kind": "pypi", "spec": "pypi:vllm==0.11.0"}


def test_error_names_the_failed_patch_file_and_hunk() -> None:
    report = _report(
        PatchOutcome("p1", ALREADY, "there", "a" * 64),
        PatchOutcome("p2", FAILED, "CMakeLists.txt: hunk #2 does not match", "b" * 64,
                     "CMakeLists.txt:120"),
    )
    error = report.error
    assert isinstance(error, PatchError)
    assert "p2" in error.what and "hunk #2" in error.what
    assert error.where == "CMakeLists.txt:120"
    assert any("failed" in line and "p2" in line for line in report.summary())


def test_describe_failure_maps_gits_line_to_the_hunk() -> None:
    files = list(parse_diff(DIFF, origin="t"))
    output = ("error: patch failed: CMakeLists.txt:120\n"
              "error: CMakeLists.txt: patch does not apply\n")
    detail, where = describe_failure(files, output)
    assert detail == "CMakeLists.txt: hunk #2 (@@ -120,3 +120,4 @@) does not match"
    assert where == "CMakeLists.txt:120 (hunk #2)"


def test_describe_failure_passes_other_git_errors_through() -> None:
    files = list(parse_diff(DIFF, origin="t"))
    detail, where = describe_failure(files, "error: CMakeLists.txt: No such file or directory\n")
    assert detail == "CMakeLists.txt: No such file or directory"
    assert where == "CMakeLists.txt"


def test_plan_diff_creates_and_modifies_files_git_style() -> None:
    plan = EditPlan(
        (
            FileChange("dir/new.h", None, "int x;\n"),
            FileChange("old.txt", "a\nb", "a\nc"),
            FileChange("same.txt", "s\n", "s\n"),
        ),
        (),
    )
    files = parse_diff(plan_diff(plan), origin="generated")
    assert [(f.path, f.change) for f in files] == [("dir/new.h", "create"), ("old.txt", "modify")]
    assert "\\ No newline at end of file" in files[1].hunks[0].text
