"""Reading a wheelhouse's manifest: bounded, a plain file only, its node profile
checked as the recipe's is, and names in verify's output quoted."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import UsageError, VerifyError
from sparkbuild.wheelhouse.manifest import MANIFEST_LIMIT, load_manifest
from sparkbuild.wheelhouse.verify import Mismatch, verify_wheelhouse

if TYPE_CHECKING:
    from pathlib import Path


def _manifest(tmp_path: Path, data: object) -> Path:
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    return tmp_path


def test_a_manifest_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    text = json.dumps({"wheels": []})
    (tmp_path / "manifest.json").write_text(text + " " * (MANIFEST_LIMIT + 1 - len(text)))
    with pytest.raises(VerifyError, match=r"manifest\.json is over 16 MiB"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(text + " " * (MANIFEST_LIMIT - len(text)))
    assert load_manifest(tmp_path)[1] == {"wheels": []}


def test_a_manifest_that_is_no_plain_file_is_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")  # opening it would wait for a writer for ever
    with pytest.raises(VerifyError, match=r"manifest\.json is not a plain file"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").unlink()
    (tmp_path / "real.json").write_text('{"wheels": []}')
    (tmp_path / "manifest.json").symlink_to("real.json")
    with pytest.raises(VerifyError, match="a symbolic link"):
        load_manifest(tmp_path)


def test_a_wheelhouse_path_over_name_max_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="the wheelhouse path has a name of 300 bytes"):
        verify_wheelhouse(tmp_path / ("w" * 300))


@pytest.mark.parametrize(("entry", "said"), [
    ({"key": "A=1;touch x;B", "value": "1"}, "'A=1;touch x;B' is not an environment"),
    ({"key": "X", "value": "1\nLD_PRELOAD=x"}, "the value of X holds U+000A"),
    ({"key": "X", "value": "1", "source": "s\r"}, "the reason or source of X holds U+000D"),
    ({"key": "X"}, "lacks a string key and value"),
])
def test_the_recorded_node_profile_is_checked_where_the_manifest_is_read(
        tmp_path: Path, entry: dict[str, str], said: str) -> None:
    _manifest(tmp_path, {"wheels": [], "build": {"node_profile": [entry]}})
    with pytest.raises(VerifyError) as refused:
        load_manifest(tmp_path)
    assert "build.node_profile entry 1" in refused.value.what and said in refused.value.what


def test_a_manifest_whose_build_is_no_object(tmp_path: Path) -> None:
    _manifest(tmp_path, {"wheels": [], "build": ["x"]})
    with pytest.raises(VerifyError, match="`build` must be an object"):
        load_manifest(tmp_path)


def test_names_in_verifys_output_cannot_forge_a_line() -> None:
    forged = Mismatch("stray\n  MISMATCH requirements.lock", "not listed in\u202e manifest.json")
    assert forged.line() == ('  MISMATCH "stray\\n  MISMATCH requirements.lock": not listed '
                             "in\\u202e manifest.json")
    assert forged.describe() == ('"stray\\n  MISMATCH requirements.lock" (not listed '
                                 "in\\u202e manifest.json)")
    assert forged.to_dict()["file"] == "stray\n  MISMATCH requirements.lock"  # JSON escapes it


def test_a_manifest_nested_too_deeply_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(VerifyError, match="nested too deeply"):
        load_manifest(tmp_path)


@pytest.mark.parametrize("components", [["a string"], [{"properties": "x"}],
                                        [{"hashes": ["x"]}], "not a list"])
def test_an_sbom_of_the_wrong_shape_cannot_be_read(tmp_path: Path, components: object) -> None:
    from sparkbuild.wheelhouse.sbom import sbom_disagreements

    (tmp_path / "sbom.cdx.json").write_text(json.dumps({"bomFormat": "CycloneDX",
                                                        "components": components}))
    assert sbom_disagreements(tmp_path, {}) == [
        ("sbom.cdx.json", "cannot be read: not a CycloneDX BOM with components")]


@pytest.mark.parametrize("packages", ['["demo"]', '[{wheels = ["x"]}]',
                                      '[{wheels = [{hashes = "x"}]}]'])
def test_a_pylock_of_the_wrong_shape_cannot_be_read(tmp_path: Path, packages: str) -> None:
    from sparkbuild.wheelhouse.pylock import pylock_disagreements

    (tmp_path / "pylock.toml").write_text(f'lock-version = "1.0"\npackages = {packages}\n')
    ((file, problem),) = pylock_disagreements(tmp_path, {}, None)
    assert file == "pylock.toml" and problem.startswith("cannot be read: not a PEP 751 lock")
