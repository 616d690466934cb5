"""The wheelhouse layout, with the index, uv and pip replaced by an in-memory fake."""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from typing import TYPE_CHECKING, Any

import pytest
from packaging.requirements import Requirement

from sparkbuild.errors import (
    CacheMissError,
    DestinationError,
    HashMismatchError,
    NetworkError,
    PinRefusedError,
    VerifyError,
)
from sparkbuild.recipe import BuildSettings, Pin, Recipe, SourcePin, Target
from sparkbuild.sources.index import IndexFile
from sparkbuild.wheelhouse.lock import LockedRequirement, parse_lock
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseReaders, write_wheelhouse
from support.wheels import zipped_wheel

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sparkbuild.store.cache import Cache
    from sparkbuild.wheelhouse.lock import ClosureTarget

SOURCE = {"kind": "git", "url": "file:///src/demo.git", "ref": "main", "commit": "c" * 40}
PATCHES = [{"name": "cmake-sm121-archs", "sha256": "a" * 64, "status": "applied",
            "detail": "applied"}]
TOOLCHAIN: dict[str, str | None] = {"nvcc": "13.0.48", "cmake": "3.31.1", "ninja": "1.13.0",
                                    "gcc": "14.2.0", "torch": "2.13.0", "python": "3.11.7"}
SETTINGS = {"jobs": 2, "environment": {"TORCH_CUDA_ARCH_LIST": "12.1"}}


def wheel_bytes(name: str, version: str, requires: Sequence[str] = ()) -> bytes:
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             "Requires-Python: >=3.8", *[f"Requires-Dist: {r}" for r in requires]]
    return zipped_wheel({f"{name.replace('-', '_')}/__init__.py": f"# {name}\n",
                         f"{dist}/METADATA": "\n".join(lines) + "\n",
                         f"{dist}/WHEEL": "Wheel-Version: 1.0\nTag: py3-none-any\n"})


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PIN_WHEEL = wheel_bytes("tiny-pin", "2.0")
DEP_WHEEL = wheel_bytes("dep-one", "1.2")
PIN_FILE = "tiny_pin-2.0-py3-none-any.whl"
DEP_FILE = "dep_one-1.2-py3-none-any.whl"


class FakeOutside:
    """The index holds tiny-pin 2.0; resolving the demo gives dep-one 1.2 and the pin."""

    def __init__(self, *, network: bool = True, dep_wheel: bytes = DEP_WHEEL) -> None:
        self.network = network
        self.dep_wheel = dep_wheel
        self.calls: list[str] = []
        self.resolved: tuple[list[str], list[str]] = ([], [])

    def _online(self, what: str) -> None:
        self.calls.append(what)
        if not self.network:
            raise NetworkError(f"no network in this test: {what}")

    def index_url(self) -> str:
        return "https://index.invalid/simple"

    def list_files(self, name: str) -> list[IndexFile]:
        self._online(f"list {name}")
        url = f"https://files.invalid/{PIN_FILE}"
        return [IndexFile(PIN_FILE, url, sha(PIN_WHEEL), len(PIN_WHEEL))] if name == "tiny-pin" \
            else []

    def fetch(self, cache: Cache, url: str, sha256: str | None, *, offline: bool) -> Path:
        if sha256 and cache.has(sha256):
            return cache.path_of(sha256)
        if offline:
            raise CacheMissError(f"not in the cache: {url}")
        self._online(f"fetch {url}")
        return cache.path_of(cache.put_bytes(PIN_WHEEL, sha256=sha256))

    def resolve(self, requirements: Sequence[str], overrides: Sequence[str],
                target: ClosureTarget, index: str) -> list[LockedRequirement]:
        self._online("resolve")
        self.resolved = (list(requirements), list(overrides))
        names = {Requirement(r).name for r in requirements}
        every = [LockedRequirement("dep-one", "1.2", (sha(self.dep_wheel), "f" * 64)),
                 LockedRequirement("tiny-pin", "2.0", (sha(PIN_WHEEL), "e" * 64))]
        return [item for item in every if item.name in names]

    def download(self, locked: Sequence[LockedRequirement], dest: Path,
                 target: ClosureTarget, index: str) -> list[Path]:
        self._online("download")
        assert [item.name for item in locked] == ["dep-one"]
        dest.mkdir(parents=True, exist_ok=True)
        (dest / DEP_FILE).write_bytes(self.dep_wheel)
        return [dest / DEP_FILE]

    def toolchain(self) -> dict[str, str | None]:
        raise AssertionError("the toolchain is passed in")


