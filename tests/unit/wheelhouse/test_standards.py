"""pylock.toml and sbom.cdx.json: written with every wheel, reproducible, schema-valid, and
checked by verify against the files present (the fake index of test_wheelhouse_layout)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import tomllib
import zipfile
from typing import TYPE_CHECKING, Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packaging.markers import Marker

from sparkbuild.cli import main
from sparkbuild.errors import UsageError, VerifyError
from sparkbuild.node.install import install_wheelhouse
from sparkbuild.wheelhouse.overrides import target_environment
from sparkbuild.wheelhouse.pylock import target_marker
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from unit.wheelhouse.test_wheelhouse_layout import PATCHES, SOURCE, TOOLCHAIN, FakeOutside, build

if TYPE_CHECKING:
    from pathlib import Path

VENDORED = [{"name": "cutlass", "kind": "git", "url": "https://github.com/NVIDIA/cutlass.git",
             "ref": "v4.2.1", "commit": "b" * 40, "sha256": None, "patched": False}]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def out(tmp_path: Path) -> Path:
    wheelhouse = tmp_path / "wheelhouse"
    build(tmp_path, wheelhouse, FakeOutside())
    return wheelhouse


def validate(text: str) -> None:
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text, all_errors=True)
    assert errors is None, [str(e) for e in errors]


def built_of(out: Path) -> Path:
    (built,) = out.glob("demo-1.0+*.whl")
    return built


def test_pylock_names_every_wheel_by_path_with_its_hash_and_the_target(out: Path) -> None:
    lock = tomllib.loads((out / "pylock.toml").read_text())
    assert lock["lock-version"] == "1.0" and lock["created-by"] == "sparkbuild"
    wheels = {w["path"]: (p["name"], p["version"], w) for p in lock["packages"]
              for w in p["wheels"]}
    assert sorted(wheels) == sorted(p.name for p in out.glob("*.whl"))
    for path, (_name, _version, wheel) in wheels.items():
        data = (out / path).read_bytes()
        assert wheel["hashes"] == {"sha256": sha(data)} and wheel["size"] == len(data)
        assert wheel["name"] == path
    assert wheels[built_of(out).name][:2] == ("demo", built_of(out).name.split("-")[1])
    env = target_environment(None, None)
    (marker,) = lock["environments"]
    assert marker == target_marker(env) and Marker(marker).evaluate(env)
    assert not Marker(marker).evaluate(target_environment("manylinux_2_39_aarch64", "3.12")
                                       | {"platform_machine": "aarch64"})
    assert lock["requires-python"] == f"=={env['python_version']}.*"


def test_pylock_for_the_spark_says_aarch64_and_its_python() -> None:
    marker = target_marker(target_environment("manylinux_2_39_aarch64", "3.12"))
    assert marker == ("sys_platform == 'linux' and platform_machine == 'aarch64' and "
                      "python_version == '3.12'")


def components(out: Path) -> dict[str, dict[str, Any]]:
    sbom = json.loads((out / "sbom.cdx.json").read_text())
    return {prop(c, "file"): c for c in sbom["components"]}


def prop(component: dict[str, Any], name: str) -> str:
    (value,) = [p["value"] for p in component.get("properties", [])
                if p["name"] == f"sparkbuild:{name}"]
    return str(value)


def test_sbom_lists_every_wheel_validates_and_holds_the_pedigree(out: Path) -> None:
    text = (out / "sbom.cdx.json").read_text()
    validate(text)
    found = components(out)
    assert sorted(found) == sorted(p.name for p in out.glob("*.whl"))
    for file, component in found.items():
        assert component["hashes"] == [{"alg": "SHA-256",
                                        "content": sha((out / file).read_bytes())}]
        assert component["purl"].startswith(f"pkg:pypi/{component['name']}@")
    built = found[built_of(out).name]
    assert prop(built, "role") == "built"
    assert {prop(c, "role") for c in found.values()} == {"built", "pin", "closure"}
    pedigree = built["pedigree"]
    assert pedigree["patches"] == [{"type": "unofficial",
                                    "diff": {"url": "sparkbuild:series:cmake-sm121-archs"}}]
    assert prop(built, "patch:cmake-sm121-archs:sha256") == PATCHES[0]["sha256"]
    assert prop(built, "patch:cmake-sm121-archs:status") == "applied"
    assert pedigree["commits"] == [{"uid": SOURCE["commit"]}]
    (ancestor,) = pedigree["ancestors"]
    assert ancestor["version"] == "1.0" and prop(ancestor, "source:commit") == SOURCE["commit"]
    sbom = json.loads(text)
    tools = {t["name"]: t["version"] for t in sbom["metadata"]["tools"]["components"]}
    assert tools["cuda-nvcc"] == TOOLCHAIN["nvcc"] and tools["torch"] == TOOLCHAIN["torch"]
    assert tools["gcc"] == TOOLCHAIN["gcc"] and "sparkbuild" in tools
    assert sbom["metadata"]["timestamp"] == "1980-01-01T00:00:00+00:00"  # no SOURCE_DATE_EPOCH


def wheel_sbom(wheel: Path) -> tuple[str, dict[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/sboms/sbom.cdx.json")]
        (record,) = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
        rows = {row[0]: row[1] for row in csv.reader(io.StringIO(
            archive.read(record).decode()))}
        assert name.split("/")[0] == record.split("/")[0]  # the relabelled dist-info
        assert rows[name].startswith("sha256=")
        return archive.read(name).decode(), rows


def test_the_built_wheel_carries_its_sbom_under_dist_info(out: Path) -> None:
    text, _rows = wheel_sbom(built_of(out))
    validate(text)
    sbom = json.loads(text)
    component = sbom["metadata"]["component"]
    assert component["version"] == built_of(out).name.split("-")[1]
    assert "hashes" not in component  # it cannot hold the hash of the wheel around it
    assert component["pedigree"]["patches"][0]["type"] == "unofficial"
    assert sbom["serialNumber"].startswith("urn:uuid:")


def test_both_documents_and_the_wheel_are_byte_identical_across_runs(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "wh", tmp_path / "b" / "wh"
    for where in (one, two):
        where.parent.mkdir()
        build(where.parent, where, FakeOutside())
    for name in ("pylock.toml", "sbom.cdx.json", built_of(one).name):
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_sbom_vendored_sources_and_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    from sparkbuild.wheelhouse.sbom import BuildFacts, wheel_sbom

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    facts = BuildFacts("demo", "demo", 1700000000, source=SOURCE, patches=PATCHES,
                       vendored=VENDORED, toolchain=TOOLCHAIN, cuda_archs=("12.1a",),
                       label="sm121a.00000000")
    text = wheel_sbom(facts, "demo", "1.0+sm121a.00000000").decode()
    validate(text)
    sbom = json.loads(text)
    assert sbom["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    (cutlass,) = sbom["metadata"]["component"]["components"]
    assert cutlass["version"] == "b" * 40 and prop(cutlass, "patched") == "false"
    assert prop(cutlass, "vendored:ref") == "v4.2.1"
    assert "vcs_url=git%2Bhttps://github.com/NVIDIA/cutlass.git%40" in cutlass["purl"]
    other = wheel_sbom(BuildFacts("demo", "demo", 1700000000, source=SOURCE, patches=[],
                                  vendored=VENDORED, toolchain=TOOLCHAIN),
                       "demo", "1.0").decode()
    assert json.loads(other)["serialNumber"] != sbom["serialNumber"]  # derived from content


def test_verify_reports_agreement(out: Path) -> None:
    result = verify_wheelhouse(out)
    assert result.error is None, result.summary()
    agreement = result.to_dict()["agreement"]
    assert agreement["pylock.toml"] == {"file": "pylock.toml", "present": True, "agrees": True,
                                        "problems": []}
    assert agreement["sbom.cdx.json"]["agrees"] is True
    assert "  pylock.toml agrees with the wheelhouse's files" in result.summary()
    assert "  sbom.cdx.json agrees with the wheelhouse's files" in result.summary()


def rehash_in_manifest(out: Path, name: str) -> None:
    """The manifest re-vouches for an edited file: only the agreement can catch it now."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"][name] = sha((out / name).read_bytes())
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_a_pylock_that_pins_another_hash_fails_verify(out: Path) -> None:
    built = built_of(out)
    lock = out / "pylock.toml"
    lock.write_text(lock.read_text().replace(sha(built.read_bytes()), "0" * 64))
    rehash_in_manifest(out, "pylock.toml")
    result = verify_wheelhouse(out)
    assert isinstance(result.error, VerifyError) and result.error.exit_code == 12
    assert [(m.file, m.problem) for m in result.mismatches] == [
        (built.name, "its sha256 is not the one pylock.toml pins")]
    assert result.to_dict()["agreement"]["pylock.toml"]["agrees"] is False
    assert "  pylock.toml DISAGREES with the wheelhouse's files (1)" in result.summary()


