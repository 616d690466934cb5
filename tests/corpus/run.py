"""Run the hostile-input corpus through the real command line and count the defects.

    .venv/bin/python tests/corpus/run.py [-k TEXT]... [CASE_ID]...

Each case runs as ``tests/integration/test_hostile_corpus.py`` runs it (one piece of code:
:func:`corpus.runner.run_case`), in a temporary directory of its own.  One line per case
(``ok``, ``DEFECT`` with the first lines of what failed, or ``skipped`` with why), then
``cases N, ok N, defects N`` (the cases run; ``(N skipped)`` after it when any was not).
Exit status 1 when a case is a defect, 2 when the selection is empty.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: corpus, support

from corpus.cases import CASES, Case
from corpus.runner import CannotRun, run_case, summary

DETAIL_LINES = 6


def _selected(ids: list[str], words: list[str]) -> list[Case]:
    unknown = sorted(set(ids) - {case.id for case in CASES})
    if unknown:
        raise SystemExit(f"no such case: {', '.join(unknown)}")
    return [case for case in CASES
            if (not ids or case.id in ids) and all(word in case.id for word in words)]


def _detail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    shown = lines[:DETAIL_LINES] + (["..."] if len(lines) > DETAIL_LINES else [])
    return "".join(f"\n    {line}" for line in shown)


def run(case: Case) -> tuple[str, str]:
    """(status, detail) of one case: ``ok``, ``DEFECT`` or ``skipped``."""
    with tempfile.TemporaryDirectory(prefix=f"corpus-{case.id}-") as work:
        try:
            run_case(case, Path(work))
        except CannotRun as why:
            return "skipped", f" ({why})"
        except AssertionError as failure:
            return "DEFECT", _detail(str(failure) or traceback.format_exc())
        except Exception:  # a builder or the runner itself broke: a defect too
            return "DEFECT", _detail(traceback.format_exc(limit=-3))
    return "ok", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", metavar="CASE_ID", help="run only these cases")
    parser.add_argument("-k", action="append", default=[], metavar="TEXT",
                        help="run only the cases whose id contains TEXT (repeatable: all)")
    args = parser.parse_args(argv)
    cases = _selected(args.ids, args.k)
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2
    counts = {"ok": 0, "DEFECT": 0, "skipped": 0}
    for case in cases:
        started = time.monotonic()
        status, detail = run(case)
        counts[status] += 1
        print(f"{status:<7} {case.id} ({time.monotonic() - started:.1f} s){detail}",
              flush=True)
    print(summary(counts["ok"], counts["DEFECT"], counts["skipped"]))
    return 1 if counts["DEFECT"] else 0


if __name__ == "__main__":
    sys.exit(main())