def make_recipe(tmp_path: Path, pins: tuple[Pin, ...] | None = None) -> Recipe:
    default = (Pin("tiny-pin", "2.0", sha(PIN_WHEEL)),)
    return Recipe(path=tmp_path / "demo.toml", name="demo", source=SourcePin("."),
                  series=tmp_path / "series", target=Target(), build=BuildSettings(),
                  pins=default if pins is None else pins, package="demo")


BUILT_REQUIRES = ("dep-one>=1", "extra-only; extra == 'x'")


def built_wheel(tmp_path: Path, requires: Sequence[str] = BUILT_REQUIRES) -> Path:
    path = tmp_path / "dist" / "demo-1.0-py3-none-any.whl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(wheel_bytes("demo", "1.0", requires))
    return path


def build(tmp_path: Path, out: Path, outside: FakeOutside, *, offline: bool = False,
          recipe: Recipe | None = None, requires: Sequence[str] = BUILT_REQUIRES) -> Any:
    return write_wheelhouse(
        out,
        WheelhouseInputs(recipe=recipe or make_recipe(tmp_path), source=SOURCE, patches=PATCHES,
                         built_wheels=[built_wheel(tmp_path, requires)], build_settings=SETTINGS,
                         cache_root=tmp_path / "cache", offline=offline, platform=None,
                         toolchain=TOOLCHAIN),
        WheelhouseReaders(outside=outside))


def test_layout(tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    outside = FakeOutside()
    result = build(tmp_path, out, outside)
    # the built wheel's requirements (not its extras) and the pins; none overrides
    assert outside.resolved == (["dep-one>=1", "tiny-pin==2.0"], [])
    assert result.overrides == []
    built = f"demo-1.0+{result.label}-py3-none-any.whl"
    assert re.fullmatch(r"sm121a\.[0-9a-f]{8}", result.label)
    top = sorted(p.name for p in out.iterdir())
    assert top == sorted([built, PIN_FILE, DEP_FILE, "requirements.lock", "manifest.json",
                          "simple", "pylock.toml", "sbom.cdx.json"])
    assert (out / PIN_FILE).read_bytes() == PIN_WHEEL  # byte-identical to the index's
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".wheelhouse")] == []

    lock = parse_lock((out / "requirements.lock").read_text(), where="lock")
    files = {p.name: sha((out / p.name).read_bytes()) for p in out.glob("*.whl")}
    assert sorted((r.name, r.version, r.hashes) for r in lock) == sorted([
        ("demo", f"1.0+{result.label}", (files[built],)),
        ("dep-one", "1.2", (files[DEP_FILE],)),
        ("tiny-pin", "2.0", (files[PIN_FILE],)),
    ])
    for line in (out / "requirements.lock").read_text().splitlines():
        assert line.startswith("#") or "--hash=sha256:" in line or line.endswith("\\")


