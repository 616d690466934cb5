"""An SM12x module of flashinfer built at 12.1a through the product, as a user runs it, and a
prebuilt jit-cache taken over loopback HTTP (nvcc, no GPU).

``sparkbuild flashinfer-aot`` builds ``fp4_quantization_121`` (the NVFP4 quantization module
of a recipe's model set, 7 sources whose includes reach cuBLAS's and cuRAND's headers) with
the real flashinfer-python 0.6.18 wheel's builder.  The test sets nothing up for the link:
on this machine the toolkit has neither those headers nor ``lib64/stubs``, and there is no
driver, so the product itself takes the headers from the NVIDIA wheels and makes the link's
libcuda; its report says from where.  The packed wheel is written into a wheelhouse whose
``verify`` reads the module's machine code with cuobjdump: every kernel native sm_121a, no
trap, no guard stub.  Installed beside flashinfer-python in a venv, flashinfer's own
``jit.env.FLASHINFER_AOT_DIR`` points into it.

Then a jit-cache wheel made here from that build (plus a module the model's set does not
have) is served over loopback HTTP and named by ``[flashinfer] jit_cache = { url, sha256,
cut_to_model }``: taken pinned, cut to the set and judged per kernel; the same wheel
relabelled 0.6.17 is refused before anything compiles, naming both versions.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbuild.flashinfer.builder_wheels import IMPORT_REQUIREMENTS
from sparkbuild.flashinfer.jit_cache_wheel import pack_jit_cache
from sparkbuild.proc import run
from sparkbuild.recipe import load_recipe
from sparkbuild.store.hashing import sha256_file
from sparkbuild.toolchain.sass import list_cuda_archs, read_sass
from sparkbuild.wheelhouse.lock import parse_lock
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, write_wheelhouse

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

FLASHINFER_SHA256 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
MODULE = "fp4_quantization_121"
TIMEOUT = 3600
PIN = f"""[[pins]]
name = "flashinfer-python"
version = "0.6.18"
sha256 = "{FLASHINFER_SHA256}"
"""
MODEL = """
[model]
head_dim = 128
num_attention_heads = 32
num_key_value_heads = 8
quantization = "nvfp4"
quantization_ignore = ["*"]
attention_backend = "FLASH_ATTN"
flashinfer_sampler = false
"""
"""An NVFP4 model with no MoE, every dense layer left unquantized, served with vLLM's own
attention and sampler: its set is NVFP4's quantization module alone."""


def _recipe(directory: Path, *, name: str, model: str, jit_cache: str = "",
            pin: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "series").write_text("# empty\n")
    path = directory / f"{name}.toml"
    path.write_text(f"""
[recipe]
name = "{name}"
package = "flashinfer-jit-cache"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
{PIN if pin else ""}
[flashinfer]
aot = true
{jit_cache}
{model}
""")
    return path


def _sparkbuild(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkbuild", *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False,
                          cwd=cwd)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """``sparkbuild flashinfer-aot`` on a model whose set is ``fp4_quantization_121``."""
    pytest.importorskip("torch")  # flashinfer's builder imports torch (a CPU build serves)
    here = tmp_path_factory.mktemp("aot")
    recipe = _recipe(here, name="fp4-only", model=MODEL)
    cache = Path.home() / ".cache" / "sparkbuild-tests" / "flashinfer-aot-cache"
    shutil.rmtree(cache / "compile-cache", ignore_errors=True)  # compiled, not a cache hit
    listed = _sparkbuild("flashinfer-aot", "--recipe", recipe, "--list", "--json", cwd=here)
    assert [m["name"] for m in json.loads(listed.stdout)["modules"]] == [MODULE]
    done = _sparkbuild("flashinfer-aot", "--recipe", recipe, "--cache", cache,
                       "--out", here / "out", "--json", cwd=here)
    assert done.returncode == 0, done.stderr[-5000:]
    return {"report": json.loads(done.stdout), "dir": here, "cache": cache}


