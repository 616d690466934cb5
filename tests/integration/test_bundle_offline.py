"""Vendor through a mirror, bundle, build offline from the bundle alone.

The example's FetchContent dependency (pybind11) is declared at an upstream-looking URL,
``https://github.com/pybind/pybind11.git``; the only copy is a local git repository laid out
like a mirror (``ROOT/git/pybind/pybind11.git``), reached through
``--mirror https://github.com/=file://ROOT/git/``.  The bundle is then built from with a
fresh cache, inside a network namespace (``unshare -n``), against the torch of the test
environment (``--use-existing-torch``: torch 2.13.0, a CPU build).  The bundle carries the
recipe's pin (iniconfig 2.3.0) and the runtime closure for the recipe's platform and Python,
so that this build, with an empty cache and no network, writes the complete wheelhouse.  A
bundle written with ``--no-closure`` says so, and its wheelhouse leaves the closure to the
node.  Tampered bundles are refused before anything compiles, naming the member.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from sparkbuild.bundle.archive import MANIFEST, TOP
from sparkbuild.errors import CacheMissError, VerifyError
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
PIN_FILE = "iniconfig-2.3.0-py3-none-any.whl"
PIN_SHA256 = "f631c04d2c48c52b84d0d0549c99ff3859c98df65b3101406327ecc7d53fbf12"
PIN = f"""[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "{PIN_SHA256}"
"""


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
{PIN}"""), encoding="utf-8")
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
    # Vendored with the series' arch edit (pybind11 has no CUDA list: stored as it came).
    assert source["key"].startswith(f"git:{UPSTREAM}@v3.1.0#series:")
    assert {p["status"] for p in source["patched"]["patches"]} == {"unchanged"}
    entry = Cache(Path(made["root"]) / "cache").lookup("sources", source["key"])
    assert entry is not None and entry["url"] == UPSTREAM and entry["commit"] == made["commit"]
    assert report["size"] == Path(made["bundle"]).stat().st_size > 0
    assert report["wheels"] == []
    runtime = report["runtime"]
    assert runtime["closure"] == "included"
    assert (runtime["platform"], runtime["python"]) == ("manylinux_2_39_aarch64", "3.12")
    assert [p["file"] for p in runtime["pins"]] == [PIN_FILE]
    assert runtime["pins"][0]["sha256"] == PIN_SHA256
    stripped = {item["name"]: item for item in report["stripped"]}
    assert stripped["source pybind11"]["files"] > 0  # pybind11's tests and docs
    with tarfile.open(made["bundle"]) as tar:
        manifest = json.loads(tar.extractfile(f"{TOP}/{MANIFEST}").read())  # type: ignore[union-attr]
        member = tar.extractfile(f"{TOP}/tree/csrc/activation_kernels.cu")
        assert member is not None
        data = member.read()
    assert manifest["members"]["tree/csrc/activation_kernels.cu"]["sha256"] == (
        hashlib.sha256(data).hexdigest())
    assert manifest["members"][f"runtime/{PIN_FILE}"]["sha256"] == PIN_SHA256


