"""flashinfer's kernels built ahead: a ``flashinfer-jit-cache`` wheel for the recipe's target.

flashinfer compiles each kernel module at first use (nvcc into
``~/.cache/flashinfer/<version>/<arch>/cached_ops``), unless the ``flashinfer_jit_cache``
package is installed: then ``flashinfer.jit.env.FLASHINFER_AOT_DIR`` is that package's
``get_jit_cache_dir()`` and a module ``NAME`` is loaded from ``DIR/NAME/NAME.so``
(``jit/core.py: JitSpec.aot_path``).  Its ``__version__`` must start with flashinfer's own
(``jit/env.py: _get_aot_dir``), so the wheel is versioned ``<flashinfer version>+cu<CUDA>``.

The build is flashinfer's own builder, from the pinned flashinfer-python wheel:
``flashinfer.aot.main`` with the recipe's ``[flashinfer] aot_args`` and
``FLASHINFER_CUDA_ARCH_LIST``, run by the build environment's interpreter (it has torch)
with the wheel and the few packages ``import flashinfer.aot`` needs installed beside it
(``--target``, from cached wheels, no index).  Two things the installed wheel does not do
by itself, the driver below adds:

* ``flashinfer.aot.main`` takes its sources from ``<site-packages>/csrc`` and
  ``3rdparty/`` (the layout of a source checkout); the wheel holds them in
  ``flashinfer/data/``, so the driver passes a staged root of links into it;
* ``--only GLOB`` (sparkbuild's, repeatable) keeps only flashinfer's modules whose name
  matches: flashinfer's own switches cannot leave out attention.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import sysconfig
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from sparkbuild.console import step
from sparkbuild.errors import (
    CacheMissError,
    CommandFailed,
    HashMismatchError,
    RecipeError,
    UsageError,
)
from sparkbuild.proc import run
from sparkbuild.store.cache import FLASHINFER_AOT_WHEELS
from sparkbuild.store.files import write_text_atomic
from sparkbuild.store.hashing import record_form, sha256_file
from sparkbuild.toolchain.archs import flashinfer_arch_list

if TYPE_CHECKING:
    from sparkbuild.recipe import Pin, Recipe

JIT_CACHE_PROJECT = "flashinfer-jit-cache"
JIT_CACHE_PACKAGE = "flashinfer_jit_cache"
JIT_CACHE_DIR = "jit_cache"
"""``flashinfer_jit_cache/jit_cache/<module>/<module>.so``: what get_jit_cache_dir() names."""

IMPORT_REQUIREMENTS = (
    "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6",
    "nvidia-ml-py", "tqdm", "requests", "urllib3", "certifi", "idna", "charset-normalizer",
    "numpy", "filelock", "jinja2", "markupsafe", "packaging", "ninja",
)
"""What ``import flashinfer.aot`` (0.6.18) imports besides torch, found by importing it with
each one missing in turn; the build environment's torch serves as it is."""

EPOCH = (1980, 1, 1, 0, 0, 0)
COMPLETE = ".sparkbuild-complete"
"""The mark of a complete ``CACHE/flashinfer-aot/<tag>/``: the requirements it was filled for."""

DRIVER = r'''
import fnmatch, sys
from pathlib import Path

root, out, build, *args = sys.argv[1:]
only, rest, it = [], [], iter(args)
for arg in it:
    if arg == "--only":
        only.append(next(it))
    elif arg.startswith("--only="):
        only.append(arg.split("=", 1)[1])
    else:
        rest.append(arg)
import flashinfer
from flashinfer import aot

data = Path(flashinfer.__file__).resolve().parent / "data"
staged = Path(root)
for rel, target in {"csrc": "csrc", "include": "include", "3rdparty/cutlass": "cutlass",
                    "3rdparty/spdlog": "spdlog"}.items():
    link = staged / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(data / target)
compile_modules = aot.compile_and_package_modules

def compile_from_wheel(*a, **k):
    k["project_root"] = staged
    return compile_modules(*a, **k)

aot.compile_and_package_modules = compile_from_wheel
if only:
    generate = aot.gen_all_modules

    def selected(*a, **k):
        specs = generate(*a, **k)
        chosen = [s for s in specs if any(fnmatch.fnmatchcase(s.name, p) for p in only)]
        if not chosen:
            names = " ".join(sorted(s.name for s in specs))
            sys.exit(f"--only {' '.join(only)} matches none of flashinfer's modules: {names}")
        return chosen

    aot.gen_all_modules = selected
sys.argv = ["flashinfer.aot", "--out-dir", out, "--build-dir", build, *rest]
aot.main()
'''

