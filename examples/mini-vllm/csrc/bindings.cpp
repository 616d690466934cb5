// The Python module mini_vllm._C.  Importing it needs no GPU (the CUDA runtime is
// linked statically and touched only when a kernel runs).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "ops.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "mini-vllm kernels, built by sparkbuild";
  m.def("torch_version", [] { return std::string(MINI_VLLM_TORCH_VERSION); },
        "the torch version the extension was built against");
  m.def("cuda_archs", [] { return std::string(MINI_VLLM_CUDA_ARCHS); },
        "the CUDA architectures the common kernels were compiled for");
  m.def("cuda_device_count", &mini_vllm::cuda_device_count);
  m.def("silu_and_mul", &mini_vllm::silu_and_mul, py::arg("input"), py::arg("d"));
  m.def("shuffle_rows", &mini_vllm::shuffle_rows, py::arg("input"), py::arg("dst2src_map"),
        py::arg("num_cols"));
#ifdef ENABLE_SCALED_MM_SM120
  m.def("scaled_mm", &mini_vllm::scaled_mm, py::arg("a"), py::arg("b"), py::arg("m"),
        py::arg("n"), py::arg("k"), py::arg("scale_a"), py::arg("scale_b"));
#endif
#ifdef ENABLE_NVFP4_SM120
  m.def("scaled_fp4_quant", &mini_vllm::scaled_fp4_quant, py::arg("input"),
        py::arg("global_scale"));
  m.def("nvfp4_mma_fragments", &mini_vllm::nvfp4_mma_fragments, py::arg("a"), py::arg("b"),
        py::arg("scale_a"), py::arg("scale_b"));
#endif
#ifdef ENABLE_MOE_DATA
  m.def("count_expert_tokens", &mini_vllm::count_expert_tokens, py::arg("topk_ids"),
        py::arg("num_experts"));
#endif
}
