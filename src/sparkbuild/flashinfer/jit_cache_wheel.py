"""The ``flashinfer-jit-cache`` wheel: how sparkbuild names, versions and packs it.

flashinfer loads a module ``NAME`` from ``flashinfer_jit_cache.get_jit_cache_dir()/NAME/
NAME.so`` when the package is installed, and only when its ``__version__`` starts with
flashinfer's own (``jit/env.py: _get_aot_dir``): the wheel is versioned ``<flashinfer
version>+cu<CUDA>``, holds that package and the modules, and is packed deterministically
(sorted members, fixed dates) so the same modules give the same bytes.
"""

from __future__ import annotations

import hashlib
import sysconfig
import zipfile
from pathlib import Path

from sparkbuild.errors import UsageError
from sparkbuild.store.hashing import record_form

JIT_CACHE_PROJECT = "flashinfer-jit-cache"
JIT_CACHE_PACKAGE = "flashinfer_jit_cache"
JIT_CACHE_DIR = "jit_cache"
"""``flashinfer_jit_cache/jit_cache/<module>/<module>.so``: what get_jit_cache_dir() names."""

EPOCH = (1980, 1, 1, 0, 0, 0)


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


def _init_py(version: str) -> str:
    return (f'"""flashinfer {version.split("+")[0]}\'s modules built ahead by sparkbuild."""\n'
            "import os\n\n"
            f"__version__ = {version!r}\n\n\n"
            "def get_jit_cache_dir() -> str:\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "
            f"{JIT_CACHE_DIR!r})\n")


def _record_line(name: str, data: bytes) -> str:
    return f"{name},{record_form(hashlib.sha256(data))},{len(data)}"


def pack_jit_cache(modules: Path, out: Path, version: str, flashinfer_version: str,
                   tag: str | None = None) -> Path:
    """``flashinfer_jit_cache-VERSION-py3-none-PLATFORM.whl`` holding ``modules/*/*.so``
    under ``flashinfer_jit_cache/jit_cache/``: deterministic (sorted, fixed dates).
    ``tag``: another wheel tag (a prebuilt wheel's, when it is cut down)."""
    tag = tag or f"py3-none-{platform_tag()}"
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