def test_simple_index_links_every_file_with_its_hash(tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    build(tmp_path, out, FakeOutside())
    root = (out / "simple" / "index.html").read_text()
    assert re.findall(r'href="([^"]+)/"', root) == ["demo", "dep-one", "tiny-pin"]
    page = (out / "simple" / "tiny-pin" / "index.html").read_text()
    assert f'href="../../{PIN_FILE}#sha256={sha(PIN_WHEEL)}"' in page
    assert 'data-requires-python="&gt;=3.8"' in page


def test_manifest_says_where_everything_came_from(tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    result = build(tmp_path, out, FakeOutside())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == SOURCE
    assert manifest["patches"] == [{"name": "cmake-sm121-archs", "sha256": "a" * 64,
                                    "status": "applied"}]
    assert manifest["toolchain"] == TOOLCHAIN
    assert manifest["build"]["archs"] == ["12.1a"] and manifest["build"]["jobs"] == 2
    assert manifest["build"]["environment"] == SETTINGS["environment"]
    wheels = {w["file"]: w for w in manifest["wheels"]}
    for name, entry in wheels.items():
        data = (out / name).read_bytes()
        assert entry["sha256"] == sha(data) and entry["size"] == len(data)
    assert {w["role"] for w in wheels.values()} == {"built", "pin", "closure"}
    assert manifest["local_label"] == result.label
    assert set(manifest["files"]) == {"requirements.lock", "simple/index.html",
                                      "simple/demo/index.html", "simple/dep-one/index.html",
                                      "simple/tiny-pin/index.html", "pylock.toml",
                                      "sbom.cdx.json"}


def test_offline_second_run_uses_the_cache_and_gives_the_same_bytes(tmp_path: Path) -> None:
    build(tmp_path, tmp_path / "one", FakeOutside())
    offline = FakeOutside(network=False)
    build(tmp_path, tmp_path / "two", offline, offline=True)
    assert offline.calls == []
    one = {p.relative_to(tmp_path / "one"): p.read_bytes() for p in (tmp_path / "one").rglob("*")
           if p.is_file()}
    two = {p.relative_to(tmp_path / "two"): p.read_bytes() for p in (tmp_path / "two").rglob("*")
           if p.is_file()}
    assert one == two


def test_offline_with_an_empty_cache_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(CacheMissError, match=r"tiny-pin==2\.0"):
        build(tmp_path, tmp_path / "out", FakeOutside(network=False), offline=True)
    no_pins = make_recipe(tmp_path, pins=())
    with pytest.raises(CacheMissError, match=r"runtime closure.*dep-one>=1"):
        build(tmp_path, tmp_path / "out", FakeOutside(network=False), offline=True,
              recipe=no_pins)
    assert not (tmp_path / "out").exists()


def test_refused_pin_says_why(tmp_path: Path) -> None:
    recipe = make_recipe(tmp_path, pins=(Pin("flashinfer-python", "0.6.17"),))
    with pytest.raises(PinRefusedError, match="NVFP4 MoE fallback kernel on GB10"):
        build(tmp_path, tmp_path / "out", FakeOutside(), recipe=recipe)


def test_pin_whose_hash_the_index_lacks_is_refused(tmp_path: Path) -> None:
    recipe = make_recipe(tmp_path, pins=(Pin("tiny-pin", "2.0", "0" * 64),))
    with pytest.raises(HashMismatchError, match=r"pinned sha256 0{64}"):
        build(tmp_path, tmp_path / "out", FakeOutside(), recipe=recipe)
    assert not (tmp_path / "out").exists()


class DiesDownloading(FakeOutside):
    def download(self, locked: Sequence[LockedRequirement], dest: Path,
                 target: ClosureTarget, index: str) -> list[Path]:
        raise KeyboardInterrupt


def test_a_killed_run_leaves_the_old_wheelhouse_and_no_staging(tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    build(tmp_path, out, FakeOutside())
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, out, DiesDownloading(), recipe=make_recipe(tmp_path, pins=()))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "dist", "wheelhouse"]


def test_stale_staging_of_a_dead_run_is_swept(tmp_path: Path) -> None:
    dead = tmp_path / ".wheelhouse.tmp-999999999"
    (dead / "simple").mkdir(parents=True)
    alive = tmp_path / f".wheelhouse.tmp-{os.getppid()}"
    alive.mkdir()
    build(tmp_path, tmp_path / "wheelhouse", FakeOutside())
    assert not dead.exists() and alive.exists()


def test_refuses_to_replace_a_directory_that_is_not_a_wheelhouse(tmp_path: Path) -> None:
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    with pytest.raises(DestinationError, match="not a sparkbuild wheelhouse"):
        build(tmp_path, out, FakeOutside())
    assert (out / "thesis.tex").read_text() == "do not delete"


# -- pins against what they ship beside ------------------------------------------------


def test_a_pin_the_built_wheel_contradicts_is_refused_before_any_download(
    tmp_path: Path,
) -> None:
    outside = FakeOutside()
    with pytest.raises(PinRefusedError) as refused:
        build(tmp_path, tmp_path / "out", outside, requires=["dep-one>=1", "tiny-pin<2"])
    assert refused.value.what.startswith("the recipe pins tiny-pin==2.0, but demo 1.0+")
    assert refused.value.what.endswith("requires tiny-pin<2")
    assert outside.calls == [] and not (tmp_path / "out").exists()


def override_recipe(tmp_path: Path) -> Recipe:
    return make_recipe(tmp_path, pins=(Pin("tiny-pin", "2.0", sha(PIN_WHEEL),
                                           override="2.0 is the one that runs on GB10"),))


def test_an_override_is_recorded_in_the_manifest_and_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    outside = FakeOutside()
    result = build(tmp_path, out, outside, recipe=override_recipe(tmp_path),
                   requires=["dep-one>=1", "tiny-pin<2"])
    assert outside.resolved[1] == ["tiny-pin==2.0"]  # uv overrides: the override pin only
    manifest = json.loads((out / "manifest.json").read_text())
    (override,) = manifest["overrides"]
    assert override["pin"] == "tiny-pin==2.0"
    assert override["reason"] == "2.0 is the one that runs on GB10"
    assert override["replaced"] == [{"required_by": f"demo 1.0+{result.label}",
                                     "requirement": "tiny-pin<2", "project": "demo"}]
    lock = (out / "requirements.lock").read_text()
    assert "# override: tiny-pin==2.0 (reason: 2.0 is the one that runs on GB10)" in lock
    # the built wheel still says what it requires: the override is recorded, not hidden
    with zipfile.ZipFile(out / f"demo-1.0+{result.label}-py3-none-any.whl") as archive:
        metadata = archive.read("demo-1.0+" + result.label + ".dist-info/METADATA").decode()
    assert "Requires-Dist: tiny-pin<2" in metadata

    verified = verify_wheelhouse(out, list_archs=lambda path: [])
    assert verified.error is None, verified.summary()
    (listed,) = verified.requirements["overrides"]
    assert listed["requirement"] == "tiny-pin<2" and listed["override"] == "tiny-pin==2.0"

    manifest["overrides"] = []  # the manifest is not hashed: verify must catch this itself
    (out / "manifest.json").write_text(json.dumps(manifest))
    verified = verify_wheelhouse(out, list_archs=lambda path: [])
    assert verified.error is not None
    assert [m.problem for m in verified.mismatches] == [
        f"demo 1.0+{result.label} requires tiny-pin<2, but the wheelhouse has tiny-pin 2.0"]


def test_a_closure_wheel_contradicting_a_pin_is_refused_naming_it(tmp_path: Path) -> None:
    deep = FakeOutside(dep_wheel=wheel_bytes("dep-one", "1.2", ["tiny-pin>=3"]))
    with pytest.raises(PinRefusedError, match=r"the recipe pins tiny-pin==2\.0, but dep-one "
                       r"1\.2 requires tiny-pin>=3"):
        build(tmp_path, tmp_path / "out", deep)
    assert not (tmp_path / "out").exists()
    deep = FakeOutside(dep_wheel=wheel_bytes("dep-one", "1.2", ["tiny-pin>=3"]))
    result = build(tmp_path, tmp_path / "out", deep, recipe=override_recipe(tmp_path))
    (override,) = result.overrides
    assert [d.describe() for d in override.replaced] == ["dep-one 1.2 requires tiny-pin>=3"]


def test_a_missing_requirement_of_a_closure_wheel_fails_the_wheelhouse(tmp_path: Path) -> None:
    deep = FakeOutside(dep_wheel=wheel_bytes("dep-one", "1.2", ["not-here>=1"]))
    with pytest.raises(VerifyError, match=r"dep-one 1\.2 requires not-here>=1, but the "
                       "wheelhouse has no not-here"):
        build(tmp_path, tmp_path / "out", deep)


def test_a_known_bad_closure_wheel_is_refused(tmp_path: Path) -> None:
    bad = FakeOutside(dep_wheel=wheel_bytes("dep-one", "1.2"))
    bad_file = "flashinfer_python-0.6.17-py3-none-any.whl"
    bad_wheel = wheel_bytes("flashinfer-python", "0.6.17")

    def resolve(requirements: Sequence[str], overrides: Sequence[str],
                target: ClosureTarget, index: str) -> list[LockedRequirement]:
        return [LockedRequirement("flashinfer-python", "0.6.17", (sha(bad_wheel),))]

    def download(locked: Sequence[LockedRequirement], dest: Path,
                 target: ClosureTarget, index: str) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / bad_file).write_bytes(bad_wheel)
        return [dest / bad_file]

    bad.resolve = resolve  # type: ignore[method-assign]
    bad.download = download  # type: ignore[method-assign]
    with pytest.raises(PinRefusedError, match=r"closure wheel flashinfer-python==0\.6\.17: "
                       "crashes the NVFP4 MoE"):
        build(tmp_path, tmp_path / "out", bad, recipe=make_recipe(tmp_path, pins=()),
              requires=["flashinfer-python>=0.6"])
    assert not (tmp_path / "out").exists()