_OWN_OPTIONS = ("--out-dir", "--build-dir")


@dataclass(frozen=True)
class AotRequest:
    flashinfer_wheel: Path
    """The pinned flashinfer-python wheel: its sources and its builder."""
    wheel_dir: Path
    """Cached wheels of :data:`IMPORT_REQUIREMENTS` (pip's --find-links, no index)."""
    python: Path
    """The build environment's interpreter (it has torch)."""
    archs: tuple[str, ...]
    out: Path
    """The directory the jit-cache wheel is written into."""
    work: Path
    cuda_home: Path
    cuda_version: str
    """``13.0``: the wheel's local label is ``cu130``."""
    args: tuple[str, ...] = ()
    jobs: int | None = None
    sha256: str | None = None
    """The pin's hash of the flashinfer-python wheel, checked before use."""


@dataclass
class AotResult:
    wheel: Path
    version: str
    flashinfer_version: str
    archs: tuple[str, ...]
    args: tuple[str, ...]
    modules: list[str] = field(default_factory=list)
    seconds: float = 0.0
    size: int = 0
    log: Path | None = None
    reused: str | None = None
    """When the kept build this wheel was copied from was made (flashinfer/kept_builds.py)."""

    def to_dict(self) -> dict[str, Any]:
        return {"wheel": str(self.wheel), "version": self.version,
                "flashinfer_version": self.flashinfer_version, "archs": list(self.archs),
                "flashinfer_cuda_arch_list": flashinfer_arch_list(self.archs),
                "aot_args": list(self.args), "modules": self.modules,
                "seconds": round(self.seconds, 1), "size": self.size,
                "log": str(self.log) if self.log else None, "reused_since": self.reused}

    def summary(self) -> list[str]:
        how = (f"reused from the cache (built {self.reused} in {self.seconds:.0f} s)"
               if self.reused else f"in {self.seconds:.0f} s")
        return [f"flashinfer {self.flashinfer_version}: {len(self.modules)} modules built "
                f"ahead for {flashinfer_arch_list(self.archs)} {how}",
                f"  {self.wheel} ({self.size / 2**20:.1f} MiB)",
                *(f"  {name}" for name in self.modules)]

    @property
    def error(self) -> None:
        return None


def jit_cache_version(flashinfer_version: str, cuda_version: str) -> str:
    """``0.6.18+cu130``: flashinfer's version, then the CUDA it was compiled with."""
    major, _, minor = cuda_version.partition(".")
    return f"{flashinfer_version}+cu{major}{minor.split('.')[0] or '0'}"


def wheel_version(wheel: Path) -> str:
    """The version in a wheel's file name (``flashinfer_python-0.6.18-py3-...``)."""
    parts = wheel.name.split("-")
    if len(parts) < 5 or not wheel.name.endswith(".whl"):
        raise UsageError(f"not a wheel file name: {wheel.name}", where=str(wheel))
    return parts[1]


