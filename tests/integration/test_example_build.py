"""The example's online build, then its offline build with no network at all.

The example's FetchContent dependency (pybind11) is served from a git repository made
here from the pybind11 sdist and reached over file://; before the offline build that
repository is moved away and the network is cut (``unshare -n``), so only the cache can
serve it.  Then one cache entry is removed: the offline build must name it and compile
nothing.  Built for 12.1a, the extension's FP4 block-scaled MMA kernel is real machine code
(``OMMA.SF``); a copy of the recipe set to plain 12.1 (with the opt-in) compiles it to a
trap, and ``wheel`` stops at verify, naming it, and writes no wheelhouse.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkbuild.errors import CacheMissError, RecipeError, VerifyError
from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.toolchain.sass import list_cuda_archs
from sparkbuild.vendoring.patched import dependency_edit
from support import example_recipe, git, pybind11_bare_repo, unshare_works

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mini-vllm"
RECIPE_NAME = "mini-vllm-ci"
TIMEOUT = 1200


@pytest.fixture(scope="module")
def pybind11_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare git repository holding pybind11 3.1.0, tagged v3.1.0."""
    root = tmp_path_factory.mktemp("pybind11")
    pybind11_bare_repo(root, root / "pybind11.git")
    return root / "pybind11.git"


@pytest.fixture(scope="module")
def build_dirs(tmp_path_factory: pytest.TempPathFactory, pybind11_repo: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("example")
    recipe = root / "recipe.toml"
    cmake_args = (f"-DMINI_VLLM_PYBIND11_GIT_REPOSITORY=file://{pybind11_repo} "
                  "-DMINI_VLLM_PYBIND11_GIT_TAG=v3.1.0")
    recipe.write_text(_recipe(RECIPE_NAME, '["12.1a"]', cmake_args), encoding="utf-8")
    plain = root / "plain.toml"
    plain.write_text(_recipe(RECIPE_NAME + "-plain", '["12.1"]\nallow_plain_sm121 = true',
                             cmake_args), encoding="utf-8")
    return {"root": root, "recipe": recipe, "plain": plain, "cache": root / "cache",
            "repo": pybind11_repo}


def _recipe(name: str, archs: str, cmake_args: str) -> str:
    return example_recipe(name, archs=archs, tail=f'[build.env]\nCMAKE_ARGS = "{cmake_args}"\n')


def _wheel(dirs: dict[str, Path], out: str, *extra: str, unshare: bool = False,
           recipe: str = "recipe") -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sparkbuild", "wheel", "--recipe", str(dirs[recipe]),
               "--cache", str(dirs["cache"]), "--out", str(dirs["root"] / out), "--json",
               *extra]
    if unshare:
        command = ["unshare", "-n", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False, cwd=dirs["root"])


