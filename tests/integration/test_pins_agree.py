"""Pins against what they ship beside, with real uv, pip and git, and no network.

A local PEP 503 index over file:// (built here: alpha 1.0 requires beta>=2; beta 1.0 and
2.0; gamma 1.0) stands in for the package index, and a local git repository over file://
stands in for the branch of PR #53896 (GitHub is unreachable here).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from sparkbuild.proc import run
from sparkbuild.recipe import load_recipe
from sparkbuild.wheelhouse.closure import RealOutside
from sparkbuild.wheelhouse.lock import parse_lock
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseReaders, write_wheelhouse
from support.wheels import zipped_wheel

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

BRANCH = "release/qwen38next"


def record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(name: str, version: str, requires: Sequence[str] = ()) -> tuple[str, bytes]:
    """A small installable wheel (with RECORD) and its file name."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                *[f"Requires-Dist: {r}" for r in requires]]
    files = {f"{module}/__init__.py": f"VERSION = {version!r}\n".encode(),
             f"{dist}/METADATA": ("\n".join(metadata) + "\n").encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = "".join(f"{path},sha256={record_digest(data)},{len(data)}\n"
                     for path, data in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{module}-{version}-py3-none-any.whl", buffer.getvalue()


INDEX = {"alpha": [wheel("alpha", "1.0", ["beta>=2"])],
         "beta": [wheel("beta", "1.0"), wheel("beta", "2.0")],
         "gamma": [wheel("gamma", "1.0")]}
BETA_1 = hashlib.sha256(INDEX["beta"][0][1]).hexdigest()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The local index, made the one sparkbuild (and pip, uv through it) uses."""
    root = tmp_path / "index" / "simple"
    for project, files in INDEX.items():
        (root / project).mkdir(parents=True)
        links = []
        for name, data in files:
            (root / project / name).write_bytes(data)
            links.append(f'<a href="{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a>')
        (root / project / "index.html").write_text("<html><body>\n" + "\n".join(links)
                                                    + "\n</body></html>\n")
    (root / "index.html").write_text("".join(f'<a href="{p}/">{p}</a>' for p in INDEX))
    url = root.as_uri()
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no find-links, no extra indexes
    monkeypatch.setenv("SPARKBUILD_CACHE", str(tmp_path / "cache"))
    return url


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def branch_repo(tmp_path: Path, requirements: str) -> Path:
    """The stand-in for the PR's branch: its requirements.txt asks for ``requirements``."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "config", "user.name", "dev")
    (repo / "README").write_text("main\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "main")
    git(repo, "checkout", "-q", "-b", BRANCH)
    (repo / "requirements.txt").write_text(requirements)
    git(repo, "add", "requirements.txt")
    git(repo, "commit", "-q", "-m", "the branch's requirements")
    return repo


def recipe_file(tmp_path: Path, spec: str, override: str | None = None) -> Path:
    path = tmp_path / "recipes" / "branch.toml"
    path.parent.mkdir(exist_ok=True)
    (tmp_path / "recipes" / "series").write_text("")
    pin = f'[[pins]]\nname = "beta"\nversion = "1.0"\nsha256 = "{BETA_1}"\n'
    if override:
        pin += f'override = "{override}"\n'
    path.write_text(f'[recipe]\nname = "branch"\npackage = "app"\n[source]\nspec = "{spec}"\n'
                    f'[series]\npath = "series"\n{pin}')
    return path


def sparkbuild(*args: str | Path) -> tuple[int, str]:
    result = run([sys.executable, "-m", "sparkbuild", *args], check=False, timeout=600)
    return result.returncode, result.output


def json_of(output: str) -> dict[str, object]:
    report, _end = json.JSONDecoder().raw_decode(output[output.index("\n{") + 1:])
    assert isinstance(report, dict)
    return report


def test_what_the_branch_pins_is_recorded_on_fetch_and_a_contradicting_pin_refused(
    index: str, tmp_path: Path
) -> None:
    repo = branch_repo(tmp_path, "gamma\nbeta==2.0\n")
    spec = f"git+file://{repo}@{BRANCH}"
    recipe = recipe_file(tmp_path, spec)
    code, output = sparkbuild("lock", "--recipe", recipe, "--platform",
                              "manylinux_2_39_aarch64", "--python", "3.12", "--out",
                              tmp_path / "out")
    assert code == 14, output
    commit = git(repo, "rev-parse", BRANCH)
    assert "the recipe pins beta==1.0, but app (requirements.txt:2) requires beta==2.0" in output
    assert f"app at {commit[:12]} (requirements.txt) requires beta==2.0" in output
    recorded = json.loads((tmp_path / "recipes" / "branch.lock.json").read_text())
    assert recorded["commit"] == commit
    assert recorded["tree_requirements"] == {"commit": commit, "from": "requirements.txt",
                                             "requirements": {"beta": ["beta==2.0"]}}
    assert not (tmp_path / "out" / "requirements.lock").exists()

    # the pin with a reason: locked, by its hash, and the override in the lock's header
    recipe = recipe_file(tmp_path, spec, override="beta 1.0 runs on GB10")
    code, output = sparkbuild("lock", "--recipe", recipe, "--platform",
                              "manylinux_2_39_aarch64", "--python", "3.12", "--out",
                              tmp_path / "out", "--json")
    assert code == 0, output
    text = (tmp_path / "out" / "requirements.lock").read_text()
    locked = {r.key: r for r in parse_lock(text, where="lock")}
    assert (locked["beta"].version, locked["beta"].hashes) == ("1.0", (BETA_1,))
    assert sorted(locked) == ["beta", "gamma"]
    assert "# override: beta==1.0 (reason: beta 1.0 runs on GB10)" in text
    assert "#   replaces: app (requirements.txt:2) requires beta==2.0" in text
    overrides = json_of(output)["overrides"]
    assert isinstance(overrides, list) and len(overrides) == 1
    assert overrides[0]["pin"] == "beta==1.0"


def test_a_pin_the_branch_agrees_with_needs_no_override(index: str, tmp_path: Path) -> None:
    repo = branch_repo(tmp_path, "gamma\nbeta<2\n")
    recipe = recipe_file(tmp_path, f"git+file://{repo}@{BRANCH}")
    code, output = sparkbuild("lock", "--recipe", recipe, "--platform",
                              "manylinux_2_39_aarch64", "--python", "3.12", "--out",
                              tmp_path / "out", "--json")
    assert code == 0, output
    assert json_of(output)["overrides"] == []
    assert load_recipe(recipe).tree_requirements() is not None


def test_a_closure_package_contradicting_a_pin_is_refused_through_uv(
    index: str, tmp_path: Path
) -> None:
    """alpha (in the closure) requires beta>=2; the recipe pins beta 1.0."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "requirements.txt").write_text("alpha\n")
    recipe = recipe_file(tmp_path, str(tree))
    code, output = sparkbuild("lock", "--recipe", recipe, "--platform",
                              "manylinux_2_39_aarch64", "--python", "3.12", "--out",
                              tmp_path / "out")
    assert code == 14, output
    assert "the recipe pins beta==1.0, but the closure contradicts it" in output
    assert "alpha depend on beta>=2" in output
    recipe = recipe_file(tmp_path, str(tree), override="alpha works with beta 1.0 here")
    code, output = sparkbuild("lock", "--recipe", recipe, "--platform",
                              "manylinux_2_39_aarch64", "--python", "3.12", "--out",
                              tmp_path / "out")
    assert code == 0, output
    locked = {r.key: r.version for r in parse_lock(
        (tmp_path / "out" / "requirements.lock").read_text(), where="lock")}
    assert locked == {"alpha": "1.0", "beta": "1.0"}


def built_app(tmp_path: Path) -> Path:
    name, data = wheel("app", "1.0", ["alpha"])
    path = tmp_path / "dist" / name
    path.parent.mkdir()
    path.write_bytes(data)
    return path


def test_an_override_installs_and_pip_check_reports_it_an_unrecorded_one_fails(
    index: str, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    recipe = load_recipe(recipe_file(tmp_path, str(tree), override="alpha runs on beta 1.0"))
    out = tmp_path / "wheelhouse"
    result = write_wheelhouse(
        out,
        WheelhouseInputs(recipe=recipe, source={}, patches=[], built_wheels=[built_app(tmp_path)],
                         build_settings={}, cache_root=tmp_path / "cache", offline=False,
                         platform=None),
        WheelhouseReaders(outside=RealOutside()))  # install: this Python
    (override,) = result.overrides
    assert [d.describe() for d in override.replaced] == ["alpha 1.0 requires beta>=2"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["overrides"] == [override.to_dict()]
    verified = verify_wheelhouse(out, list_archs=lambda path: [])
    assert verified.error is None, verified.summary()
    assert [o["requirement"] for o in verified.requirements["overrides"]] == ["beta>=2"]

    code, output = sparkbuild("install", out, "--venv", tmp_path / "venv", "--json")
    assert code == 0, output
    pip_check = json_of(output)["pip_check"]
    assert isinstance(pip_check, dict) and pip_check["ok"] is True
    assert pip_check["problems"] == []
    assert pip_check["overrides"] == ["alpha 1.0 has requirement beta>=2, but you have beta "
                                      "1.0. (override beta==1.0: alpha runs on beta 1.0)"]

    manifest["overrides"] = []  # the same conflict, no longer recorded
    (out / "manifest.json").write_text(json.dumps(manifest))
    code, output = sparkbuild("install", out, "--venv", tmp_path / "venv2", "--json")
    assert code == 12, output
    report = json_of(output)
    assert report["pip_check"] == {
        "ok": False, "overrides": [],
        "problems": ["alpha 1.0 has requirement beta>=2, but you have beta 1.0."]}
    assert "alpha 1.0 has requirement beta>=2" in report["error"]["what"]  # type: ignore[index]


def test_a_known_bad_version_is_refused_by_lock_and_install(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text('[source]\nspec = "pypi:vllm==0.33.0"\n[series]\npath = "series"\n'
                      '[[pins]]\nname = "flashinfer-python"\nversion = "0.6.17"\n')
    code, output = sparkbuild("lock", "--recipe", recipe, "--out", tmp_path / "out")
    assert code == 14, output
    assert ("refusing pin flashinfer-python==0.6.17: crashes the NVFP4 MoE fallback kernel "
            "on GB10") in output
    assert "known_bad.toml" in output and not (tmp_path / "out").exists()

    # A wheelhouse that passes verify (its manifest vouches for the wheel and the lock), so
    # that install reaches the known-bad check, which refuses it before any venv exists.
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel = house / "flashinfer_python-0.6.17-py3-none-any.whl"
    info = "flashinfer_python-0.6.17.dist-info"
    wheel.write_bytes(zipped_wheel({
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.17\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = f"flashinfer-python==0.6.17 \\\n    --hash=sha256:{digest}\n"
    (house / "requirements.lock").write_text(lock)
    (house / "manifest.json").write_text(json.dumps({
        "target": {"cuda_archs": ["12.1a"]},
        "wheels": [{"file": wheel.name, "name": "flashinfer-python", "version": "0.6.17",
                    "sha256": digest, "size": wheel.stat().st_size, "role": "pin"}],
        "files": {"requirements.lock": hashlib.sha256(lock.encode()).hexdigest()}}))
    code, output = sparkbuild("install", house, "--venv", tmp_path / "venv")
    assert code == 14, output
    assert "refusing wheelhouse file flashinfer-python==0.6.17" in output
    assert not (tmp_path / "venv").exists()


def test_wheel_refuses_a_contradicted_pin_before_building(index: str, tmp_path: Path) -> None:
    """`wheel` on the stand-in branch: the pin is refused right after the fetch, no build."""
    repo = branch_repo(tmp_path, "gamma\nbeta==2.0\n")
    recipe = recipe_file(tmp_path, f"git+file://{repo}@{BRANCH}")
    code, output = sparkbuild("wheel", "--recipe", recipe, "--cache", tmp_path / "cache",
                              "--out", tmp_path / "wheelhouse")
    assert code == 14, output
    assert "the recipe pins beta==1.0, but app (requirements.txt:2) requires beta==2.0" in output
    assert "building" not in output and not (tmp_path / "wheelhouse").exists()
    recorded = json.loads((tmp_path / "recipes" / "branch.lock.json").read_text())
    assert recorded["tree_requirements"]["requirements"] == {"beta": ["beta==2.0"]}
