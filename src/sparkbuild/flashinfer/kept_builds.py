"""flashinfer's modules built ahead, kept in the cache and reused while what built them stands.

``[flashinfer] aot`` builds the same modules on every ``wheel`` (95 builder steps, 110 s on
16 cores for a narrowed set; minutes on a Spark with the default set) -- also on a warm
rebuild after a one-line patch to vLLM, which changes nothing flashinfer's builder reads.
The built wheel is kept as a cache blob, its entry under ``flashinfer-aot-builds/KEY``, KEY
the sha256 of everything the build reads:

* the pinned flashinfer-python wheel's bytes (its sources and its builder) and the bytes of
  every wheel in the builder's wheel directory (what ``pip install --find-links`` can pick);
* the target archs, ``aot_args`` and the model's module set (each generator and its
  arguments);
* the CUDA compiler: its root, its version and the bytes of its ``nvcc`` and ``ptxas``;
* the build's interpreter and its torch, the platform, and sparkbuild's driver, build
  environment and packing code (their sources).

A kept entry whose blob is gone, whose copy does not hash to the recorded sha256 or whose
version is not the one this request would write is a miss, never an error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import SparkbuildError
from sparkbuild.flashinfer import builder as flashinfer_builder
from sparkbuild.flashinfer.builder import AotRequest, AotResult, build_jit_cache
from sparkbuild.flashinfer.jit_cache_wheel import jit_cache_version, platform_tag, wheel_version
from sparkbuild.store.hashing import sha256_bytes, sha256_file

if TYPE_CHECKING:
    from sparkbuild.store.cache import Cache

SCHEMA = 2
NAMESPACE = "flashinfer-aot-builds"
COMPILER_FILES = ("nvcc", "ptxas")


def _file_digest(path: Path) -> str | None:
    return sha256_file(path, progress=False) if path.is_file() else None


def aot_key(request: AotRequest, torch: str | None) -> str:
    """The sha256 of everything the build of ``request`` reads (the module's docstring)."""
    keyed = {
        "schema": SCHEMA,
        "flashinfer_wheel": _file_digest(request.flashinfer_wheel),
        "builder_wheels": {path.name: _file_digest(path)
                           for path in sorted(request.wheel_dir.glob("*.whl"))},
        "archs": list(request.archs),
        "args": list(request.args),
        "modules": [m.plan_item() for m in request.modules],
        "cuda_home": str(request.cuda_home),
        "cuda_version": request.cuda_version,
        "compiler": {name: _file_digest(request.cuda_home / "bin" / name)
                     for name in COMPILER_FILES},
        "python": str(request.python),
        "torch": torch,
        "platform": platform_tag(),
        "code": [_file_digest(Path(flashinfer_builder.__file__)), _file_digest(Path(__file__)),
                 *(_file_digest(Path(flashinfer_builder.__file__).with_name(name))
                   for name in ("driver.py", "build_env.py", "jit_cache_wheel.py"))],
    }
    return sha256_bytes(json.dumps(keyed, sort_keys=True).encode())


def keep(cache: Cache, key: str, result: AotResult) -> None:
    """Store the built wheel as a blob and what the build gave under ``key``."""
    digest = cache.put_file(result.wheel, name=result.wheel.name)
    cache.keep(NAMESPACE, key, SCHEMA, {
        "wheel": {"name": result.wheel.name, "sha256": digest},
        "version": result.version, "flashinfer_version": result.flashinfer_version,
        "modules": result.modules, "seconds": result.seconds, "size": result.size})


def _strings(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("not a list of strings")
    return value


def kept(cache: Cache, key: str, request: AotRequest) -> AotResult | None:
    """The build kept under ``key``, its wheel copied into ``request.out``; None when there
    is none, or when it does not read back exactly."""
    entry = cache.kept(NAMESPACE, key, SCHEMA)
    if entry is None:
        return None
    try:
        wheel: dict[str, Any] = entry["wheel"]
        name, digest = str(wheel["name"]), str(wheel["sha256"])
        version = str(entry["version"])
        flashinfer_version = wheel_version(request.flashinfer_wheel)
        modules = _strings(entry["modules"])
        seconds, size = float(entry["seconds"]), int(entry["size"])
        if (version != jit_cache_version(flashinfer_version, request.cuda_version)
                or str(entry["flashinfer_version"]) != flashinfer_version or not modules
                or "/" in name or not name.endswith(".whl")):
            return None
        source = cache.path_of(digest)
    except (KeyError, TypeError, ValueError, SparkbuildError):
        return None
    request.out.mkdir(parents=True, exist_ok=True)
    copy = request.out / name
    shutil.copyfile(source, copy)
    if sha256_file(copy, progress=False) != digest or copy.stat().st_size != size:
        copy.unlink()
        return None
    return AotResult(copy, version, flashinfer_version, request.archs, request.args,
                     modules, seconds, size, None, reused=str(entry["when"]))


def reusing_jit_cache(cache: Cache, request: AotRequest, torch: str | None) -> AotResult:
    """The kept build when what it read stands, else a new one, kept."""
    key = aot_key(request, torch)
    found = kept(cache, key, request)
    if found is not None:
        return found
    result = build_jit_cache(request)
    keep(cache, key, result)
    return result