@pytest.mark.skipif(not unshare_works(), reason="needs `unshare -n` (root)")
def test_an_offline_build_from_the_bundle_alone(made: dict[str, Path | str]) -> None:
    """The acceptance: `bundle`, then `unshare -n ... wheel --offline --bundle` with an
    empty cache writes the example's complete wheelhouse (built wheel, pin, lock, index)."""
    root = Path(made["root"])
    assert not (root / "fresh-cache").exists()
    result = _sparkbuild("wheel", "--offline", "--bundle", str(made["bundle"]),
                         "--use-existing-torch", "--cache", str(root / "fresh-cache"),
                         "--out", str(root / "out"), cwd=root, unshare=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "1 pins, 0 closure wheels" in result.stderr
    shipped = {w["file"]: w for w in json.loads(result.stdout)["wheelhouse"]["wheels"]}
    assert shipped[PIN_FILE]["role"] == "pin" and shipped[PIN_FILE]["sha256"] == PIN_SHA256
    assert sha256_file(root / "out" / PIN_FILE) == PIN_SHA256
    lock = (root / "out" / "requirements.lock").read_text()
    assert f"iniconfig==2.3.0 \\\n    --hash=sha256:{PIN_SHA256}" in lock
    assert (root / "out" / "simple" / "iniconfig" / "index.html").is_file()
    report = json.loads(result.stdout)
    assert report["offline"] is True
    assert report["build"]["compiled_units"] >= 4
    assert "imported from the bundle into the cache: pybind11" in result.stderr
    assert "doctor: torch CUDA: none (a CPU build)" in result.stderr
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    assert manifest["toolchain"]["torch"] == importlib.metadata.version("torch")
    assert manifest["toolchain"]["torch_from"].startswith("existing: ")
    assert manifest["build"]["use_existing_torch"] is True
    assert manifest["closure"] == "included"
    assert manifest["target"]["platform"] == "manylinux_2_39_aarch64"
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


@pytest.mark.skipif(not unshare_works(), reason="needs `unshare -n` (root)")
def test_a_bundle_without_closure_says_so_and_its_wheelhouse_leaves_it_to_the_node(
        made: dict[str, Path | str]) -> None:
    root = Path(made["root"])
    bundle = root / "no-closure.bundle.tar.xz"
    written = _sparkbuild("bundle", "--recipe", str(root / "recipe.toml"), "--cache",
                          str(root / "cache"), "--out", str(bundle), "--without-wheels",
                          "--no-closure", "--offline", cwd=root)
    assert written.returncode == 0, written.stderr[-4000:]
    runtime = json.loads(written.stdout)["runtime"]
    assert runtime["closure"] == "left out (--no-closure)" and runtime["files"] == []
    assert [p["file"] for p in runtime["pins"]] == [PIN_FILE]  # the pins still travel
    result = _sparkbuild("wheel", "--bundle", str(bundle), "--use-existing-torch",
                         "--cache", str(root / "fresh-cache-2"), "--out",
                         str(root / "out-no-closure"), cwd=root, unshare=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "written with --no-closure" in result.stderr
    manifest = json.loads((root / "out-no-closure" / "manifest.json").read_text())
    assert manifest["closure"] == "left out (--no-closure)"
    assert (root / "out-no-closure" / PIN_FILE).is_file()


def test_a_wheel_the_bundle_lacks_is_named_before_anything_compiles(
        made: dict[str, Path | str]) -> None:
    """The recipe used with the bundle pins one more wheel than the bundle carries."""
    root = Path(made["root"])
    recipe = root / "more-pins.toml"
    recipe.write_text((root / "recipe.toml").read_text() + """[[pins]]
name = "packaging"
version = "25.0"
""")
    cache = root / "cache-lacking"
    result = _sparkbuild("wheel", "--bundle", str(made["bundle"]), "--recipe", str(recipe),
                         "--use-existing-torch", "--cache", str(cache),
                         "--out", str(root / "out-lacking"), cwd=root)
    assert result.returncode == CacheMissError.exit_code, result.stderr[-3000:]
    error = json.loads(result.stdout)["error"]
    assert "pin packaging==25.0: not in the cache nor in the bundle" in error["what"]
    assert "iniconfig" not in error["what"]  # the bundle carries that one
    assert "Building CUDA object" not in result.stderr
    assert not list(cache.glob("work/*/logs/build.log"))
    assert not (root / "out-lacking").exists()


def test_a_bundle_with_one_line_changed_rebuilds_one_unit(made: dict[str, Path | str]) -> None:
    """A warm rebuild: the same recipe from a second bundle whose tree differs in
    one line of one unit, in the cache and work directory of a build of the first: the work
    tree is brought up to the new one file by file (its build directory stays), the
    configure is skipped, and ninja compiles that one unit."""
    root = Path(made["root"])
    cache = root / "cache-warm"
    first = _sparkbuild("wheel", "--bundle", str(made["bundle"]), "--use-existing-torch",
                        "--cache", str(cache), "--out", str(root / "out-warm-1"), cwd=root)
    assert first.returncode == 0, first.stderr[-4000:]
    changed = root / "changed-example"
    shutil.copytree(EXAMPLE, changed, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    unit = changed / "csrc" / "activation_kernels.cu"
    unit.write_text(unit.read_text() + "\nstatic_assert(sizeof(int) == 4, \"one line\");\n")
    recipe = root / "recipe-changed.toml"
    recipe.write_text((root / "recipe.toml").read_text().replace(str(EXAMPLE), str(changed)),
                      encoding="utf-8")
    second_bundle = root / "changed.bundle.tar.xz"
    written = _sparkbuild("bundle", "--recipe", str(recipe), "--cache", str(root / "cache"),
                          "--out", str(second_bundle), "--without-wheels", "--offline",
                          cwd=root)
    assert written.returncode == 0, written.stderr[-4000:]
    second = _sparkbuild("wheel", "--bundle", str(second_bundle), "--use-existing-torch",
                         "--cache", str(cache), "--out", str(root / "out-warm-2"), cwd=root)
    assert second.returncode == 0, second.stderr[-4000:]
    (synced,) = [line for line in second.stderr.splitlines() if "the bundle's tree:" in line]
    assert "csrc/activation_kernels.cu" in synced, synced
    report = json.loads(second.stdout)
    assert report["build"]["compiled_units"] == 1, second.stderr[-4000:]
    (log,) = cache.glob("work/*/logs/build.log")
    assert "sparkbuild: configure skipped" in log.read_text()
