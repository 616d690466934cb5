"""``flashinfer-aot`` with a prebuilt jit-cache: the wheel is staged beside ``--out``, judged
there, and placed only when it passes -- a refusal, an error or an interruption leaves
``--out`` as it was, and what a killed run left beside it goes; a library that is no ELF
holds no GPU code (cuobjdump is not asked), and one nothing can read is a note, not a crash."""

from __future__ import annotations

import os
import zipfile
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import DestinationError
from sparkbuild.recipe import load_recipe
from sparkbuild.store.files import sweep_partials_beside
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.sass import KernelCode
from sparkbuild.wheelhouse import verify
from sparkbuild.wheelhouse.verify import Readers, gpu_libraries, take_judged_jit_cache
from support.jit_caches import WHEEL_NAME, JitCache, encrypted, library, module_member

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sparkbuild.recipe import Recipe


def _recipe(tmp_path: Path, wheel: JitCache, *, allow_jit: bool = False) -> Recipe:
    path = wheel.write(tmp_path / "dist")
    (tmp_path / "series").write_text("# empty\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text(f"""
[recipe]
name = "jc"
package = "flashinfer-jit-cache"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
allow_jit = {str(allow_jit).lower()}
[[pins]]
name = "flashinfer-python"
version = "0.6.18"
sha256 = "{"d" * 64}"
[flashinfer]
aot = true
jit_cache = {{ path = "{path}", sha256 = "{sha256_file(path)}" }}
""")
    return load_recipe(recipe)


def _native(path: Path) -> list[str]:
    return ["sm_121a"]


def _readers(monkeypatch: pytest.MonkeyPatch, *, stubs: Sequence[str] = (),
             interrupt: bool = False, ptx_only: bool = False) -> None:
    """cuobjdump as a library of one native kernel (``ptx_only``: one kernel of PTX only)
    and ``stubs`` reads; or a Ctrl-C."""
    from sparkbuild.toolchain.sass import FunctionFacts

    def functions(path: Path) -> list[FunctionFacts]:
        if interrupt:
            raise KeyboardInterrupt
        return [FunctionFacts(name, "sm_121a", 4, 0, True, True) for name in stubs]

    def kernels(path: Path) -> list[KernelCode]:
        if ptx_only:
            return [KernelCode("_Z1kv", (), ("compute_121a",))]
        return [KernelCode(name, ("sm_121a",)) for name in ("_Z1kv", *stubs)]

    monkeypatch.setattr(verify, "_default_lister", _native)
    monkeypatch.setattr(verify, "_default_reader", functions)
    monkeypatch.setattr(verify, "_default_kernels", kernels)


def test_a_wheel_that_passes_is_placed_and_nothing_is_left_beside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _readers(monkeypatch)
    out = tmp_path / "out"
    judged = take_judged_jit_cache(_recipe(tmp_path, JitCache()), tmp_path / "cache", out=out,
                                   offline=True)
    assert judged.error is None and judged.placed
    assert [p.name for p in out.iterdir()] == [WHEEL_NAME]
    assert judged.aot.wheel == out / WHEEL_NAME
    assert judged.to_dict()["wheel"] == str(out / WHEEL_NAME)
    assert list(tmp_path.glob(".out.partial-*")) == []


@pytest.mark.parametrize("out_exists", [True, False])
def test_a_refused_wheel_leaves_out_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out_exists: bool) -> None:
    _readers(monkeypatch, stubs=("_Z4trapv",))
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    judged = take_judged_jit_cache(_recipe(tmp_path, JitCache()), tmp_path / "cache", out=out,
                                   offline=True)
    assert judged.error is not None and not judged.placed
    assert judged.to_dict()["wheel"] is None
    assert "  refused: nothing written to --out" in judged.summary()
    assert str(judged.error.where).endswith(f"dist/{WHEEL_NAME}")
    assert out.is_dir() == out_exists and (not out_exists or list(out.iterdir()) == [])
    assert list(tmp_path.glob(".out.partial-*")) == []


@pytest.mark.parametrize("allow_jit", [False, True])
def test_a_ptx_only_kernel_is_judged_by_the_recipe_s_allow_jit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allow_jit: bool) -> None:
    """As ``wheel`` judges the same jit-cache: PTX only is refused unless ``allow_jit``."""
    _readers(monkeypatch, ptx_only=True)
    judged = take_judged_jit_cache(_recipe(tmp_path, JitCache(), allow_jit=allow_jit),
                                   tmp_path / "cache", out=tmp_path / "out", offline=True)
    assert judged.placed == allow_jit
    assert (judged.error is None) == allow_jit
    if not allow_jit:
        assert judged.error is not None and "PTX" in judged.error.what


def test_an_interrupted_judgement_leaves_nothing(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _readers(monkeypatch, interrupt=True)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt):
        take_judged_jit_cache(_recipe(tmp_path, JitCache()), tmp_path / "cache", out=out,
                              offline=True)
    assert list(out.iterdir()) == [] and list(tmp_path.glob(".out.partial-*")) == []


def test_out_that_is_a_file_or_names_a_directory_in_the_way_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _readers(monkeypatch)
    recipe = _recipe(tmp_path, JitCache())
    (tmp_path / "file").write_text("x")
    with pytest.raises(DestinationError, match="not a directory"):
        take_judged_jit_cache(recipe, tmp_path / "cache", out=tmp_path / "file", offline=True)
    (tmp_path / "out" / WHEEL_NAME).mkdir(parents=True)
    with pytest.raises(DestinationError, match="is not a file"):
        take_judged_jit_cache(recipe, tmp_path / "cache", out=tmp_path / "out", offline=True)
    assert list(tmp_path.glob(".out.partial-*")) == []


def test_what_a_killed_run_left_is_swept_but_not_a_live_ones(tmp_path: Path) -> None:
    dead = tmp_path / ".out.partial-999999999"
    (dead / "sub").mkdir(parents=True)
    live = tmp_path / f".out.partial-{os.getpid()}"
    live.mkdir()
    (tmp_path / ".out.partial-1x").write_text("not a pid")
    assert sweep_partials_beside(tmp_path / "out") == [tmp_path / ".out.partial-1x", dead]
    assert live.is_dir() and not dead.exists()


def test_a_library_that_is_no_elf_is_not_given_to_cuobjdump(tmp_path: Path) -> None:
    def never(path: Path) -> list[KernelCode]:
        raise AssertionError(f"cuobjdump asked of {path.name}")

    for data in (b"", b"text"):
        path = tmp_path / "x.so"
        path.write_bytes(data)
        code = Readers(never, never, never).read(path, with_code=True)  # type: ignore[arg-type]
        assert (code.archs, code.functions, code.kernels) == ((), (), ())


def test_a_library_nothing_can_read_is_a_note(tmp_path: Path) -> None:
    wheel = JitCache(modules={"sampling": library()},
                     tweak={module_member("sampling"): encrypted}).write(tmp_path)
    libraries, notes = gpu_libraries([wheel], ["12.1a"], list_archs=_native,
                                     read_functions=lambda _p: [], read_kernels=lambda _p: [])
    assert libraries == [] and len(notes) == 1
    assert "an encrypted member" in notes[0] and "GPU code not listed" in notes[0]
    with zipfile.ZipFile(wheel) as archive:
        assert archive.getinfo(module_member("sampling")).flag_bits & 0x1
