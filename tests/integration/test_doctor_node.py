"""``sparkbuild doctor --node --json`` on this machine: every check named, with its result;
a path that is no installed venv is a named error."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from sparkbuild.proc import run

if TYPE_CHECKING:
    from pathlib import Path

CHECKS = {"wheelhouse", "gpu", "driver", "ptxas", "flashinfer_modules", "workspace", "nofile",
          "rdma", "nccl_ib_gid_index", "nccl_ib_hca"}


def _doctor(venv: Path) -> tuple[int, str]:
    result = run([sys.executable, "-m", "sparkbuild", "doctor", "--node", "--venv", venv,
                  "--json"], check=False, timeout=300)
    assert "Traceback" not in result.output
    return result.returncode, result.output


def test_doctor_node_names_every_check(tmp_path: Path) -> None:
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a venv install did not make
    code, output = _doctor(tmp_path)
    report = json.JSONDecoder().raw_decode(output[output.index("{"):])[0]
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == CHECKS
    assert all(c["status"] in {"ok", "warn", "fail", "absent"} and c["value"]
               for c in checks.values())
    assert checks["wheelhouse"]["status"] == "fail"  # tmp_path was not installed by sparkbuild
    assert "has no sparkbuild-wheelhouse.json" in checks["wheelhouse"]["detail"]
    assert code == 12, output


def test_doctor_node_on_what_is_no_venv(tmp_path: Path) -> None:
    for path, said in ((tmp_path / "absent", "the venv does not exist"),
                       (tmp_path, "not a venv: it has no pyvenv.cfg")):
        code, output = _doctor(path)
        error = json.JSONDecoder().raw_decode(output[output.index("{"):])[0]["error"]
        assert (code, error["error"]) == (2, "UsageError") and said in error["what"]