def test_the_module_is_built_linked_and_packed_through_the_product(
        built: dict[str, object]) -> None:
    report = built["report"]
    assert isinstance(report, dict)
    assert report["modules"] == [MODULE] and report["version"] == "0.6.18+cu130"
    assert report["sources"] == 7
    said = "\n".join(report["environment"])
    assert "curand_kernel.h:" in said and "cublasLt.h:" in said
    assert "libcuda for the link:" in said  # the toolkit's stub, a driver's, or sparkbuild's
    if not Path("/usr/local/cuda/lib64/stubs/libcuda.so").is_file():
        assert "sparkbuild stub from cuda.h" in said or "driver" in said
    units = report["units"]  # from ninja's log, through sparkbuild's ninja
    assert len(units) == 7 and {u["module"] for u in units} == {MODULE}
    assert all(u["seconds"] >= 0 for u in units) and sum(u["seconds"] for u in units) > 0
    assert any(u["path"].endswith("quantization.cu") for u in units)
    # measured through the launcher too (sccache's server is followed by its port)
    cuda = next(u for u in units if u["path"].endswith("quantization.cu"))
    assert cuda["peak_rss_gib"] > 0.3 and cuda["cpu_seconds"] > 10


def test_verify_reads_every_kernel_native_sm_121a(built: dict[str, object]) -> None:
    here = built["dir"]
    assert isinstance(here, Path)
    (wheel,) = (here / "out").glob("flashinfer_jit_cache-0.6.18+cu130-*.whl")
    so = f"flashinfer_jit_cache/jit_cache/{MODULE}/{MODULE}.so"
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(so, here / "unpacked")
    library = here / "unpacked" / so
    assert list_cuda_archs(library) == ["sm_121a"]
    functions = read_sass(library)
    assert functions and all(f.arch == "sm_121a" for f in functions)
    assert any("quantize_with_block_size" in f.name for f in functions)

    house = here / "wheelhouse"  # the jit-cache wheel alone (flashinfer-python is the node's)
    alone = _recipe(here / "house", name="house", model=MODEL, pin=False)
    written = write_wheelhouse(
        house,
        WheelhouseInputs(recipe=load_recipe(alone), source={"kind": "directory", "spec": "."},
                         patches=[], built_wheels=[wheel], build_settings={},
                         cache_root=here / "cache", offline=True, platform=None, closure=False))
    (shipped,) = [f for f in written.files if f.role == "built"]
    locked = {r.key: r for r in parse_lock((house / "requirements.lock").read_text(),
                                           where="lock")}
    assert locked["flashinfer-jit-cache"].hashes == (shipped.sha256,)
    result = verify_wheelhouse(house)
    assert result.error is None, result.summary()
    (lib,) = result.libraries
    assert lib.library == so and lib.sass_archs == ("sm_121a",)
    assert lib.trap_only_kernels == () and lib.guard_stub_kernels == ()
    (spark,) = [c.to_dict() for c in lib.coverage]
    assert spark["target"] == "12.1a" and spark["kernels"] > 0
    assert (spark["native"], spark["ptx"], spark["none"]) == (spark["kernels"], 0, 0)


def test_flashinfer_finds_the_module_in_the_installed_wheel(built: dict[str, object]) -> None:
    import torch  # this interpreter's torch serves the venv (after the venv's own packages)

    here, cache = built["dir"], built["cache"]
    assert isinstance(here, Path) and isinstance(cache, Path)
    (wheel,) = (here / "out").glob("flashinfer_jit_cache-*.whl")
    (wheels,) = sorted(cache.glob("flashinfer-aot/*/"))
    (flashinfer,) = wheels.glob("flashinfer_python-0.6.18-*.whl")
    venv = here / "venv"
    run([sys.executable, "-m", "venv", venv])
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "sparkbuild-test-torch.pth").write_text(str(Path(torch.__file__).parents[1]) + "\n")
    run([venv / "bin" / "python", "-m", "pip", "install", "--no-index", "--no-deps",
         "--find-links", wheels, flashinfer, wheel, *IMPORT_REQUIREMENTS], timeout=1200)
    probe = ("import flashinfer_jit_cache as c, flashinfer.jit.env as e; "
             "from flashinfer.jit.fp4_quantization import gen_fp4_quantization_sm121_module as g;"
             " s = g(); print(c.__version__); print(e.FLASHINFER_AOT_DIR); print(s.aot_path); "
             "print(s.is_aot)")
    out = subprocess.run([venv / "bin" / "python", "-c", probe], capture_output=True,
                         text=True, check=False, cwd=here, timeout=600,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(here),
                              "FLASHINFER_CUDA_ARCH_LIST": "12.1a"})
    assert out.returncode == 0, out.stderr[-3000:]
    version, aot_dir, aot_path, is_aot = out.stdout.strip().splitlines()[-4:]
    assert version == "0.6.18+cu130" and Path(aot_dir).is_relative_to(venv)
    assert aot_path == str(Path(aot_dir) / MODULE / f"{MODULE}.so") and is_aot == "True"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A directory served over loopback HTTP: (base URL, directory)."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", root
    finally:
        httpd.shutdown()


