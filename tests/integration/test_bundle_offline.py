"""Issue 10 in CI: vendor through a mirror, bundle, build offline from the bundle alone.

The example's FetchContent dependency (pybind11) is declared at an upstream-looking URL,
``https://github.com/pybind/pybind11.git``; the only copy is a local git repository laid out
like a mirror (``ROOT/git/pybind/pybind11.git``), reached through
``--mirror https://github.com/=file://ROOT/git/``.  The bundle is then built from with a
fresh cache, inside a network namespace (``unshare -n``), against the torch of the test
environment (``--use-existing-torch``: torch 2.13.0, a CPU build).  Tampered bundles are
refused before anything compiles, naming the member.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from sparkbuild.bundle.archive import MANIFEST, TOP
from sparkbuild.errors import VerifyError
from sparkbuild.store.cache import Cache
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.sass import list_cuda_archs
from support import example_recipe, pybind11_bare_repo, unshare_works
from support.bundles import rewrite_bundle

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mini-vllm"
UPSTREAM = "https://github.com/pybind/pybind11.git"
TIMEOUT = 1200


def _sparkbuild(*args: str, cwd: Path, unshare: bool = False
                ) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sparkbuild", *args, "--json"]
    if unshare:
        command = ["unshare", "-n", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False, cwd=cwd)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """A mirror holding pybind11 3.1.0 at v3.1.0, a recipe naming upstream, and a bundle."""
    root = tmp_path_factory.mktemp("bundle")
    commit = pybind11_bare_repo(root, root / "git" / "pybind" / "pybind11.git")
    recipe = root / "recipe.toml"
    recipe.write_text(example_recipe("mini-vllm-bundle", tail=f"""[build.env]
CMAKE_ARGS = "-DMINI_VLLM_PYBIND11_GIT_REPOSITORY={UPSTREAM} -DMINI_VLLM_PYBIND11_GIT_TAG=v3.1.0"
"""), encoding="utf-8")
    bundle = root / "mini.bundle.tar.xz"
    result = _sparkbuild("bundle", "--recipe", str(recipe), "--cache", str(root / "cache"),
                         "--out", str(bundle), "--without-wheels",
                         "--mirror", f"https://github.com/=file://{root}/git/", cwd=root)
    assert result.returncode == 0, result.stderr[-4000:]
    return {"root": root, "bundle": bundle, "report": result.stdout,
            "commit": commit}


def test_the_mirror_fills_the_cache_under_the_upstream_url(made: dict[str, Path | str]) -> None:
    report = json.loads(str(made["report"]))
    (source,) = report["sources"]
    assert (source["url"], source["ref"], source["commit"]) == (UPSTREAM, "v3.1.0",
                                                                made["commit"])
    entry = Cache(Path(made["root"]) / "cache").lookup("sources", f"git:{UPSTREAM}@v3.1.0")
    assert entry is not None and entry["url"] == UPSTREAM and entry["commit"] == made["commit"]
    assert report["size"] == Path(made["bundle"]).stat().st_size > 0
    assert report["wheels"] == []
    stripped = {item["name"]: item for item in report["stripped"]}
    assert stripped["source pybind11"]["files"] > 0  # pybind11's tests and docs
    with tarfile.open(made["bundle"]) as tar:
        manifest = json.loads(tar.extractfile(f"{TOP}/{MANIFEST}").read())  # type: ignore[union-attr]
        member = tar.extractfile(f"{TOP}/tree/csrc/activation_kernels.cu")
        assert member is not None
        data = member.read()
    assert manifest["members"]["tree/csrc/activation_kernels.cu"]["sha256"] == (
        hashlib.sha256(data).hexdigest())


@pytest.mark.skipif(not unshare_works(), reason="needs `unshare -n` (root)")
def test_an_offline_build_from_the_bundle_alone(made: dict[str, Path | str]) -> None:
    root = Path(made["root"])
    result = _sparkbuild("wheel", "--bundle", str(made["bundle"]), "--use-existing-torch",
                         "--cache", str(root / "fresh-cache"), "--out", str(root / "out"),
                         cwd=root, unshare=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    assert report["offline"] is True
    assert report["build"]["compiled_units"] >= 4
    assert "imported from the bundle into the cache: pybind11" in result.stderr
    assert "doctor: torch CUDA: none (a CPU build)" in result.stderr
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    assert manifest["toolchain"]["torch"] == importlib.metadata.version("torch")
    assert manifest["toolchain"]["torch_from"].startswith("existing: ")
    assert manifest["build"]["use_existing_torch"] is True
    (wheel,) = sorted((root / "out").glob("mini_vllm-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.startswith("mini_vllm/_C")]
        archive.extract(member, root / "so")
    assert "sm_121a" in list_cuda_archs(root / "so" / member)


@pytest.mark.parametrize(("how", "member", "says"), [
    ("change", "tree/csrc/activation_kernels.cu", "tree/csrc/activation_kernels.cu: changed"),
    ("drop", "tree/CMakeLists.txt", "tree/CMakeLists.txt: missing"),
])
def test_a_tampered_bundle_is_refused_before_compiling(made: dict[str, Path | str], how: str,
                                                       member: str, says: str) -> None:
    root = Path(made["root"])
    tampered = rewrite_bundle(Path(made["bundle"]), root / f"tampered-{how}.tar.xz",
                              **{how: member})
    assert sha256_file(tampered) != sha256_file(Path(made["bundle"]))
    cache = root / f"cache-{how}"
    result = _sparkbuild("wheel", "--bundle", str(tampered), "--use-existing-torch",
                         "--cache", str(cache), "--out", str(root / f"out-{how}"), cwd=root)
    assert result.returncode == VerifyError.exit_code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["error"] == "VerifyError" and says in error["what"]
    assert "Building CUDA object" not in result.stderr
    assert not list(cache.glob("work/*/logs/build.log"))
    assert not (root / f"out-{how}").exists()
