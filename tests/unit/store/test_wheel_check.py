"""A wheel's inner structure: one check for verify, install and wheel, on wheels
made here entry by entry, and the manifest's wheels against the files."""

from __future__ import annotations

import json
import stat
import warnings
import zipfile
from typing import TYPE_CHECKING

import pytest

from sparkbuild.store.wheel_check import (
    manifest_wheel_problems,
    member_name_problem,
    same_project,
    same_version,
    script_name_problem,
    wheel_problems,
)
from sparkbuild.store.wheel_members import open_member, unreadable
from sparkbuild.wheelhouse.verify import verify_files
from support.wheels import record_row

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

DIST = "demo-1.0.dist-info"
NAME = "demo-1.0-py3-none-any.whl"
META = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"


def members(*extra: tuple[str, bytes], metadata: bytes = META) -> list[tuple[str, bytes]]:
    return [("demo/__init__.py", b"VALUE = 1\n"), *extra, (f"{DIST}/METADATA", metadata)]


def record(entries: Sequence[tuple[str, bytes]], *, omit: Sequence[str] = ()) -> bytes:
    rows = [record_row(n, d) for n, d in dict(entries).items() if n not in omit]
    return ("".join(rows) + f"{DIST}/RECORD,,\n").encode()


def wheel(tmp_path: Path, entries: Sequence[tuple[str, bytes]], text: bytes | None = None,
          *, name: str = NAME, links: Sequence[str] = ()) -> Path:
    path = tmp_path / name
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore")
        for member, data in entries:
            info = zipfile.ZipInfo(member)
            if member in links:
                info.create_system = 3
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data)
        archive.writestr(f"{DIST}/RECORD", record(entries) if text is None else text)
    return path


def test_a_sound_wheel_has_no_problem(tmp_path: Path) -> None:
    points = (f"{DIST}/entry_points.txt", b"[console_scripts]\ndemo = demo:main\n")
    assert wheel_problems(wheel(tmp_path, members(points)), built=True) == []


@pytest.mark.parametrize(("member", "problem"), [
    ("../../x.py", "climbs out with .."),
    ("/etc/x.py", "an absolute name"),
    ("C:/x.py", "an absolute name"),
    ("demo\\..\\x.py", "a backslash"),
    ("demo//x.py", "an empty or . part"),
    ("demo/./x.py", "an empty or . part"),
    ("demo/x\nRECORD", "U+000A"),
    ("demo/\u202eyp.exe", "U+202E"),
    ("demo/x\x1b[2J", "U+001B"),
])
def test_member_names_an_installer_must_not_get(tmp_path: Path, member: str,
                                                problem: str) -> None:
    assert problem in (member_name_problem(member) or "")
    (found,) = wheel_problems(wheel(tmp_path, members((member, b""))), built=False)
    assert problem in found


def test_two_entries_of_one_name(tmp_path: Path) -> None:
    entries = [*members(), ("demo/__init__.py", b"import os\n")]
    assert wheel_problems(wheel(tmp_path, entries), built=False) == [
        "2 zip entries are named demo/__init__.py: an installer takes one, a check may read "
        "another"]


def test_record_both_ways(tmp_path: Path) -> None:
    entries = members(("demo/extra.py", b""))
    text = record(entries, omit=["demo/extra.py"]) + record_row("demo/gone.py", b"").encode()
    text += b"demo/__init__.py,,\n"
    found = wheel_problems(wheel(tmp_path, entries, text), built=False)
    assert "demo/extra.py is not listed in RECORD" in found
    assert "RECORD lists demo/gone.py, which the wheel does not hold" in found
    assert "RECORD lists demo/__init__.py twice" in found
    assert "RECORD gives demo/__init__.py no sha256" in found


def test_a_built_wheels_bytes_are_checked_against_record(tmp_path: Path) -> None:
    entries = members()
    lying = record([("demo/__init__.py", b"other"), *entries[1:]])
    path = wheel(tmp_path, entries, lying)
    assert wheel_problems(path, built=False) == []  # an index's wheel: its sha256 is pinned
    assert wheel_problems(path, built=True) == [
        "demo/__init__.py is not the file its RECORD row describes"]


