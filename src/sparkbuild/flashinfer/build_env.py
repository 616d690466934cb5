"""What flashinfer's builder needs beside nvcc: the cuBLAS/cuRAND headers, and a link with no
driver.  Each is found (or made) and named before anything compiles.

Headers.  flashinfer looks for toolkit headers only in ``$CUDA_HOME/include``
(``FI/jit/cpp_ext.py:124-141``), and its MoE, FP4 and sampling sources include
``cublasLt.h`` and ``curand_kernel.h``; a toolkit assembled from wheels (this machine's)
has neither.  They are looked for in the toolkit, then in the build environment's NVIDIA
wheels (torch's CUDA dependencies), then in the builder's own pinned copies of those wheels
(:data:`HEADER_WHEELS`, installed beside flashinfer); the directories found go on ``CPATH``,
which nvcc and the host compiler both read (and flashinfer's spec generators, which run
nvcc themselves).

The link.  flashinfer links every module with ``-L$cuda_home/lib64 -L$cuda_home/lib64/stubs
-lcudart -lcuda`` (``cpp_ext.py:254-260``), its MoE module ``-lnvrtc``, its GEMM ``-lcublas
-lcublasLt``.  A machine with no driver and a toolkit with no ``lib64/stubs`` (a CI runner,
a build container, this machine) fails every link with ``cannot find -lcuda``.  So a link
directory (``FLASHINFER_EXTRA_LDFLAGS=-L DIR``) holds:

* ``libcuda.so``: the toolkit's stub when it has one, else a driver's ``libcuda.so`` when
  the machine has one, else a stub sparkbuild compiles from the toolkit's ``cuda.h`` (every
  driver function it declares, as an empty function, soname ``libcuda.so.1``) -- which one is
  said.  A stub that defines the symbols keeps ``libcuda.so.1`` in the module's ``NEEDED``
  under the linker's ``--as-needed``; on the node the driver's library is loaded by that
  name;
* ``libnvrtc.so``, ``libcublas.so``, ``libcublasLt.so``: links to the versioned libraries of
  the toolkit or the wheels (the wheels ship only ``.so.13``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from sparkbuild.errors import ToolchainError
from sparkbuild.proc import run
from sparkbuild.records import Record, as_json

HEADER_WHEELS = ("nvidia-cublas==13.10.0.20", "nvidia-curand==10.4.5.25",
                 "nvidia-cuda-nvrtc==13.5.37")
"""The builder's own copies of the CUDA 13 library wheels whose headers and sonames the link
needs (installed beside flashinfer, no dependencies): used when neither the toolkit nor the
build environment has them."""

HEADER_FILES = {"cublas": "cublasLt.h", "curand": "curand_kernel.h"}
HEADER_WHEEL_OF = {"cublasLt.h": HEADER_WHEELS[0], "curand_kernel.h": HEADER_WHEELS[1],
                   "libnvrtc.so": HEADER_WHEELS[2], "libcublas.so": HEADER_WHEELS[0],
                   "libcublasLt.so": HEADER_WHEELS[0]}
"""The pinned wheel that gives a header or a library the link needs."""
LINK_LIBRARIES = ("nvrtc", "cublas", "cublasLt")
STUB_SONAME = "libcuda.so.1"


LibcudaKind = Literal["toolkit stub", "driver", "sparkbuild stub from cuda.h"]
"""Which libcuda.so the link is given: the toolkit's stub, the driver's, or one sparkbuild
makes from cuda.h."""


@dataclass(frozen=True)
class Libcuda(Record):
    json_order: ClassVar[tuple[str, ...]] = ("kind", "path")

    path: Path
    kind: LibcudaKind

    def line(self) -> str:
        return f"libcuda for the link: {self.kind} ({self.path})"


@dataclass
class LinkEnvironment(Record):
    """What the builder's environment gets (:meth:`env`), and what it says of it."""

    json_order: ClassVar[tuple[str, ...]] = ("headers", "libcuda", "libraries", "link_dir")

    include_dirs: list[Path] = field(metadata=as_json(skip=True))
    headers: dict[str, str]
    """header -> where it was found."""
    libcuda: Libcuda
    link_dir: Path
    libraries: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        cpath = os.pathsep.join([*map(str, self.include_dirs), os.environ.get("CPATH", "")])
        extra = os.environ.get("FLASHINFER_EXTRA_LDFLAGS", "")
        return {"CPATH": cpath.rstrip(os.pathsep),
                "FLASHINFER_EXTRA_LDFLAGS": f"{extra} -L{self.link_dir}".strip()}

    def lines(self) -> list[str]:
        return [*(f"{header}: {where}" for header, where in self.headers.items()),
                self.libcuda.line(),
                *(f"lib{name}.so for the link: {where}" for name, where in self.libraries.items())]


