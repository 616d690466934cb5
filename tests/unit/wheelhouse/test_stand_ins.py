"""A source built from another commit than the tree's pin, as a wheelhouse records it: the
manifest's reading (sparkbuild.wheelhouse.manifest), the SBOM's pedigree
(sparkbuild.wheelhouse.sbom) and verify's report (sparkbuild.wheelhouse.verify)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from sparkbuild.wheelhouse.manifest import stand_in_line, stand_ins_of
from sparkbuild.wheelhouse.sbom import BuildFacts, wheel_sbom
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseReaders, write_wheelhouse
from support.wheels import NoNetwork, demo_recipe, demo_wheel

if TYPE_CHECKING:
    from pathlib import Path

URL = "https://github.com/vllm-project/flash-attention.git"
PIN = "06bdd47c0d0383daf6a2ff0c418faff9c6da16e5"
USED = "617264c1c7955c9e84817654ebeedff069f3c5f1"
STAND_IN = {"url": URL, "pinned": PIN, "used": USED, "reason": "the pin is in no mirror"}
DEPENDENCIES: list[dict[str, Any]] = [
    {"name": "cutlass", "url": "https://github.com/NVIDIA/cutlass.git", "ref": "v4.2.1"},
    {"name": "vllm-flash-attn", "url": URL, "ref": PIN, "stand_in": STAND_IN},
]


def test_the_manifest_names_each_stand_in_with_its_source() -> None:
    manifest = {"build": {"dependencies": DEPENDENCIES}}
    assert stand_ins_of(manifest) == [{"name": "vllm-flash-attn", **STAND_IN}]


@pytest.mark.parametrize("manifest", [
    {}, {"build": None}, {"build": "text"},
    {"build": {"dependencies": "text"}},
    {"build": {"dependencies": ["text", 3, None, {"stand_in": "text"}]}},
    {"build": {"dependencies": [{"name": "x", "stand_in": ["a"]}]}},
])
def test_a_manifest_without_well_formed_stand_ins_has_none(manifest: dict[str, Any]) -> None:
    assert stand_ins_of(manifest) == []


def test_missing_fields_of_a_recorded_stand_in_read_as_empty() -> None:
    manifest = {"build": {"dependencies": [{"name": 7, "stand_in": {"used": 1}}]}}
    assert stand_ins_of(manifest) == [{"name": "7", "url": "", "pinned": "", "used": "1",
                                       "reason": ""}]


def test_one_line_for_every_command() -> None:
    line = stand_in_line({"name": "vllm-flash-attn", **STAND_IN})
    assert line == (f"stand-in: vllm-flash-attn built from {USED}, not the tree's pin {PIN} "
                    "(the pin is in no mirror)")


def test_the_sbom_gives_a_stand_in_its_pin_as_ancestor_and_its_commit_as_variant() -> None:
    vendored: list[dict[str, Any]] = [
        {"name": "vllm-flash-attn", "kind": "git", "url": URL, "ref": PIN, "commit": USED,
         "sha256": "c" * 64, "patched": True, "stand_in": STAND_IN},
        {"name": "cutlass", "kind": "git", "url": "https://github.com/NVIDIA/cutlass",
         "ref": "v4.2.1", "commit": "b" * 40, "sha256": "d" * 64}]
    facts = BuildFacts("vllm", "r", 1700000000, source={"kind": "sdist"}, vendored=vendored)
    text = wheel_sbom(facts, "vllm", "0.29.0+sm121a").decode()
    assert list(JsonStrictValidator(SchemaVersion.V1_6).validate_str(
        text, all_errors=True) or []) == []
    components = json.loads(text)["metadata"]["component"]["components"]
    by_name = {component["name"]: component for component in components}
    fa, cutlass = by_name["vllm-flash-attn"], by_name["cutlass"]
    assert fa["version"] == USED
    props = {p["name"]: p["value"] for p in fa["properties"]}
    assert props["sparkbuild:vendored:stand_in_for"] == PIN
    assert props["sparkbuild:vendored:stand_in_reason"] == "the pin is in no mirror"
    (ancestor,) = fa["pedigree"]["ancestors"]
    (variant,) = fa["pedigree"]["variants"]
    assert (ancestor["version"], variant["version"]) == (PIN, USED)
    assert f"%40{PIN}" in ancestor["purl"] and f"%40{USED}" in variant["purl"]
    assert fa["pedigree"]["notes"] == (f"stand-in: built from {USED}, not the pin {PIN}: "
                                       "the pin is in no mirror")
    assert "pedigree" not in cutlass
    assert not any("stand_in" in p["name"] for p in cutlass["properties"])


def _wheelhouse(tmp_path: Path, dependencies: list[dict[str, Any]]) -> Path:
    out = tmp_path / "wheelhouse"
    built = demo_wheel(tmp_path, {"demo/_C.so": b"\x7fELF demo"})
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=demo_recipe(tmp_path, allow_jit=False),
                         source={"kind": "directory"}, patches=[], built_wheels=[built],
                         build_settings={"dependencies": dependencies},
                         cache_root=tmp_path / "cache", offline=False, platform=None,
                         toolchain={"python": "3.11"}),
        WheelhouseReaders(outside=NoNetwork(), list_archs=lambda _path: ["sm_121a"],
                          read_functions=lambda _path: [], read_kernels=lambda _path: []))
    return out


def test_verify_prints_each_stand_in_of_the_wheelhouse(tmp_path: Path) -> None:
    hostile = {**STAND_IN, "reason": "planted \x1b[2J escape"}
    out = _wheelhouse(tmp_path, [*DEPENDENCIES, {"name": "x", "stand_in": hostile}])
    result = verify_wheelhouse(out, list_archs=lambda _path: ["sm_121a"],
                               read_functions=lambda _path: [], read_kernels=lambda _path: [])
    assert result.error is None, result.summary()
    assert result.to_dict()["stand_ins"] == [{"name": "vllm-flash-attn", **STAND_IN},
                                             {"name": "x", **hostile}]
    lines = result.summary()
    assert f"  {stand_in_line({'name': 'vllm-flash-attn', **STAND_IN})}" in lines
    (planted,) = [line for line in lines if line.startswith("  stand-in: x ")]
    assert "\x1b" not in planted  # a manifest's text is escaped before it is printed


def test_verify_of_a_wheelhouse_without_stand_ins_prints_none(tmp_path: Path) -> None:
    out = _wheelhouse(tmp_path, DEPENDENCIES[:1])
    result = verify_wheelhouse(out, list_archs=lambda _path: ["sm_121a"],
                               read_functions=lambda _path: [], read_kernels=lambda _path: [])
    assert result.to_dict()["stand_ins"] == []
    assert not any("stand-in" in line for line in result.summary())
