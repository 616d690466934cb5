"""`python -m sparkbuild doctor` for real: this machine's toolchain, a fake old nvcc on
PATH, and no nvcc at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbuild.errors import RecipeError, ToolchainError

CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "MAX_JOBS", "NVCC_THREADS")


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CUDA_VARIABLES}
    env.update(changes)
    return env


def _doctor(
    *args: str, env: dict[str, str], prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "sparkbuild", "doctor", *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def test_doctor_json_describes_this_machine() -> None:
    done = _doctor("--json", env=_env(MAX_JOBS="7"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    checks = {check["name"]: check for check in report["checks"]}
    assert {"nvcc", "cmake", "ninja", "gcc", "torch", "disk", "compiler launcher", "memory",
            "cores", "MAX_JOBS", "NVCC_THREADS"} <= set(checks)
    assert checks["nvcc"]["ok"] and checks["nvcc"]["hard"]
    assert report["tools"]["nvcc"]["version"].startswith(("12.9", "13."))
    assert report["tools"]["cmake"]["source"] == "virtual environment"
    assert report["plan"]["max_jobs"] == 7
    assert any("as requested" in reason for reason in report["plan"]["reasons"])
    assert all(check["reason"] for check in report["checks"])


def test_doctor_names_the_trees_torch_pin(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["torch==1.0.0"]\n', encoding="utf-8")
    done = _doctor("--tree", str(tmp_path), "--json", env=_env())
    assert done.returncode == 0, done.stderr
    torch = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "torch")
    assert not torch["ok"]
    assert "torch==1.0.0" in torch["reason"]


def test_old_nvcc_on_path_is_a_toolchain_error(tmp_path: Path) -> None:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n",
                    encoding="utf-8")
    nvcc.chmod(0o755)
    env = _env(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    done = _doctor(env=env)
    assert done.returncode == ToolchainError.exit_code
    assert "error: nvcc 12.4.131 is too old for sm_121" in done.stderr
    assert str(nvcc) in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    as_json = _doctor("--json", env=env)
    assert as_json.returncode == ToolchainError.exit_code
    payload = json.loads(as_json.stdout)
    assert payload["error"]["error"] == "ToolchainError"
    assert "too old for sm_121" in payload["error"]["what"]


def test_missing_nvcc_is_a_toolchain_error(tmp_path: Path) -> None:
    """/usr/local (nvcc's wrapper and /usr/local/cuda) hidden by a tmpfs in a private
    mount namespace: nothing else on the machine changes."""
    python_in_usr_local = Path(sys.executable).resolve().is_relative_to("/usr/local")
    if shutil.which("unshare") is None or python_in_usr_local:
        pytest.skip("needs unshare and a Python outside /usr/local")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("unshare -m is not permitted here")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not Path(p, "nvcc").exists())
    script = 'mount -t tmpfs none /usr/local && exec "$@"'
    done = _doctor(env=_env(PATH=path),
                   prefix=("unshare", "-m", "sh", "-c", script, "sh"))
    assert done.returncode == ToolchainError.exit_code, done.stderr
    assert "error: nvcc not found" in done.stderr
    assert "hint: install the CUDA toolkit 12.9 or later" in done.stderr
    assert "Traceback" not in done.stderr


PLAIN_RECIPE = """\
[source]
spec = "pypi:vllm==0.33.0"
[series]
path = "series"
[target]
cuda_archs = ["12.1"]
[build]
job_memory_gib = 3.0
"""


def test_doctor_refuses_a_plain_12_1_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "plain.toml"
    recipe.write_text(PLAIN_RECIPE, encoding="utf-8")
    done = _doctor("--recipe", str(recipe), "--json", env=_env())
    assert done.returncode == RecipeError.exit_code, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["error"] == "RecipeError" and error["where"] == f"{recipe}:6"
    assert "plain sm_121 compiles CUTLASS's FP4 kernels to a trap" in error["hint"]
    assert "use 12.1a" in error["hint"] and "Traceback" not in done.stderr

    recipe.write_text(PLAIN_RECIPE.replace('["12.1"]', '["12.1"]\nallow_plain_sm121 = true'),
                      encoding="utf-8")
    opted_in = _doctor("--recipe", str(recipe), "--json", env=_env())
    assert opted_in.returncode == 0, opted_in.stderr
    reasons = json.loads(opted_in.stdout)["plan"]["reasons"]
    assert any("3 GiB per job" in reason for reason in reasons)  # the recipe's budget


def test_doctor_takes_the_shipped_recipes_budget() -> None:
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "vllm-0.33.0.toml"
    done = _doctor("--recipe", str(recipe), "--json", env=_env())
    assert done.returncode == 0, done.stderr
    assert any("8.7 GiB per job" in r for r in json.loads(done.stdout)["plan"]["reasons"])