def environment_site(python: Path) -> list[Path]:
    """The site-packages of the venv ``python`` belongs to (the build environment's)."""
    root = python.parent.parent
    found = sorted(root.glob("lib/python*/site-packages"))
    if not found and python.resolve() == Path(sys.executable).resolve():
        found = [Path(sysconfig.get_paths()["purelib"])]
    return found


def include_roots(cuda_home: Path, environment: list[Path], builder_site: Path
                  ) -> list[tuple[Path, str]]:
    """Where headers are looked for, in order, each with what it is."""
    roots = [(cuda_home / "include", "the toolkit"),
             *((d, "the build environment's NVIDIA wheels")
               for site in environment for d in sorted(site.glob("nvidia/*/include"))),
             *((d, "the builder's pinned NVIDIA wheels")
               for d in sorted(builder_site.glob("nvidia/*/include")))]
    return [(d, what) for d, what in roots if d.is_dir()]


def find_headers(needed: tuple[str, ...], roots: list[tuple[Path, str]]
                 ) -> tuple[list[Path], dict[str, str], list[str]]:
    """The include directories that give ``needed`` (``cublas``, ``curand``), what each
    header was found in, and the headers found nowhere."""
    dirs: list[Path] = []
    found: dict[str, str] = {}
    missing: list[str] = []
    for library in needed:
        header = HEADER_FILES[library]
        for directory, what in roots:
            if (directory / header).is_file():
                found[header] = f"{what} ({directory})"
                if directory not in dirs:
                    dirs.append(directory)
                break
        else:
            missing.append(header)
    return dirs, found, missing


def missing_headers_error(missing: list[str], roots: list[tuple[Path, str]]) -> ToolchainError:
    looked = "; ".join(f"{what}: {d}" for d, what in roots) or "nowhere: no include directory"
    return ToolchainError(
        f"flashinfer's modules need {', '.join(missing)}, which neither the toolkit nor "
        "the NVIDIA wheels have (nothing was compiled)", where=looked,
        hint=f"install the CUDA toolkit's cuBLAS/cuRAND headers, or let sparkbuild download "
        f"its pinned {', '.join(HEADER_WHEELS)} (run online once)")


def toolkit_root(env: dict[str, str] | None = None) -> Path | None:
    """The CUDA toolkit a build would use, found without running anything: ``CUDA_HOME``,
    ``CUDA_PATH``, else ``/usr/local/cuda`` (the builder asks nvcc itself)."""
    env = dict(os.environ) if env is None else env
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable) and Path(env[variable]).is_dir():
            return Path(env[variable]).resolve()
    default = Path("/usr/local/cuda")
    return default.resolve() if (default / "include").is_dir() else None


def toolkit_stub(cuda_home: Path) -> Path | None:
    for candidate in (cuda_home / "lib64" / "stubs" / "libcuda.so",
                      *sorted(cuda_home.glob("targets/*/lib/stubs/libcuda.so"))):
        if candidate.is_file():
            return candidate
    return None


DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
               "/usr/lib/wsl/lib")


def driver_library(dirs: tuple[str, ...] = DRIVER_DIRS) -> Path | None:
    for directory in dirs:
        for name in ("libcuda.so", STUB_SONAME):
            candidate = Path(directory) / name
            if candidate.is_file():
                return candidate
    return None


_DECLARED = re.compile(r"CUDAAPI\s+(cu[A-Za-z0-9_]+)\s*\(")
_RENAMED = re.compile(r"^\s*#\s*define\s+cu[A-Za-z0-9_]+\s+(cu[A-Za-z0-9_]+)\s*$", re.MULTILINE)


