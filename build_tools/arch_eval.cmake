# Evaluate CUDA arch lists with a vLLM tree's own cuda_archs_loose_intersection.
#
#   cmake -DUTILS=<tree>/cmake/utils.cmake -DTARGET=12.1 -DLISTS=<file> -P arch_eval.cmake
#
# Which arch a kernel list compiles for is decided by the tree's helper, and that helper
# changed between releases (family "f" suffixes, cross-suffix matching).  sparkbuild asks
# the tree instead of re-implementing it.
#
# LISTS holds one source list per line, "<id>:<entries separated by commas>" (commas,
# because a line read by file(STRINGS) cannot keep its semicolons).  TARGET is the
# target arch list, also comma separated.  For each line this prints, on stderr,
#   sparkbuild-arch-eval <id>:<result entries separated by commas>
cmake_minimum_required(VERSION 3.20)

foreach(_required UTILS TARGET LISTS)
  if(NOT DEFINED ${_required})
    message(FATAL_ERROR "arch_eval.cmake: pass -D${_required}=...")
  endif()
endforeach()

include("${UTILS}")
if(NOT COMMAND cuda_archs_loose_intersection)
  message(FATAL_ERROR "arch_eval.cmake: ${UTILS} defines no cuda_archs_loose_intersection")
endif()

string(REPLACE "," ";" _target "${TARGET}")
file(STRINGS "${LISTS}" _lines)
foreach(_line IN LISTS _lines)
  if(NOT _line MATCHES "^([0-9]+):(.*)$")
    message(FATAL_ERROR "arch_eval.cmake: malformed line '${_line}' in ${LISTS}")
  endif()
  set(_id "${CMAKE_MATCH_1}")
  string(REPLACE "," ";" _source "${CMAKE_MATCH_2}")
  cuda_archs_loose_intersection(_result "${_source}" "${_target}")
  list(JOIN _result "," _joined)
  message(NOTICE "sparkbuild-arch-eval ${_id}:${_joined}")
endforeach()
