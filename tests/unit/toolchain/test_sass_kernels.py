"""Coverage per kernel, read from recorded ``cuobjdump -symbols`` and ``-ptx`` text.

The texts are cuobjdump 13.0's output for libraries compiled with nvcc 13.0 (shortened
only where the PTX bodies and trailing blanks were): one .cu built for sm_121a, another built
``-gencode arch=compute_80,code=compute_80``, linked into one .so (the sm_75 ELF with no
symbols is the stub nvcc's device linking adds); and a .cu built for sm_120f, compute_121a PTX
and sm_90 + compute_90 PTX.  No process is started.
"""

from __future__ import annotations

import pytest

from sparkbuild.toolchain import sass

MIXED_SYMBOLS = """
Fatbin elf code:
================
arch = sm_75
code version = [1,8]
host = linux
compile_size = 64bit

symbols:

Fatbin elf code:
================
arch = sm_121a
code version = [1,8]
host = linux
compile_size = 64bit

symbols:
OBJECT        WEAK    DEFAULT    -                                 U  .nv.reservedSmem.offset0
NOTYPE        WEAK    DEFAULT    RESERVED_SHARED   __nv_reservedSMEM_offset_0_alias
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z6tmpl_kIfEvPT_
FUNC          GLOBAL  DEFAULT    ENTRY                                native_k

Fatbin ptx code:
================
arch = sm_80
code version = [9,0]
host = linux
compile_size = 64bit
compressed
ptxasOptions =
"""

MIXED_PTX = """
Fatbin elf code:
================
arch = sm_75
code version = [1,8]
host = linux
compile_size = 64bit

Fatbin elf code:
================
arch = sm_121a
code version = [1,8]
host = linux
compile_size = 64bit

Fatbin ptx code:
================
arch = sm_80
code version = [9,0]
host = linux
compile_size = 64bit
compressed
ptxasOptions =

.version 9.0
.target sm_80
.address_size 64

.visible .entry _ZN2ns5ptx_kEPfi(
.param .u64 _ZN2ns5ptx_kEPfi_param_0,
.param .u32 _ZN2ns5ptx_kEPfi_param_1
)
{
ret;

}
"""

FAMILY_SYMBOLS = """
Fatbin elf code:
================
arch = sm_120f
code version = [1,8]
host = linux
compile_size = 64bit

symbols:
FUNC          LOCAL   DEFAULT    ENTRY                                _Z8static_kPf
OBJECT        WEAK    DEFAULT    -                                 U  .nv.reservedSmem.offset0
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z5fam_kPf

Fatbin ptx code:
================
arch = sm_121a
code version = [9,0]

Fatbin elf code:
================
arch = sm_90
code version = [1,8]

symbols:
FUNC          LOCAL   DEFAULT    ENTRY                                _Z8static_kPf
FUNC          GLOBAL  DEFAULT    ENTRY                                _Z5fam_kPf
FUNC          GLOBAL  DEFAULT    -                                    _Z9device_fnv
"""

FAMILY_PTX = """
Fatbin ptx code:
================
arch = sm_121a
code version = [9,0]
compressed
ptxasOptions =

.version 9.0
.target sm_121a
.visible .entry _Z5fam_kPf(
.param .u64 .ptr .align 1 _Z5fam_kPf_param_0
)
{
ret;
}
.visible .func _Z9device_fnv()
.entry _Z8static_kPf(
.param .u64 .ptr .align 1 _Z8static_kPf_param_0
)
"""


def kernels(symbols: str, ptx: str) -> list[sass.KernelCode]:
    return sass.kernel_table(sass.parse_elf_entries(symbols), sass.parse_ptx_entries(ptx))


def test_entries_of_elf_symbol_tables_and_ptx_are_the_kernels() -> None:
    assert sass.parse_elf_entries(MIXED_SYMBOLS) == {"sm_121a": {"_Z6tmpl_kIfEvPT_",
                                                                 "native_k"}}
    assert sass.parse_ptx_entries(MIXED_PTX) == {"compute_80": {"_ZN2ns5ptx_kEPfi"}}
    # a device function (FUNC without ENTRY, `.func`) is no kernel; LOCAL entries are
    assert sass.parse_elf_entries(FAMILY_SYMBOLS)["sm_90"] == {"_Z8static_kPf", "_Z5fam_kPf"}
    assert sass.parse_ptx_entries(FAMILY_PTX) == {"compute_121a": {"_Z5fam_kPf",
                                                                   "_Z8static_kPf"}}