def platform_tag() -> str:
    """The tag of this machine's platform (the host code of the modules is built here)."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def build_jit_cache(request: AotRequest) -> AotResult:
    """Build flashinfer's modules for ``request.archs`` and pack them as a wheel."""
    for option in _OWN_OPTIONS:
        if any(a == option or a.startswith(option + "=") for a in request.args):
            raise UsageError(f"aot_args may not set {option}: sparkbuild chooses it",
                             hint="drop it from [flashinfer] aot_args")
    if not request.flashinfer_wheel.is_file():
        raise CacheMissError("the flashinfer-python wheel is not in the cache",
                             where=str(request.flashinfer_wheel),
                             hint="run the build online once, or import a bundle")
    if request.sha256 and sha256_file(request.flashinfer_wheel) != request.sha256:
        raise HashMismatchError("the flashinfer-python wheel differs from its pin",
                                where=str(request.flashinfer_wheel))
    version = wheel_version(request.flashinfer_wheel)
    work = request.work
    shutil.rmtree(work, ignore_errors=True)
    site, modules = work / "site", work / "modules"
    work.mkdir(parents=True)
    pip_env = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"}
    step(f"installing flashinfer-python {version} and what its builder imports beside the "
         "build environment")
    run([request.python, "-m", "pip", "install", "--no-index", "--no-deps", "--target", site,
         "--find-links", request.wheel_dir, request.flashinfer_wheel, *IMPORT_REQUIREMENTS],
        env=pip_env, timeout=1800, log=work / "install.log")
    driver = work / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    env = aot_environment(request, site)
    log = work / "aot.log"
    step(f"building flashinfer's modules ahead for FLASHINFER_CUDA_ARCH_LIST="
         f"{env['FLASHINFER_CUDA_ARCH_LIST']} (log: {log})")
    started = time.monotonic()
    try:
        run([request.python, driver, work / "root", modules, work / "build",
             *request.args], env=env, cwd=work, timeout=24 * 3600.0, log=log)
    except CommandFailed as exc:
        only = any(a == "--only" or a.startswith("--only=") for a in request.args)
        exc.hint = (  # proc.run's own hint is generic: this one says what to change
            "flashinfer generates every switched-on group's modules before --only picks: "
            "switch the others off too (--add-moe false, --add-misc false, --add-xqa false, "
            "...)" if only else "read the log; narrow the module set with [flashinfer] aot_args")
        raise
    seconds = time.monotonic() - started
    built = sorted(p.parent.name for p in modules.glob("*/*.so"))
    if not built:
        raise CommandFailed("flashinfer's builder wrote no module", where=str(log))
    wheel = pack_jit_cache(modules, request.out,
                           jit_cache_version(version, request.cuda_version), version)
    return AotResult(wheel, jit_cache_version(version, request.cuda_version), version,
                     request.archs, request.args, built, seconds, wheel.stat().st_size, log)


def aot_environment(request: AotRequest, site: Path) -> dict[str, str]:
    """The builder's environment: its packages first on the path, nvcc and ninja on PATH,
    a workspace inside ``work``, and no download (an artifact it needs fails the build)."""
    path = [str(site / "bin"), str(request.python.parent), str(request.cuda_home / "bin")]
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep),
        "PATH": os.pathsep.join([*path, os.environ.get("PATH", "")]),
        "CUDA_HOME": str(request.cuda_home),
        "FLASHINFER_CUDA_ARCH_LIST": flashinfer_arch_list(request.archs),
        "FLASHINFER_WORKSPACE_BASE": str(request.work / "workspace"),
        "FLASHINFER_NO_DOWNLOAD": "1",
        "PYTHONNOUSERSITE": "1",
    }
    if request.jobs:
        env["MAX_JOBS"] = str(request.jobs)
    return env


# -- the wheel -----------------------------------------------------------------------------


def _init_py(version: str) -> str:
    return (f'"""flashinfer {version.split("+")[0]}\'s modules built ahead by sparkbuild."""\n'
            "import os\n\n"
            f"__version__ = {version!r}\n\n\n"
            "def get_jit_cache_dir() -> str:\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "
            f"{JIT_CACHE_DIR!r})\n")


def _record_line(name: str, data: bytes) -> str:
    return f"{name},{record_form(hashlib.sha256(data))},{len(data)}"


