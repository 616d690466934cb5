"""`verify --installed`: a venv against what `install` recorded, on a venv made of files."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from sparkbuild.errors import VerifyError
from sparkbuild.node.fingerprint import RECORD_NAME, fingerprint, record_installation
from sparkbuild.node.installed_check import verify_installed

MANIFEST = {"schema": 1, "wheels": [
    {"file": "demo-1.0-py3-none-any.whl", "name": "demo", "version": "1.0", "sha256": "0" * 64,
     "size": 1, "role": "built"}]}


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _install_dist(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = [f"{info.name}/METADATA,{_digest((info / 'METADATA').read_bytes())},"]
    for relative, data in files.items():
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        rows.append(f"{relative},{_digest(data)},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    _install_dist(site, "demo", "1.0", {"demo/__init__.py": b"VALUE = 1\n",
                                        "demo/_C.so": b"\x7fELF fake"})
    _install_dist(site, "pip", "25.0", {"pip/__init__.py": b""})
    return venv


def _manifest(tmp_path: Path) -> bytes:
    data = json.dumps(MANIFEST, indent=2).encode()
    (tmp_path / "manifest.json").write_bytes(data)
    return data


def test_fresh_install_passes_and_prints_the_fingerprint(venv: Path, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    recorded = record_installation(venv, manifest, "http://127.0.0.1:8000/wh/")
    assert recorded.fingerprint == "sha256:" + hashlib.sha256(manifest).hexdigest()
    result = verify_installed(venv)
    assert result.error is None, result.summary()
    assert result.fingerprint == fingerprint(manifest)
    assert f"wheelhouse fingerprint: {recorded.fingerprint}" in result.summary()
    assert result.files_checked == 5 and result.distributions == 2


def test_a_changed_file_is_named(venv: Path, tmp_path: Path) -> None:
    record_installation(venv, _manifest(tmp_path), "somewhere")
    changed = venv / "lib" / "python3.12" / "site-packages" / "demo" / "__init__.py"
    changed.write_bytes(b"VALUE = 2\n")
    result = verify_installed(venv)
    assert [m.file for m in result.mismatches] == [
        "lib/python3.12/site-packages/demo/__init__.py"]
    assert isinstance(result.error, VerifyError)
    assert "demo/__init__.py" in result.error.what


def test_a_removed_file_a_new_dist_and_a_patched_record(venv: Path, tmp_path: Path) -> None:
    record_installation(venv, _manifest(tmp_path), "somewhere")
    site = venv / "lib" / "python3.12" / "site-packages"
    (site / "demo" / "_C.so").unlink()
    _install_dist(site, "intruder", "0.1", {"intruder.py": b""})
    record = site / "pip-25.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "pip/extra.py,,\n")
    problems = {m.file: m.problem for m in verify_installed(venv).mismatches}
    assert problems["lib/python3.12/site-packages/demo/_C.so"] == "missing"
    assert "not from it" in problems["lib/python3.12/site-packages/intruder-0.1.dist-info"]
    assert "RECORD changed" in problems["lib/python3.12/site-packages/pip-25.0.dist-info/RECORD"]


def test_uninstalled_and_tampered_record(venv: Path, tmp_path: Path) -> None:
    record_installation(venv, _manifest(tmp_path), "somewhere")
    data = json.loads((venv / RECORD_NAME).read_text())
    data["manifest"] = data["manifest"].replace('"1.0"', '"1.1"')
    (venv / RECORD_NAME).write_text(json.dumps(data))
    problems = {m.file: m.problem for m in verify_installed(venv).mismatches}
    assert "does not hash" in problems[RECORD_NAME]
    assert "not installed at its version" in problems["demo-1.0-py3-none-any.whl"]


def _wheelhouse(root: Path, files: dict[str, bytes]) -> tuple[Path, bytes]:
    """A wheelhouse that passes verify: one demo wheel of ``files``, its lock, a manifest."""
    root.mkdir()
    wheel = root / "demo-1.0-py3-none-any.whl"
    meta = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in {**files, "demo-1.0.dist-info/METADATA": meta}.items():
            archive.writestr(name, data)
        archive.writestr("demo-1.0.dist-info/RECORD", "".join(
            f"{n},{_digest(d)},{len(d)}\n" for n, d in files.items()))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = root / "requirements.lock"
    lock.write_text(f"demo==1.0 --hash=sha256:{digest}\n")
    manifest = {"schema": 1, "wheels": [
        {"file": wheel.name, "name": "demo", "version": "1.0", "sha256": digest,
         "size": wheel.stat().st_size, "role": "built"}],
        "files": {lock.name: hashlib.sha256(lock.read_bytes()).hexdigest()}}
    data = json.dumps(manifest, indent=2).encode()
    (root / "manifest.json").write_bytes(data)
    return root, data


INSTALLED = {"demo/__init__.py": b"VALUE = 1\n", "demo/_C.so": b"\x7fELF fake"}


def test_compared_with_the_wheels_of_the_wheelhouse(venv: Path, tmp_path: Path) -> None:
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", INSTALLED)
    record_installation(venv, manifest, str(wheelhouse))
    result = verify_installed(venv)
    assert result.error is None, result.mismatches
    assert result.compared_with == str(wheelhouse)
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text("{}")
    problems = verify_installed(venv, other).mismatches
    assert "fails verify" in problems[-1].problem


def test_installed_bytes_differ_from_the_wheels(venv: Path, tmp_path: Path) -> None:
    """The venv's RECORD agrees with its files; the wheel does not: the wheel decides."""
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", {**INSTALLED,
                                                         "demo/__init__.py": b"VALUE = 3\n"})
    record_installation(venv, manifest, str(wheelhouse))
    result = verify_installed(venv)
    assert [m.file for m in result.mismatches] == [
        "lib/python3.12/site-packages/demo/__init__.py"]
    assert "differ from its wheel demo-1.0-py3-none-any.whl" in result.mismatches[0].problem


