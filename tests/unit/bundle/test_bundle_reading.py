"""Reading a bundle: its manifest first, then only what it lists, with each error its own.

Bundles are written here member by member (no ``sparkbuild bundle``), so that a member can
be unlisted, oversized, doubled, unsafe or put before the manifest."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import TYPE_CHECKING

import pytest

from sparkbuild.bundle.archive import MANIFEST, TOP
from sparkbuild.bundle.read import admit_listed, read_manifest, unpack_bundle
from sparkbuild.bundle.write import PLAN
from sparkbuild.errors import UnsafeArchiveError, VerifyError
from sparkbuild.sources.archive import ArchiveMember, read_tar_member

if TYPE_CHECKING:
    from pathlib import Path

PLAN_JSON = json.dumps({"format": 1, "recipe": "r", "recipe_file": "r.toml", "sources": []})
LISTED = {PLAN: PLAN_JSON.encode(), "recipe/r.toml": b'[source]\nspec = "."\n'}


def _entry(data: bytes) -> dict[str, object]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def _bundle(path: Path, *, extra: dict[str, bytes] | None = None, manifest_last: bool = False,
            members: dict[str, object] | None = None,
            raw: tuple[tuple[str, bytes], ...] = ()
            ) -> Path:
    """A bundle of LISTED (and ``extra``, unlisted); ``members``: the manifest's map as
    given; ``raw``: members written under their names as they are (no TOP prefix)."""
    listed = members if members is not None else {n: _entry(d) for n, d in LISTED.items()}
    manifest = json.dumps({"format": 1, "members": listed}).encode()
    files = [(f"{TOP}/{n}", d) for n, d in {**LISTED, **(extra or {})}.items()] + list(raw)
    files = ([*files, (f"{TOP}/{MANIFEST}", manifest)] if manifest_last
             else [(f"{TOP}/{MANIFEST}", manifest), *files])
    with tarfile.open(path, "w:xz") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_bundle_verifies_and_its_plan_is_read(tmp_path: Path) -> None:
    unpacked = unpack_bundle(_bundle(tmp_path / "b.tar.xz"), tmp_path / "into")
    assert unpacked.plan["recipe"] == "r"
    assert unpacked.recipe_path.read_bytes() == LISTED["recipe/r.toml"]


def test_a_bundle_of_an_older_sparkbuild_with_its_manifest_last_still_verifies(
        tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz", manifest_last=True)
    assert unpack_bundle(bundle, tmp_path / "into").plan["recipe_file"] == "r.toml"


def test_the_manifest_is_read_without_extracting(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz")
    assert set(read_manifest(bundle)["members"]) == set(LISTED)
    assert not (tmp_path / TOP).exists()
    with pytest.raises(UnsafeArchiveError, match="more than the 10 it may be"):
        read_tar_member(bundle, f"{TOP}/{MANIFEST}", limit=10)


@pytest.mark.parametrize(("member", "says"), [
    (ArchiveMember(f"{TOP}/tree/evil.cu", "file", 3), "tree/evil.cu: not in the manifest"),
    (ArchiveMember(f"{TOP}/{PLAN}", "file", 10 << 30), f"{PLAN}: changed (it holds"),
    (ArchiveMember(f"{TOP}/{PLAN}", "symlink", 0, "/etc/passwd"),
     f"{PLAN}: not the file the manifest names"),
    (ArchiveMember("elsewhere/plan.json", "file", 3), "not in the manifest"),
    (ArchiveMember("tree", "dir", 0), "tree: not in the manifest"),
])
def test_a_member_the_manifest_does_not_list_as_it_is_refused_before_it_is_written(
        tmp_path: Path, member: ArchiveMember, says: str) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz")
    admit = admit_listed(read_manifest(bundle), bundle)
    admit(ArchiveMember(TOP, "dir", 0))
    admit(ArchiveMember(f"{TOP}/recipe", "dir", 0))
    with pytest.raises(VerifyError) as refused:
        admit(member)
    assert says in refused.value.what


def test_a_member_present_twice_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz", raw=((f"{TOP}/{PLAN}", PLAN_JSON.encode()),))
    with pytest.raises(VerifyError, match=f"{PLAN}: in the bundle twice"):
        unpack_bundle(bundle, tmp_path / "into")


def test_an_unlisted_member_leaves_nothing(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz", extra={"tree/big.bin": bytes(1 << 20)})
    with pytest.raises(VerifyError, match=r"tree/big\.bin: not in the manifest"):
        unpack_bundle(bundle, tmp_path / "into")
    assert not [p for p in (tmp_path / "into").iterdir() if p.suffix != ".lock"]


def test_an_unsafe_member_keeps_the_archive_s_error(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz", raw=((f"{TOP}/../escaped", b"x"),))
    with pytest.raises(UnsafeArchiveError, match="escapes the destination"):
        unpack_bundle(bundle, tmp_path / "into")
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("members", [[], {"plan.json": "x"}, {"plan.json": {"size": 1}},
                                     {"plan.json": {"sha256": "0", "size": True}}])
def test_a_manifest_of_another_form_is_refused(tmp_path: Path, members: object) -> None:
    bundle = _bundle(tmp_path / "b.tar.xz", members=members)  # type: ignore[arg-type]
    with pytest.raises(VerifyError, match="does not map each member"):
        unpack_bundle(bundle, tmp_path / "into")


def test_a_manifest_nested_too_deeply_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.xz"
    deep = ('{"members": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    with tarfile.open(bundle, "w:xz") as tar:
        info = tarfile.TarInfo(f"{TOP}/{MANIFEST}")
        info.size = len(deep)
        tar.addfile(info, io.BytesIO(deep))
    with pytest.raises(VerifyError, match="nested too deeply"):
        unpack_bundle(bundle, tmp_path / "into")


@pytest.mark.parametrize("recipe_file", ["../../../etc/passwd", "/etc/passwd", ""])
def test_a_path_the_plan_names_outside_the_bundle_is_refused(tmp_path: Path,
                                                             recipe_file: str) -> None:
    plan = json.dumps({"format": 1, "recipe": "r", "recipe_file": recipe_file}).encode()
    listed = {**LISTED, PLAN: plan}
    members = {n: _entry(d) for n, d in listed.items()}
    bundle = tmp_path / "b.tar.xz"
    with tarfile.open(bundle, "w:xz") as tar:
        for name, data in [(MANIFEST, json.dumps({"members": members}).encode()),
                           *listed.items()]:
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    unpacked = unpack_bundle(bundle, tmp_path / "into")
    with pytest.raises(VerifyError, match="names a path outside the bundle"):
        _ = unpacked.recipe_path