def pack_jit_cache(modules: Path, out: Path, version: str, flashinfer_version: str) -> Path:
    """``flashinfer_jit_cache-VERSION-py3-none-PLATFORM.whl`` holding ``modules/*/*.so``
    under ``flashinfer_jit_cache/jit_cache/``: deterministic (sorted, fixed dates)."""
    tag = f"py3-none-{platform_tag()}"
    dist_info = f"{JIT_CACHE_PACKAGE}-{version}.dist-info"
    entries: list[tuple[str, bytes, bool]] = [
        (f"{JIT_CACHE_PACKAGE}/__init__.py", _init_py(version).encode(), False)]
    for library in sorted(modules.glob("*/*.so")):
        name = f"{JIT_CACHE_PACKAGE}/{JIT_CACHE_DIR}/{library.parent.name}/{library.name}"
        entries.append((name, library.read_bytes(), True))
    metadata = ("Metadata-Version: 2.1\n"
                f"Name: {JIT_CACHE_PROJECT}\nVersion: {version}\n"
                f"Summary: flashinfer {flashinfer_version}'s kernel modules, built ahead\n"
                f"Requires-Dist: flashinfer-python=={flashinfer_version}\n\n")
    wheel_file = ("Wheel-Version: 1.0\nGenerator: sparkbuild\nRoot-Is-Purelib: false\n"
                  f"Tag: {tag}\n")
    entries += [(f"{dist_info}/METADATA", metadata.encode(), False),
                (f"{dist_info}/WHEEL", wheel_file.encode(), False)]
    record = [_record_line(name, data) for name, data, _ in entries]
    record.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), False))
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{JIT_CACHE_PACKAGE}-{version}-{tag}.whl"
    tmp = wheel.with_name(wheel.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, executable in entries:
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if executable else 0o644) << 16
            archive.writestr(info, data)
    tmp.replace(wheel)
    return wheel


# -- from a recipe -------------------------------------------------------------------------


def _pin_of(recipe: Recipe) -> Pin:
    for pin in recipe.pins:
        if canonicalize_name(pin.name) == "flashinfer-python":
            return pin
    raise RecipeError("[flashinfer] aot needs a flashinfer-python pin", where=str(recipe.path),
                      hint="add a [[pins]] entry for flashinfer-python (its wheel holds the "
                      "builder), or set aot = false")


def _interpreter_tag(python: Path) -> str:
    if python.resolve() == Path(sys.executable).resolve():
        return running_tag()
    result = run([python, "-c", "import platform, sys; print(f'cp{sys.version_info[0]}"
                  "{sys.version_info[1]}-{platform.machine()}')"], echo=False, timeout=120)
    return result.output.strip().splitlines()[-1]


def running_tag() -> str:
    """``cp312-aarch64``: this interpreter's, which is the build environment's too (``wheel``
    creates it with this interpreter, or builds with it: ``--use-existing-torch``)."""
    return f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}"


def _wanted(pin: Pin) -> str:
    return "\n".join([pin.requirement, *IMPORT_REQUIREMENTS]) + "\n"


def _complete(wheel_dir: Path, pin: Pin) -> bool:
    """Whether ``wheel_dir``'s marker says every wheel the builder needs for ``pin`` is in."""
    marker = wheel_dir / COMPLETE
    return marker.is_file() and marker.read_text(encoding="utf-8") == _wanted(pin)


def builder_gaps(recipe: Recipe, cache_root: Path, tag: str) -> list[str]:
    """What ``CACHE/flashinfer-aot/<tag>/`` lacks of the wheels flashinfer's builder needs,
    each named (reads files only); a recipe without the flashinfer-python pin is refused."""
    pin = _pin_of(recipe)
    wheel_dir = cache_root / FLASHINFER_AOT_WHEELS / tag
    if not _complete(wheel_dir, pin):
        others = sorted(p.parent.name for p in wheel_dir.parent.glob(f"*/{COMPLETE}")
                        if p.parent.name != tag)
        held = f"; the cache holds them for {', '.join(others)} only" if others else ""
        return [f"flashinfer-aot {pin.requirement} and the {len(IMPORT_REQUIREMENTS)} "
                f"wheels its builder imports, for {tag}: not in {wheel_dir}{held}"]
    if not sorted(wheel_dir.glob(f"flashinfer_python-{pin.version}-*.whl")):
        return [f"flashinfer-aot {pin.requirement}: no wheel of it in {wheel_dir}"]
    return []


