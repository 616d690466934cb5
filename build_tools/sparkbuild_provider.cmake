# sparkbuild's CMake dependency provider, loaded into every build it runs with
#   -DCMAKE_PROJECT_TOP_LEVEL_INCLUDES=<this file>      (CMake >= 3.24)
#
# CMake calls the provider for each FetchContent_MakeAvailable() dependency that no
# FETCHCONTENT_SOURCE_DIR_<NAME> redirects, with the arguments of its
# FetchContent_Declare() already resolved.  sparkbuild redirects every source it
# vendored, so the provider sees exactly the dependencies sparkbuild's CMake reader
# missed.  It
#
#  * appends one line per such dependency to $ENV{SPARKBUILD_FETCH_LOG}:
#      <name> TAB <KEY> TAB <value> [TAB <value>...] [TAB <KEY> ...]
#    so that, after an online build, sparkbuild vendors what CMake itself fetched;
#  * when $ENV{SPARKBUILD_OFFLINE} is set, stops the configure -- before anything
#    compiles -- naming the dependency, if it would be downloaded (a GIT_REPOSITORY or
#    URL).
#
# It never provides a dependency itself: FetchContent goes on as usual (with the
# FETCHCONTENT_SOURCE_DIR_<NAME> and FETCHCONTENT_FULLY_DISCONNECTED sparkbuild sets).
# FetchContent_Populate() with the full signature does not go through providers; vLLM's
# calls of that kind are redirected through their *_SRC_DIR variables instead.

if(CMAKE_VERSION VERSION_LESS 3.24)
  message(WARNING "sparkbuild: CMake ${CMAKE_VERSION} has no dependency providers (3.24+); "
                  "FetchContent calls are not recorded")
  return()
endif()

# A function, not a macro: it provides nothing, so nothing must reach the caller's scope.
function(sparkbuild_provide_dependency method dep_name)
  set(SPARKBUILD_FETCH_KEYWORDS
    GIT_REPOSITORY GIT_TAG GIT_SHALLOW GIT_PROGRESS GIT_SUBMODULES GIT_SUBMODULES_RECURSE
    GIT_CONFIG GIT_REMOTE_NAME GIT_REMOTE_UPDATE_STRATEGY URL URL_HASH URL_MD5 DOWNLOAD_NAME
    DOWNLOAD_NO_EXTRACT DOWNLOAD_EXTRACT_TIMESTAMP SOURCE_DIR BINARY_DIR SUBBUILD_DIR
    SOURCE_SUBDIR CONFIGURE_COMMAND BUILD_COMMAND INSTALL_COMMAND TEST_COMMAND PATCH_COMMAND
    UPDATE_COMMAND UPDATE_DISCONNECTED EXCLUDE_FROM_ALL SYSTEM OVERRIDE_FIND_PACKAGE
    FIND_PACKAGE_ARGS TLS_VERIFY TLS_CAINFO HTTP_HEADER NETRC INACTIVITY_TIMEOUT TIMEOUT
    SVN_REPOSITORY HG_REPOSITORY CVS_REPOSITORY LOG_DOWNLOAD QUIET)
  set(SPARKBUILD_RECORDED_KEYWORDS
    GIT_REPOSITORY GIT_TAG URL URL_HASH SOURCE_DIR SOURCE_SUBDIR GIT_SUBMODULES)
  string(TOUPPER "${dep_name}" _sb_upper)
  set(_sb_args "${ARGN}")
  set(_sb_line "${dep_name}")
  set(_sb_fetches FALSE)
  set(_sb_recording FALSE)
  set(_sb_what "")
  foreach(_sb_arg IN LISTS _sb_args)
    list(FIND SPARKBUILD_FETCH_KEYWORDS "${_sb_arg}" _sb_keyword)
    list(FIND SPARKBUILD_RECORDED_KEYWORDS "${_sb_arg}" _sb_recorded)
    if(_sb_keyword GREATER -1)
      set(_sb_recording FALSE)
      set(_sb_current "${_sb_arg}")
      if(_sb_recorded GREATER -1)
        set(_sb_recording TRUE)
        string(APPEND _sb_line "\t${_sb_arg}")
      endif()
      if(_sb_arg MATCHES "^(GIT_REPOSITORY|URL|SVN_REPOSITORY|HG_REPOSITORY|CVS_REPOSITORY)$")
        set(_sb_fetches TRUE)
      endif()
    elseif(_sb_recording)
      string(REPLACE "\t" " " _sb_value "${_sb_arg}")
      string(REPLACE "\n" " " _sb_value "${_sb_value}")
      string(APPEND _sb_line "\t${_sb_value}")
      if(_sb_current MATCHES "^(GIT_REPOSITORY|GIT_TAG|URL)$")
        string(APPEND _sb_what " ${_sb_current} ${_sb_value}")
      endif()
    endif()
  endforeach()
  if(DEFINED ENV{SPARKBUILD_FETCH_LOG})
    file(APPEND "$ENV{SPARKBUILD_FETCH_LOG}" "${_sb_line}\n")
  endif()
  if(DEFINED ENV{SPARKBUILD_OFFLINE} AND _sb_fetches AND NOT FETCHCONTENT_SOURCE_DIR_${_sb_upper})
    message(FATAL_ERROR
      "sparkbuild: the offline build needs FetchContent dependency '${dep_name}' "
      "(${_sb_what} ), which is not in the sparkbuild cache. Run the build once "
      "online, or `sparkbuild vendor`, to store it.")
  endif()
endfunction()

cmake_language(
  SET_DEPENDENCY_PROVIDER sparkbuild_provide_dependency
  SUPPORTED_METHODS FETCHCONTENT_MAKEAVAILABLE_SERIAL
)

# The heavy units' job pool (sparkbuild.jobplan.pools): declared here, next to the tree's
# own pools (vLLM's setup.py passes CMAKE_JOB_POOLS=compile=MAX_JOBS), with the depth
# doctor chose in $ENV{SPARKBUILD_HEAVY_POOL_DEPTH}.  Which units go into it is decided
# after CMake wrote build.ninja, by sparkbuild's ninja (CMAKE_MAKE_PROGRAM): CMake has no
# per-source pool, and vLLM's kernels are all sources of one target.
if(DEFINED ENV{SPARKBUILD_HEAVY_POOL_DEPTH})
  get_property(_sb_pools GLOBAL PROPERTY JOB_POOLS)
  if(NOT _sb_pools AND DEFINED CMAKE_JOB_POOLS)
    set(_sb_pools "${CMAKE_JOB_POOLS}")
  endif()
  list(FILTER _sb_pools EXCLUDE REGEX "^sparkbuild_heavy=")
  list(APPEND _sb_pools "sparkbuild_heavy=$ENV{SPARKBUILD_HEAVY_POOL_DEPTH}")
  set_property(GLOBAL PROPERTY JOB_POOLS "${_sb_pools}")
  message(STATUS "sparkbuild: job pools ${_sb_pools}")
endif()
