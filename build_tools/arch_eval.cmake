# Evaluate a vLLM tree's CUDA arch lists with the tree's own cuda_archs_loose_intersection.
#
#   cmake -DUTILS=<tree>/cmake/utils.cmake -DREQUESTS=<file.cmake> -P arch_eval.cmake
#
# Which arch a kernel list compiles for is decided by the tree's helper, and that helper
# changed between releases (family "f" suffixes, cross-suffix matching, the target's
# suffix kept); which list applies depends on the CUDA version.  sparkbuild asks the tree
# instead of re-implementing either (sparkbuild.toolchain.arch_eval writes REQUESTS).
#
# REQUESTS is a CMake file of calls to the functions below, every text a bracket argument
# (so that lists keep their semicolons and conditions their ${...}):
#   sparkbuild_version(V)          CMAKE_CUDA_COMPILER_VERSION = V for what follows
#   sparkbuild_condition(ID COND)  prints "sparkbuild-arch cond ID:1" when if(COND) holds
#                                  at that version, else ":0"
#   sparkbuild_target(LIST)        the target archs (TORCH_CUDA_ARCH_LIST without +PTX);
#                                  CUDA_ARCHS starts as the target itself
#   sparkbuild_supported(ID LIST)  CUDA_ARCHS = intersection(LIST, target); prints
#                                  "sparkbuild-arch archs ID:<CUDA_ARCHS, comma separated>"
#   sparkbuild_report_archs(ID)    prints CUDA_ARCHS the same way (no supported list)
#   sparkbuild_list(ID LIST)       prints "sparkbuild-arch list ID:<intersection(LIST,
#                                  CUDA_ARCHS)>"
cmake_minimum_required(VERSION 3.20)

foreach(_required UTILS REQUESTS)
  if(NOT DEFINED ${_required})
    message(FATAL_ERROR "arch_eval.cmake: pass -D${_required}=...")
  endif()
endforeach()

include("${UTILS}")
if(NOT COMMAND cuda_archs_loose_intersection)
  message(FATAL_ERROR "arch_eval.cmake: ${UTILS} defines no cuda_archs_loose_intersection")
endif()

function(_sparkbuild_print KIND ID VALUES)
  list(JOIN VALUES "," _joined)
  message(NOTICE "sparkbuild-arch ${KIND} ${ID}:${_joined}")
endfunction()

function(sparkbuild_version VERSION)
  set(CMAKE_CUDA_COMPILER_VERSION "${VERSION}" PARENT_SCOPE)
endfunction()

function(sparkbuild_condition ID CONDITION)
  cmake_language(EVAL CODE "
    if(${CONDITION})
      set(_holds 1)
    else()
      set(_holds 0)
    endif()")
  _sparkbuild_print(cond "${ID}" "${_holds}")
endfunction()

function(sparkbuild_target LIST)
  set(_sparkbuild_target "${LIST}" PARENT_SCOPE)
  set(_sparkbuild_cuda_archs "${LIST}" PARENT_SCOPE)
endfunction()

function(sparkbuild_supported ID LIST)
  cuda_archs_loose_intersection(_archs "${LIST}" "${_sparkbuild_target}")
  set(_sparkbuild_cuda_archs "${_archs}" PARENT_SCOPE)
  _sparkbuild_print(archs "${ID}" "${_archs}")
endfunction()

function(sparkbuild_report_archs ID)
  _sparkbuild_print(archs "${ID}" "${_sparkbuild_cuda_archs}")
endfunction()

function(sparkbuild_list ID LIST)
  cuda_archs_loose_intersection(_result "${LIST}" "${_sparkbuild_cuda_archs}")
  _sparkbuild_print(list "${ID}" "${_result}")
endfunction()

include("${REQUESTS}")