def driver_symbols(cuda_h: str) -> list[str]:
    """Every driver function ``cuda.h`` declares, under each name a caller may link to
    (``cuMemAlloc`` and the ``cuMemAlloc_v2`` it is defined to)."""
    return sorted({*_DECLARED.findall(cuda_h), *_RENAMED.findall(cuda_h)})


def stub_source(symbols: list[str]) -> str:
    body = "".join(f"void {name}(void) {{}}\n" for name in symbols)
    return ("/* libcuda.so stub for linking without a driver (sparkbuild); never loaded: the "
            "node's driver provides libcuda.so.1 */\n" + body)


def provided_stub(cuda_home: Path, directory: Path) -> Path:
    """A ``libcuda.so`` (soname ``libcuda.so.1``) defining every function of the toolkit's
    ``cuda.h``, compiled with the host C compiler."""
    header = cuda_home / "include" / "cuda.h"
    if not header.is_file():
        raise ToolchainError("no driver, no toolkit stub libcuda.so and no cuda.h to make one",
                             where=str(cuda_home),
                             hint="install the toolkit's stubs (lib64/stubs) or a driver")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ToolchainError("no C compiler to make the libcuda stub with", where="PATH",
                             hint="install gcc, or the toolkit's lib64/stubs")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "libcuda-stub.c"
    source.write_text(stub_source(driver_symbols(header.read_text(encoding="utf-8",
                                                                  errors="replace"))),
                      encoding="utf-8")
    out = directory / "libcuda.so"
    run([compiler, "-shared", "-fPIC", f"-Wl,-soname,{STUB_SONAME}", "-o", out, source],
        echo=False, timeout=300)
    return out


def choose_libcuda(cuda_home: Path, directory: Path, *, make: bool = True) -> Libcuda | None:
    """The library ``-lcuda`` links to: the toolkit's stub, a driver's, or one made here
    (``make``; without it None says none exists yet)."""
    stub = toolkit_stub(cuda_home)
    if stub is not None:
        return Libcuda(stub, "toolkit stub")
    driver = driver_library()
    if driver is not None:
        return Libcuda(driver, "driver")
    if not make:
        return None
    return Libcuda(provided_stub(cuda_home, directory), "sparkbuild stub from cuda.h")


def _versioned(name: str, dirs: list[Path]) -> Path | None:
    for directory in dirs:
        for candidate in sorted(directory.glob(f"lib{name}.so*")):
            if candidate.is_file() and re.fullmatch(rf"lib{name}\.so(\.\d+)*", candidate.name):
                return candidate
    return None


def library_dirs(cuda_home: Path, environment: list[Path], builder_site: Path) -> list[Path]:
    return [cuda_home / "lib64", cuda_home / "lib",
            *(d for site in environment for d in sorted(site.glob("nvidia/*/lib"))),
            *sorted(builder_site.glob("nvidia/*/lib"))]


def missing_libraries(needed: tuple[str, ...], dirs: list[Path]) -> list[str]:
    """The ``libNAME.so`` of ``needed`` found in none of ``dirs``."""
    return [f"lib{name}.so" for name in needed if _versioned(name, dirs) is None]


def link_environment(*, cuda_home: Path, python: Path, builder_site: Path, work: Path,
                     needed_headers: tuple[str, ...], needed_libraries: tuple[str, ...] = ()
                     ) -> LinkEnvironment:
    """Headers found (a missing one raised, nothing compiled yet) and the link directory."""
    environment = environment_site(python)
    roots = include_roots(cuda_home, environment, builder_site)
    dirs, found, missing = find_headers(needed_headers, roots)
    lib_dirs = library_dirs(cuda_home, environment, builder_site)
    missing += missing_libraries(needed_libraries, lib_dirs)
    if missing:
        raise missing_headers_error(missing, roots)
    link_dir = work / "link"
    shutil.rmtree(link_dir, ignore_errors=True)
    link_dir.mkdir(parents=True)
    libcuda = choose_libcuda(cuda_home, work / "libcuda-stub")
    assert libcuda is not None
    (link_dir / "libcuda.so").symlink_to(libcuda.path)
    libraries: dict[str, str] = {}
    for name in LINK_LIBRARIES:
        target = _versioned(name, lib_dirs)
        if target is not None:
            (link_dir / f"lib{name}.so").symlink_to(target)
            libraries[name] = str(target)
    return LinkEnvironment(dirs, found, libcuda, link_dir, libraries)
