"""CUTLASS MoeFCGemm kernels' mangled names, as fused_moe_120.so holds them: made by g++ from
a replica of the class templates' shapes (the Itanium ABI mangles a host and a device
function alike), and the name c++filt reads one as.

``cutlass::Kernel<MoeFCGemm<Mma, Epilogue, Swizzle, cutlass::arch::SmNN, Mode>>(...::Params)``
with Mma a ``MmaPipelined`` of half_t tiles: :data:`PREFIX` is the name up to the arch tag.
In :data:`SM75_INSIDE_PREFIX` the Mma's own arguments name ``cutlass::arch::Sm75`` first, so
the arch tag of the kernel is the substitution ``SZ_`` (not the text ``Sm75``).
"""

from __future__ import annotations

PREFIX = (
    "_ZN7cutlass6KernelINS_4gemm6kernel9MoeFCGemmINS1_11threadblock12MmaPipelinedINS1_9GemmSh"
    "apeILi128ELi128ELi64EEENS_9transform11threadblock22PredicatedTileIteratorINS_11MatrixSha"
    "peILi128ELi64EEENS_6half_tENS_6layout8RowMajorELi1ENSB_ILi64ELi128EEELi8ELb0ENSE_9NoPerm"
    "uteEEESI_fSF_NS4_9MmaPolicyINS1_4warp11MmaTensorOpINS6_ILi64ELi64ELi64EEESD_SF_SD_NSE_11"
    "ColumnMajorEfSF_NSK_17MmaTensorOpPolicyINS_4arch3MmaINS6_ILi16ELi8ELi8EEELi32ESD_SF_SD_S"
    "N_fSF_NSP_13OpMultiplyAddEEENSB_ILi1ELi1EEEEELi1ELb0EbEENSB_ILi0ELi0EEESX_Li1EEENS_21Num"
    "ericArrayConverterISD_SD_Li8ELNS_15FloatRoundStyleE2EEES11_bEENS_8epilogue6thread17Linea"
    "rCombinationISD_Li8EffLNS14_9ScaleType4KindE0ELS10_2ESD_EENS4_37GemmBatchedIdentityThrea"
    "dblockSwizzleE")

SM75_INSIDE_PREFIX = (
    "_ZN7cutlass6KernelINS_4gemm6kernel9MoeFCGemmINS1_11threadblock12MmaPipelinedINS1_9GemmSh"
    "apeILi128ELi128ELi64EEENS_9transform11threadblock22PredicatedTileIteratorINS_11MatrixSha"
    "peILi128ELi64EEENS_6half_tENS_6layout8RowMajorELi1ENSB_ILi64ELi128EEELi8ELb0ENSE_9NoPerm"
    "uteEEESI_fSF_NS4_9MmaPolicyINS1_4warp11MmaTensorOpINS6_ILi64ELi64ELi64EEESD_SF_SD_NSE_11"
    "ColumnMajorEfSF_NSK_17MmaTensorOpPolicyINS_4arch3MmaINS6_ILi16ELi8ELi8EEELi32ESD_SF_SD_S"
    "N_fSF_NSP_13OpMultiplyAddEEENSB_ILi1ELi1EEEEELi1ELb0EbEENSB_ILi0ELi0EEESX_Li1EEENSP_4Sm7"
    "5ESZ_bEENS_8epilogue6thread17LinearCombinationISD_Li8EffLNS12_9ScaleType4KindE0ELNS_15Fl"
    "oatRoundStyleE2ESD_EENS4_37GemmBatchedIdentityThreadblockSwizzleE")



def moe_fc_gemm(arch_tag: str, *, mode: int = 0, prefix: str = PREFIX,
                arch: str | None = None) -> str:
    """The kernel for ``cutlass::arch::<arch_tag>`` (``arch``: the arch argument as mangled,
    given whole), GroupScheduleMode ``mode``."""
    spelled = arch if arch is not None else f"NSP_{len(arch_tag)}{arch_tag}E"
    return f"{prefix}{spelled}LNS2_17GroupScheduleModeE{mode}EEEEEvNT_6ParamsE"