def test_an_sbom_missing_a_wheel_fails_verify(out: Path) -> None:
    path = out / "sbom.cdx.json"
    sbom = json.loads(path.read_text())
    dropped = sbom["components"].pop(0)
    path.write_text(json.dumps(sbom))
    rehash_in_manifest(out, "sbom.cdx.json")
    result = verify_wheelhouse(out)
    assert result.error is not None
    assert [(m.file, m.problem) for m in result.mismatches] == [
        (prop(dropped, "file"), "not in sbom.cdx.json")]


def test_each_standard_file_words_its_own_disagreements(out: Path) -> None:
    from sparkbuild.wheelhouse.pylock import pylock_disagreements
    from sparkbuild.wheelhouse.sbom import sbom_disagreements
    from sparkbuild.wheelhouse.standards import present_wheels

    wheels = present_wheels({p.name: sha(p.read_bytes()) for p in out.glob("*.whl")})
    first, second = sorted(wheels)[:2]
    name, version, digest = wheels[second]
    present = {first: wheels[first], second: (name + "x", version, digest),
               "z-1.0-py3-none-any.whl": ("z", "1.0", "0" * 64)}
    dropped = sorted(set(wheels) - set(present))
    assert dropped  # the fake index has three wheels: the third is listed but not present
    assert pylock_disagreements(out, present, None) == [
        (second, f"pylock.toml names it {name}=={version}"),
        ("z-1.0-py3-none-any.whl", "not in pylock.toml")] + [
        ("pylock.toml", f"names {file}, which is not in the wheelhouse") for file in dropped]
    present[first] = (*wheels[first][:2], "0" * 64)
    assert sbom_disagreements(out, present)[:3] == [
        (first, "its sha256 is not the one sbom.cdx.json lists"),
        (second, f"sbom.cdx.json names it {name}=={version}"),
        ("z-1.0-py3-none-any.whl", "not in sbom.cdx.json")]
    assert sbom_disagreements(out, present)[3:] == [
        ("sbom.cdx.json", f"lists {file}, which is not in the wheelhouse") for file in dropped]