def test_a_pth_is_refused_in_a_built_wheel_only(tmp_path: Path) -> None:
    path = wheel(tmp_path, members(("distutils-precedence.pth", b"import os\n"),
                                   ("demo-1.0.data/platlib/zz.pth", b"import os\n")))
    assert wheel_problems(path, built=False) == []
    assert wheel_problems(path, built=True) == [
        "distutils-precedence.pth: a .pth file: the interpreter runs it at every start",
        "demo-1.0.data/platlib/zz.pth: a .pth file: the interpreter runs it at every start"]


@pytest.mark.parametrize("member", ["sitecustomize.py", "usercustomize/__init__.py",
                                    "sitecustomize.cpython-311-x86_64-linux-gnu.so",
                                    "demo-1.0.data/purelib/sitecustomize.py"])
def test_startup_modules_are_refused_in_any_wheel(tmp_path: Path, member: str) -> None:
    (found,) = wheel_problems(wheel(tmp_path, members((member, b""))), built=False)
    assert found == f"{member}: a module the interpreter imports at every start"


@pytest.mark.parametrize(("section", "script", "project", "refused"), [
    ("console_scripts", "python3", "demo", True),
    ("console_scripts", "python", "demo", True),
    ("console_scripts", "python3.12", "demo", True),
    ("gui_scripts", "activate", "demo", True),
    ("console_scripts", "Activate.ps1", "demo", True),
    ("console_scripts", "pip3", "demo", True),
    ("console_scripts", "pip3", "pip", False),
    ("console_scripts", "pythonic", "demo", False),
    ("console_scripts", "vllm", "demo", False),
])
def test_scripts_that_would_replace_the_venvs_own(tmp_path: Path, section: str, script: str,
                                                  project: str, refused: bool) -> None:
    assert (script_name_problem(script, project) is not None) == refused
    if project == "demo":
        points = (f"{DIST}/entry_points.txt", f"[{section}]\n{script} = demo:main\n".encode())
        found = wheel_problems(wheel(tmp_path, members(points)), built=False)
        assert found == ([f"{section} entry point {script}: it would replace the venv's own "
                          f"bin/{script}"] if refused else [])


@pytest.mark.parametrize(("member", "problem"), [
    ("demo-1.0.data/scripts/python3", "it would replace the venv's own bin/python3"),
    ("demo-1.0.data/data/pyvenv.cfg", "it would replace the venv's own pyvenv.cfg"),
    ("demo-1.0.data/data/bin/activate", "it would replace the venv's own bin/activate"),
    ("demo-1.0.data/data/lib/python3.12/site-packages/x.pth",
     "it would replace the venv's own lib/python3.12/site-packages/x.pth"),
    ("demo-1.0.data/data/sparkbuild/node.env", "it would replace the venv's own"),
    ("demo-1.0.data/weird/x", "an unknown .data scheme weird"),
])
def test_data_members_that_land_on_the_venv(tmp_path: Path, member: str, problem: str) -> None:
    (found,) = wheel_problems(wheel(tmp_path, members((member, b""))), built=False)
    assert found.startswith(f"{member}: {problem}")
    assert wheel_problems(wheel(tmp_path, members(("demo-1.0.data/data/share/x", b""))),
                          built=False) == []


def test_links_dist_info_and_metadata(tmp_path: Path) -> None:
    assert wheel_problems(wheel(tmp_path, members(("demo/etc", b"/etc")),
                                links=["demo/etc"]), built=False) == [
        "demo/etc: a symbolic link member"]
    assert wheel_problems(wheel(tmp_path, members(metadata=META.replace(b"1.0", b"6.6"))),
                          built=False) == [
        "its METADATA says demo 6.6, the file name demo 1.0"]
    two = wheel(tmp_path, members(("other-1.0.dist-info/METADATA", META)))
    assert wheel_problems(two, built=False) == ["it holds 2 .dist-info directories, not one"]
    renamed = wheel(tmp_path, members(), name="other-1.0-py3-none-any.whl")
    assert wheel_problems(renamed, built=False) == [
        "its demo-1.0.dist-info is not the file name's other 1.0",
        "its METADATA says demo 1.0, the file name other 1.0"]
    (tmp_path / "junk-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    assert wheel_problems(tmp_path / "junk-1.0-py3-none-any.whl", built=False)[0].startswith(
        "not a readable wheel")


