"""What flashinfer's builder needs in the cache, fetched before anything compiles.

``CACHE/flashinfer-aot/<cpXY-machine>/`` holds the pinned flashinfer-python wheel and what
its builder imports (:data:`IMPORT_REQUIREMENTS`), marked complete once filled, and the
pinned NVIDIA wheels (:data:`sparkbuild.flashinfer.build_env.HEADER_WHEELS`) whose headers and
libraries the toolkit and the build environment lack.  ``wheel`` asks
:func:`ready_builder` in its pins phase: online the missing ones are downloaded then,
offline each is named; a prebuilt jit-cache is fetched and its version checked there too.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from sparkbuild.console import step
from sparkbuild.errors import CacheMissError, RecipeError
from sparkbuild.flashinfer.build_env import (
    HEADER_WHEEL_OF,
    environment_site,
    find_headers,
    include_roots,
    library_dirs,
    missing_libraries,
    toolkit_root,
)
from sparkbuild.flashinfer.module_set import needed_headers, needed_libraries
from sparkbuild.proc import run
from sparkbuild.store.files import write_text_atomic
from sparkbuild.vendoring.index import FLASHINFER_AOT_WHEELS

if TYPE_CHECKING:
    from sparkbuild.recipe import Pin, Recipe

IMPORT_REQUIREMENTS = (
    "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6",
    "nvidia-ml-py", "tqdm", "requests", "urllib3", "certifi", "idna", "charset-normalizer",
    "numpy", "filelock", "jinja2", "markupsafe", "packaging", "ninja",
)
"""What ``import flashinfer.aot`` (0.6.18) imports besides torch, found by importing it with
each one missing in turn; the build environment's torch serves as it is."""

COMPLETE = ".sparkbuild-complete"
"""The mark of a complete ``CACHE/flashinfer-aot/<tag>/``: the requirements it was filled for."""


def wanted_wheels(headers: tuple[str, ...], libraries: tuple[str, ...], cuda_home: Path,
                  environment: list[Path], site: Path) -> tuple[list[str], list[str]]:
    """What neither the toolkit nor ``environment`` (site-packages) nor ``site`` gives of
    ``headers`` and ``libraries``, and the pinned wheels that give it."""
    roots = include_roots(cuda_home, environment, site)
    missing = find_headers(headers, roots)[2]
    missing += missing_libraries(libraries, library_dirs(cuda_home, environment, site))
    return missing, sorted({HEADER_WHEEL_OF[m] for m in missing})


def held_wheels(wheel_dir: Path, wanted: list[str]) -> list[str]:
    """The pinned wheels of ``wanted`` not in ``wheel_dir``."""
    return [w for w in wanted if not any(wheel_dir.glob(
        f"{w.split('==')[0].replace('-', '_')}-{w.split('==')[1]}-*.whl"))]


def fetch_header_wheels(wanted: list[str], python: Path, wheel_dir: Path, log: Path) -> None:
    step(f"downloading {', '.join(wanted)}: their headers and libraries for flashinfer's "
         "modules")
    run([python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         "--dest", wheel_dir, *wanted], timeout=3600, log=log)


def pinned_flashinfer(recipe: Recipe) -> Pin:
    """The recipe's flashinfer-python pin (refused when it has none)."""
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
    pin = pinned_flashinfer(recipe)
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
    """``wheel``'s check before anything compiles (``[flashinfer] aot``): the model's set
    resolved, a prebuilt jit-cache fetched and its version checked; online, the builder's
    wheels (and the pinned NVIDIA wheels for headers the toolkit and this environment lack)
    are downloaded now; offline, what the cache lacks is returned."""
    from sparkbuild.flashinfer.module_set import recipe_set

    if recipe.flashinfer.jit_cache is not None:
        from sparkbuild.flashinfer.jit_cache import ready_jit_cache
        from sparkbuild.store.cache import Cache

        ready_jit_cache(recipe, Cache(cache_root), offline=offline,
                        pinned=pinned_flashinfer(recipe).version)
        return []
    if not recipe.flashinfer.aot:
        return []
    chosen = recipe_set(recipe)  # a [model] the mapping refuses is said now
    tag = running_tag()
    wheel_dir = cache_root / FLASHINFER_AOT_WHEELS / tag
    gaps = builder_gaps(recipe, cache_root, tag)
    if gaps and not offline:
        fetch_builder_wheels(pinned_flashinfer(recipe), Path(sys.executable), wheel_dir)
        gaps = builder_gaps(recipe, cache_root, tag)
    modules = chosen.modules if chosen else []
    cuda_home = toolkit_root()
    if cuda_home is None:
        return gaps  # doctor names the missing nvcc
    missing, wanted = wanted_wheels(needed_headers(modules), needed_libraries(modules),
                                    cuda_home, environment_site(Path(sys.executable)),
                                    wheel_dir / "-")
    absent = held_wheels(wheel_dir, wanted)
    if absent and not offline:
        wheel_dir.mkdir(parents=True, exist_ok=True)
        fetch_header_wheels(absent, Path(sys.executable), wheel_dir,
                            wheel_dir / "headers-download.log")
        absent = held_wheels(wheel_dir, wanted)
    return gaps + [f"{wheel} (for {', '.join(missing)}, which the toolkit at {cuda_home} "
                   f"lacks): not in {wheel_dir}" for wheel in absent]


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