def test_a_pylock_for_another_target_fails_verify(out: Path) -> None:
    lock = out / "pylock.toml"
    machine = target_environment(None, None)["platform_machine"]
    lock.write_text(lock.read_text().replace(f"'{machine}'", "'sparc'"))
    rehash_in_manifest(out, "pylock.toml")
    (problem,) = verify_wheelhouse(out).mismatches
    assert problem.file == "pylock.toml" and "are not the target's" in problem.problem


def test_a_wheelhouse_from_before_the_standards_gets_a_note(out: Path) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    for name in ("pylock.toml", "sbom.cdx.json"):
        (out / name).unlink()
        del manifest["files"][name]
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = verify_wheelhouse(out)
    assert result.error is None, result.summary()
    assert result.to_dict()["agreement"]["pylock.toml"]["present"] is False


def test_verify_json_has_the_agreement(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["agreement"]) == {"pylock.toml", "sbom.cdx.json"}


def test_install_from_pylock_needs_the_file(out: Path, tmp_path: Path) -> None:
    (out / "pylock.toml").unlink()  # listed in the manifest: the wheelhouse fails verify
    with pytest.raises(VerifyError, match=r"pylock\.toml"):
        install_wheelhouse(out, tmp_path / "venv", source="pylock")
    with pytest.raises(UsageError, match="unknown install source") as refused:
        install_wheelhouse(out, tmp_path / "venv", source="poetry")
    assert refused.value.hint == "--from takes lock or pylock"
    assert not (tmp_path / "venv").exists()