def test_one_comparison_of_versions_and_names() -> None:
    assert same_version("1.0", "1.0.0") and same_version("1.0+CU130", "1.0+cu130")
    assert not same_version("1.0", "1.0.1") and same_version("not a version", "not a version")
    assert not same_version("1.0", "not a version")
    assert same_project("Foo_Bar", "foo-bar") and not same_project("foo", "foobar")


def _wheelhouse(tmp_path: Path, wheels: list[dict[str, object]]) -> dict[str, object]:
    path = wheel(tmp_path, members())
    return {"wheels": [{"file": path.name, "sha256": "x", **w} for w in wheels]}


def test_the_manifests_wheels_against_the_files(tmp_path: Path) -> None:
    manifest = _wheelhouse(tmp_path, [{"name": "demo", "version": "9.9.9"},
                                      {"name": "iniconfig", "version": "1.0.0"}])
    assert manifest_wheel_problems(tmp_path, manifest, [NAME]) == [
        (NAME, "listed 2 times in manifest.json's wheels"),
        (NAME, "manifest.json says version 9.9.9, the file is version 1.0"),
        (NAME, "manifest.json names it iniconfig, the file is demo")]
    other = {"file": "demo-2.0-py3-none-any.whl", "sha256": "y"}
    two = {"wheels": [{"file": NAME, "sha256": "x", "version": "1.0.0"}, other]}
    assert manifest_wheel_problems(tmp_path, two, []) == [
        ("manifest.json", "lists demo at 2 versions: 1.0, 2.0")]


def test_verify_files_looks_inside_each_wheel_it_vouches_for(tmp_path: Path) -> None:
    import hashlib

    path = wheel(tmp_path, members(("zz.pth", b"import os\n")))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"demo==1.0 --hash=sha256:{digest}\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"target": {"cuda_archs": ["12.1a"]},
                                                        "wheels": [
        {"file": NAME, "sha256": digest, "role": "built", "name": "demo", "version": "1.0"}],
        "files": {lock.name: hashlib.sha256(lock.read_bytes()).hexdigest()}}))
    checked = verify_files(tmp_path)
    assert [(m.file, m.problem) for m in checked.mismatches] == [
        (NAME, "zz.pth: a .pth file: the interpreter runs it at every start")]


@pytest.mark.parametrize(("flags", "method", "problem"), [
    (0x1, zipfile.ZIP_STORED, "an encrypted member"),
    (0x40, zipfile.ZIP_STORED, "an encrypted member"),
    (0x20, zipfile.ZIP_STORED, "compressed patched data"),
    (0, 99, "compressed by method 99"),
    (0, 9, "compressed by method 9"),  # deflate64: zipfile has no codec
])
@pytest.mark.parametrize("member", ["demo/_C.so", f"{DIST}/METADATA", f"{DIST}/RECORD"])
def test_a_member_nothing_can_read_is_named_not_raised(
        tmp_path: Path, member: str, flags: int, method: int, problem: str) -> None:
    path = wheel(tmp_path, members(("demo/_C.so", b"\x7fELF")))
    with zipfile.ZipFile(path, "a") as archive:
        info = archive.getinfo(member)
        info.flag_bits |= flags
        info.compress_type = method
        archive._didModify = True  # type: ignore[attr-defined]  # rewrite the directory
    assert unreadable(info) is not None and problem in (unreadable(info) or "")
    for built in (True, False):
        found = wheel_problems(path, built=built)
        assert any(problem in p and member in p for p in found), found
    with zipfile.ZipFile(path) as archive, pytest.raises(zipfile.BadZipFile, match=problem):
        open_member(archive, member)


@pytest.mark.parametrize("data", [b"", b"not a zip", b"PK\x03\x04" + bytes(40)])
def test_a_file_that_is_no_zip_is_a_problem(tmp_path: Path, data: bytes) -> None:
    (tmp_path / NAME).write_bytes(data)
    (found,) = wheel_problems(tmp_path / NAME, built=True)
    assert found.startswith("not a readable wheel")


def test_a_cache_blob_is_checked_under_the_name_it_was_given(tmp_path: Path) -> None:
    blob = wheel(tmp_path, members(), name="3f2a9c")
    assert wheel_problems(blob, built=True, name=NAME) == []
    assert wheel_problems(blob, built=True)[0].startswith("not a wheel file name")
