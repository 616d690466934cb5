"""A real wheelhouse of a tiny generated setuptools project, end to end.

Two builds of the project (with different file times and modes) go through the wheelhouse;
the second offline, from the cache the first filled.  Then: the layout, byte-identical
wheels, verify passing and then naming a changed wheel, and install inside ``unshare -n``
(no network at all).  The project's closure is one tiny wheel (six) and its pin another
(iniconfig), so the test downloads a few kilobytes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
import zipfile
from typing import TYPE_CHECKING, Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from sparkbuild.proc import run
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.store.cache import Cache, default_cache_root
from sparkbuild.store.hashing import sha256_file
from sparkbuild.wheelhouse.closure import RealOutside, fetch_pin
from sparkbuild.wheelhouse.lock import find_uv, parse_lock
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse
from support import example_recipe

if TYPE_CHECKING:
    from pathlib import Path

FLASHINFER_0_6_18 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
FLASHINFER_0_7_2_POST1 = "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
INICONFIG_2_3_0 = "f631c04d2c48c52b84d0d0549c99ff3859c98df65b3101406327ecc7d53fbf12"
RECIPE = f"""
[recipe]
name = "tinyproj"
package = "tinyproj"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "{INICONFIG_2_3_0}"
"""
PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"
[project]
name = "tinyproj"
version = "0.3.0"
dependencies = ["six>=1.16"]
[project.scripts]
tinyproj-hello = "tinyproj:hello"
"""


def make_project(root: Path) -> Path:
    (root / "tinyproj").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "tinyproj" / "__init__.py").write_text(
        "import six\n\ndef hello() -> None:\n    print('hello', six.__name__)\n")
    (root / "tinyproj" / "data.txt").write_text("payload\n")
    return root


def build_wheel(project: Path, dist: Path) -> Path:
    env = {"PIP_CONFIG_FILE": os.devnull}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--wheel-dir", dist, project], env=env, cwd=project, timeout=300)
    (wheel,) = dist.glob("tinyproj-*.whl")
    return wheel


def install_report(output: str) -> dict[str, Any]:
    """``install --json``'s object: stdout's JSON after stderr's command echoes."""
    report, _end = json.JSONDecoder().raw_decode(output[output.index("\n{") + 1:])
    assert isinstance(report, dict)
    return report


def wheelhouse(tmp_path: Path, wheel: Path, out: Path, *, offline: bool) -> None:
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=load_recipe(tmp_path / "recipe.toml"),
                         source={"kind": "directory", "spec": str(tmp_path / "p1")}, patches=[],
                         built_wheels=[wheel], build_settings={"jobs": 1},
                         cache_root=tmp_path / "cache", offline=offline, platform=None))


