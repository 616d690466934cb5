"""Coverage per kernel on libraries compiled here with nvcc (no GPU), read by cuobjdump.

Four shared libraries: native only (sm_121a), PTX only (``-gencode
arch=compute_80,code=compute_80``), both in one library (one .cu built for sm_121a, another
PTX only, linked into one .so), and nothing for the target (sm_90a only).  Each is judged
for 12.1a by :func:`sparkbuild.toolchain.sass.read_kernels` and, put into a wheel, by
``wheel``'s verify: the PTX-only kernel fails it, by name, unless ``allow_jit``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.errors import VerifyError
from sparkbuild.proc import run
from sparkbuild.toolchain import sass
from sparkbuild.toolchain.tools import find_nvcc
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseReaders, write_wheelhouse
from support.wheels import NoNetwork, demo_recipe, demo_wheel

pytestmark = pytest.mark.nvcc

SOURCES = {
    "native.cu": 'extern "C" __global__ void native_k(float* x) { x[threadIdx.x] *= 2.0f; }\n'
                 "template <typename T> __global__ void tmpl_k(T* x) { x[threadIdx.x] += T(1); }\n"
                 "template __global__ void tmpl_k<float>(float*);\n",
    "jit.cu": "namespace ns { __global__ void ptx_k(float* x, int n) {\n"
              "  if (threadIdx.x < n) x[threadIdx.x] = 3.0f; } }\n",
    "hopper.cu": "__global__ void hopper_k(float* x) { x[threadIdx.x] = 1.0f; }\n",
}
GENCODE = {"native.cu": "arch=compute_121a,code=sm_121a",
           "jit.cu": "arch=compute_80,code=compute_80",
           "hopper.cu": "arch=compute_90a,code=sm_90a"}
LIBRARIES = {"native": ["native.cu"], "ptx": ["jit.cu"], "mixed": ["native.cu", "jit.cu"],
             "none": ["hopper.cu"]}
PTX_KERNEL = "_ZN2ns5ptx_kEPfi"


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kernels")
    nvcc = str(find_nvcc().path)
    for name, text in SOURCES.items():
        (root / name).write_text(text, encoding="utf-8")
        run([nvcc, "-Xcompiler", "-fPIC", "-c", root / name, "-o", root / f"{name}.o",
             "-gencode", GENCODE[name]], cwd=root, timeout=300, echo=False)
    built = {}
    for library, sources in LIBRARIES.items():
        built[library] = root / f"lib{library}.so"
        run([nvcc, "-shared", *[root / f"{s}.o" for s in sources], "-o", built[library]],
            cwd=root, timeout=300, echo=False)
    return built


def _coverage(path: Path) -> sass.Coverage:
    return sass.coverage(sass.read_kernels(path), "12.1a")


def test_native_only(libraries: dict[str, Path]) -> None:
    found = _coverage(libraries["native"])
    assert found.counts() == {"native": 2, "ptx": 0, "none": 0}
    assert {(k.name, k.code) for k in found.kernels} == {("native_k", "sm_121a"),
                                                        ("_Z6tmpl_kIfEvPT_", "sm_121a")}


def test_ptx_only(libraries: dict[str, Path]) -> None:
    (kernel,) = _coverage(libraries["ptx"]).kernels
    assert (kernel.name, kernel.kind, kernel.code) == (PTX_KERNEL, "ptx", "compute_80")
    if kernel.demangled is not None:  # c++filt is at hand
        assert kernel.demangled == "ns::ptx_k(float*, int)"
    # the SASS listing alone says "no sm_121": the library-level rule was wrong here
    assert not any(sass.arch_digits(a) == "121" for a in sass.list_cuda_archs(libraries["ptx"]))


def test_native_and_ptx_only_in_one_library(libraries: dict[str, Path]) -> None:
    found = _coverage(libraries["mixed"])
    assert found.counts() == {"native": 2, "ptx": 1, "none": 0}
    assert [(k.name, k.kind, k.code) for k in found.not_native] == [
        (PTX_KERNEL, "ptx", "compute_80")]
    # the library has sm_121a code, so it passed before: the kernel is what counts
    assert "sm_121a" in sass.list_cuda_archs(libraries["mixed"])


def test_nothing_for_the_target(libraries: dict[str, Path]) -> None:
    (kernel,) = _coverage(libraries["none"]).kernels
    assert (kernel.name, kernel.kind) == ("_Z8hopper_kPf", "none")
    assert sass.coverage(sass.read_kernels(libraries["none"]), "9.0a").counts()["native"] == 1


def _wheelhouse(tmp_path: Path, library: Path, *, allow_jit: bool) -> Path:
    out = tmp_path / f"wheelhouse-{allow_jit}"
    write_wheelhouse(
        out,
        WheelhouseInputs(recipe=demo_recipe(tmp_path, allow_jit=allow_jit),
                         source={"kind": "directory"}, patches=[],
                         built_wheels=[demo_wheel(tmp_path, {"demo/_C.so": library.read_bytes()})],
                         build_settings={}, cache_root=tmp_path / "cache", offline=False,
                         platform=None, toolchain={"python": "3.11"}),
        WheelhouseReaders(outside=NoNetwork()))
    return out


def test_the_wheelhouse_of_the_mixed_library(libraries: dict[str, Path], tmp_path: Path
                                             ) -> None:
    with pytest.raises(VerifyError) as caught:
        _wheelhouse(tmp_path, libraries["mixed"], allow_jit=False)
    assert PTX_KERNEL in caught.value.what and "PTX only" in caught.value.what
    assert "native_k" not in caught.value.what
    out = _wheelhouse(tmp_path, libraries["mixed"], allow_jit=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(k["kernel"], k["ptx_arch"]) for k in manifest["jit_kernels"]] == [
        (PTX_KERNEL, "compute_80")]
    result = verify_wheelhouse(out)
    assert result.error is None, result.summary()
    (library,) = result.to_dict()["libraries"]
    assert library["coverage"][0]["native"] == 2 and library["coverage"][0]["ptx"] == 1


def test_the_wheelhouse_of_a_library_with_no_code_fails_even_with_allow_jit(
    libraries: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(VerifyError, match="_Z8hopper_kPf"):
        _wheelhouse(tmp_path, libraries["none"], allow_jit=True)