def fetch_builder_wheels(pin: Pin, python: Path, wheel_dir: Path) -> None:
    """Download the pinned flashinfer-python wheel and what its builder imports, for
    ``python`` (no dependencies: flashinfer's own closure is not needed to build)."""
    step(f"downloading {pin.requirement} and what its builder imports into {wheel_dir}")
    wheel_dir.mkdir(parents=True, exist_ok=True)
    run([python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         "--dest", wheel_dir, pin.requirement, *IMPORT_REQUIREMENTS],
        timeout=3600, log=wheel_dir / "download.log")
    write_text_atomic(wheel_dir / COMPLETE, _wanted(pin))


def ready_builder(recipe: Recipe, cache_root: Path, *, offline: bool) -> list[str]:
    """``wheel``'s check before anything compiles (``[flashinfer] aot``): online, the
    builder's wheels are downloaded now; offline, what the cache lacks is returned."""
    if not recipe.flashinfer.aot:
        return []
    tag = running_tag()
    gaps = builder_gaps(recipe, cache_root, tag)
    if gaps and not offline:
        fetch_builder_wheels(_pin_of(recipe), Path(sys.executable),
                             cache_root / FLASHINFER_AOT_WHEELS / tag)
        return builder_gaps(recipe, cache_root, tag)
    return gaps


def aot_wheels(pin: Pin, python: Path, cache_root: Path, *, offline: bool) -> tuple[Path, Path]:
    """The pinned flashinfer-python wheel and the wheels its builder imports, for
    ``python``: ``CACHE/flashinfer-aot/<python tag>/``, downloaded once (online), then used
    offline."""
    wheel_dir = cache_root / FLASHINFER_AOT_WHEELS / _interpreter_tag(python)
    if not _complete(wheel_dir, pin):
        if offline:
            raise CacheMissError(
                f"the cache lacks the wheels flashinfer's builder needs ({pin.requirement} "
                "and its imports)", where=str(wheel_dir),
                hint="run `sparkbuild flashinfer-aot` (or `wheel`) online once with this cache")
        fetch_builder_wheels(pin, python, wheel_dir)
    found = sorted(wheel_dir.glob(f"flashinfer_python-{pin.version}-*.whl"))
    if not found:
        raise CacheMissError(f"no {pin.requirement} wheel in the cache", where=str(wheel_dir))
    return found[0], wheel_dir


def build_for_recipe(recipe: Recipe, *, out: Path, python: Path, cache_root: Path,
                     work: Path, offline: bool, jobs: int | None = None,
                     cuda_home: Path | None = None) -> AotResult:
    """``sparkbuild flashinfer-aot``: the recipe's target and ``[flashinfer] aot_args``,
    with the pinned wheel's builder (``wheel`` reuses a kept build: flashinfer/kept_builds.py)."""
    return build_jit_cache(request_for_recipe(
        recipe, out=out, python=python, cache_root=cache_root, work=work, offline=offline,
        jobs=jobs, cuda_home=cuda_home))


def request_for_recipe(recipe: Recipe, *, out: Path, python: Path, cache_root: Path,
                       work: Path, offline: bool, jobs: int | None = None,
                       cuda_home: Path | None = None) -> AotRequest:
    """The build the recipe asks for: its target, its ``aot_args``, the pinned wheel and
    its builder's wheels (downloaded now when online and missing), and this nvcc."""
    from sparkbuild.toolchain.tools import cuda_root, find_nvcc

    pin = _pin_of(recipe)
    nvcc = find_nvcc()
    wheel, wheel_dir = aot_wheels(pin, python, cache_root, offline=offline)
    version = nvcc.version
    return AotRequest(
        flashinfer_wheel=wheel, wheel_dir=wheel_dir, python=python,
        archs=recipe.target.cuda_archs, out=out, work=work,
        cuda_home=cuda_home or cuda_root(nvcc),
        cuda_version=f"{version.major}.{version.minor}" if version else "0.0",
        args=recipe.flashinfer.aot_args, jobs=jobs, sha256=pin.sha256)