def _jit_cache_wheel(built: dict[str, object], directory: Path, version: str) -> Path:
    """A jit-cache wheel made here: the module built above and one the set lacks."""
    here = built["dir"]
    assert isinstance(here, Path)
    (wheel,) = (here / "out").glob("flashinfer_jit_cache-*.whl")
    modules = directory / f"modules-{version}"
    for name in (MODULE, "xqa_not_in_the_set"):
        (modules / name).mkdir(parents=True)
        with zipfile.ZipFile(wheel) as archive, (modules / name / f"{name}.so").open("wb") as out:
            out.write(archive.read(f"flashinfer_jit_cache/jit_cache/{MODULE}/{MODULE}.so"))
    return pack_jit_cache(modules, directory, version, version.split("+")[0])


def test_a_prebuilt_jit_cache_over_http_is_taken_pinned_cut_and_judged(
        built: dict[str, object], served: tuple[str, Path], tmp_path: Path) -> None:
    url, root = served
    wheel = _jit_cache_wheel(built, root, "0.6.18+cu130")
    table = (f'jit_cache = {{ url = "{url}{wheel.name}", sha256 = "{sha256_file(wheel)}", '
             "cut_to_model = true }")
    recipe = _recipe(tmp_path, name="prebuilt", model=MODEL, jit_cache=table)
    done = _sparkbuild("flashinfer-aot", "--recipe", recipe, "--cache", tmp_path / "cache",
                       "--out", tmp_path / "out", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["modules"] == [MODULE] and "cut from 2 modules" in report["prebuilt"]
    assert report["ok"] and report["codeless_modules"] == []
    (library,) = report["libraries"]
    (spark,) = library["coverage"]
    assert (spark["native"], spark["ptx"], spark["none"]) == (spark["kernels"], 0, 0)
    (cut,) = (tmp_path / "out").glob("*.whl")
    with zipfile.ZipFile(cut) as archive:
        assert not [n for n in archive.namelist() if "xqa_not_in_the_set" in n]
    again = _recipe(tmp_path, name="prebuilt-wrong-hash", model=MODEL,
                    jit_cache=table.replace(sha256_file(wheel), "0" * 64))
    refused = _sparkbuild("flashinfer-aot", "--recipe", again, "--cache", tmp_path / "c2",
                          "--out", tmp_path / "out3", "--json", cwd=tmp_path)
    assert refused.returncode != 0 and "sha256 mismatch" in refused.stdout


def test_a_prebuilt_jit_cache_of_another_version_is_refused_before_anything_compiles(
        built: dict[str, object], served: tuple[str, Path], tmp_path: Path) -> None:
    url, root = served
    wheel = _jit_cache_wheel(built, root, "0.6.17+cu130")
    table = f'jit_cache = {{ url = "{url}{wheel.name}", sha256 = "{sha256_file(wheel)}" }}'
    recipe = _recipe(tmp_path, name="old", jit_cache=table, model=MODEL)
    done = _sparkbuild("flashinfer-aot", "--recipe", recipe, "--cache", tmp_path / "cache",
                       "--out", tmp_path / "out", "--json", cwd=tmp_path)
    assert done.returncode == 14, done.stderr[-3000:]
    error = json.loads(done.stdout)["error"]
    assert "0.6.17+cu130" in error["what"] and "flashinfer-python is 0.6.18" in error["what"]
    assert not (tmp_path / "cache" / "work").exists()  # nothing was built
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
