"""The example plus one kernel compiled ``-gencode arch=compute_80,code=compute_80`` only.

A copy of examples/mini-vllm gets one more .cu in its extension, whose CMake gives it
compute_80 PTX and no SASS: at 12.1a that kernel is PTX only (the driver would JIT-compile
it at load) while every other kernel of the same library is native sm_121a code.  ``wheel``
refuses it before the first compile (its code forecast reads the unit's ``-gencode``), and
no wheelhouse is written; with
``allow_jit = true`` under ``[target]`` the wheelhouse is written, its manifest lists the
kernel in ``jit_kernels``, and ``verify --json`` counts it as the one PTX-only kernel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbuild.errors import VerifyError
from support import EXAMPLE, example_recipe

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

JIT_KERNEL = "_ZN9mini_vllm16jit_only_scale_kEPfif"
JIT_SOURCE = """\
// Test only: a kernel the example's CMake compiles to compute_80 PTX and nothing else.
namespace mini_vllm {
__global__ void jit_only_scale_k(float* x, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
}  // namespace mini_vllm
"""
JIT_CMAKE = """
# Test only: one unit whose gencode gives 12.1a no SASS, compute_80 PTX only.
target_sources(_C PRIVATE "csrc/jit_only.cu")
set_property(SOURCE "csrc/jit_only.cu" APPEND PROPERTY COMPILE_OPTIONS
  "-gencode=arch=compute_80,code=compute_80")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jit-example")
    copy = shutil.copytree(EXAMPLE, root / "mini-vllm",
                           ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (copy / "csrc" / "jit_only.cu").write_text(JIT_SOURCE, encoding="utf-8")
    cmake = copy / "CMakeLists.txt"
    cmake.write_text(cmake.read_text(encoding="utf-8") + JIT_CMAKE, encoding="utf-8")
    return copy


def _recipe(project: Path, directory: Path, *, allow_jit: bool) -> Path:
    archs = '["12.1a"]' + ("\nallow_jit = true" if allow_jit else "")
    text = example_recipe(f"mini-vllm-jit-{allow_jit}", archs=archs, build="jobs = 2")
    text = text.replace(f'spec = "{EXAMPLE}"', f'spec = "{project}"')
    path = directory / f"recipe-{allow_jit}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _wheel(recipe: Path, cache: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbuild", "wheel", "--recipe", str(recipe),
                           "--cache", str(cache), "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=1800, check=False,
                          cwd=out.parent)


def test_a_ptx_only_kernel_fails_wheel_and_passes_with_allow_jit(
    project: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    refused = _wheel(_recipe(project, tmp_path, allow_jit=False), cache, tmp_path / "refused")
    assert refused.returncode == VerifyError.exit_code, refused.stderr[-4000:]
    printed = json.loads(refused.stdout)
    error = printed["error"]
    assert "code forecast" in printed["timeline"]["phases"] and printed["units"] == []
    # named by the code forecast, before the first compile (verify would refuse the same
    # kernel after the build: the allowed wheelhouse below lists it as the one PTX-only)
    assert error["error"] == "VerifyError" and "nothing was compiled" in error["what"]
    assert "_C: 1 unit(s), PTX only (compute_80) for 12.1a: csrc/jit_only.cu" in error["what"]
    assert "code=compute_80" in error["where"] and "allow_jit" in error["hint"]
    assert "forecasting each unit's code" in refused.stderr
    assert not list(cache.glob("work/*/logs/build.log"))  # no build started
    assert not (tmp_path / "refused").exists()

    out = tmp_path / "allowed"
    allowed = _wheel(_recipe(project, tmp_path, allow_jit=True), cache, out)
    assert allowed.returncode == 0, allowed.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["allow_jit"] is True
    assert [(k["kernel"], k["target"], k["ptx_arch"]) for k in manifest["jit_kernels"]] == [
        (JIT_KERNEL, "12.1a", "compute_80")]
    assert manifest["jit_kernels"][0]["library"].startswith("mini_vllm/_C")

    verified = subprocess.run([sys.executable, "-m", "sparkbuild", "verify", str(out),
                               "--json"], capture_output=True, text=True, timeout=600,
                              check=False)
    assert verified.returncode == 0, verified.stderr[-3000:]
    (library,) = [lib for lib in json.loads(verified.stdout)["libraries"] if lib["coverage"]]
    (spark,) = library["coverage"]
    assert spark["target"] == "12.1a" and spark["ptx"] == 1 and spark["none"] == 0
    assert spark["native"] == spark["kernels"] - 1 > 0  # every other kernel is sm_121a code
    (jit,) = spark["not_native"]
    assert (jit["kernel"], jit["coverage"], jit["ptx_arch"]) == (JIT_KERNEL, "ptx", "compute_80")
