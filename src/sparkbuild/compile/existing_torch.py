"""Building against the torch already installed: vLLM's ``use_existing_torch`` flow.

NVIDIA's PyTorch containers ship a torch built for their CUDA; installing the tree's
pinned torch on top would replace it.  vLLM's answer is ``use_existing_torch.py``, which
strips the torch pins from ``requirements/`` and ``pyproject.toml`` so that a build with
``--no-build-isolation`` uses the torch it finds.  ``wheel --use-existing-torch`` does the
same: it runs the tree's own script (``--prefix``: only the ``torch==``-style pins), or,
for a tree without one, makes the same edit itself, and builds with the running Python
instead of a build environment made from vendored wheels.

doctor compares that torch (its version and the CUDA it was built with) and the CUDA
toolkit with the tree's pins; the wheelhouse manifest records the torch the wheel was
really built against.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from sparkbuild.compile.doctor import Check, tree_torch_pin
from sparkbuild.console import info, step
from sparkbuild.proc import run

if TYPE_CHECKING:
    from sparkbuild.toolchain.tools import Tool

SCRIPTS = ("use_existing_torch.py", "tools/use_existing_torch.py")
TORCH_LIB_PREFIXES = ("torch=", "torchvision=", "torchaudio=", "torchcodec=", '"torch=',
                      '"torchvision=', '"torchaudio=', '"torchcodec=',
                      '"torch =', '"torchvision =', '"torchaudio =', '"torchcodec =')
_CUDA = re.compile(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOCKER_CUDA = re.compile(r"^ARG\s+CUDA_VERSION=(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class RunningTorch:
    version: str
    """With its local label, e.g. ``2.11.0+cu130``."""
    cuda: str | None
    """``torch.version.cuda``; None for a CPU build."""
    location: str


def running_torch() -> RunningTorch | None:
    """The torch of this interpreter, read from its files (importing it takes seconds)."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    package = Path(str(dist.locate_file("torch")))
    cuda = None
    try:
        match = _CUDA.search((package / "version.py").read_text(encoding="utf-8"))
        cuda = match.group(1) if match else None
    except OSError:
        pass
    return RunningTorch(dist.version, cuda, str(package))


def tree_cuda_pin(tree: Path) -> tuple[str, str] | None:
    """The CUDA toolkit the tree's release images build with (``docker/Dockerfile``)."""
    dockerfile = tree / "docker" / "Dockerfile"
    try:
        match = _DOCKER_CUDA.search(dockerfile.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return (match.group(1), "docker/Dockerfile ARG CUDA_VERSION") if match else None


def strip_torch_pins(tree: Path) -> list[str]:
    """The edit ``use_existing_torch.py --prefix`` makes, for a tree without the script."""
    removed = []
    files = [*sorted(tree.glob("requirements/**/*.txt")),
             *sorted(tree.glob("requirements/**/*.in")), tree / "pyproject.toml"]
    for path in files:
        if not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines
                if not line.lower().strip().startswith(TORCH_LIB_PREFIXES)]
        if len(kept) != len(lines):
            removed += [f"{path.relative_to(tree)}: {line.strip()}"
                        for line in lines if line not in kept]
            path.write_text("".join(kept), encoding="utf-8")
    return removed


def use_existing_torch(tree: Path, logs: Path) -> Path:
    """Unpin torch in ``tree`` as vLLM's script does; returns the Python to build with."""
    script = next((tree / name for name in SCRIPTS if (tree / name).is_file()), None)
    if script is None:
        removed = strip_torch_pins(tree)
        step("no use_existing_torch.py in the tree: removed the torch pins the same way")
        for line in removed:
            info(f"  removed {line}")
    else:
        flags = ["--prefix"] if "--prefix" in script.read_text(encoding="utf-8") else []
        step(f"running the tree's {script.relative_to(tree)} {' '.join(flags)}".rstrip())
        logs.mkdir(parents=True, exist_ok=True)
        run([sys.executable, script, *flags], cwd=tree, timeout=300,
            log=logs / "use_existing_torch.log")
    return Path(sys.executable)


# -- doctor's checks ------------------------------------------------------------------------


def _version_pair(text: str | None) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in numbers[:2])


