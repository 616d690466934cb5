"""The CI workflow builds the main job's two parts side by side and joins them.

Read from ``.github/workflows/wheelhouse.yml`` by indentation (the file's own layout: jobs
at two spaces, their keys at four, steps at six), with no YAML library: the jobs, their
``needs:`` edges, the command each runs.  actionlint checks the whole file
(tests/integration/test_workflow.py).
"""

from __future__ import annotations

import re
from pathlib import Path

WORKFLOW = Path(__file__).resolve().parents[3] / ".github" / "workflows" / "wheelhouse.yml"


def _jobs(text: str) -> dict[str, str]:
    """Each job's id and its block (the lines under ``  ID:`` of ``jobs:``)."""
    body = text[text.index("\njobs:\n") + len("\njobs:\n"):]
    found: dict[str, str] = {}
    current = None
    for line in body.splitlines():
        head = re.fullmatch(r"  ([A-Za-z0-9_-]+):", line)
        if head:
            current = head.group(1)
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


def _needs(block: str) -> list[str]:
    line = next((x for x in block.splitlines() if x.startswith("    needs:")), None)
    if line is None:
        return []
    value = line.split(":", 1)[1].strip()
    return [v.strip() for v in value.strip("[]").split(",") if v.strip()]


def _key(block: str, key: str) -> str | None:
    return next((x.split(":", 1)[1].strip() for x in block.splitlines()
                 if x.startswith(f"    {key}:")), None)


def _steps(block: str) -> list[str]:
    """Each step's text (from ``      - `` to the next)."""
    steps = block[block.index("    steps:\n"):].split("\n      - ")[1:]
    return ["- " + step for step in steps]


def test_three_jobs_two_parts_side_by_side_and_a_join_that_needs_both() -> None:
    jobs = _jobs(WORKFLOW.read_text())
    assert list(jobs) == ["vllm", "flashinfer", "wheelhouse"]
    assert _needs(jobs["vllm"]) == [] and _needs(jobs["flashinfer"]) == []  # in parallel
    assert sorted(_needs(jobs["wheelhouse"])) == ["flashinfer", "vllm"]
    for job in jobs.values():
        assert _key(job, "runs-on") == "${{ inputs.runs-on }}"  # a runner each
    for part in ("vllm", "flashinfer"):
        assert int(_key(jobs[part], "timeout-minutes") or 0) == 360  # GitHub's 6-hour limit


def test_each_part_job_builds_its_part_and_uploads_it() -> None:
    jobs = _jobs(WORKFLOW.read_text())
    for part in ("vllm", "flashinfer"):
        steps = _steps(jobs[part])
        assert f"      PART: {part}\n" in jobs[part]
        build = next(s for s in steps if 'sparkbuild wheel "${args[@]}"' in s)
        assert '--part "$PART" --out "part-$PART" --json)' in build
        upload = next(s for s in steps if f"name: part-{part}\n" in s)
        assert "actions/upload-artifact@" in upload and f"path: part-{part}\n" in upload
        assert steps.index(build) < steps.index(upload)
    # a recipe without flashinfer's part: its job builds nothing and uploads nothing
    guarded = [s for s in _steps(jobs["flashinfer"]) if "sparkbuild wheel" in s
               or "name: part-flashinfer" in s]
    assert all("if: steps.part.outputs.build == 'true'" in s for s in guarded)
    assert "recipe_parts(load_recipe(" in jobs["flashinfer"]


def test_the_join_job_downloads_the_parts_joins_verifies_and_fingerprints() -> None:
    steps = _steps(_jobs(WORKFLOW.read_text())["wheelhouse"])
    order = []
    for marker in ("actions/download-artifact@", "sparkbuild join parts/part-* --recipe",
                   'sparkbuild verify "$OUT" --json > verify.json', '["fingerprint"]',
                   "actions/attest-build-provenance@", "name: wheelhouse\n"):
        order.append(next(i for i, s in enumerate(steps) if marker in s))
    assert order == sorted(order)
    download = steps[order[0]]
    assert "pattern: part-*" in download and "path: parts" in download
    join = steps[order[1]]
    assert '--out "$OUT" --json > join.json' in join
