"""``wheel`` with ``[flashinfer] aot = true``, end to end, on the mini-vllm example.

A copy of the example's recipe pins flashinfer-python 0.6.18 and turns on ``[flashinfer]
aot`` narrowed to one module (``--only silu_and_mul`` with only flashinfer's activation
group switched on); it
is built with ``--no-closure`` (flashinfer's closure is torch with CUDA, several GB).  The
wheelhouse holds the flashinfer-jit-cache wheel beside mini-vllm's: hashed into the lock,
listed in the manifest (``build.flashinfer_aot``), its machine code read by ``verify``
(sm_121a, every kernel native).  ``install`` of that wheelhouse then runs with no network
(``unshare -n`` where it can): the venv has no torch (the closure is the node's), so
flashinfer itself is not imported; what is checked is the installed layout: the package's
``get_jit_cache_dir()`` holds ``silu_and_mul/silu_and_mul.so`` with its version, which is
where flashinfer's ``jit.env`` looks (tests/integration/test_flashinfer_aot.py proves that
with torch beside it).

This machine's CUDA has no ``lib64/stubs/libcuda.so`` and no driver: the test sets nothing
up for the link; sparkbuild's builder makes the libcuda it links against and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkbuild.proc import run
from sparkbuild.toolchain.sass import list_cuda_archs
from sparkbuild.wheelhouse.lock import parse_lock
from support import FLASHINFER_SHA256, aot_example_recipe, pybind11_bare_repo, unshare_works

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

MODULE = "silu_and_mul"
AOT_ARGS = ["--only", MODULE, "--add-act", "true", "--add-moe", "false", "--add-comm", "false",
            "--add-misc", "false", "--add-xqa", "false", "--add-gemma", "false",
            "--add-oai-oss", "false"]
"""``--only`` alone is not enough: flashinfer generates every group's specs before
sparkbuild's filter sees them, and at 12.x the fmha v2 generator compiles and runs a host
program needing cuBLAS's headers; the group switches leave those generators out."""
TIMEOUT = 1800


def _recipe(pybind11: Path) -> str:
    return aot_example_recipe("mini-vllm-aot", pybind11, AOT_ARGS)


def _sparkbuild(*args: str | os.PathLike[str], env: dict[str, str] | None = None,
                offline: bool = False, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sparkbuild", *map(str, args)]
    if offline and unshare_works():
        command = ["unshare", "-n", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False, cwd=cwd, env={**os.environ, **(env or {})})


def test_wheel_builds_flashinfer_ahead_into_the_wheelhouse(tmp_path: Path) -> None:
    pybind11 = tmp_path / "pybind11.git"
    pybind11_bare_repo(tmp_path, pybind11)
    (tmp_path / "recipe.toml").write_text(_recipe(pybind11))
    house = tmp_path / "wheelhouse"
    built = _sparkbuild("wheel", "--recipe", tmp_path / "recipe.toml", "--cache",
                        tmp_path / "cache", "--out", house, "--no-closure", "--json",
                        cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-5000:]
    report = json.loads(built.stdout)
    # the build's own read of the machine code (the wheelhouse step), as for mini-vllm's
    (seen,) = [lib for lib in report["wheelhouse"]["libraries"]
               if lib["library"] == f"flashinfer_jit_cache/jit_cache/{MODULE}/{MODULE}.so"]
    assert seen["sass_archs"] == ["sm_121a"] and seen["trap_only_kernels"] == []

    (jit,) = sorted(house.glob("flashinfer_jit_cache-*.whl"))
    assert jit.name.startswith("flashinfer_jit_cache-0.6.18+cu")
    assert sorted(p.name.split("-")[0] for p in house.glob("*.whl")) == [
        "flashinfer_jit_cache", "flashinfer_python", "mini_vllm"]
    manifest = json.loads((house / "manifest.json").read_text())
    aot = manifest["build"]["flashinfer_aot"]
    assert aot["modules"] == [MODULE] and aot["flashinfer_version"] == "0.6.18"
    assert aot["flashinfer_cuda_arch_list"] == "12.1a"
    assert aot["aot_args"] == AOT_ARGS
    (listed,) = [w for w in manifest["wheels"] if w["file"] == jit.name]
    assert listed["role"] == "built"
    locked = {r.key: r for r in parse_lock((house / "requirements.lock").read_text(),
                                           where="lock")}
    assert locked["flashinfer-jit-cache"].hashes == (listed["sha256"],)
    assert locked["flashinfer-python"].hashes == (FLASHINFER_SHA256,)

    so = f"flashinfer_jit_cache/jit_cache/{MODULE}/{MODULE}.so"
    with zipfile.ZipFile(jit) as archive:
        archive.extract(so, tmp_path / "unpacked")
    assert list_cuda_archs(tmp_path / "unpacked" / so) == ["sm_121a"]

    verified = _sparkbuild("verify", house, "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr[-3000:]
    (library,) = [lib for lib in json.loads(verified.stdout)["libraries"]
                  if lib["library"].endswith(f"{MODULE}.so")]
    assert "sm_121a" in library["archs"]
    (spark,) = library["coverage"]
    assert spark["target"] == "12.1a" and spark["kernels"] > 0
    assert (spark["native"], spark["ptx"], spark["none"]) == (spark["kernels"], 0, 0)

    venv = tmp_path / "venv"
    installed = _sparkbuild("install", house, "--venv", venv, "--json", offline=True,
                            cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    result = json.loads(installed.stdout)
    assert "flashinfer_jit_cache" in result["imported"]
    # pip check: flashinfer-python's own requirements (torch, ...) are the node's
    left = result["pip_check"]["left_to_node"]
    assert result["pip_check"]["ok"] and any(" requires torch," in line for line in left)
    probe = ("import flashinfer_jit_cache as c, pathlib; d = pathlib.Path(c.get_jit_cache_dir()); "
             f"print(c.__version__); print(d); print(sorted(p.name for p in d.iterdir())); "
             f"print((d / {MODULE!r} / {MODULE + '.so'!r}).is_file())")
    (python,) = venv.glob("bin/python")
    out = run([python, "-c", probe], cwd=tmp_path, timeout=120).output.strip().splitlines()
    version, cache_dir, modules, present = out[-4:]
    # flashinfer reads __version__ (it must start with its own); the wheelhouse's label is
    # added to the wheel's version (0.6.18+cu130.sm121a.<series>), not to the module's
    assert version.startswith("0.6.18+cu") and jit.name.split("-")[1].startswith(version)
    assert Path(cache_dir).is_relative_to(venv) and modules == str([MODULE])
    assert present == "True"