def existing_torch_checks(tree: Path | None, nvcc: Tool | None) -> list[Check]:
    """``--use-existing-torch``: the running torch and the toolkit against the tree's pins.

    Every difference is a warning with its reason (the user chose this torch); only a
    missing torch stops the build.
    """
    torch = running_torch()
    if torch is None:
        return [Check("torch (existing)", False, "not installed",
                      "--use-existing-torch builds against the torch of this environment, "
                      "and there is none: install it or drop the flag", hard=True)]
    pin = tree_torch_pin(tree) if tree else None
    checks = []
    if pin is None:
        checks.append(Check("torch (existing)", True, torch.version, "no tree pin to compare"))
    elif Version(torch.version).public != pin[0].public:
        checks.append(Check("torch (existing)", False, torch.version, (
            f"the tree pins torch=={pin[0]} ({pin[1]}); building against {torch.version} "
            "instead: the kernels compile against this torch's C++ API, so the wheel "
            "runs only next to this torch")))
    else:
        checks.append(Check("torch (existing)", True, torch.version,
                            f"matches torch=={pin[0]} ({pin[1]}); {torch.location}"))
    nvcc_version = str(nvcc.version) if nvcc and nvcc.version else None
    if torch.cuda is None:
        checks.append(Check("torch CUDA", False, "none (a CPU build)",
                            "vLLM's CUDA extensions need a CUDA build of torch"))
    elif nvcc_version and _version_pair(torch.cuda) != _version_pair(nvcc_version):
        same_major = _version_pair(torch.cuda)[:1] == _version_pair(nvcc_version)[:1]
        checks.append(Check("torch CUDA", False, torch.cuda, (
            f"torch was built with CUDA {torch.cuda}, nvcc is {nvcc_version}: "
            + ("same major version, usually compatible, but not what torch was tested with"
               if same_major else "different major versions: the extensions would need "
               "another CUDA runtime than torch loads"))))
    else:
        checks.append(Check("torch CUDA", True, torch.cuda, f"matches nvcc {nvcc_version}"))
    cuda_pin = tree_cuda_pin(tree) if tree else None
    if cuda_pin and nvcc_version and _version_pair(cuda_pin[0]) != _version_pair(nvcc_version):
        checks.append(Check("CUDA toolkit", False, nvcc_version, (
            f"the tree's release builds use CUDA {cuda_pin[0]} ({cuda_pin[1]}); nvcc "
            f"{nvcc_version} may compile some kernels differently or lack features")))
    elif cuda_pin:
        checks.append(Check("CUDA toolkit", True, str(nvcc_version),
                            f"matches CUDA {cuda_pin[0]} ({cuda_pin[1]})"))
    if tree is not None:
        checks.append(_check_build_requirements(tree))
    return checks


def _check_build_requirements(tree: Path) -> Check:
    """The tree's non-torch build requirements must be installed already (no isolation).

    One that is not installed at all stops the build before anything runs: the tree's
    metadata step imports it (vLLM's setup.py imports setuptools_scm), so the build would
    fail there; so does pip, which runs the build.  One installed at a version outside the
    tree's range is a warning: the user chose this environment, and the build may well go
    through.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from sparkbuild.compile.own_requirements import installed
    from sparkbuild.vendoring.build_deps import plan_wheels

    wheels, _torch = plan_wheels(tree)
    absent: dict[str, Requirement] = {}
    outside = []
    # pip too: the build is `python -m pip wheel --no-build-isolation` in this environment
    # (a venv made without pip failed there, after the bundle import, the copy and doctor)
    for requirement in [*(Requirement(w.requirement) for w in wheels), Requirement("pip")]:
        if requirement.name.lower().startswith("torch"):
            continue
        found, met = installed(requirement)
        if found is None:
            absent.setdefault(canonicalize_name(requirement.name), requirement)
        elif not met:
            outside.append(f"{requirement} (found {found})")
    if absent:
        names = " ".join(f"'{r}'" for r in absent.values())
        return Check("build requirements", False, f"{len(absent)} not installed", (
            "a build on the existing torch imports the tree's build requirements from this "
            f"environment, and these are not installed: {names}; install them first "
            f"(pip install {names}; offline: pip install --no-index --find-links DIR "
            f"{names})" + (f"; also outside the tree's range: {'; '.join(outside)}"
                           if outside else "")), hard=True)
    if outside:
        return Check("build requirements", False, f"{len(outside)} outside the range", (
            "a build on the existing torch uses this environment's packages: "
            + "; ".join(outside)))
    return Check("build requirements", True, f"{len(wheels) + 1} met",
                 "all installed, pip included")