def _tamper_sbom(out: Path, change: Any) -> list[tuple[str, str]]:
    """The mismatches of the wheelhouse with its SBOM changed and resealed (then restored)."""
    path = out / "sbom.cdx.json"
    original = path.read_text()
    sbom = json.loads(original)
    change(sbom, {prop(c, "file"): c for c in sbom["components"]}[built_of(out).name])
    path.write_text(json.dumps(sbom))
    rehash_in_manifest(out, "sbom.cdx.json")
    found = [(m.file, m.problem) for m in verify_wheelhouse(out).mismatches]
    path.write_text(original)
    return found


def test_an_sbom_whose_pedigree_or_tools_are_not_the_manifests_fails_verify(out: Path) -> None:
    """The SBOM agrees with the manifest in more than name, version and hash: its
    pedigree, properties, purl and tools too."""
    built = built_of(out).name
    said = "in sbom.cdx.json is not what the manifest says"
    assert _tamper_sbom(out, lambda s, c: c.pop("pedigree")) == [
        (built, f"its pedigree {said}")]
    assert _tamper_sbom(out, lambda s, c: c["pedigree"].update(patches=[])) == [
        (built, f"its pedigree {said}")]
    assert _tamper_sbom(out, lambda s, c: c.update(properties=[
        p for p in c["properties"] if ":patch:" not in p["name"]])) == [
        (built, f"its properties {said}")]
    assert _tamper_sbom(out, lambda s, c: c.update(purl=c["purl"].replace("demo", "evil"))) == [
        (built, f"its purl {said}")]
    assert _tamper_sbom(out, lambda s, c: s["metadata"].pop("tools")) == [
        ("sbom.cdx.json", "its metadata.tools is not what the manifest says")]


