"""Parsing cuobjdump output (and the e2m1 selftest's other tools): no process is started."""

from __future__ import annotations

import pytest

from sparkbuild.checks import selftest
from sparkbuild.errors import CommandFailed, ToolchainError
from sparkbuild.toolchain import sass

# Shortened `cuobjdump -sass` of an object built for sm_121a and sm_120f (fatbin sections).
FATBIN_SASS = """
Fatbin elf code:
================
arch = sm_121a
code version = [1,8]
host = linux
compile_size = 64bit

\tcode for sm_121a
\t.target\tsm_121a

\t\tFunction : e2m1_pack8
\t.headerflags\t@"EF_CUDA_SM121 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM121)"
        /*0000*/                   LDC R1, c[0x0][0x37c] ;                  /* 0x0000df00ff017b82 */
                                                                            /* 0x000fe20000000800 */
        /*0080*/               @P0 EXIT ;                                   /* 0x000000000000094d */
                                                                            /* 0x000fea0003800000 */
        /*0110*/                   F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C R14, R15, R14, RZ ;
        /*0120*/                   F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C R12, R13, R12, R14 ;
        /*0150*/                   STG.E desc[UR4][R6.64], R8 ;             /* 0x0000000806007986 */
        /*0160*/                   EXIT ;                                   /* 0x000000000000794d */
        /*0170*/                   BRA 0x170;                               /* 0xfffffffc00fc7947 */
        /*0180*/                   NOP;                                     /* 0x0000000000007918 */
        /*0190*/                   NOP;                                     /* 0x0000000000007918 */
\t\t..........

Fatbin elf code:
================
arch = sm_120f
code version = [1,8]

\tcode for sm_120
\t.target\tsm_120

\t\tFunction : emulated
        /*0000*/                   F2F.F64.F32 R2, R4 ;
        /*0010*/                   DSETP.GTU.AND P0, PT, |R2|, +INF , PT ;
        /*0020*/                   F2I.U64.TRUNC R6, R5 ;
        /*0030*/                   MUFU.RCP64H R9, R3 ;
        /*0040*/              @!P0 BRA 0x10 ;
        /*0050*/                   FMNMX R0, |R5|, 1, !PT ;
        /*0060*/                   DEPBAR.LE SB0, 0x0 ;
        /*0070*/                   EXIT ;
        /*0080*/                   BRA 0x80;
"""

# A lone cubin names its target only in "code for".
CUBIN_SASS = """
\tcode for sm_121
\t.target\tsm_121

\t\tFunction : only
        /*0000*/                   EXIT ;
        /*0010*/                   BRA 0x10;
"""

ARCH_LISTING = """\
ELF file    1: multi.1.sm_121a.cubin
ELF file    2: multi.2.sm_90.cubin
PTX file    1: multi.1.sm_90.ptx
ELF file    3: multi.3.sm_120.cubin
ELF file    4: multi.4.sm_90.cubin
"""


def test_functions_and_their_architectures() -> None:
    functions = sass.parse_sass(FATBIN_SASS)
    assert [(f.name, f.arch) for f in functions] == [
        ("e2m1_pack8", "sm_121a"),
        ("emulated", "sm_120f"),
    ]
    assert sass.parse_sass(CUBIN_SASS)[0].arch == "sm_121"


def test_body_drops_the_closing_self_branch_and_padding() -> None:
    pack8 = sass.parse_sass(FATBIN_SASS)[0]
    assert len(pack8.instructions) == 9
    assert pack8.count == 6
    assert pack8.body[-1].opcode == "EXIT"
    assert pack8.opcode_counts()["F2FP"] == 2


def test_a_branch_elsewhere_is_not_padding() -> None:
    emulated = sass.parse_sass(FATBIN_SASS)[1]
    backward = [i for i in emulated.body if i.opcode == "BRA"]
    assert len(backward) == 1
    assert backward[0].predicate == "!P0"
    assert emulated.count == 8


def test_e2m1_instructions_are_found() -> None:
    pack8, emulated = sass.parse_sass(FATBIN_SASS)
    found = pack8.e2m1_instructions()
    assert [i.mnemonic for i in found] == ["F2FP.SATFINITE.E2M1.F32.PACK_AB_MERGE_C"] * 2
    assert emulated.e2m1_instructions() == []


def test_fp64_instructions_are_found_and_lookalikes_are_not() -> None:
    pack8, emulated = sass.parse_sass(FATBIN_SASS)
    assert [i.opcode for i in emulated.fp64_instructions()] == ["F2F", "DSETP", "MUFU"]
    # F2I.U64 is an integer width, DEPBAR a barrier, FMNMX FP32: none of them FP64.
    assert pack8.fp64_instructions() == []


def test_parse_instruction_splits_predicate_opcode_and_operands() -> None:
    instruction = sass.parse_instruction(0x40, "@!P0 FMNMX R0, |R5|, 1, !PT")
    assert instruction.predicate == "!P0"
    assert instruction.opcode == "FMNMX"
    assert instruction.modifiers == ()
    assert instruction.operands == "R0, |R5|, 1, !PT"
    assert sass.parse_instruction(0, "SHF.L.W.U32.HI R0, R0, 0x4, R9").modifiers == (
        "L",
        "W",
        "U32",
        "HI",
    )


