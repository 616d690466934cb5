# Part of cmake_recorder.cmake: what find_package() reports.  For Torch, the CUDA flags are
# the ones torch's own CMake computes: the recorder runs torch's share/cmake files --
# torch_cuda_get_nvcc_gencode_flag (Caffe2/public/utils.cmake with FindCUDA's
# select_compute_arch.cmake) and the part of Caffe2/public/cuda.cmake that builds
# CUDA_NVCC_FLAGS and appends them to CMAKE_CUDA_FLAGS (-DONNX_NAMESPACE, the gencode of
# TORCH_CUDA_ARCH_LIST, -Xcudafe --diag_suppress=..., --expt-relaxed-constexpr,
# --expt-extended-lambda).  Torch's exported targets (Caffe2Targets.cmake) are read too,
# so their interface compile definitions reach the units that link torch.
# Without SB_TORCH_CMAKE_DIR (no torch installed), CMAKE_CUDA_FLAGS is SB_GENCODE alone.

function(_sb_torch_targets)
  set(CMAKE_FIND_PACKAGE_NAME Caffe2)
  if(EXISTS "${SB_TORCH_CMAKE_DIR}/Caffe2/Caffe2Targets.cmake")
    _include("${SB_TORCH_CMAKE_DIR}/Caffe2/Caffe2Targets.cmake")
  endif()
endfunction()

macro(_sb_torch_cuda_flags)
  set(CMAKE_CUDA_FLAGS "")
  if(SB_TORCH_CMAKE_DIR)
    set(_sb_cuda_cmake "${SB_TORCH_CMAKE_DIR}/Caffe2/public/cuda.cmake")
    _include("${SB_TORCH_CMAKE_DIR}/Caffe2/public/utils.cmake")
    _include("${SB_TORCH_CMAKE_DIR}/Caffe2/Modules_CUDA_fix/upstream/FindCUDA/select_compute_arch.cmake")
    _file(READ "${_sb_cuda_cmake}" _sb_text)
    string(FIND "${_sb_text}" "if(ONNX_NAMESPACE)" _sb_at)
    if(_sb_at EQUAL -1)
      _sb_emit(toolchain "torch" cuda_cmake
        "${_sb_cuda_cmake} has no 'if(ONNX_NAMESPACE)': its CUDA flags cannot be read")
    else()
      string(SUBSTRING "${_sb_text}" ${_sb_at} -1 _sb_tail)
      set(TORCH_CUDA_ARCH_LIST "${SB_ARCH_LIST}")
      cmake_language(EVAL CODE "${_sb_tail}")
    endif()
  else()
    set(CMAKE_CUDA_FLAGS "${SB_GENCODE}")
  endif()
endmacro()

macro(find_package _sb_name)
  if("${_sb_name}" STREQUAL "Torch")
    set(Torch_FOUND TRUE)
    set(Torch_VERSION "${SB_TORCH_VERSION}")
    set(TORCH_INCLUDE_DIRS "${SB_TORCH_INCLUDES}")
    if(NOT TORCH_INCLUDE_DIRS)
      # no torch here (the vendor plan): a directory that is not there, outside the tree,
      # so that a tree which reads torch's headers (vLLM 0.29.0's torch 2.13 hotfix:
      # list(GET TORCH_INCLUDE_DIRS 0 ...), then file(READ ...)) reads them as empty
      set(TORCH_INCLUDE_DIRS "${SB_BINARY_DIR}/no-torch/include")
    endif()
    set(TORCH_LIBRARIES torch)
    set(TORCH_CUDA_ARCH_LIST "${SB_ARCH_LIST}")
    if("${SB_DEVICE}" STREQUAL "cuda")
      set(CUDA_FOUND TRUE)
      set(CUDA_VERSION "${SB_CUDA_VERSION}")
      set(CUDAToolkit_VERSION "${SB_CUDA_VERSION}")
      set(CUDA_TOOLKIT_ROOT_DIR "${SB_CUDA_ROOT}")
      set(CUDA_INCLUDE_DIRS "${SB_CUDA_ROOT}/include")
      set(CMAKE_CUDA_COMPILER_VERSION "${SB_CUDA_VERSION}")
      set(CMAKE_CUDA_COMPILER "${SB_CUDA_ROOT}/bin/nvcc")
      _sb_torch_cuda_flags()
    endif()
    if(SB_TORCH_CMAKE_DIR)
      _sb_torch_targets()
    endif()
    _sb_emit(directory "." system_includes "${SB_TORCH_INCLUDES}")
  elseif("${_sb_name}" MATCHES "^Python3?$")
    set(${_sb_name}_FOUND TRUE)
    set(${_sb_name}_EXECUTABLE "${SB_PYTHON}")
    string(REPLACE "." ";" _sb_pyver "${SB_PYTHON_VERSION}")
    list(GET _sb_pyver 0 ${_sb_name}_VERSION_MAJOR)
    list(GET _sb_pyver 1 ${_sb_name}_VERSION_MINOR)
    set(${_sb_name}_VERSION "${SB_PYTHON_VERSION}")
    set(${_sb_name}_INCLUDE_DIRS "${SB_PYTHON_INCLUDE}")
    _sb_emit(directory "." system_includes "${SB_PYTHON_INCLUDE}")
  elseif("${_sb_name}" STREQUAL "CUDAToolkit" AND "${SB_DEVICE}" STREQUAL "cuda")
    set(CUDAToolkit_FOUND TRUE)
    set(CUDAToolkit_VERSION "${SB_CUDA_VERSION}")
    set(CUDAToolkit_INCLUDE_DIRS "${SB_CUDA_ROOT}/include")
    set(CUDAToolkit_BIN_DIR "${SB_CUDA_ROOT}/bin")
  else()
    set(${_sb_name}_FOUND FALSE)
    _sb_emit(skipped "find_package" name "${_sb_name}")
  endif()
endmacro()
