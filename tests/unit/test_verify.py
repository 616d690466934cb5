"""verify: every byte against manifest and lock, and the GPU code of the built wheels."""

from __future__ import annotations

import io
import json
import zipfile
from typing import TYPE_CHECKING

import pytest

from sparkbuild.cli import main
from sparkbuild.errors import VerifyError
from sparkbuild.recipe import BuildSettings, Recipe, SourcePin, Target
from sparkbuild.wheelhouse.closure import RealOutside
from sparkbuild.wheelhouse.verify import arch_digits, verify_wheelhouse
from sparkbuild.wheelhouse.write import write_wheelhouse

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class NoNetwork(RealOutside):
    """The built wheel has no requirements and the recipe no pins: nothing to fetch."""

    def index_url(self) -> str:
        return "https://index.invalid/simple"


def demo_wheel(directory: Path, libraries: tuple[str, ...]) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        for library in libraries:
            archive.writestr(library, b"\x7fELF" + library.encode())
        archive.writestr("demo-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        archive.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    path = directory / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    path.write_bytes(buffer.getvalue())
    return path


def wheelhouse(tmp_path: Path, libraries: tuple[str, ...] = ("demo/_C.so",)) -> Path:
    recipe = Recipe(path=tmp_path / "r.toml", name="demo", source=SourcePin("."),
                    series=tmp_path / "series", target=Target(cuda_archs=("12.1",)),
                    build=BuildSettings(), pins=(), package="demo")
    out = tmp_path / "wheelhouse"
    write_wheelhouse(out, recipe=recipe, source={"kind": "directory"}, patches=[],
                     built_wheels=[demo_wheel(tmp_path, libraries)], build_settings={},
                     cache_root=tmp_path / "cache", offline=False, platform=None,
                     toolchain={"python": "3.11"}, outside=NoNetwork())
    return out


def lister(archs: dict[str, list[str]]) -> Callable[[Path], list[str]]:
    return lambda path: archs.get(path.name, [])


SM121 = lister({"_C.so": ["sm_121a"]})


def test_intact_wheelhouse_passes_and_lists_archs(tmp_path: Path) -> None:
    result = verify_wheelhouse(wheelhouse(tmp_path), list_archs=SM121)
    assert result.error is None, result.summary()
    assert [(lib.library, lib.archs) for lib in result.libraries] == [("demo/_C.so", ("sm_121a",))]
    assert result.checked == 5  # the wheel, the lock, two index pages and the manifest
    assert result.to_dict()["ok"] is True


def test_one_flipped_byte_names_the_wheel(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path)
    wheel = next(out.glob("demo-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.write_bytes(bytes(data))
    result = verify_wheelhouse(out, list_archs=SM121)
    assert result.error is not None
    assert [m.file for m in result.mismatches] == [wheel.name]
    assert wheel.name in str(result.error)
    assert "differs from the manifest's" in result.mismatches[0].problem
    assert "not the one requirements.lock pins" in result.mismatches[0].problem


def test_added_missing_and_edited_files_are_each_named(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path)
    (out / "evil-1.0-py3-none-any.whl").write_bytes(b"not from the build")
    (out / "simple" / "demo" / "index.html").unlink()
    lock = out / "requirements.lock"
    lock.write_text(lock.read_text() + "# edited\n")
    problems = {m.file: m.problem for m in verify_wheelhouse(out, list_archs=SM121).mismatches}
    assert problems["simple/demo/index.html"] == "missing"
    assert problems["requirements.lock"].startswith("sha256")
    assert "not listed in manifest.json" in problems["evil-1.0-py3-none-any.whl"]


def test_missing_target_arch_fails_naming_the_library(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, ("demo/_C.so", "demo/_host_only.so"))
    result = verify_wheelhouse(out, list_archs=lister({"_C.so": ["sm_90", "sm_120"]}))
    assert result.mismatches == []
    assert [lib.missing for lib in result.libraries] == [("sm_121",), ()]
    assert result.error is not None and "demo/_C.so" in str(result.error)
    assert "sm_121" in "\n".join(result.summary())


def test_no_gpu_code_anywhere_fails_when_archs_are_targeted(tmp_path: Path) -> None:
    result = verify_wheelhouse(wheelhouse(tmp_path), list_archs=lister({}))
    assert result.error is not None and "no shared library holds GPU machine code" in str(
        result.error)


def test_pure_python_wheel_has_nothing_to_list(tmp_path: Path) -> None:
    result = verify_wheelhouse(wheelhouse(tmp_path, ()), list_archs=SM121)
    assert result.error is None and result.libraries == []
    assert "no shared library" in result.notes[0]


def test_not_a_wheelhouse(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match=r"manifest\.json is missing"):
        verify_wheelhouse(tmp_path)


def test_cli_json_reports_and_exits_with_verify_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = wheelhouse(tmp_path)
    next(out.glob("demo-*.whl")).write_bytes(b"truncated")
    monkeypatch.setattr("sparkbuild.toolchain.sass.list_cuda_archs", SM121)
    assert main(["verify", str(out), "--json"]) == VerifyError.exit_code
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["error"]["error"] == "VerifyError"
    assert report["mismatches"][0]["file"].startswith("demo-1.0+sm121.")


def test_arch_spellings() -> None:
    assert arch_digits("12.1") == arch_digits("sm_121") == arch_digits("sm_121a") == "121"
    assert arch_digits("sm_120f") == "120"


def test_missing_directory_is_named_as_missing_not_as_a_killed_run(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as caught:
        verify_wheelhouse(tmp_path / "absent")
    error = caught.value
    assert error.what == "the wheelhouse directory does not exist"
    assert error.where == str(tmp_path / "absent")
    assert "killed" not in f"{error.what} {error.hint}"
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(VerifyError, match="is not a directory"):
        verify_wheelhouse(tmp_path / "file")