@pytest.fixture(scope="module")
def online_build(build_dirs: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """The example's online build, run once: it fills the cache the offline runs read."""
    return _wheel(build_dirs, "online")


def _extension_archs(wheel: Path, into: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.startswith("mini_vllm/_C") and
                     n.endswith(".so")]
        archive.extract(member, into)
    return list_cuda_archs(into / member)


def _built_wheel(out: Path) -> Path:
    (wheel,) = sorted(out.glob("mini_vllm-*.whl"))
    return wheel


@pytest.mark.skipif(not unshare_works(), reason="needs `unshare -n` (root)")
def test_online_then_offline_build(
    build_dirs: dict[str, Path], online_build: subprocess.CompletedProcess[str]
) -> None:
    online = online_build
    assert online.returncode == 0, online.stderr[-4000:]
    report = json.loads(online.stdout)
    assert [p["status"] for p in report["patches"]] == ["applied"] * 4
    (source,) = report["vendor"]["sources"]
    assert (source["name"], source["kind"], source["ref"]) == ("pybind11", "git", "v3.1.0")
    assert "torch==2.13.0" in [w["requirement"] for w in report["vendor"]["wheels"]]
    assert "sm_121a" in _extension_archs(_built_wheel(build_dirs["root"] / "online"),
                                         build_dirs["root"] / "so-online")
    (extension,) = report["wheelhouse"]["libraries"]
    assert extension["sass_archs"] == ["sm_121a"]
    _vendored_in_sbom(build_dirs["root"] / "online", build_dirs["repo"])
    assert extension["block_scaled_mma"] > 0 and extension["trap_only_kernels"] == []
    # the unit watch read each CUDA object as ninja finished it, and refused none
    watched = report["build"]["unit_code"]
    assert watched["refused"] is None and watched["read"] >= 4, watched
    assert "CUDA object(s) read as they were compiled, none refused" in online.stderr
    # ... and kept their cubins' facts: reading the linked library disassembled none of them
    code = report["wheelhouse"]["machine_code"]
    assert code["read"] == 1 and code["cubins_from_cache"] >= 4, code
    verified = subprocess.run([sys.executable, "-m", "sparkbuild", "verify",
                               str(build_dirs["root"] / "online"), "--json"],
                              capture_output=True, text=True, timeout=600, check=False)
    assert verified.returncode == 0, verified.stderr[-3000:]
    (library,) = json.loads(verified.stdout)["libraries"]
    assert library["block_scaled_mma"] == extension["block_scaled_mma"]
    # every kernel of the extension is native sm_121a code: none PTX only, none without code
    (spark,) = library["coverage"]
    assert spark["target"] == "12.1a" and spark["kernels"] > 0
    assert (spark["native"], spark["ptx"], spark["none"]) == (spark["kernels"], 0, 0)
    assert spark["not_native"] == []

    # No network, and the dependency's repository gone: only the cache can serve it.
    hidden = build_dirs["repo"].with_name("moved-away.git")
    build_dirs["repo"].rename(hidden)
    try:
        offline = _wheel(build_dirs, "offline", "--offline", unshare=True)
    finally:
        hidden.rename(build_dirs["repo"])
    assert offline.returncode == 0, offline.stderr[-4000:]
    report = json.loads(offline.stdout)
    assert report["offline"] is True
    # the same tree, recipe and environment: the recorder's CMake runs were not repeated
    assert report["vendor"]["plan_reused_since"], offline.stderr[-4000:]
    assert "vendor plan reused: inputs unchanged since" in offline.stderr
    # ... nor the code forecast's (its first run read every unit: clear at 12.1a)
    assert report["code_forecast"]["status"] == "clear", report["code_forecast"]
    assert report["code_forecast"]["reused_since"], offline.stderr[-4000:]
    assert report["code_forecast"]["units"] >= 4
    assert "code forecast" in report["timeline"]["phases"]
    # the same tree in the same work directory: brought up to it file by file, nothing
    # changed, so the build directory stayed and ninja had nothing to compile; the
    # configure ran again (its arguments changed: FetchContent disconnected), offline
    assert report["build"]["compiled_units"] == 0, offline.stderr[-4000:]
    assert "0 file(s) changed" in offline.stderr
    assert "-DFETCHCONTENT_FULLY_DISCONNECTED=ON" in report["build"]["env"]["CMAKE_ARGS"]
    archs = _extension_archs(_built_wheel(build_dirs["root"] / "offline"),
                             build_dirs["root"] / "so-offline")
    assert "sm_121a" in archs, archs


def _vendored_in_sbom(out: Path, repo: Path) -> None:
    """The wheelhouse's SBOM names the vendored pybind11 inside the built wheel, at the
    commit its tag resolved to, unpatched; the wheel's own SBOM says the same."""
    commit = git("rev-parse", "v3.1.0^{commit}", cwd=repo)
    sbom = json.loads((out / "sbom.cdx.json").read_text())
    (built,) = [c for c in sbom["components"] if c["name"] == "mini-vllm"]
    (pybind11,) = built["components"]
    props = {p["name"]: p["value"] for p in pybind11["properties"]}
    assert (pybind11["name"], pybind11["version"]) == ("pybind11", commit)
    assert props["sparkbuild:vendored:ref"] == "v3.1.0"
    assert props["sparkbuild:patched"] == "false"
    with zipfile.ZipFile(_built_wheel(out)) as archive:
        (inside,) = [n for n in archive.namelist() if n.endswith("/sboms/sbom.cdx.json")]
        own = json.loads(archive.read(inside))
    # the same component in both, but for the wheelhouse's bom-ref, which names the built
    # wheel (every built wheel of a wheelhouse lists its sources, and refs must be unique)
    (inner,) = own["metadata"]["component"]["components"]
    assert pybind11["bom-ref"] == f"{inner['bom-ref']}#{_built_wheel(out).name}"
    assert {**inner, "bom-ref": None} == {**pybind11, "bom-ref": None}


def test_plain_12_1_stops_naming_the_trap(build_dirs: dict[str, Path]) -> None:
    """The opt-in copy of the recipe compiles (nvcc exits 0), and the trap is refused: by
    the unit watch as the FP4 object lands (the build stopped), or by verify when the build
    ended before the watch read that object; either way nothing is written."""
    result = _wheel(build_dirs, "plain", recipe="plain")
    assert result.returncode == VerifyError.exit_code, result.stderr[-4000:]
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["error"] == "VerifyError"
    assert "nvfp4_block_scaled_mma_kernel" in error["what"] and "only trap" in error["what"]
    if "the build was stopped" in error["what"]:
        assert "nvfp4_block_scaled_mma.cu.o holds code verify would refuse for 12.1" in (
            error["what"]), error["what"]
        assert error["where"].endswith("nvfp4_block_scaled_mma.cu.o")
    else:
        assert "not written" in error["what"] and "mini_vllm/_C" in error["what"]
    assert not (build_dirs["root"] / "plain").exists()


def test_plain_12_1_without_the_opt_in_is_refused_before_any_work(
    build_dirs: dict[str, Path], tmp_path: Path
) -> None:
    refused = tmp_path / "refused.toml"
    refused.write_text(build_dirs["plain"].read_text().replace(
        "allow_plain_sm121 = true\n", ""))
    dirs = {**build_dirs, "refused": refused, "cache": tmp_path / "empty-cache"}
    result = _wheel(dirs, "refused", recipe="refused")
    assert result.returncode == RecipeError.exit_code, result.stderr[-3000:]
    error = json.loads(result.stdout)["error"]
    assert "use 12.1a" in error["hint"] and error["where"].startswith(str(refused))
    assert not (tmp_path / "empty-cache" / "work").exists()  # nothing was prepared


@pytest.mark.skipif(not unshare_works(), reason="needs `unshare -n` (root)")
def test_missing_cache_entry_is_named_before_compiling(
    build_dirs: dict[str, Path], online_build: subprocess.CompletedProcess[str]
) -> None:
    """Runs in any order: the entry is set aside for the run and put back afterwards."""
    assert online_build.returncode == 0, online_build.stderr[-4000:]
    cache = Cache(build_dirs["cache"])
    # Vendored with the series' arch edit: the key says so (vendor.patched).
    edit = dependency_edit(load_recipe(build_dirs["recipe"]))
    assert edit is not None
    key = edit.key(f"git:file://{build_dirs['repo']}@v3.1.0")
    entry = cache.lookup("sources", key)
    assert entry is not None, "the online build stored no pybind11 source in the cache"
    blob = cache.blob_path(entry["sha256"])
    aside = build_dirs["root"] / "set-aside.blob"
    blob.rename(aside)
    cache.remove(entry["sha256"])  # and its verified marker
    logs = build_dirs["cache"] / "work" / RECIPE_NAME / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    try:
        result = _wheel(build_dirs, "missing", "--offline", unshare=True)
    finally:
        aside.rename(blob)
    assert result.returncode == CacheMissError.exit_code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["error"] == "CacheMissError"
    assert "source pybind11" in error["what"] and "v3.1.0" in error["what"]
    assert "Building CUDA object" not in result.stderr
    assert not (logs / "build.log").exists()
    assert not (build_dirs["root"] / "missing").exists()
