"""``sparkbuild doctor --node --json`` on this machine: every check named, with its result."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from sparkbuild.proc import run

if TYPE_CHECKING:
    from pathlib import Path

CHECKS = {"wheelhouse", "gpu", "driver", "ptxas", "flashinfer_modules", "workspace", "nofile",
          "rdma", "nccl_ib_gid_index"}


def test_doctor_node_names_every_check(tmp_path: Path) -> None:
    result = run([sys.executable, "-m", "sparkbuild", "doctor", "--node", "--venv",
                  tmp_path, "--json"], check=False, timeout=300)
    report = json.loads(result.output[result.output.index("{"):])
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == CHECKS
    assert all(c["status"] in {"ok", "warn", "fail", "absent"} and c["value"]
               for c in checks.values())
    assert checks["wheelhouse"]["status"] == "warn"  # tmp_path was not installed by sparkbuild
    failed = [c for c in checks.values() if c["status"] == "fail"]
    assert result.returncode == (12 if failed else 0), result.output
    assert "Traceback" not in result.output