def test_verify_checks_the_shipped_torch_against_the_build(tmp_path: Path) -> None:
    torch = wheel_bytes("torch", "2.14.0")
    torch_file = "torch-2.14.0-py3-none-any.whl"

    class WithTorch(FakeOutside):
        def resolve(self, requirements: Sequence[str], overrides: Sequence[str],
                    target: ClosureTarget, index: str) -> list[LockedRequirement]:
            return [*super().resolve(requirements, overrides, target, index),
                    LockedRequirement("torch", "2.14.0", (sha(torch),))]

        def download(self, locked: Sequence[LockedRequirement], dest: Path,
                     target: ClosureTarget, index: str) -> list[Path]:
            placed = super().download([i for i in locked if i.name != "torch"], dest,
                                      target, index)
            (dest / torch_file).write_bytes(torch)
            return [*placed, dest / torch_file]

    out = tmp_path / "out"
    # wheel verifies before it writes: a build against 2.13.0 (TOOLCHAIN) shipping 2.14.0
    with pytest.raises(VerifyError, match=r"compiled against torch 2\.13\.0, but the "
                       r"wheelhouse ships torch 2\.14\.0"):
        build(tmp_path, out, WithTorch(), requires=["dep-one>=1", "torch==2.14.0"])
    assert not out.exists()
    # built against the torch it ships, then a manifest that says otherwise: verify names it
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=make_recipe(tmp_path), source=SOURCE, patches=PATCHES,
                         built_wheels=[built_wheel(tmp_path, ["dep-one>=1", "torch==2.14.0"])],
                         build_settings=SETTINGS, cache_root=tmp_path / "cache", offline=False,
                         platform=None, toolchain={**TOOLCHAIN, "torch": "2.14.0"}),
        WheelhouseReaders(outside=WithTorch()))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["toolchain"]["torch"] = "2.13.0"
    (out / "manifest.json").write_text(json.dumps(manifest))
    verified = verify_wheelhouse(out, list_archs=lambda path: [])
    assert verified.error is not None
    assert verified.requirements["torch"] == {
        "built_against": "2.13.0", "shipped": "2.14.0", "ok": False,
        "note": verified.mismatches[0].problem}
    assert "compiled against torch 2.13.0, but the wheelhouse ships torch 2.14.0" in (
        verified.mismatches[0].problem)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["toolchain"]["torch"] = "2.14.0+cu130"  # same release, another local label
    (out / "manifest.json").write_text(json.dumps(manifest))
    verified = verify_wheelhouse(out, list_archs=lambda path: [])
    assert verified.requirements["torch"]["ok"] is True
    # the SBOM's tools still say 2.14.0: it no longer agrees with the edited manifest
    assert [(m.file, m.problem) for m in verified.mismatches] == [
        ("sbom.cdx.json", "its metadata.tools is not what the manifest says")]
