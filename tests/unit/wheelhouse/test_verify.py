"""verify: every byte against manifest and lock, and the GPU code of the built wheels."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from sparkbuild.cli import main
from sparkbuild.errors import VerifyError
from sparkbuild.toolchain.sass import KernelCode, SassFunction, arch_digits, parse_sass, runs_on
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseReaders, write_wheelhouse
from support.wheels import NoNetwork, demo_recipe, demo_wheel

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

# Shortened `cuobjdump -sass` of a library: a real FP4 MMA kernel for sm_121a, its
# printf + trap twin for plain sm_121, and a trap for sm_90 (not loaded by a Spark).
def _fatbin(arch: str, code_for: str, name: str, body: str) -> str:
    return (f"Fatbin elf code:\n================\narch = {arch}\n\n\tcode for {code_for}\n"
            f"\n\t\tFunction : {name}\n{body}")


REAL_MMA = """\
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0150*/          OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X R12, R12, R16, RZ, R0, R19, URZ ;
        /*0160*/                   STG.E desc[UR4][R6.64], R12 ;
        /*0170*/                   EXIT ;
        /*0180*/                   BRA 0x180;
"""
TRAP = """\
        /*0000*/                   LDC R1, c[0x0][0x37c] ;
        /*0010*/                   CALL.ABS.NOINC `(vprintf) ;
        /*0020*/                   BPT.TRAP 0x1 ;
        /*0030*/                   EXIT ;
        /*0040*/                   BRA 0x40;
"""
KERNEL = "_ZN9mini_vllm29nvfp4_block_scaled_mma_kernelEPKjS1_S1_S1_Pf"
REAL_121A = _fatbin("sm_121a", "sm_121a", KERNEL, REAL_MMA)
TRAP_121 = _fatbin("sm_121", "sm_121", KERNEL, TRAP)
TRAP_90 = _fatbin("sm_90", "sm_90", "sm120_only_kernel", TRAP)
REAL_120F = _fatbin("sm_120f", "sm_120", KERNEL, REAL_MMA)


def reader(texts: dict[str, str]) -> Callable[[Path], list[SassFunction]]:
    return lambda path: parse_sass(texts.get(path.name, ""))


NO_SASS = reader({})


def lister(archs: dict[str, list[str]]) -> Callable[[Path], list[str]]:
    return lambda path: archs.get(path.name, [])


SM121 = lister({"_C.so": ["sm_121a"]})


def kernel_reader(table: dict[str, list[KernelCode]]) -> Callable[[Path], list[KernelCode]]:
    """A fake ``read_kernels``: the kernels of each library, by file name."""
    return lambda path: table.get(path.name, [])


NATIVE = kernel_reader({"_C.so": [KernelCode(KERNEL, ("sm_121a",))]})
PTX_KERNEL = "_ZN4demo12marlin_gemmEPKvPv"
# The shape of `_vllm_fa2_C` at 12.1a: sm_80 SASS and compute_80 PTX, nothing else.
SM80_PTX = kernel_reader({"_C.so": [KernelCode(PTX_KERNEL, ("sm_80",), ("compute_80",))]})
# The shape of `_C` at 12.1a: sm_121a code for some kernels, PTX only for a Marlin one.
MIXED = kernel_reader({"_C.so": [KernelCode(KERNEL, ("sm_121a",)),
                                 KernelCode(PTX_KERNEL, (), ("compute_80",))]})


def wheelhouse(tmp_path: Path, libraries: tuple[str, ...] = ("demo/_C.so",), *,
               sass: Callable[[Path], list[SassFunction]] = NO_SASS,
               archs: Callable[[Path], list[str]] = SM121,
               out: Path | None = None,
               kernels: Callable[[Path], list[KernelCode]] = NATIVE,
               allow_jit: bool = False) -> Path:
    out = out or tmp_path / "wheelhouse"
    built = demo_wheel(tmp_path, {library: b"\x7fELF" + library.encode()
                                  for library in libraries})
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=demo_recipe(tmp_path, allow_jit=allow_jit),
                         source={"kind": "directory"}, patches=[], built_wheels=[built],
                         build_settings={}, cache_root=tmp_path / "cache", offline=False,
                         platform=None, toolchain={"python": "3.11"}),
        WheelhouseReaders(outside=NoNetwork(), list_archs=archs, read_functions=sass,
                          read_kernels=kernels))
    return out


def test_intact_wheelhouse_passes_and_lists_archs(tmp_path: Path) -> None:
    result = verify_wheelhouse(wheelhouse(tmp_path), list_archs=SM121, read_functions=NO_SASS,
                               read_kernels=NATIVE)
    assert result.error is None, result.summary()
    assert [(lib.library, lib.archs) for lib in result.libraries] == [("demo/_C.so", ("sm_121a",))]
    # the wheel, the lock, two index pages, pylock.toml, sbom.cdx.json and the manifest
    assert result.checked == 7
    assert result.to_dict()["ok"] is True


def test_one_flipped_byte_names_the_wheel(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path)
    wheel = next(out.glob("demo-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.write_bytes(bytes(data))
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS, read_kernels=NATIVE)
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
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS, read_kernels=NATIVE)
    problems = {m.file: m.problem for m in result.mismatches}
    assert problems["simple/demo/index.html"] == "missing"
    assert problems["requirements.lock"].startswith("sha256")
    assert "not listed in manifest.json" in problems["evil-1.0-py3-none-any.whl"]


def test_a_stray_file_with_a_bad_wheel_name_is_a_mismatch_not_a_crash(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path)
    (out / "extra.whl").write_bytes(b"dropped here by hand")
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS, read_kernels=NATIVE)
    problems = {m.file: m.problem for m in result.mismatches}
    assert "not a valid wheel file name" in problems["extra.whl"]
    assert "not listed in manifest.json" in problems["extra.whl"]


def test_a_kernel_with_no_code_for_the_target_fails_naming_it(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, ("demo/_C.so", "demo/_host_only.so"))
    hopper = kernel_reader({"_C.so": [KernelCode(KERNEL, ("sm_121a",)),
                                      KernelCode("_Z8hopper_kPf", ("sm_90a", "sm_120a"))]})
    result = verify_wheelhouse(out, list_archs=lister({"_C.so": ["sm_90", "sm_120a"]}),
                               read_functions=NO_SASS, read_kernels=hopper)
    assert result.mismatches == []
    assert [lib.missing for lib in result.libraries] == [("sm_121",), ()]
    assert result.error is not None and "demo/_C.so" in str(result.error)
    assert "1 kernel(s) with no code for 12.1a: _Z8hopper_kPf" in str(result.error)
    (library, host) = result.to_dict()["libraries"]
    assert library["coverage"] == [{"target": "12.1a", "kernels": 2, "native": 1, "ptx": 0,
                                    "none": 1, "not_native": [
                                        {"kernel": "_Z8hopper_kPf", "coverage": "none"}]}]
    assert host["coverage"] == []
    assert "kernels 12.1a: 1 native, 0 ptx, 1 none" in "\n".join(result.summary())


def test_sm80_sass_with_compute_80_ptx_is_ptx_only_not_missing(tmp_path: Path) -> None:
    # Before: "missing sm_121".  Now: its kernel reaches 12.1a as compute_80 PTX only.
    with pytest.raises(VerifyError, match="PTX only") as caught:
        wheelhouse(tmp_path, archs=lister({"_C.so": ["sm_80"]}), kernels=SM80_PTX,
                   out=tmp_path / "refused")
    assert PTX_KERNEL in caught.value.what
    assert "1 kernel(s) PTX only for 12.1a (compute_80, JIT-compiled at load)" in (
        caught.value.what)
    assert "no code" not in caught.value.what
    assert "allow_jit" in (caught.value.hint or "")


def test_one_ptx_only_kernel_beside_native_ones_fails(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, kernels=NATIVE)
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS,
                               read_kernels=MIXED)
    assert result.error is not None and PTX_KERNEL in str(result.error)
    assert KERNEL not in str(result.error)
    (coverage,) = result.to_dict()["libraries"][0]["coverage"]
    assert (coverage["native"], coverage["ptx"], coverage["none"]) == (1, 1, 0)
    assert coverage["not_native"] == [{"kernel": PTX_KERNEL, "coverage": "ptx",
                                       "ptx_arch": "compute_80"}]


def test_allow_jit_passes_and_the_manifest_lists_the_jit_kernels(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, kernels=MIXED, allow_jit=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["allow_jit"] is True
    assert manifest["jit_kernels"] == [{"wheel": manifest["wheels"][0]["file"],
                                        "library": "demo/_C.so", "target": "12.1a",
                                        "kernel": PTX_KERNEL, "ptx_arch": "compute_80"}]
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS,
                               read_kernels=MIXED)
    assert result.error is None, result.summary()
    assert result.to_dict()["allow_jit"] is True
    # a kernel that is PTX only and not listed as a JIT kernel is named
    manifest["jit_kernels"] = []
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS,
                               read_kernels=MIXED)
    assert [m.problem for m in result.mismatches] == [
        f"demo/_C.so: the PTX-only kernel {PTX_KERNEL} (at 12.1a) is not listed in jit_kernels"]
    # allow_jit does not let a kernel with no code for the target through
    none = kernel_reader({"_C.so": [KernelCode("_Z8hopper_kPf", ("sm_90a",))]})
    with pytest.raises(VerifyError, match=r"no code for 12\.1a"):
        wheelhouse(tmp_path, kernels=none, allow_jit=True, out=tmp_path / "refused")


def test_without_allow_jit_the_manifest_lists_no_jit_kernels(tmp_path: Path) -> None:
    manifest = json.loads((wheelhouse(tmp_path) / "manifest.json").read_text())
    assert manifest["jit_kernels"] == [] and manifest["target"]["allow_jit"] is False


def test_no_gpu_code_anywhere_fails_when_archs_are_targeted(tmp_path: Path) -> None:
    result = verify_wheelhouse(wheelhouse(tmp_path), list_archs=lister({}),
                               read_functions=NO_SASS, read_kernels=NATIVE)
    assert result.error is not None and "no shared library holds GPU machine code" in str(
        result.error)


def test_pure_python_wheel_has_nothing_to_list(tmp_path: Path) -> None:
    result = verify_wheelhouse(wheelhouse(tmp_path, ()), list_archs=SM121,
                               read_functions=NO_SASS, read_kernels=NATIVE)
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
    monkeypatch.setattr("sparkbuild.toolchain.sass.read_sass", NO_SASS)
    monkeypatch.setattr("sparkbuild.toolchain.sass.read_kernels", NATIVE)
    assert main(["verify", str(out), "--json"]) == VerifyError.exit_code
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["error"]["error"] == "VerifyError"
    assert report["mismatches"][0]["file"].startswith("demo-1.0+sm121a.")


def test_arch_spellings() -> None:
    assert arch_digits("12.1") == arch_digits("sm_121") == arch_digits("sm_121a") == "121"
    assert arch_digits("sm_120f") == "120"


@pytest.mark.parametrize(
    ("arch", "target", "runs"),
    [("sm_121a", "12.1a", True), ("sm_121f", "12.1a", True), ("sm_121", "12.1a", True),
     ("sm_120f", "12.1a", True), ("sm_120a", "12.1a", False), ("sm_120", "12.1a", True),
     ("sm_122", "12.1a", False), ("sm_100", "12.1a", False),
     ("sm_122f", "12.1a", False), ("sm_90a", "12.1a", False), ("sm_100f", "10.3a", True),
     ("sm_90a", "9.0a", True)],
)
def test_which_machine_code_a_target_gpu_loads(arch: str, target: str, runs: bool) -> None:
    assert runs_on(arch, target) is runs


def test_block_scaled_mma_is_counted_for_the_target(tmp_path: Path) -> None:
    sass = reader({"_C.so": REAL_121A + TRAP_90})
    out = wheelhouse(tmp_path, sass=sass)
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=sass, read_kernels=NATIVE)
    assert result.error is None, result.summary()
    (library,) = result.to_dict()["libraries"]
    assert library["block_scaled_mma"] == 1 and library["trap_only_kernels"] == []
    assert library["sass_archs"] == ["sm_121a"]  # sm_90's trap is not code a Spark loads
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["libraries"][0]["block_scaled_mma"] == 1
    assert manifest["libraries"][0]["trap_only_kernels"] == []


def test_family_code_of_the_same_major_counts(tmp_path: Path) -> None:
    sass = reader({"_C.so": REAL_120F})
    out = wheelhouse(tmp_path, sass=sass, archs=lister({"_C.so": ["sm_120", "sm_121a"]}))
    result = verify_wheelhouse(out, list_archs=lister({"_C.so": ["sm_120", "sm_121a"]}),
                               read_functions=sass, read_kernels=NATIVE)
    assert result.libraries[0].sass_archs == ("sm_120f",)
    assert result.libraries[0].block_scaled_mma == 1


def test_a_trap_only_kernel_fails_verify_naming_library_and_kernel(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path)
    sass = reader({"_C.so": TRAP_121})
    result = verify_wheelhouse(out, list_archs=lister({"_C.so": ["sm_121"]}), read_functions=sass,
                               read_kernels=NATIVE)
    assert result.mismatches == []
    assert result.libraries[0].trap_only_kernels == (KERNEL,)
    assert result.error is not None
    assert "demo/_C.so" in str(result.error) and KERNEL in str(result.error)
    assert "only trap" in str(result.error)
    assert f"TRAP-ONLY {KERNEL}" in "\n".join(result.summary())


def test_a_kernel_that_prints_and_exits_fails_verify_too(tmp_path: Path) -> None:
    # CUTLASS 4.2's guards: printf + EXIT, no trap -- the GEMM silently does nothing.
    exits = TRAP.replace("BPT.TRAP 0x1", "NOP")
    out = wheelhouse(tmp_path)
    sass = reader({"_C.so": _fatbin("sm_121a", "sm_121a", KERNEL, exits)})
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=sass, read_kernels=NATIVE)
    library = result.libraries[0]
    assert library.trap_only_kernels == () and library.guard_stub_kernels == (KERNEL,)
    assert result.error is not None and KERNEL in str(result.error)
    assert result.to_dict()["libraries"][0]["guard_stub_kernels"] == [KERNEL]
    assert f"GUARD STUB (prints and exits) {KERNEL}" in "\n".join(result.summary())


def test_writing_refuses_a_trap_and_leaves_no_wheelhouse(tmp_path: Path) -> None:
    out = tmp_path / "refused"
    with pytest.raises(VerifyError, match="nvfp4_block_scaled_mma_kernel") as caught:
        wheelhouse(tmp_path, sass=reader({"_C.so": TRAP_121}),
                   archs=lister({"_C.so": ["sm_121"]}), out=out)
    assert "not written" in caught.value.what
    assert not out.exists()
    assert not list(tmp_path.glob(".refused.*"))  # no staging left behind either


def test_writing_refuses_a_library_without_target_code(tmp_path: Path) -> None:
    out = tmp_path / "refused"
    # sm_120a: arch-specific code of another GPU, which a 12.1 GPU does not load.
    stand_in = kernel_reader({"_C.so": [KernelCode(KERNEL, ("sm_120a",))]})
    with pytest.raises(VerifyError, match=f"no code for 12.1a: {KERNEL}"):
        wheelhouse(tmp_path, archs=lister({"_C.so": ["sm_120a"]}), out=out, kernels=stand_in)
    assert not out.exists()


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


def test_a_build_for_another_machine_is_written_and_verify_names_it(tmp_path: Path) -> None:
    """The wheelhouse declares the Spark (Python 3.12); its built wheel is a cp311 x86_64 one:
    `wheel` writes it (its note says so), verify names the wheel."""
    out = tmp_path / "wheelhouse"
    made = demo_wheel(tmp_path, {"demo/_C.so": b"\x7fELF demo/_C.so"})
    built = made.rename(made.with_name("demo-1.0-cp311-cp311-linux_x86_64.whl"))
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=demo_recipe(tmp_path, allow_jit=False),
                         source={"kind": "directory"}, patches=[], built_wheels=[built],
                         build_settings={}, cache_root=tmp_path / "cache", offline=False,
                         platform="manylinux_2_39_aarch64", toolchain={"python": "3.11"}),
        WheelhouseReaders(outside=NoNetwork(), list_archs=SM121, read_functions=NO_SASS,
                          read_kernels=NATIVE))
    result = verify_wheelhouse(out, list_archs=SM121, read_functions=NO_SASS,
                               read_kernels=NATIVE)
    problems = {m.file: m.problem for m in result.mismatches}
    (wheel,) = (name for name in problems if name.startswith("demo-"))
    assert "which does not install on the manifest's target manylinux_2_39_aarch64 Python " \
           "3.12" in problems[wheel]