@pytest.mark.network
def test_wheelhouse_of_a_small_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    (tmp_path / "recipe.toml").write_text(RECIPE)
    first = build_wheel(make_project(tmp_path / "p1"), tmp_path / "dist1")
    second_project = shutil.copytree(tmp_path / "p1", tmp_path / "p2")
    for path in second_project.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    (second_project / "tinyproj" / "data.txt").chmod(0o600)
    second = build_wheel(second_project, tmp_path / "dist2")
    assert first.read_bytes() != second.read_bytes()  # the backend is not reproducible

    one, two = tmp_path / "wh1", tmp_path / "wh2"
    wheelhouse(tmp_path, first, one, offline=False)
    wheelhouse(tmp_path, second, two, offline=True)  # from the cache the first run filled

    (built,) = one.glob("tinyproj-0.3.0+sm121a.*-py3-none-any.whl")
    assert (two / built.name).read_bytes() == built.read_bytes()  # we are
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted([built.name, "iniconfig-2.3.0-py3-none-any.whl",
                            "six-1.17.0-py2.py3-none-any.whl", "requirements.lock",
                            "manifest.json", "simple", "pylock.toml", "sbom.cdx.json"]), names
    for name in ("pylock.toml", "sbom.cdx.json"):
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    locked = {r.key: r for r in parse_lock((one / "requirements.lock").read_text(), where="x")}
    assert locked["iniconfig"].hashes == (INICONFIG_2_3_0,)
    assert sorted(locked) == ["iniconfig", "six", "tinyproj"]
    manifest = json.loads((one / "manifest.json").read_text())
    assert manifest["toolchain"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert (one / "simple" / "six" / "index.html").is_file()

    assert verify_wheelhouse(one).error is None
    data = bytearray((two / built.name).read_bytes())
    data[100] ^= 0xFF
    (two / built.name).write_bytes(bytes(data))
    result = run([sys.executable, "-m", "sparkbuild", "verify", two, "--json"], check=False)
    assert result.returncode == 12, result.output
    report, _end = json.JSONDecoder().raw_decode(result.output[result.output.index("{"):])
    assert [m["file"] for m in report["mismatches"]] == [built.name]

    venv = tmp_path / "venv"
    installed = run(["unshare", "-n", sys.executable, "-m", "sparkbuild", "install", one,
                     "--venv", venv, "--json"], check=False, timeout=600)
    assert installed.returncode == 0, installed.output
    assert install_report(installed.output)["pip_check"] == {
        "ok": True, "overrides": [], "problems": []}
    probe = run([venv / "bin" / "python", "-c",
                 "import importlib.metadata as m, tinyproj, iniconfig; "
                 "print(m.version('tinyproj'))"], cwd=tmp_path)
    assert probe.output.strip() == built.name.split("-")[1]

    pylock_venv = tmp_path / "venv-pylock"
    installed = run(["unshare", "-n", sys.executable, "-m", "sparkbuild", "install", one,
                     "--venv", pylock_venv, "--from", "pylock", "--json"], check=False,
                    timeout=600)
    assert installed.returncode == 0, installed.output
    report = install_report(installed.output)
    assert report["installed_from"] == "pylock.toml" and report["pip_check"]["ok"] is True
    assert "uv" in installed.output.split("\n{")[0] and "--offline" in installed.output
    probe = run([pylock_venv / "bin" / "python", "-c",
                 "import importlib.metadata as m, tinyproj, six; print(m.version('tinyproj'))"],
                cwd=tmp_path)
    assert probe.output.strip() == built.name.split("-")[1]
    with zipfile.ZipFile(built) as archive:
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}

    # the caller's PYTHONPATH holds six already (as where sparkbuild's own site holds
    # setuptools): the venv still gets its own copy, and pip check judges the venv
    shadow = tmp_path / "shadow"
    (six_wheel,) = one.glob("six-*.whl")
    with zipfile.ZipFile(six_wheel) as archive:
        archive.extractall(shadow)
    shadowed_venv = tmp_path / "venv-shadowed"
    installed = run(["unshare", "-n", sys.executable, "-m", "sparkbuild", "install", one,
                     "--venv", shadowed_venv, "--json"], check=False, timeout=600,
                    env={"PYTHONPATH": str(shadow)})
    assert installed.returncode == 0, installed.output
    assert list(shadowed_venv.glob("lib/python*/site-packages/six.py"))
    probe = run([shadowed_venv / "bin" / "python", "-c", "import six; print(six.__file__)"],
                cwd=tmp_path, env={"PYTHONPATH": ""})
    assert str(shadowed_venv) in probe.output


@pytest.mark.network
@pytest.mark.network
def test_without_the_closure_the_nodes_projects_are_listed_not_missing(tmp_path: Path) -> None:
    # --no-closure (a node that already holds the runtime, as NVIDIA's containers do): six,
    # which tinyproj requires, is not shipped; the wheelhouse is written and verifies, and
    # verify names six as the node's to provide.
    (tmp_path / "recipe.toml").write_text(RECIPE)
    wheel = build_wheel(make_project(tmp_path / "p1"), tmp_path / "dist")
    out = tmp_path / "wh"
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=load_recipe(tmp_path / "recipe.toml"),
                         source={"kind": "directory", "spec": str(tmp_path / "p1")}, patches=[],
                         built_wheels=[wheel], build_settings={"jobs": 1},
                         cache_root=tmp_path / "cache", offline=False, platform=None,
                         closure=False))
    assert not list(out.glob("six-*.whl"))
    result = verify_wheelhouse(out)
    assert result.error is None
    assert result.requirements["left_to_the_node"] == ["six>=1.16"]
    assert result.requirements["ok"] is True


