"""One fingerprint per fleet: install prints it, verify --installed re-checks every file.

The wheelhouse is a tiny generated project's (its closure: one small wheel from the index)
written by write_wheelhouse; each "node" installs it into a venv of its own, one from the
directory and one from a `python -m http.server` on 127.0.0.1 serving it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.recipe import load_recipe
from sparkbuild.wheelhouse.manifest import manifest_fingerprint
from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.network

RECIPE = """
[recipe]
name = "fleetproj"
package = "fleetproj"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1"]
allow_plain_sm121 = true
[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "f631c04d2c48c52b84d0d0549c99ff3859c98df65b3101406327ecc7d53fbf12"
"""
PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"
[project]
name = "fleetproj"
version = "1.0.0"
dependencies = ["six>=1.16"]
"""


def _sparkbuild(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbuild", *map(str, args)],
                          capture_output=True, text=True, timeout=900, check=False, cwd=cwd)


def _json(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run.stdout)
    return data


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    project = root / "project"
    (project / "fleetproj").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "fleetproj" / "__init__.py").write_text("import six\nANSWER = 42\n")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "--wheel-dir", str(root / "dist"), str(project)],
                   env={**os.environ, "PIP_CONFIG_FILE": os.devnull}, check=True,
                   capture_output=True, timeout=300)
    (root / "recipe.toml").write_text(RECIPE)
    out = root / "served" / "wheelhouse"
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=load_recipe(root / "recipe.toml"), source={}, patches=[],
                         built_wheels=sorted((root / "dist").glob("*.whl")), build_settings={},
                         cache_root=root / "cache", offline=False, platform=None))
    return out


def _fingerprint_line(text: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith("wheelhouse fingerprint: ")]
    return line


def test_install_then_verify_installed(wheelhouse: Path, tmp_path: Path) -> None:
    expected = manifest_fingerprint((wheelhouse / "manifest.json").read_bytes())
    venv = tmp_path / "node-1"
    installed = _sparkbuild("install", wheelhouse, "--venv", venv)
    assert installed.returncode == 0, installed.stderr[-3000:]
    line = _fingerprint_line(installed.stderr)
    assert line == f"wheelhouse fingerprint: {expected}"
    recorded = json.loads((venv / "sparkbuild-wheelhouse.json").read_text())
    assert recorded["fingerprint"] == expected
    assert {"fleetproj", "six", "iniconfig"} <= set(recorded["distributions"])

    checked = _sparkbuild("verify", "--installed", venv)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    assert _fingerprint_line(checked.stderr) == line  # the same one line on every node
    report = _json(_sparkbuild("verify", "--installed", venv, wheelhouse, "--json"))
    assert report["ok"] is True and report["compared_with_wheelhouse"] == str(wheelhouse)
    assert report["files_checked"] > 10

    (changed,) = venv.glob("lib/python*/site-packages/six.py")
    changed.write_text(changed.read_text() + "\n# changed on one node\n")
    failed = _sparkbuild("verify", "--installed", venv, "--json")
    assert failed.returncode == 12, failed.stderr[-3000:]
    report = _json(failed)
    relative = changed.relative_to(venv).as_posix()
    assert [m["file"] for m in report["mismatches"]] == [relative]
    assert relative in report["error"]["what"]
    assert report["fingerprint"] == expected


@pytest.fixture
def http_server(wheelhouse: Path) -> Iterator[tuple[str, Path]]:
    """``python -m http.server`` on 127.0.0.1 serving the wheelhouse's parent directory."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = wheelhouse.parent.parent / f"http-{port}.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
             "--directory", str(wheelhouse.parent)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/{wheelhouse.name}/", log
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_install_from_a_wheelhouse_served_over_http(wheelhouse: Path, tmp_path: Path,
                                                    http_server: tuple[str, Path]) -> None:
    url, log = http_server
    local = tmp_path / "node-local"
    assert _sparkbuild("install", wheelhouse, "--venv", local).returncode == 0
    remote = tmp_path / "node-http"
    installed = _sparkbuild("install", url, "--venv", remote, "--json")
    assert installed.returncode == 0, installed.stderr[-3000:]
    report = _json(installed)
    assert report["wheelhouse"] == url
    served = log.read_text()
    assert "GET /wheelhouse/simple/six/" in served and "GET /wheelhouse/manifest.json" in served
    lines = {_fingerprint_line(_sparkbuild("verify", "--installed", venv).stderr)
             for venv in (local, remote)}
    assert len(lines) == 1 and report["fingerprint"] in lines.pop()
    probe = subprocess.run([str(remote / "bin" / "python"), "-c",
                            "import fleetproj; print(fleetproj.ANSWER)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    assert probe.stdout.strip() == "42"