def _repointed(out: Path, old: str, new: str) -> None:
    """pylock.toml with ``old`` replaced by ``new``, resealed in the manifest."""
    path = out / "pylock.toml"
    path.write_text(path.read_text().replace(old, new))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"]["pylock.toml"] = sha(path.read_bytes())
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("path", "said"), [
    ("/elsewhere/{file}", "installs tiny-pin from the path '/elsewhere/"),
    ("../elsewhere/{file}", "installs tiny-pin from the path '../elsewhere/"),
    ("sub/{file}", "installs tiny-pin from the path 'sub/"),
    ("C:{file}", "installs tiny-pin from the path 'C:"),
])
def test_a_pylock_path_outside_the_wheelhouse_is_refused_before_uv(
        out: Path, tmp_path: Path, path: str, said: str) -> None:
    pin = "tiny_pin-2.0-py3-none-any.whl"
    _repointed(out, f'path = "{pin}"', f'path = "{path.format(file=pin)}"')
    problems = [p for item in verify_wheelhouse(out).agreement for _f, p in item.problems]
    assert any(said in p for p in problems), problems
    with pytest.raises(VerifyError, match=r"pylock\.toml is not the wheelhouse's") as refused:
        install_wheelhouse(out, tmp_path / "venv", source="pylock")
    assert said in refused.value.what
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize(("old", "new", "said"), [
    ('path = "tiny_pin-2.0-py3-none-any.whl"',
     'url = "https://evil.invalid/tiny_pin-2.0-py3-none-any.whl"',
     "installs tiny-pin from the URL 'https://evil.invalid/"),
    ('name = "tiny_pin-2.0-py3-none-any.whl"', 'name = "evil-2.0-py3-none-any.whl"',
     "names the wheel at tiny_pin-2.0-py3-none-any.whl 'evil-2.0-py3-none-any.whl'"),
    ('[[packages]]\nname = "tiny-pin"\nversion = "2.0"\n',
     '[[packages]]\nname = "tiny-pin"\nversion = "2.0"\nsdist = { path = "/tmp/x.tar.gz" }\n',
     "installs tiny-pin from its sdist"),
])
def test_a_pylock_entry_from_elsewhere_is_refused(out: Path, tmp_path: Path, old: str,
                                                  new: str, said: str) -> None:
    assert old in (out / "pylock.toml").read_text()
    _repointed(out, old, new)
    with pytest.raises(VerifyError, match=r"pylock\.toml is not the wheelhouse's") as refused:
        install_wheelhouse(out, tmp_path / "venv", source="pylock")
    assert said in refused.value.what


def test_uv_gets_the_checked_lock_with_absolute_paths(out: Path) -> None:
    from sparkbuild.node.install import checked_pylock
    from sparkbuild.wheelhouse.verify import verify_files

    copy = tomllib.loads(checked_pylock(verify_files(out)))
    original = tomllib.loads((out / "pylock.toml").read_text())
    assert copy["environments"] == original["environments"]
    assert [(p["name"], p["version"]) for p in copy["packages"]] == [
        (p["name"], p["version"]) for p in original["packages"]]
    for package in copy["packages"]:
        (wheel,) = package["wheels"]
        assert wheel["path"] == str(out / wheel["name"])
        assert wheel["hashes"] == {"sha256": sha((out / wheel["name"]).read_bytes())}


def _bom_refs(component: dict[str, Any]) -> list[str]:
    nested = [*component.get("components", []),
              *(c for key in ("ancestors", "variants")
                for c in component.get("pedigree", {}).get(key, []))]
    return [component.get("bom-ref", ""), *(r for c in nested for r in _bom_refs(c))]


def test_two_built_wheels_with_one_vendored_source_keep_every_bom_ref_unique() -> None:
    """cyclonedx replaces a repeated bom-ref with a random one: the wheelhouse's SBOM would
    differ from run to run (and a joined main job's from its one-job twin)."""
    from sparkbuild.wheelhouse.sbom import BuildFacts, SbomWheel, wheelhouse_sbom

    stand_in = {**VENDORED[0], "stand_in": {"pinned": "c" * 40, "used": "b" * 40,
                                            "reason": "the pin's tag is gone"}}
    facts = BuildFacts("demo", "demo", 1700000000, source=SOURCE, patches=PATCHES,
                       vendored=[stand_in], toolchain=TOOLCHAIN, cuda_archs=("12.1a",))
    wheels = [SbomWheel("demo", "1.0", "built", "demo-1.0-py3-none-any.whl", "1" * 64),
              SbomWheel("flashinfer-jit-cache", "0.6.18", "built",
                        "fi-0.6.18-py3-none-any.whl", "2" * 64)]
    text = wheelhouse_sbom(facts, wheels)
    validate(text)
    refs = [r for c in json.loads(text)["components"] for r in _bom_refs(c)]
    # each built wheel: itself, its source's ancestor, the vendored source, its pin and use
    assert len(refs) == 2 * 5 and len(set(refs)) == len(refs), refs
    assert not [r for r in refs if r.startswith("BomRef.")]
    assert text == wheelhouse_sbom(facts, wheels)
