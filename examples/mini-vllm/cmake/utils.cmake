# Helpers of the mini-vllm example, written for sparkbuild.
#
# The names and argument orders match the ones vLLM's own build uses (so that
# sparkbuild's patch series, which evaluates arch lists with the tree's own
# `cuda_archs_loose_intersection`, treats this project the way it treats vLLM),
# but the code is this project's own.

# IN_LIST below; set here so the functions work under `cmake -P` scripts too.
cmake_policy(SET CMP0057 NEW)

# Turn TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX", "12.1", "8.6 9.0") into a sorted,
# de-duplicated CMake list of "major.minor[suffix]" entries.
function(torch_arch_list_to_cuda_archs OUT_VAR ARCH_LIST)
  string(REPLACE " " ";" _entries "${ARCH_LIST}")
  set(_archs)
  foreach(_entry IN LISTS _entries)
    string(STRIP "${_entry}" _entry)
    if(_entry STREQUAL "")
      continue()
    endif()
    if(NOT _entry MATCHES "^[0-9]+\\.[0-9]+[af]?(\\+PTX)?$")
      message(FATAL_ERROR "TORCH_CUDA_ARCH_LIST entry '${_entry}' is not of the form 12.1, 12.1a or 9.0+PTX")
    endif()
    list(APPEND _archs "${_entry}")
  endforeach()
  list(REMOVE_DUPLICATES _archs)
  list(SORT _archs COMPARE NATURAL ORDER ASCENDING)
  set(${OUT_VAR} "${_archs}" PARENT_SCOPE)
endfunction()

# The major version of an arch string: "12.1a" -> "12".
function(_arch_major OUT_VAR ARCH)
  string(REGEX REPLACE "^([0-9]+)\\..*$" "\\1" _major "${ARCH}")
  set(${OUT_VAR} "${_major}" PARENT_SCOPE)
endfunction()

# OUT_CUDA_ARCHS = the architectures to compile a kernel for, given the archs the
# kernel supports (SRC_CUDA_ARCHS) and the archs the user asked for (TGT_CUDA_ARCHS).
# A suffix says what the code may use: "a" the arch-specific features of exactly that
# GPU, "f" the family-specific features (the code then runs on every GPU of the family
# at that minor or later), none the portable subset.
#
#  - "X.Ya"/"X.Yf" and a plain target "X.Y": the source entry, as written.
#  - "X.Ya"/"X.Yf" and a target "X.Ya" or "X.Yf": the target's spelling.
#  - "X.Yf" and any other remaining target of major X, minor >= Y: the target's spelling
#    (the target asks for that exact GPU; the family code covers it).
#  - a suffixed target "X.Ys" and a plain source "X.Y": the target's spelling.
#  - otherwise each target gets the highest plain source arch that is not newer and has
#    the same major (SASS runs only within one major): a "loose" match, so a target 12.1
#    is served by a 12.0 stand-in when the list has no 12.1.
#  - "X.Y+PTX" may also serve newer majors, and keeps its +PTX in the result.
function(cuda_archs_loose_intersection OUT_CUDA_ARCHS SRC_CUDA_ARCHS TGT_CUDA_ARCHS)
  set(_targets ${TGT_CUDA_ARCHS})
  set(_plain)
  set(_suffixed)
  set(_ptx)
  set(_result)
  foreach(_src IN LISTS SRC_CUDA_ARCHS)
    if(_src STREQUAL "")
      continue()
    elseif(_src MATCHES "^(.*)\\+PTX$")
      list(APPEND _ptx "${CMAKE_MATCH_1}")
      list(APPEND _plain "${CMAKE_MATCH_1}")
    elseif(_src MATCHES "[af]$")
      list(APPEND _suffixed "${_src}")
    else()
      list(APPEND _plain "${_src}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _plain)
  list(SORT _plain COMPARE NATURAL ORDER ASCENDING)

  # Suffixed sources: the same arch first (plain target, then suffixed target).
  set(_family)
  foreach(_src IN LISTS _suffixed)
    string(REGEX REPLACE "[af]$" "" _base "${_src}")
    if("${_base}" IN_LIST _targets)
      list(APPEND _result "${_src}")
      list(REMOVE_ITEM _targets "${_base}")
    elseif("${_base}a" IN_LIST _targets)
      list(APPEND _result "${_base}a")
      list(REMOVE_ITEM _targets "${_base}a")
    elseif("${_base}f" IN_LIST _targets)
      list(APPEND _result "${_base}f")
      list(REMOVE_ITEM _targets "${_base}f")
    elseif(_src MATCHES "f$")
      list(APPEND _family "${_base}")
    endif()
  endforeach()
  # Family sources: any remaining target of the family, at the same minor or later.
  foreach(_fam IN LISTS _family)
    _arch_major(_fam_major "${_fam}")
    foreach(_tgt IN LISTS _targets)
      string(REGEX REPLACE "(\\+PTX|[af])$" "" _tgt_base "${_tgt}")
      _arch_major(_tgt_major "${_tgt_base}")
      if(_tgt_major STREQUAL _fam_major AND _fam VERSION_LESS_EQUAL _tgt_base)
        list(APPEND _result "${_tgt}")
        list(REMOVE_ITEM _targets "${_tgt}")
        break()
      endif()
    endforeach()
  endforeach()

  foreach(_tgt IN LISTS _targets)
    string(REGEX REPLACE "(\\+PTX|[af])$" "" _tgt_base "${_tgt}")
    if(_tgt MATCHES "[af]$" AND "${_tgt_base}" IN_LIST _plain)
      list(APPEND _result "${_tgt}")
      continue()
    endif()
    _arch_major(_tgt_major "${_tgt_base}")
    set(_best)
    foreach(_src IN LISTS _plain)
      if(_src VERSION_GREATER _tgt_base)
        break()
      endif()
      _arch_major(_src_major "${_src}")
      if(_src_major STREQUAL _tgt_major OR _src IN_LIST _ptx)
        set(_best "${_src}")
      endif()
    endforeach()
    if(_best)
      if(_best IN_LIST _ptx)
        list(APPEND _result "${_best}+PTX")
      else()
        list(APPEND _result "${_best}")
      endif()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _result)
  set(${OUT_CUDA_ARCHS} "${_result}" PARENT_SCOPE)
endfunction()

# Add -gencode flags for CUDA_ARCHS to each CUDA source in SRCS (per file, so that
# a kernel is compiled only for the archs it supports, as vLLM does).
#   set_gencode_flags_for_srcs(SRCS <files> CUDA_ARCHS <archs>)
function(set_gencode_flags_for_srcs)
  cmake_parse_arguments(arg "" "" "SRCS;CUDA_ARCHS" ${ARGN})
  set(_flags)
  foreach(_arch IN LISTS arg_CUDA_ARCHS)
    set(_with_ptx FALSE)
    if(_arch MATCHES "^(.*)\\+PTX$")
      set(_arch "${CMAKE_MATCH_1}")
      set(_with_ptx TRUE)
    endif()
    string(REPLACE "." "" _sm "${_arch}")
    list(APPEND _flags "-gencode=arch=compute_${_sm},code=sm_${_sm}")
    if(_with_ptx)
      list(APPEND _flags "-gencode=arch=compute_${_sm},code=compute_${_sm}")
    endif()
  endforeach()
  foreach(_src IN LISTS arg_SRCS)
    set_property(SOURCE "${_src}" APPEND PROPERTY COMPILE_OPTIONS ${_flags})
  endforeach()
endfunction()
