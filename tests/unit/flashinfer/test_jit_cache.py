"""A prebuilt jit-cache: pinned by hash, its version the pin's (refused before anything
compiles, naming both), cut down to the model's set; and a module with no machine code
named by verify, as a module with code for other archs is (the moe_utils class)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.errors import HashMismatchError, PinRefusedError, RecipeError, VerifyError
from sparkbuild.flashinfer.jit_cache import (
    codeless_modules,
    cut_to,
    fetch_jit_cache,
    jit_cache_file_name,
    read_jit_cache,
    refuse_other_version,
    take_jit_cache,
)
from sparkbuild.flashinfer.jit_cache_wheel import pack_jit_cache
from sparkbuild.recipe import load_recipe
from sparkbuild.resources import recipes_dir
from sparkbuild.store.cache import Cache
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.sass import KernelCode, coverage_at
from sparkbuild.wheelhouse.verify import LibraryArchs, VerifyResult, check_archs
from support.jit_caches import (
    JitCache,
    compressed_by_method,
    encrypted,
    library,
    module_member,
    symbolic_link,
)


def _wheel(tmp_path: Path, version: str, modules: tuple[str, ...]) -> Path:
    built = tmp_path / f"modules-{version}"
    for name in modules:
        (built / name).mkdir(parents=True)
        (built / name / f"{name}.so").write_bytes(b"\x7fELF" + name.encode())
    return pack_jit_cache(built, tmp_path / f"dist-{version}", version,
                          version.split("+")[0])


def test_a_wheel_says_its_version_three_ways_and_its_modules(tmp_path: Path) -> None:
    wheel = read_jit_cache(_wheel(tmp_path, "0.6.18+cu130", ("sampling", "fused_moe_120")))
    assert wheel.versions == {"file name": "0.6.18+cu130", "METADATA": "0.6.18+cu130",
                              "__version__": "0.6.18+cu130"}
    assert wheel.modules == ["fused_moe_120", "sampling"]
    refuse_other_version(wheel, "0.6.18")


@pytest.mark.parametrize("version", ["0.6.17+cu130", "0.6.18.post1+cu130", "0.6.180+cu130"])
def test_another_version_is_refused_naming_both(tmp_path: Path, version: str) -> None:
    wheel = read_jit_cache(_wheel(tmp_path, version, ("sampling",)))
    with pytest.raises(PinRefusedError) as caught:
        refuse_other_version(wheel, "0.6.18")
    assert version in caught.value.what and "0.6.18" in caught.value.what
    assert "flashinfer-python is 0.6.18" in caught.value.what


def test_cut_to_the_models_set_keeps_version_tag_and_only_those(tmp_path: Path) -> None:
    wheel = read_jit_cache(_wheel(tmp_path, "0.6.18+cu130", ("a", "b", "c")))
    cut = read_jit_cache(cut_to(wheel, ["a", "c"], tmp_path / "cut"))
    assert cut.modules == ["a", "c"] and cut.version == wheel.version and cut.tag == wheel.tag
    with zipfile.ZipFile(cut.path) as archive:
        assert archive.read("flashinfer_jit_cache/jit_cache/c/c.so") == b"\x7fELFc"
    with pytest.raises(RecipeError, match="lacks 1 module"):
        cut_to(wheel, ["a", "zzz"], tmp_path / "cut2")


def _recipe(tmp_path: Path, table: str) -> Path:
    text = (recipes_dir() / "qwen38next.toml").read_text()
    text = text.replace('config = "qwen38next-model.json"',
                        f'config = "{recipes_dir() / "qwen38next-model.json"}"')
    text = text.replace('path = "../patches/series"',
                        f'path = "{(recipes_dir() / "../patches/series").resolve()}"')
    text = text.replace("aot_args = []\n", f"aot_args = []\n{table}\n")
    (tmp_path / "r.toml").write_text(text)
    return tmp_path / "r.toml"


def test_a_local_file_is_taken_pinned_and_cut(tmp_path: Path) -> None:
    from sparkbuild.flashinfer.module_set import recipe_set

    plain = load_recipe(_recipe(tmp_path, ""))
    chosen = recipe_set(plain)
    assert chosen is not None
    prebuilt = _wheel(tmp_path, "0.6.18+cu130", (*chosen.names, "xqa_mla_other", "norm"))
    digest = sha256_file(prebuilt)
    recipe = load_recipe(_recipe(tmp_path, f'jit_cache = {{ path = "{prebuilt}", '
                                           f'sha256 = "{digest}", cut_to_model = true }}'))
    taken = take_jit_cache(recipe, Cache(tmp_path / "cache"), out=tmp_path / "out",
                           offline=True, pinned="0.6.18")
    assert sorted(taken.modules) == sorted(chosen.names)
    assert taken.prebuilt is not None and "cut from" in taken.prebuilt
    assert read_jit_cache(taken.wheel).modules == sorted(chosen.names)
    wrong = load_recipe(_recipe(tmp_path, f'jit_cache = {{ path = "{prebuilt}", '
                                          f'sha256 = "{"0" * 64}" }}'))
    with pytest.raises(HashMismatchError, match="differs from its pin"):
        take_jit_cache(wrong, Cache(tmp_path / "cache"), out=tmp_path / "out2",
                       offline=True, pinned="0.6.18")


def test_a_version_other_than_the_pin_is_refused_before_the_build(tmp_path: Path) -> None:
    from sparkbuild.flashinfer.builder_wheels import ready_builder

    old = _wheel(tmp_path, "0.6.17+cu130", ("sampling",))
    recipe = load_recipe(_recipe(tmp_path, f'jit_cache = {{ path = "{old}", '
                                           f'sha256 = "{sha256_file(old)}" }}'))
    with pytest.raises(PinRefusedError) as caught:
        ready_builder(recipe, tmp_path / "cache", offline=True)
    assert "0.6.17+cu130" in caught.value.what and "0.6.18" in caught.value.what


@pytest.mark.parametrize(("table", "says"), [
    ('jit_cache = { url = "https://x/y.whl" }', "needs sha256"),
    (f'jit_cache = {{ sha256 = "{"a" * 64}" }}', "one of url or path"),
    (f'jit_cache = {{ url = "u", path = "p", sha256 = "{"a" * 64}" }}', "one of url or path"),
])
def test_a_jit_cache_table_without_its_pin_or_place_is_refused(
        tmp_path: Path, table: str, says: str) -> None:
    with pytest.raises(RecipeError, match=says):
        load_recipe(_recipe(tmp_path, table))


WHEEL = "flashinfer_jit_cache-0.6.18+cu130-py3-none-linux_x86_64.whl"


def test_a_module_with_no_machine_code_is_named_spdlog_aside() -> None:
    libraries = [(WHEEL, "flashinfer_jit_cache/jit_cache/moe_utils/moe_utils.so", ()),
                 (WHEEL, "flashinfer_jit_cache/jit_cache/spdlog/spdlog.so", ()),
                 (WHEEL, "flashinfer_jit_cache/jit_cache/sampling/sampling.so", ("sm_121a",)),
                 ("vllm-0.29.0-cp38-abi3-linux_x86_64.whl", "vllm/_host.so", ())]
    assert codeless_modules(libraries) == ["moe_utils"]


def test_verify_refuses_a_codeless_module_and_one_built_for_other_archs(
        tmp_path: Path) -> None:
    result = VerifyResult(tmp_path, 0, ("12.1a",))
    codeless = LibraryArchs(WHEEL, "flashinfer_jit_cache/jit_cache/moe_utils/moe_utils.so",
                            (), ())
    hopper = LibraryArchs(
        WHEEL, "flashinfer_jit_cache/jit_cache/moe_sm90/moe_sm90.so", ("sm_90a",),
        ("sm_121a",), coverage=tuple(coverage_at([KernelCode("_Z4moeKPf", ("sm_90a",))],
                                                 ("12.1a",))))
    check_archs(result, [], lambda _p: [], lambda _p: [], known=[codeless, hopper])
    error = str(result.error)
    assert "flashinfer module moe_utils holds no GPU machine code for 12.1a" in error
    assert "flashinfer#5237" in error
    assert "moe_sm90/moe_sm90.so" in error and "no code for 12.1a: _Z4moeKPf" in error


# -- the wheel's own name, its structure, what cannot be read -------------------------------


def _hostile(tmp_path: Path, **how: Any) -> Path:
    return JitCache(**how).write(tmp_path / "dist")


def test_an_uncut_wheel_is_taken_under_its_own_name_whatever_its_last_member(
        tmp_path: Path) -> None:
    for n, last in enumerate(({}, {module_member("norm"): library()})):
        prebuilt = _hostile(tmp_path / str(n), last=last)
        recipe = load_recipe(_recipe(tmp_path / str(n), f'jit_cache = {{ path = "{prebuilt}", '
                                                        f'sha256 = "{sha256_file(prebuilt)}" }}'))
        out = tmp_path / str(n) / "out"
        taken = take_jit_cache(recipe, Cache(tmp_path / "cache"), out=out, offline=True,
                               pinned="0.6.18")
        assert taken.wheel == out / prebuilt.name
        assert [p.name for p in out.iterdir()] == [prebuilt.name]
        assert taken.wheel.read_bytes() == prebuilt.read_bytes()


@pytest.mark.parametrize("name", [
    "flashinfer_jit_cache-0.6.18+cu130-py3-none-x/../../jc.whl",
    "../flashinfer_jit_cache-0.6.18+cu130-py3-none-any.whl",
    "/tmp/flashinfer_jit_cache-0.6.18+cu130-py3-none-any.whl",
    "flashinfer_jit_cache-0.6.18+cu130-py3-none-any.whl\n",
    ".flashinfer_jit_cache-0.6.18+cu130-py3-none-any.whl",
    "flashinfer_jit_cache-0.6.18+cu130-py3-none-x\\..\\jc.whl",
    "flashinfer_jit_cache-0.6.18+cu130.whl",
    "flashinfer_python-0.6.18-py3-none-any.whl",
    "",
])
def test_a_name_that_is_no_plain_jit_cache_wheel_name_is_refused(name: str) -> None:
    with pytest.raises(RecipeError, match="the jit-cache wheel's name"):
        jit_cache_file_name(name, "recipe")


def test_the_file_name_gives_version_and_tag() -> None:
    assert jit_cache_file_name(WHEEL, "r") == ("0.6.18+cu130", "py3-none-linux_x86_64")


@pytest.mark.parametrize(("how", "says"), [
    ({"last": {"/abs/x.whl": b"x"}}, "an absolute name"),
    ({"extra": {"flashinfer_jit_cache/../../x.py": b"x"}}, "climbs out with .."),
    ({"extra": {"x.so": b"/etc/passwd"}, "tweak": {"x.so": symbolic_link}},
     "a symbolic link member"),
    ({"unlisted": (module_member("sampling"),)}, "is not listed in RECORD"),
    ({"extra": {"hook.pth": b"import os\n"}}, "a .pth file"),
    ({"tweak": {module_member("sampling"): encrypted}}, "an encrypted member"),
    ({"tweak": {module_member("sampling"): compressed_by_method(99)}},
     "compressed by method 99"),
])
def test_a_wheel_an_installer_must_not_get_is_refused_before_it_is_read(
        tmp_path: Path, how: dict[str, Any], says: str) -> None:
    with pytest.raises(VerifyError, match="is not a wheel an installer may be given") as caught:
        read_jit_cache(_hostile(tmp_path, **how), source="given/path.whl")
    assert says in caught.value.what and caught.value.where == "given/path.whl"


def test_a_file_that_is_no_zip_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / WHEEL
    path.write_bytes(b"not a zip\n")
    with pytest.raises(VerifyError, match="not a readable wheel"):
        read_jit_cache(path)


def test_a_symbolic_link_is_read_under_the_name_the_recipe_gives(tmp_path: Path) -> None:
    blob = JitCache().write(tmp_path / "blobs", "3f2a9c")
    link = tmp_path / "given" / WHEEL
    link.parent.mkdir()
    link.symlink_to(blob)
    recipe = load_recipe(_recipe(tmp_path, f'jit_cache = {{ path = "given/{WHEEL}", '
                                           f'sha256 = "{sha256_file(blob)}" }}'))
    given = recipe.flashinfer.jit_cache
    assert given is not None and given.path == link
    wheel = fetch_jit_cache(given, Cache(tmp_path / "cache"), offline=True)
    assert wheel.name == WHEEL and wheel.shown_as == str(link)
    wrong = load_recipe(_recipe(tmp_path, f'jit_cache = {{ path = "given/{WHEEL}", '
                                          f'sha256 = "{"0" * 64}" }}'))
    assert wrong.flashinfer.jit_cache is not None
    with pytest.raises(HashMismatchError) as caught:
        fetch_jit_cache(wrong.flashinfer.jit_cache, Cache(tmp_path / "cache"), offline=True)
    assert caught.value.where == str(link)


def test_wheels_check_before_the_build_refuses_a_wheel_nothing_can_read(
        tmp_path: Path) -> None:
    from sparkbuild.flashinfer.builder_wheels import ready_builder

    bad = _hostile(tmp_path, tweak={module_member("sampling"): encrypted})
    recipe = load_recipe(_recipe(tmp_path, f'jit_cache = {{ path = "{bad}", '
                                           f'sha256 = "{sha256_file(bad)}" }}'))
    with pytest.raises(VerifyError, match="an encrypted member"):
        ready_builder(recipe, tmp_path / "cache", offline=True)
