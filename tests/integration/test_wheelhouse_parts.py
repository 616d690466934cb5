"""The main job in two parts and joined: the wheelhouse of one job, fingerprint for fingerprint.

The mini-vllm example with ``[flashinfer] aot`` narrowed to one module (the recipe of
tests/integration/test_flashinfer_aot_wheel.py), built three ways from one cache: one job
(``wheel``), then ``wheel --part vllm`` and ``wheel --part flashinfer``, each into a part
directory, and ``join`` of the two parts.  The joined wheelhouse passes ``verify``, holds
the same files with the same sha256, and has the one-job wheelhouse's fingerprint although
the two manifests record different runs (each unit's seconds, the plans' MAX_JOBS).  A join
with a part missing, or a part of another recipe, writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbuild.wheelhouse.manifest import manifest_identity
from support import aot_example_recipe, pybind11_bare_repo

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

AOT_ARGS = ["--only", "silu_and_mul", "--add-act", "true", "--add-moe", "false",
            "--add-comm", "false", "--add-misc", "false", "--add-xqa", "false",
            "--add-gemma", "false", "--add-oai-oss", "false"]
TIMEOUT = 1800


def _recipe(pybind11: Path, name: str = "mini-vllm-parts") -> str:
    return aot_example_recipe(name, pybind11, AOT_ARGS)


def _sparkbuild(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbuild", *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False,
                          cwd=cwd)


def _differences(one: object, other: object, where: str = "") -> list[str]:
    """Where two JSON values differ (for the failure's message)."""
    if isinstance(one, dict) and isinstance(other, dict):
        return [line for key in sorted(set(one) | set(other))
                for line in _differences(one.get(key), other.get(key), f"{where}.{key}")]
    if isinstance(one, list) and isinstance(other, list) and len(one) == len(other):
        return [line for i, (a, b) in enumerate(zip(one, other, strict=True))
                for line in _differences(a, b, f"{where}[{i}]")]
    return [] if one == other else [f"{where}: {str(one)[:200]} | {str(other)[:200]}"]


def _verified(house: Path, cwd: Path) -> dict[str, object]:
    verified = _sparkbuild("verify", house, "--json", cwd=cwd)
    assert verified.returncode == 0, verified.stderr[-3000:]
    report = json.loads(verified.stdout)
    assert isinstance(report, dict)
    return report


def test_the_joined_parts_have_the_one_job_fingerprint(tmp_path: Path) -> None:
    pybind11 = tmp_path / "pybind11.git"
    pybind11_bare_repo(tmp_path, pybind11)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(_recipe(pybind11))
    common = ("--recipe", recipe, "--cache", tmp_path / "cache")
    one = _sparkbuild("wheel", *common, "--out", tmp_path / "one", "--no-closure", "--json",
                      cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-5000:]
    parts = []
    for part in ("vllm", "flashinfer"):
        built = _sparkbuild("wheel", *common, "--part", part, "--out", tmp_path / f"part-{part}",
                            "--no-closure", "--json", cwd=tmp_path)
        assert built.returncode == 0, built.stderr[-5000:]
        report = json.loads(built.stdout)
        wheels = report["wheels"] if part == "flashinfer" else report["wheelhouse"]["wheels"]
        names = [w["file"].split("-")[0] for w in wheels]
        assert names == (["mini_vllm"] if part == "vllm" else ["flashinfer_jit_cache"])
        parts.append(tmp_path / f"part-{part}")

    missing = _sparkbuild("join", parts[0], *common, "--out", tmp_path / "joined", "--json",
                          cwd=tmp_path)
    assert missing.returncode == 2 and not (tmp_path / "joined").exists()
    assert "the part flashinfer is missing" in json.loads(missing.stdout)["error"]["what"]
    other = tmp_path / "other.toml"
    other.write_text(_recipe(pybind11, name="another"))
    refused = _sparkbuild("join", *parts, "--recipe", other, "--cache", tmp_path / "cache",
                          "--out", tmp_path / "joined", cwd=tmp_path)
    assert refused.returncode == 2 and "another recipe" in refused.stderr

    joined = _sparkbuild("join", *parts, *common, "--out", tmp_path / "joined", "--json",
                         cwd=tmp_path)
    assert joined.returncode == 0, joined.stderr[-5000:]
    one_house, joined_house = _verified(tmp_path / "one", tmp_path), _verified(
        tmp_path / "joined", tmp_path)
    assert json.loads(joined.stdout)["fingerprint"] == joined_house["fingerprint"]
    one_manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    joined_manifest = json.loads((tmp_path / "joined" / "manifest.json").read_text())
    assert one_house["fingerprint"] == joined_house["fingerprint"], _differences(
        manifest_identity(one_manifest), manifest_identity(joined_manifest))
    assert one_manifest["wheels"] == joined_manifest["wheels"]
    assert one_manifest["libraries"] == joined_manifest["libraries"]
    # two runs: what the fingerprint leaves out differs, and the manifests' bytes with it
    assert one_manifest["build"]["units"] != joined_manifest["build"]["units"] or \
        one_manifest["build"]["jobs"] != joined_manifest["build"]["jobs"] or \
        one_manifest["build"]["flashinfer_aot"]["seconds"] != \
        joined_manifest["build"]["flashinfer_aot"]["seconds"]