def test_closure_for_the_spark_platform(tmp_path: Path) -> None:
    """``--platform``: a binary dependency arrives as its manylinux aarch64 cp312 wheel."""
    (tmp_path / "recipe.toml").write_text(RECIPE)
    project = make_project(tmp_path / "p1")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"six>=1.16"', '"PyYAML>=6"'))
    wheel = build_wheel(project, tmp_path / "dist")
    out = tmp_path / "wh"
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=load_recipe(tmp_path / "recipe.toml"), source={}, patches=[],
                         built_wheels=[wheel], build_settings={}, cache_root=tmp_path / "cache",
                         offline=False, platform="manylinux_2_39_aarch64"))
    (yaml,) = out.glob("[Pp]y[Yy][Aa][Mm][Ll]-*.whl")
    assert "-cp312-cp312-" in yaml.name and yaml.name.endswith("_aarch64.whl")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["platform"] == "manylinux_2_39_aarch64"
    assert manifest["target"]["python"] == "3.12"


@pytest.mark.network
@pytest.mark.parametrize(("recipe_name", "filename", "sha256"), [
    ("qwen38next.toml", "flashinfer_python-0.6.18-py3-none-any.whl", FLASHINFER_0_6_18),
    ("vllm-0.33.0.toml", "flashinfer_python-0.7.2.post1-py3-none-any.whl",
     FLASHINFER_0_7_2_POST1),
])
def test_the_recipes_flashinfer_pin_lands_byte_identical(
    tmp_path: Path, recipe_name: str, filename: str, sha256: str
) -> None:
    """The real recipes' pins, through the cache (~/.cache/sparkbuild), checked byte for byte.

    Both are py3-none-any wheels: they install on the Spark (manylinux_2_39_aarch64, 3.12).
    """
    recipe = load_recipe(REPO_ROOT / "recipes" / recipe_name)
    (pin,) = [p for p in recipe.pins if p.name == "flashinfer-python"]
    placed = fetch_pin(pin, Cache(default_cache_root()), tmp_path, RealOutside(), offline=False)
    assert placed.file == filename
    assert placed.sha256 == sha256 == sha256_file(tmp_path / placed.file)


EXAMPLE_RECIPE = example_recipe("mini-vllm-wheelhouse-test", build="jobs = 1", tail=f"""[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "{INICONFIG_2_3_0}"
""")


def sparkbuild_wheel(recipe: Path, cache: Path, out: Path, *extra: str) -> None:
    result = run([sys.executable, "-m", "sparkbuild", "wheel", "--recipe", recipe,
                  "--cache", cache, "--out", out, *extra], check=False, timeout=1800)
    assert result.returncode == 0, result.output[-4000:]