def test_the_elf_headers_are_read_in_order_ptx_sections_left_out() -> None:
    # the archs an extracted cubin loses its family suffix from (sass_library pairs them)
    assert sass.elf_header_archs(FAMILY_SYMBOLS) == ["sm_120f", "sm_90"]
    assert sass.elf_header_archs(MIXED_SYMBOLS) == ["sm_75", "sm_121a"]


def test_one_library_with_a_native_and_a_ptx_only_kernel() -> None:
    found = sass.coverage(kernels(MIXED_SYMBOLS, MIXED_PTX), "12.1a")
    assert found.counts() == {"native": 2, "ptx": 1, "none": 0}
    assert [(k.name, k.kind, k.code) for k in found.not_native] == [
        ("_ZN2ns5ptx_kEPfi", "ptx", "compute_80")]
    assert found.describe() == "12.1a: 2 native, 1 ptx (compute_80), 0 none"
    assert found.to_dict()["not_native"] == [
        {"kernel": "_ZN2ns5ptx_kEPfi", "coverage": "ptx", "ptx_arch": "compute_80"}]


def test_the_same_library_at_another_target() -> None:
    # at 9.0 the sm_121a code does not load and the compute_80 PTX JITs: all but one none
    found = sass.coverage(kernels(MIXED_SYMBOLS, MIXED_PTX), "9.0")
    assert found.counts() == {"native": 0, "ptx": 1, "none": 2}
    # at 7.5 not even the PTX of compute_80 can be JIT-compiled
    assert sass.coverage(kernels(MIXED_SYMBOLS, MIXED_PTX), "7.5").counts()["none"] == 3


def test_family_sass_is_native_and_arch_specific_ptx_only_jits_on_its_gpu() -> None:
    table = kernels(FAMILY_SYMBOLS, FAMILY_PTX)
    assert [(k.name, k.sass, k.ptx) for k in table] == [
        ("_Z5fam_kPf", ("sm_90", "sm_120f"), ("compute_121a",)),
        ("_Z8static_kPf", ("sm_90", "sm_120f"), ("compute_121a",))]
    spark = sass.coverage(table, "12.1a")
    assert {(k.kind, k.code) for k in spark.kernels} == {("native", "sm_120f")}
    # 12.0: the family SASS loads; 10.0: neither the sm_120f SASS nor the 121a PTX
    assert sass.coverage(table, "12.0").counts()["native"] == 2
    assert sass.coverage(table, "10.0").counts() == {"native": 0, "ptx": 0, "none": 2}


def test_nothing_for_the_target_is_none() -> None:
    table = [sass.KernelCode("_Z8hopper_kPf", ("sm_90a",))]
    (kernel,) = sass.coverage(table, "12.1a").kernels
    assert (kernel.kind, kernel.code) == ("none", None)
    assert kernel.to_dict() == {"kernel": "_Z8hopper_kPf", "coverage": "none"}


@pytest.mark.parametrize(("arch", "target", "jits"), [
    ("compute_80", "12.1a", True), ("compute_120", "12.1a", True),
    ("compute_121", "12.1a", True), ("compute_121a", "12.1a", True),
    ("compute_120a", "12.1a", False), ("compute_90a", "12.1a", False),
    ("compute_120f", "12.1a", True), ("compute_121f", "12.1a", True),
    ("compute_100f", "12.1a", False), ("compute_122", "12.1a", False),
    ("compute_90", "8.9", False), ("compute_80", "8.6", True),
    ("sm_80", "12.1a", True), ("bogus", "12.1a", False)])
def test_which_ptx_the_driver_can_jit_for_a_target(arch: str, target: str, jits: bool) -> None:
    assert sass.jit_runs_on(arch, target) is jits


def test_the_newest_ptx_a_target_can_jit_is_named() -> None:
    kernel = sass.KernelCode("k", ("sm_90a",), ("compute_80", "compute_90", "compute_90a"))
    assert sass.classify_kernel(kernel, "12.1a").code == "compute_90"


def test_no_device_code_and_demangled_names() -> None:
    assert sass.kernel_table(sass.parse_elf_entries(""), sass.parse_ptx_entries("")) == []
    kernel = sass.KernelCode("_ZN2ns5ptx_kEPfi", (), ("compute_80",), "ns::ptx_k(float*, int)")
    named = sass.coverage([kernel], "12.1a")
    assert named.to_dict()["not_native"][0]["demangled"] == "ns::ptx_k(float*, int)"


def test_a_recipe_arch_names_its_target_gpu() -> None:
    assert sass.target_name("8.0+PTX") == "8.0" and sass.target_name("12.1a") == "12.1a"
