"""Run ``sparkbuild selftest e2m1 --gpu`` in a given folder and keep its report as JSON.

Unlike the CLI, a failure still writes what is known (the error), and the build logs stay
in WORK_DIR for bench/e2m1_gpu.sh to bring back.

    python bench/e2m1_selftest_json.py WORK_DIR REPORT_JSON [--no-gpu]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sparkbuild.checks.selftest import run_e2m1_selftest
from sparkbuild.errors import SparkbuildError


def main(argv: list[str]) -> int:
    work_dir, report = Path(argv[0]), Path(argv[1])
    gpu = "--no-gpu" not in argv[2:]
    try:
        result = run_e2m1_selftest(gpu=gpu, work_dir=work_dir)
    except SparkbuildError as error:
        report.write_text(json.dumps({"error": error.to_dict()}, indent=1))
        print(error.render())
        return 1
    report.write_text(json.dumps(result.to_dict(), indent=1))
    print("\n".join(result.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
