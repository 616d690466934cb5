"""A generated dependency shaped like vllm-flash-attn's CMake, shared by the arch-edit tests
(test_arch_arithmetic: the edit's plan on it; test_vendor_patched: vendored and patched).

Its own, older ``cmake/utils.cmake`` (:data:`OLD_HELPER`: no suffix rules; per target,
the highest listed arch at or below it of its major, or a ``+PTX`` one),
``CUDA_SUPPORTED_ARCHS`` grown by ``list(APPEND)`` per CUDA branch, and ``FA2_ARCHS
"8.0+PTX"`` (:data:`DEPENDENCY`, its ``CMakeLists.txt``).  Written for the tests, not
copied from flash-attention.
"""

from __future__ import annotations

OLD_HELPER = r"""
function(cuda_archs_loose_intersection OUT_CUDA_ARCHS SRC_CUDA_ARCHS TGT_CUDA_ARCHS)
  set(_SRC ${SRC_CUDA_ARCHS})
  set(_PTX)
  foreach(_arch ${SRC_CUDA_ARCHS})
    if(_arch MATCHES "\\+PTX$")
      string(REPLACE "+PTX" "" _base "${_arch}")
      list(APPEND _PTX "${_base}")
      list(REMOVE_ITEM _SRC "${_arch}")
      list(APPEND _SRC "${_base}")
    endif()
  endforeach()
  list(SORT _SRC COMPARE NATURAL ORDER ASCENDING)
  set(_OUT)
  foreach(_tgt ${TGT_CUDA_ARCHS})
    set(_pick)
    string(REGEX REPLACE "^([0-9]+)\\..*$" "\\1" _tmaj "${_tgt}")
    foreach(_src ${_SRC})
      string(REGEX REPLACE "^([0-9]+)\\..*$" "\\1" _smaj "${_src}")
      if(_src VERSION_LESS_EQUAL _tgt)
        if(_src IN_LIST _PTX OR _smaj STREQUAL _tmaj)
          set(_pick "${_src}")
        endif()
      endif()
    endforeach()
    if(_pick)
      if(_pick IN_LIST _PTX)
        list(APPEND _OUT "${_pick}+PTX")
      else()
        list(APPEND _OUT "${_pick}")
      endif()
    endif()
  endforeach()
  set(${OUT_CUDA_ARCHS} ${_OUT} PARENT_SCOPE)
endfunction()
"""
DEPENDENCY = """\
cmake_minimum_required(VERSION 3.20)
project(flashlike LANGUAGES CXX)
include(${CMAKE_CURRENT_LIST_DIR}/cmake/utils.cmake)
set(CUDA_SUPPORTED_ARCHS "8.0;8.6;8.9;9.0")
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8)
  list(APPEND CUDA_SUPPORTED_ARCHS "10.0" "11.0" "12.0")
endif()
cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")
message(STATUS "CUDA supported target architectures: ${CUDA_ARCHS}")
cuda_archs_loose_intersection(FA2_ARCHS "8.0+PTX" "${CUDA_ARCHS}")
message(STATUS "FA2_ARCHS: ${FA2_ARCHS}")
cuda_archs_loose_intersection(FA3_ARCHS "9.0a;" "${CUDA_ARCHS}")
"""
