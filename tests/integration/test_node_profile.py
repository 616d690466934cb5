"""The node profile: recorded in the manifest by the build, written into the venv by
``install`` (with no network), and set by ``source VENV/bin/activate``.

The wheelhouse is a real one with no built wheel: the recipe's pin (iniconfig) alone, so
the test downloads a few kilobytes.  The recipe adds one entry and drops one default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from sparkbuild.node.fingerprint import fingerprint
from sparkbuild.node.profile import ON_NODE, declared_profile
from sparkbuild.proc import run
from sparkbuild.recipe import load_recipe
from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse
from support import unshare_works

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.network

INICONFIG_2_3_0 = "f631c04d2c48c52b84d0d0549c99ff3859c98df65b3101406327ecc7d53fbf12"
RECIPE = f"""
[recipe]
name = "profiled"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
[node]
drop = ["VLLM_USE_DEEP_GEMM"]
[node.env]
NCCL_IB_HCA = "=rocep1s0f0:1"
[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "{INICONFIG_2_3_0}"
"""


def _sourced(venv: Path, keys: list[str]) -> dict[str, str]:
    script = f". {venv}/bin/activate && " + " && ".join(
        f'printf "%s=%s\\n" {k} "${{{k}-UNSET}}"' for k in keys)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(venv.parent)})
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def test_install_writes_the_profile_and_activate_sets_it(tmp_path: Path) -> None:
    (tmp_path / "recipe.toml").write_text(RECIPE)
    recipe = load_recipe(tmp_path / "recipe.toml")
    declared = [e.to_dict() for e in declared_profile(recipe.target.cuda_archs,
                                                      recipe.node.env, recipe.node.drop,
                                                      str(recipe.path))]
    out = tmp_path / "wh"
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=recipe, source={"kind": "directory", "spec": "."}, patches=[],
                         built_wheels=[], build_settings={"node_profile": declared},
                         cache_root=tmp_path / "cache", offline=False, platform=None))
    manifest_bytes = (out / "manifest.json").read_bytes()
    recorded = json.loads(manifest_bytes)["build"]["node_profile"]
    assert recorded == declared
    assert {e["key"] for e in recorded} == {
        "FLASHINFER_NO_DOWNLOAD", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST",
        "TRITON_PTXAS_PATH", "VLLM_HAS_FLASHINFER_CUBIN", "NCCL_IB_HCA"}

    venv = tmp_path / "venv"
    command: list[str | os.PathLike[str]] = [sys.executable, "-m", "sparkbuild", "install",
                                             out, "--venv", venv, "--json"]
    installed = run(["unshare", "-n", *command] if unshare_works() else command,
                    check=False, timeout=600)
    assert installed.returncode == 0, installed.output
    report = json.loads(installed.output[installed.output.index("\n{") + 1:])
    assert report["fingerprint"] == fingerprint(manifest_bytes)
    entries = {e["key"]: e for e in report["profile"]["entries"]}
    assert entries["NCCL_IB_HCA"]["source"].startswith("recipe ")
    assert all(e["reason"] and e["source"] for e in entries.values())
    assert ON_NODE not in {e["value"] for e in entries.values()}

    keys = [*entries, "VLLM_USE_DEEP_GEMM"]
    sourced = _sourced(venv, keys)
    assert sourced["FLASHINFER_NO_DOWNLOAD"] == "1"
    assert sourced["FLASHINFER_CUDA_ARCH_LIST"] == "12.1a"
    assert sourced["NCCL_IB_HCA"] == "=rocep1s0f0:1"
    assert sourced["VLLM_USE_DEEP_GEMM"] == "UNSET"  # dropped by the recipe
    workspace = venv / "var" / "flashinfer"
    assert sourced["FLASHINFER_WORKSPACE_BASE"] == str(workspace) and workspace.is_dir()
    if "TRITON_PTXAS_PATH" in entries:  # found here: nvcc 13.0's ptxas compiles sm_121a
        assert sourced["TRITON_PTXAS_PATH"].endswith("ptxas")
    else:
        assert any("TRITON_PTXAS_PATH" in n for n in report["profile"]["notes"])

    env_file = (venv / "sparkbuild" / "node.env").read_text().splitlines()
    pairs = dict(line.split("=", 1) for line in env_file if line and not line.startswith("#"))
    assert pairs == {k: sourced[k] for k in entries}