def test_arch_listing() -> None:
    elf, ptx = sass.parse_arch_listing(ARCH_LISTING)
    assert elf == ["sm_90", "sm_120", "sm_121a"]
    assert ptx == ["sm_90"]


def test_arch_listing_of_a_file_without_device_code() -> None:
    text = "cuobjdump info    : File 'x' does not contain device code\n"
    assert sass.parse_arch_listing(text) == ([], [])


# ---- the other tool output the e2m1 selftest reads: nvidia-smi and its checkers ----


def test_gpu_arch_for_a_spark_is_the_family_specific_target() -> None:
    assert selftest.gpu_arch_for("12.1\n") == "sm_121a"
    assert selftest.gpu_arch_for("10.0\n") == "sm_100a"


def test_gpu_arch_for_a_gpu_without_the_instruction_is_the_plain_target() -> None:
    assert selftest.gpu_arch_for("9.0\n") == "sm_90"
    assert selftest.gpu_arch_for("8.9\n8.9\n") == "sm_89"


def test_gpu_arch_for_unreadable_output() -> None:
    with pytest.raises(ToolchainError):
        selftest.gpu_arch_for("No devices were found\n")


def test_parse_check_output_reads_the_last_result_line() -> None:
    output = (
        "threads=2 stride=4096 ftz=1\n"
        "MISMATCH form=x2 lo=0x40200000 (2.5) hi=0xc0200000 (-2.5) expected=0xc4 got=0xc5\n"
        "RESULT ok=0 checked=1048576 mismatches=1 seconds=0.01\n"
    )
    check = selftest.parse_check_output("mutant", output, 0.5, must_fail=True)
    assert not check.ok
    assert check.as_expected
    assert check.values["mismatches"] == "1"
    assert check.mismatches == (output.splitlines()[1],)


def test_parse_check_output_without_a_result_line() -> None:
    with pytest.raises(CommandFailed):
        selftest.parse_check_output("crashed", "Segmentation fault\n", 0.1)


# Shortened `cuobjdump -sass` of two kernels built for plain sm_121 and for sm_121a: the
# guarded one is printf + trap on sm_121 (as nvcc 13.0 emits it), an FP4 MMA on sm_121a.
GUARDED_SASS = """
Fatbin elf code:
================
arch = sm_121
\tcode for sm_121
\t\tFunction : fp4_gemm
        /*0000*/                   LDC R1, c[0x0][0x37c] ;
        /*0010*/                   LDCU UR4, c[0x0][0x388] ;
        /*0020*/                   STL [R1], R2 ;
        /*0030*/                   LDC.64 R8, c[0x4][R0] ;
        /*0040*/                   LEPC R20, 0x60 ;
        /*0050*/                   CALL.ABS.NOINC R8 ;
        /*0060*/                   BPT.TRAP 0x1 ;
        /*0070*/                   BRA 0x70;
\t\tFunction : copy_rows
        /*0000*/                   LDG.E R2, desc[UR4][R2.64] ;
        /*0010*/                   STG.E desc[UR4][R4.64], R2 ;
        /*0020*/              @P0 BPT.TRAP 0x1 ;
        /*0030*/                   EXIT ;

Fatbin elf code:
================
arch = sm_121a
\tcode for sm_121a
\t\tFunction : fp4_gemm
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/         OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X R8, R4, R12, R8, R20, R21, URZ ;
        /*0020*/         OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X R8, R5, R13, R8, R20, R21, URZ ;
        /*0030*/                   HMMA.16816.F32 R8, R4, R12, R8 ;
        /*0040*/                   STG.E desc[UR4][R6.64], R8 ;
        /*0050*/                   EXIT ;
"""


def test_a_printf_and_trap_body_is_trap_only() -> None:
    plain = sass.summarize(sass.parse_sass(GUARDED_SASS), "sm_121")
    assert plain.trap_only_kernels == ("fp4_gemm",)
    assert plain.block_scaled_mma == 0
    assert (plain.functions, plain.instructions) == (2, 11)


def test_a_kernel_that_can_trap_but_does_work_is_not_trap_only() -> None:
    (copy_rows,) = [f for f in sass.parse_sass(GUARDED_SASS) if f.name == "copy_rows"]
    assert not copy_rows.is_trap_only


def test_block_scaled_mma_counts_only_the_scaled_ones_of_the_asked_arch() -> None:
    real = sass.summarize(sass.parse_sass(GUARDED_SASS), "sm_121a")
    assert real.block_scaled_mma == 2
    assert real.trap_only_kernels == ()
    (gemm,) = [f for f in sass.parse_sass(GUARDED_SASS) if f.arch == "sm_121a"]
    assert gemm.e2m1_instructions() == []  # the MMAs name E2M1 but convert nothing
    assert real.to_dict()["block_scaled_mma"] == 2


def test_an_arch_with_no_code_summarizes_to_nothing() -> None:
    nothing = sass.summarize(sass.parse_sass(GUARDED_SASS), "sm_90a")
    assert (nothing.functions, nothing.instructions, nothing.block_scaled_mma) == (0, 0, 0)
