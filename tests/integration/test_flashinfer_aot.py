"""flashinfer's modules built ahead for 12.1a, for one small module group (nvcc, no GPU).

The real flashinfer-python 0.6.18 wheel's builder compiles ``silu_and_mul`` (flashinfer's
activation group) for 12.1a; the packed flashinfer-jit-cache wheel holds sm_121a SASS
(cuobjdump), has the layout flashinfer looks for and a version that starts with
flashinfer's.  Installed beside flashinfer-python 0.6.18 in a venv, flashinfer's own
``jit.env.FLASHINFER_AOT_DIR`` points into it.  Importing ``flashinfer.jit.env`` needs no
GPU (only ``CompilationContext``, which reads ``FLASHINFER_CUDA_ARCH_LIST``); the same
venv's check of loading the module on a GPU is the device run's (bench/first-start).

This machine's CUDA has no ``lib64/stubs/libcuda.so``: a stub library with libcuda's
soname stands in for the link (``FLASHINFER_EXTRA_LDFLAGS``), as the toolkit's does.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkbuild.flashinfer.builder import (
    IMPORT_REQUIREMENTS,
    AotRequest,
    build_jit_cache,
)
from sparkbuild.proc import run
from sparkbuild.recipe import load_recipe
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.sass import list_cuda_archs, read_sass
from sparkbuild.toolchain.tools import cuda_root, find_nvcc
from sparkbuild.wheelhouse.lock import parse_lock
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import write_wheelhouse

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

FLASHINFER = "flashinfer-python==0.6.18"
FLASHINFER_SHA256 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
RECIPE = """
[recipe]
name = "jit-cache"
package = "flashinfer-jit-cache"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
"""
SMALL = ("--only", "silu_and_mul", "--add-act", "true", "--add-moe", "false", "--add-comm",
         "false", "--add-misc", "false", "--add-xqa", "false", "--add-gemma", "false",
         "--add-oai-oss", "false")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = Path.home() / ".cache" / "sparkbuild-tests" / "flashinfer-aot"
    directory.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", directory, FLASHINFER,
         *IMPORT_REQUIREMENTS], timeout=1200)
    return directory


def _libcuda_stub(root: Path) -> Path:
    (root / "stub.c").write_text("int sparkbuild_stub;\n")
    run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", root / "libcuda.so",
         root / "stub.c"])
    return root


def test_one_module_group_for_12_1a(wheels: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")  # flashinfer's builder imports torch (a CPU build serves)
    nvcc = find_nvcc()
    cuda = cuda_root(nvcc)
    if not (cuda / "lib64" / "stubs" / "libcuda.so").is_file():
        monkeypatch.setenv("FLASHINFER_EXTRA_LDFLAGS", f"-L{_libcuda_stub(tmp_path)}")
    (flashinfer,) = wheels.glob("flashinfer_python-0.6.18-*.whl")
    assert sha256_file(flashinfer) == FLASHINFER_SHA256
    result = build_jit_cache(AotRequest(
        flashinfer_wheel=flashinfer, wheel_dir=wheels, python=Path(sys.executable),
        archs=("12.1a",), out=tmp_path / "out", work=tmp_path / "work", cuda_home=cuda,
        cuda_version="13.0", args=SMALL, jobs=2, sha256=FLASHINFER_SHA256))
    assert result.modules == ["silu_and_mul"]
    assert result.version == "0.6.18+cu130"
    assert result.wheel.name.startswith("flashinfer_jit_cache-0.6.18+cu130-py3-none-")

    with zipfile.ZipFile(result.wheel) as archive:
        names = archive.namelist()
        so = "flashinfer_jit_cache/jit_cache/silu_and_mul/silu_and_mul.so"
        assert so in names and "flashinfer_jit_cache/__init__.py" in names
        archive.extract(so, tmp_path / "unpacked")
    library = tmp_path / "unpacked" / so
    assert list_cuda_archs(library) == ["sm_121a"]
    functions = read_sass(library)
    assert functions and all(f.arch == "sm_121a" for f in functions)
    assert any("act_and_mul_kernel" in f.name for f in functions)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    import torch  # this interpreter's torch serves the venv (after the venv's own packages)

    (site,) = venv.glob("lib/python*/site-packages")
    (site / "sparkbuild-test-torch.pth").write_text(str(Path(torch.__file__).parents[1]) + "\n")
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", wheels,
         flashinfer, result.wheel, *IMPORT_REQUIREMENTS], timeout=1200)
    probe = ("import flashinfer_jit_cache as c, flashinfer.jit.env as e, "
             "flashinfer.jit.core as k, pathlib; "
             "from flashinfer.jit.activation import gen_act_and_mul_module as g; "
             "s = g('silu'); "
             "print(c.__version__); print(c.get_jit_cache_dir()); print(e.FLASHINFER_AOT_DIR); "
             "print(s.aot_path); print(s.is_aot)")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False,
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                            "FLASHINFER_CUDA_ARCH_LIST": "12.1a",
                                            "CUDA_HOME": str(cuda)}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    version, cache_dir, aot_dir, aot_path, is_aot = out.stdout.strip().splitlines()[-5:]
    assert version == "0.6.18+cu130" and version.startswith("0.6.18")
    assert aot_dir == cache_dir and Path(cache_dir).is_relative_to(venv)
    assert aot_path == str(Path(cache_dir) / "silu_and_mul" / "silu_and_mul.so")
    assert is_aot == "True"

    # In a wheelhouse it is a built wheel: hashed into the lock, listed in the manifest,
    # and its machine code read by verify like vLLM's.
    (tmp_path / "recipe.toml").write_text(RECIPE)
    house = tmp_path / "wheelhouse"
    written = write_wheelhouse(house, recipe=load_recipe(tmp_path / "recipe.toml"),
                               source={"kind": "directory", "spec": "."}, patches=[],
                               built_wheels=[result.wheel], build_settings={},
                               cache_root=tmp_path / "cache", offline=True, platform=None,
                               closure=False)
    (shipped,) = [f for f in written.files if f.role == "built"]
    assert shipped.name == "flashinfer-jit-cache" and shipped.version.startswith("0.6.18+cu130")
    locked = {r.key: r for r in parse_lock((house / "requirements.lock").read_text(), where="x")}
    assert locked["flashinfer-jit-cache"].hashes == (shipped.sha256,)
    report = verify_wheelhouse(house)
    assert report.error is None, report.summary()
    (lib,) = report.libraries
    assert lib.library.endswith("silu_and_mul.so") and "sm_121a" in lib.archs