def test_a_file_no_wheel_has_fails_even_when_record_lists_it(venv: Path, tmp_path: Path
                                                             ) -> None:
    """Issue 23: a venv installed from a tampered wheel (one file added with its RECORD line)
    passed against itself and against the genuine wheelhouse."""
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", INSTALLED)
    site = venv / "lib" / "python3.12" / "site-packages"
    (site / "demo" / "backdoor.py").write_text("print('hi')\n")
    record = site / "demo-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + f"demo/backdoor.py,{_digest(b'print(1)')},8\n")
    (site / "demo" / "backdoor.py").write_bytes(b"print(1)")
    (site / "sitecustomize.pth").write_text("import demo.backdoor\n")
    record_installation(venv, manifest, str(wheelhouse))  # as the old install recorded it
    alone = verify_installed(venv, tmp_path / "nowhere")
    assert alone.error is None  # its own RECORD says nothing against it: not enough
    result = verify_installed(venv)
    assert sorted(m.file for m in result.mismatches) == [
        "lib/python3.12/site-packages/demo/backdoor.py",
        "lib/python3.12/site-packages/sitecustomize.pth"]
    assert all(m.problem == "no wheel of the wheelhouse has this file"
               for m in result.mismatches)


def test_the_wheelhouse_compared_with_is_verified_first(venv: Path, tmp_path: Path) -> None:
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", INSTALLED)
    record_installation(venv, manifest, str(wheelhouse))
    (wheelhouse / "requirements.lock").write_text("demo==1.0 --hash=sha256:" + "1" * 64 + "\n")
    result = verify_installed(venv)
    assert result.compared_with is None
    assert [m.file for m in result.mismatches] == [str(wheelhouse)]
    assert "requirements.lock" in result.mismatches[0].problem


def test_a_venv_not_made_by_install(venv: Path) -> None:
    with pytest.raises(VerifyError) as caught:
        verify_installed(venv)
    assert RECORD_NAME in caught.value.what