@pytest.mark.network
@pytest.mark.nvcc
@pytest.mark.slow
def test_example_two_builds_verify_and_install_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acceptance run on examples/mini-vllm: build twice (the second --offline)."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(EXAMPLE_RECIPE)
    one, two = tmp_path / "wh1", tmp_path / "wh2"
    sparkbuild_wheel(recipe, tmp_path / "cache", one)
    sparkbuild_wheel(recipe, tmp_path / "cache", two, "--offline")

    (built,) = one.glob("mini_vllm-0.1.0+sm121a.*.whl")
    assert (two / built.name).read_bytes() == built.read_bytes()  # its SBOM included
    assert sorted(p.name for p in one.iterdir()) == sorted(
        [built.name, "iniconfig-2.3.0-py3-none-any.whl", "requirements.lock", "manifest.json",
         "simple", "pylock.toml", "sbom.cdx.json"])
    check_example_standards(one, two, built)
    manifest = json.loads((one / "manifest.json").read_text())
    assert [p["status"] for p in manifest["patches"]] == ["applied"] * 4
    assert manifest["toolchain"]["nvcc"] and manifest["build"]["archs"] == ["12.1a"]
    (extension,) = [lib for lib in manifest["libraries"] if "/_C" in lib["library"]]
    assert extension["block_scaled_mma"] > 0 and extension["trap_only_kernels"] == []

    report = verify_wheelhouse(one)  # cuobjdump reads the extension's GPU code
    assert report.error is None, report.summary()
    assert any("sm_121a" in lib.archs for lib in report.libraries)
    assert [lib.block_scaled_mma for lib in report.libraries if lib.archs] == [
        extension["block_scaled_mma"]]
    data = bytearray((two / built.name).read_bytes())
    data[-200] ^= 0x01
    (two / built.name).write_bytes(bytes(data))
    assert [m.file for m in verify_wheelhouse(two).mismatches] == [built.name]

    venv = tmp_path / "venv"
    installed = run(["unshare", "-n", sys.executable, "-m", "sparkbuild", "install", one,
                     "--venv", venv, "--json"], check=False, timeout=600)
    assert installed.returncode == 0, installed.output
    install_json = install_report(installed.output)
    assert install_json["pip_check"]["ok"] is True, install_json["pip_check"]
    assert install_json["pip_check"]["problems"] == [] and "mini_vllm" in install_json["imported"]
    # the node profile: declared in the manifest, written by install, set by activate
    assert {e["key"] for e in manifest["build"]["node_profile"]} >= {
        "FLASHINFER_NO_DOWNLOAD", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST",
        "TRITON_PTXAS_PATH", "VLLM_USE_DEEP_GEMM"}
    written = {e["key"]: e["value"] for e in install_json["profile"]["entries"]}
    shown = run(["bash", "-c", f". {venv}/bin/activate && env"], check=True).output
    sourced = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    assert {k: sourced.get(k) for k in written} == written
    assert written["FLASHINFER_NO_DOWNLOAD"] == "1" and written["VLLM_USE_DEEP_GEMM"] == "0"
    assert written["FLASHINFER_CUDA_ARCH_LIST"] == "12.1a"
    assert (venv / "sparkbuild" / "node.env").is_file()

    # The standard route: uv alone, from pylock.toml, no network, into a fresh venv, on a
    # copy of the wheelhouse as a node receives it.
    node = tmp_path / "node"
    shutil.copytree(one, node / "wheelhouse")
    fresh = tmp_path / "venv-uv"
    run([sys.executable, "-m", "venv", "--without-pip", fresh], timeout=300)
    uv_install = run(["unshare", "-n", find_uv(), "pip", "install", "--offline", "-r",
                      "wheelhouse/pylock.toml"], cwd=node,
                     env={"VIRTUAL_ENV": str(fresh), "UV_NO_CONFIG": "1",
                          "UV_CACHE_DIR": str(tmp_path / "uv-cache")},
                     check=False, timeout=600)
    assert uv_install.returncode == 0, uv_install.output
    probe = run([fresh / "bin" / "python", "-c",
                 "import importlib.metadata as m, mini_vllm, iniconfig; "
                 "print(m.version('mini-vllm'))"], cwd=tmp_path)
    assert probe.output.strip() == built.name.split("-")[1]


def check_example_standards(one: Path, two: Path, built: Path) -> None:
    """pylock.toml and sbom.cdx.json: the same bytes from both builds, schema-valid, every
    wheel with its hash, the patches as pedigree; the wheel's own SBOM under .dist-info."""
    for name in ("pylock.toml", "sbom.cdx.json"):
        assert (two / name).read_bytes() == (one / name).read_bytes(), name
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    text = (one / "sbom.cdx.json").read_text()
    assert validator.validate_str(text) is None
    sbom = json.loads(text)
    hashes = {c["purl"].split("?file_name=")[1].replace("%2B", "+"): c["hashes"][0]["content"]
              for c in sbom["components"]}
    assert hashes == {p.name: sha256_file(p) for p in one.glob("*.whl")}
    (component,) = [c for c in sbom["components"] if c["name"] == "mini-vllm"]
    assert len(component["pedigree"]["patches"]) == 4
    statuses = {p["name"]: p["value"] for p in component["properties"]
                if p["name"].endswith(":status")}
    assert sorted(statuses.values()) == ["applied"] * 4
    lock = tomllib.loads((one / "pylock.toml").read_text())
    assert {w["path"]: w["hashes"]["sha256"] for p in lock["packages"]
            for w in p["wheels"]} == hashes
    with zipfile.ZipFile(built) as archive:
        (inside,) = [n for n in archive.namelist()
                     if n.endswith(".dist-info/sboms/sbom.cdx.json")]
        record = archive.read(inside.split("/")[0] + "/RECORD").decode()
        assert f"{inside},sha256=" in record
        assert validator.validate_str(archive.read(inside).decode()) is None