SM75 = moe_fc_gemm("Sm75")
SM75_DEMANGLED = (
    "void cutlass::Kernel<cutlass::gemm::kernel::MoeFCGemm<cutlass::gemm::threadblock::MmaPip"
    "elined<cutlass::gemm::GemmShape<128, 128, 64>, cutlass::transform::threadblock::Predicat"
    "edTileIterator<cutlass::MatrixShape<128, 64>, cutlass::half_t, cutlass::layout::RowMajor"
    ", 1, cutlass::MatrixShape<64, 128>, 8, false, cutlass::layout::NoPermute>, cutlass::tran"
    "sform::threadblock::PredicatedTileIterator<cutlass::MatrixShape<128, 64>, cutlass::half_"
    "t, cutlass::layout::RowMajor, 1, cutlass::MatrixShape<64, 128>, 8, false, cutlass::layou"
    "t::NoPermute>, float, cutlass::layout::RowMajor, cutlass::gemm::threadblock::MmaPolicy<c"
    "utlass::gemm::warp::MmaTensorOp<cutlass::gemm::GemmShape<64, 64, 64>, cutlass::half_t, c"
    "utlass::layout::RowMajor, cutlass::half_t, cutlass::layout::ColumnMajor, float, cutlass:"
    ":layout::RowMajor, cutlass::gemm::warp::MmaTensorOpPolicy<cutlass::arch::Mma<cutlass::ge"
    "mm::GemmShape<16, 8, 8>, 32, cutlass::half_t, cutlass::layout::RowMajor, cutlass::half_t"
    ", cutlass::layout::ColumnMajor, float, cutlass::layout::RowMajor, cutlass::arch::OpMulti"
    "plyAdd>, cutlass::MatrixShape<1, 1> >, 1, false, bool>, cutlass::MatrixShape<0, 0>, cutl"
    "ass::MatrixShape<0, 0>, 1>, cutlass::NumericArrayConverter<cutlass::half_t, cutlass::hal"
    "f_t, 8, (cutlass::FloatRoundStyle)2>, cutlass::NumericArrayConverter<cutlass::half_t, cu"
    "tlass::half_t, 8, (cutlass::FloatRoundStyle)2>, bool>, cutlass::epilogue::thread::Linear"
    "Combination<cutlass::half_t, 8, float, float, (cutlass::epilogue::thread::ScaleType::Kin"
    "d)0, (cutlass::FloatRoundStyle)2, cutlass::half_t>, cutlass::gemm::threadblock::GemmBatc"
    "hedIdentityThreadblockSwizzle, cutlass::arch::Sm75, (cutlass::gemm::kernel::GroupSchedul"
    "eMode)0> >(cutlass::gemm::kernel::MoeFCGemm<cutlass::gemm::threadblock::MmaPipelined<cut"
    "lass::gemm::GemmShape<128, 128, 64>, cutlass::transform::threadblock::PredicatedTileIter"
    "ator<cutlass::MatrixShape<128, 64>, cutlass::half_t, cutlass::layout::RowMajor, 1, cutla"
    "ss::MatrixShape<64, 128>, 8, false, cutlass::layout::NoPermute>, cutlass::transform::thr"
    "eadblock::PredicatedTileIterator<cutlass::MatrixShape<128, 64>, cutlass::half_t, cutlass"
    "::layout::RowMajor, 1, cutlass::MatrixShape<64, 128>, 8, false, cutlass::layout::NoPermu"
    "te>, float, cutlass::layout::RowMajor, cutlass::gemm::threadblock::MmaPolicy<cutlass::ge"
    "mm::warp::MmaTensorOp<cutlass::gemm::GemmShape<64, 64, 64>, cutlass::half_t, cutlass::la"
    "yout::RowMajor, cutlass::half_t, cutlass::layout::ColumnMajor, float, cutlass::layout::R"
    "owMajor, cutlass::gemm::warp::MmaTensorOpPolicy<cutlass::arch::Mma<cutlass::gemm::GemmSh"
    "ape<16, 8, 8>, 32, cutlass::half_t, cutlass::layout::RowMajor, cutlass::half_t, cutlass:"
    ":layout::ColumnMajor, float, cutlass::layout::RowMajor, cutlass::arch::OpMultiplyAdd>, c"
    "utlass::MatrixShape<1, 1> >, 1, false, bool>, cutlass::MatrixShape<0, 0>, cutlass::Matri"
    "xShape<0, 0>, 1>, cutlass::NumericArrayConverter<cutlass::half_t, cutlass::half_t, 8, (c"
    "utlass::FloatRoundStyle)2>, cutlass::NumericArrayConverter<cutlass::half_t, cutlass::hal"
    "f_t, 8, (cutlass::FloatRoundStyle)2>, bool>, cutlass::epilogue::thread::LinearCombinatio"
    "n<cutlass::half_t, 8, float, float, (cutlass::epilogue::thread::ScaleType::Kind)0, (cutl"
    "ass::FloatRoundStyle)2, cutlass::half_t>, cutlass::gemm::threadblock::GemmBatchedIdentit"
    "yThreadblockSwizzle, cutlass::arch::Sm75, (cutlass::gemm::kernel::GroupScheduleMode)0>::"
    "Params)")
"""c++filt's reading of :data:`SM75`."""

SM75_AS_SUBSTITUTION = moe_fc_gemm("Sm75", prefix=SM75_INSIDE_PREFIX, arch="SZ_")
"""The Sm75 kernel whose arch tag is the substitution of an earlier ``cutlass::arch::Sm75``."""
SM80_AFTER_AN_SM75_MMA = moe_fc_gemm("Sm80", prefix=SM75_INSIDE_PREFIX)
"""An Sm80 kernel whose Mma names ``cutlass::arch::Sm75``: the text ``4Sm75E`` is in it."""
