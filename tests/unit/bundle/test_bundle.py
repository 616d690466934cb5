"""Bundles without a build: write one from a hand-made cache, verify, tamper, import."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from sparkbuild.bundle.archive import MANIFEST, TOP, members_of
from sparkbuild.bundle.read import import_bundle, prepared_from_bundle, unpack_bundle
from sparkbuild.bundle.write import assemble
from sparkbuild.errors import RecipeError, UnsafeArchiveError, VerifyError
from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.store.hashing import sha256_file
from sparkbuild.vendoring.build_deps import WheelPlan
from sparkbuild.vendoring.fetch import write_tree_tarball
from sparkbuild.vendoring.index import FLASHINFER_AOT_WHEELS, source_entry, wheelset_entry
from sparkbuild.vendoring.plan import SourcePlan, VendorPlan, adjust_plan
from support.bundles import rewrite_bundle

SOURCE = SourcePlan(name="dep", kind="git", url="https://example.com/dep.git", ref="v1")


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, object]:
    tree = tmp_path / "tree"
    _write(tree, {"CMakeLists.txt": 'include_directories("${DEP}/examples/common")\n',
                  "csrc/kernel.cu": "__global__ void k() {}\n", "docs/big.md": "x" * 1000,
                  ".sparkbuild/applied/p": "ok"})
    dep = tmp_path / "dep"
    _write(dep, {"include/dep.h": "#pragma once\n", "include/copy.h": "#pragma once\n",
                 "tests/t.cc": "int main() {}\n", "examples/common/h.h": "//\n",
                 "examples/demo/d.cc": "//\n", "media/logo.png": "PNG"})
    cache = Cache(tmp_path / "cache")
    blob = tmp_path / "dep.tar.gz"
    write_tree_tarball(dep, blob)
    digest = cache.put_file(blob)
    cache.record("sources", SOURCE.key, {"kind": "git", "name": "dep", "url": SOURCE.url,
                                         "ref": "v1", "commit": "c" * 40, "sha256": digest,
                                         "strip_top": False, "submodules": None})
    wheel = tmp_path / "tool-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel, only bytes to carry")
    plan = VendorPlan(tree, (SOURCE,), (), (WheelPlan("tool==1.0", "pyproject.toml"),), (),
                      None)
    cache.record("wheelsets", plan.wheelset_key, {"requirements": ["tool==1.0"],
                                                  "files": {wheel.name: cache.put_file(wheel)}})
    series = tmp_path / "patches"
    _write(series, {"series": "# empty\n"})
    recipe_path = tmp_path / "r.toml"
    recipe_path.write_text('[source]\nspec = "."\n[series]\npath = "patches/series"\n')
    return {"tree": tree, "cache": cache, "plan": plan, "recipe": load_recipe(recipe_path),
            "tmp": tmp_path}


def _bundle(setup: dict[str, object], *, wheels: bool = True) -> Path:
    out = Path(str(setup["tmp"])) / "b.tar.xz"
    result = assemble(recipe=setup["recipe"], tree=setup["tree"], prepared={"patches": []},  # type: ignore[arg-type]
                      plan=setup["plan"], cache=setup["cache"], out=out,  # type: ignore[arg-type]
                      with_wheels=wheels)
    assert result.size == out.stat().st_size and result.sha256 == sha256_file(out)
    return out


def test_a_bundle_holds_tree_sources_wheels_recipe_and_a_manifest(setup: dict[str, object]
                                                                  ) -> None:
    bundle = _bundle(setup)
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(f"{TOP}/{MANIFEST}").read())  # type: ignore[union-attr]
    assert names[0] == f"{TOP}/{MANIFEST}"  # first: read before anything is extracted
    members = manifest["members"]
    assert "tree/csrc/kernel.cu" in members and "tree/docs/big.md" not in members
    assert "sources/dep/include/dep.h" in members
    assert "sources/dep/examples/common/h.h" in members  # the tree's CMake names it
    assert not any(n.startswith(("sources/dep/tests", "sources/dep/media",
                                 "sources/dep/examples/demo")) for n in members)
    assert "wheels/tool-1.0-py3-none-any.whl" in members
    assert "recipe/r.toml" in members and "recipe/series/series" in members
    assert all(len(meta["sha256"]) == 64 for meta in members.values() if "sha256" in meta)
    # include/copy.h has the same bytes as include/dep.h: stored once, as a link.
    with tarfile.open(bundle) as tar:
        links = [m for m in tar.getmembers() if m.islnk()]
    assert len(links) == 1


def test_unpack_verifies_and_import_fills_the_cache(setup: dict[str, object],
                                                    tmp_path: Path) -> None:
    bundle = _bundle(setup)
    unpacked = unpack_bundle(bundle, tmp_path / "unpacked")
    assert (unpacked.tree / "csrc" / "kernel.cu").is_file()
    assert unpacked.recipe_path.read_text().count('path = "series/series"') == 1
    fresh = Cache(tmp_path / "fresh")
    assert import_bundle(unpacked, fresh) == ["dep", "1 wheels"]
    entry = source_entry(fresh, SOURCE)
    assert entry is not None and entry["commit"] == "c" * 40
    assert wheelset_entry(fresh, setup["plan"]) is not None  # type: ignore[arg-type]
    assert unpack_bundle(bundle, tmp_path / "unpacked").root == unpacked.root  # reused


def test_the_build_tree_path_does_not_depend_on_the_bundle(setup: dict[str, object],
                                                           tmp_path: Path) -> None:
    # A shared compile cache hits only when nvcc sees the same source paths, so every
    # bundle's tree is built at the recipe's path, and the verified copy stays untouched.
    recipe = setup["recipe"]
    dest = tmp_path / "work" / "tree"
    first = unpack_bundle(_bundle(setup), tmp_path / "unpacked")
    prepared = prepared_from_bundle(first, recipe, dest)  # type: ignore[arg-type]
    assert prepared.tree == dest and (dest / "csrc" / "kernel.cu").is_file()
    (dest / "build.o").write_text("a build's output")
    assert not (first.tree / "build.o").exists()
    prepared_from_bundle(first, recipe, dest)  # type: ignore[arg-type]
    assert (dest / "build.o").is_file()  # the same bundle again: resumed, not copied
    _write(Path(str(setup["tree"])), {"csrc/kernel.cu": "__global__ void k2() {}\n"})
    second = unpack_bundle(_bundle(setup), tmp_path / "unpacked")
    assert second.root != first.root
    kept = {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.is_file()
            and p.name not in ("kernel.cu", "build.o")}
    assert prepared_from_bundle(second, recipe, dest).tree == dest  # type: ignore[arg-type]
    assert "k2" in (dest / "csrc" / "kernel.cu").read_text()
    # another bundle: brought up to it file by file, so a warm rebuild keeps its build
    # directory and ninja sees only the changed file as new
    assert (dest / "build.o").is_file()
    assert kept and all(p.stat().st_mtime_ns == mtime for p, mtime in kept.items())


@pytest.mark.parametrize(("how", "member", "says"), [
    ("change", "tree/csrc/kernel.cu", "tree/csrc/kernel.cu: changed"),
    ("drop", "sources/dep/include/dep.h", "sources/dep/include/dep.h: missing"),
    ("add", "tree/csrc/evil.cu", "tree/csrc/evil.cu: not in the manifest"),
])
def test_a_tampered_bundle_is_refused_naming_the_member(setup: dict[str, object],
                                                        tmp_path: Path, how: str, member: str,
                                                        says: str) -> None:
    bundle = _bundle(setup)
    tampered = rewrite_bundle(bundle, tmp_path / "t.tar.xz", **{how: member})
    with pytest.raises(VerifyError) as caught:
        unpack_bundle(tampered, tmp_path / "unpacked")
    assert says in caught.value.what
    assert not list((tmp_path / "unpacked").glob("bundle-*"))


def test_a_truncated_bundle_is_refused(setup: dict[str, object], tmp_path: Path) -> None:
    """The archive's own error, as for any truncated archive (exit 5): its manifest, first,
    was read, and nothing of the rest is kept."""
    bundle = _bundle(setup)
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])
    with pytest.raises(UnsafeArchiveError, match="truncated"):
        unpack_bundle(cut, tmp_path / "unpacked")
    assert not [p.name for p in (tmp_path / "unpacked").iterdir() if p.suffix != ".lock"]


def test_without_wheels_leaves_them_out(setup: dict[str, object]) -> None:
    with tarfile.open(_bundle(setup, wheels=False)) as tar:
        assert not any("/wheels/" in name for name in tar.getnames())


def test_the_recipe_s_vendor_choices_apply_to_the_plan(setup: dict[str, object],
                                                       tmp_path: Path) -> None:
    plan = setup["plan"]
    assert isinstance(plan, VendorPlan)
    narrowed = adjust_plan(plan, submodules={"dep": ("csrc/cutlass",)})
    assert narrowed.sources[0].submodules == ("csrc/cutlass",)
    excluded = adjust_plan(plan, exclude=("dep",))
    assert excluded.sources == () and excluded.excluded[0].name == "dep"
    assert excluded.to_dict()["excluded"][0]["name"] == "dep"
    with pytest.raises(RecipeError, match="triton"):
        adjust_plan(plan, exclude=("triton_kernels",))


def test_recipe_vendor_table(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[source]\nspec = "."\n[series]\npath = "s"\n[vendor]\n'
                    'mirrors = ["https://github.com/=file:///srv/git/"]\n'
                    'submodules = { fa = ["csrc/cutlass"] }\nexclude = ["tk"]\nsparse = true\n')
    vendor = load_recipe(path).vendor
    assert vendor.mirrors == ("https://github.com/=file:///srv/git/",)
    assert vendor.submodules == {"fa": ("csrc/cutlass",)}
    assert vendor.exclude == ("tk",) and vendor.sparse
    for bad in ("x", "a= ", "=b"):  # what --mirror refuses, the recipe refuses on load
        path.write_text('[source]\nspec = "."\n[series]\npath = "s"\n[vendor]\n'
                        f'mirrors = ["{bad}"]\n')
        with pytest.raises(RecipeError, match="BASE=REPLACEMENT"):
            load_recipe(path)
    proof = Path(__file__).resolve().parents[3] / "bench" / "real-build" / "vllm-0.20.0-proof.toml"
    assert load_recipe(proof).target.cuda_archs == ("12.1a", "9.0a")


def test_links_to_directories_are_kept_in_tarballs_and_bundle_members(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    _write(tree, {"include/real/h.h": "//\n", "x.txt": "x"})
    (tree / "include" / "alias").symlink_to("real")
    blob = tmp_path / "t.tar.gz"
    write_tree_tarball(tree, blob)
    with tarfile.open(blob) as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert links == {"include/alias": "real"}
    members = members_of(tree)
    assert "include/alias" in members and "include/real/h.h" in members
    assert "include/alias/h.h" not in members  # the link itself, not what it points to


def test_flashinfer_aot_wheels_travel_in_the_bundle(setup: dict[str, object],
                                                    tmp_path: Path) -> None:
    cache = setup["cache"]
    assert isinstance(cache, Cache)
    aot = cache.root / FLASHINFER_AOT_WHEELS / "cp312-x86_64"
    _write(aot, {"flashinfer_python-0.6.18-py3-none-any.whl": "wheel bytes",
                 ".sparkbuild-complete": "flashinfer-python==0.6.18\n", "download.log": "x"})
    recipe_path = tmp_path / "aot.toml"
    recipe_path.write_text('[source]\nspec = "."\n[series]\npath = "patches/series"\n'
                           '[flashinfer]\naot = true\naot_args = ["--add-moe", "false"]\n')
    setup = {**setup, "recipe": load_recipe(recipe_path)}
    unpacked = unpack_bundle(_bundle(setup), tmp_path / "unpacked")
    assert unpacked.plan["flashinfer_aot"] == [
        "flashinfer-aot/cp312-x86_64/.sparkbuild-complete",
        "flashinfer-aot/cp312-x86_64/flashinfer_python-0.6.18-py3-none-any.whl"]
    fresh = Cache(tmp_path / "fresh")
    assert import_bundle(unpacked, fresh)[-1] == "the wheels of flashinfer's builder"
    copied = fresh.root / FLASHINFER_AOT_WHEELS / "cp312-x86_64"
    assert (copied / "flashinfer_python-0.6.18-py3-none-any.whl").read_text() == "wheel bytes"
    assert not (copied / "download.log").exists()
