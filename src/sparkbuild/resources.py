"""Where sparkbuild's non-Python resources live: the source checkout, or the installed wheel.

The recipes, the patch series, the CMake helper scripts and the E2M1 header with its
checkers are data, not Python.  In a source checkout (and in an editable install, whose
modules are the checkout's own files) they sit at the repository root beside ``src/``.  A
wheel carries a copy of the same tree in ``sparkbuild/_resources``: the root CMakeLists.txt
installs it there, run by scikit-build-core (the build backend).  The copy mirrors the
repository's layout so the relative paths written inside the files keep working in both
places: a recipe's ``../patches/series``, a patch's ``../csrc/e2m1.cuh``.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The directory of the ``sparkbuild`` package: ``src/sparkbuild`` in a checkout."""

INSTALLED_DIR_NAME = "_resources"
"""The resource tree's directory inside the installed package."""

CHECKOUT_MARKER = Path("patches") / "series"
"""A file only a checkout's root has; its presence beside ``src/`` means "checkout"."""


def checkout_root(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The checkout whose ``src/`` holds ``package_dir``, or None when installed.

    A wheel installed into site-packages has no ``src/`` parent; a checkout that lost its
    patch series is not usable as a resource root, so it counts as "not a checkout" too.
    """
    if package_dir.parent.name != "src":
        return None
    root = package_dir.parent.parent
    return root if (root / CHECKOUT_MARKER).is_file() else None


def find_resource_root(package_dir: Path = PACKAGE_DIR) -> Path:
    """The checkout root for a checkout, else ``package_dir/_resources`` (the wheel's copy)."""
    checkout = checkout_root(package_dir)
    return checkout if checkout is not None else package_dir / INSTALLED_DIR_NAME


def resource_root() -> Path:
    """Root of the resource tree this running sparkbuild uses (see the module docstring)."""
    return find_resource_root(PACKAGE_DIR)


def recipes_dir() -> Path:
    """``recipes/``: the shipped recipe TOML files."""
    return resource_root() / "recipes"


def patches_dir() -> Path:
    """``patches/``: the patch series file and the patches it names."""
    return resource_root() / "patches"


def build_tools_dir() -> Path:
    """``build_tools/``: CMake scripts sparkbuild hands to cmake (provider, arch evaluation)."""
    return resource_root() / "build_tools"


def csrc_dir() -> Path:
    """``csrc/``: the E2M1 header, its CMake project and the checkers the selftest builds."""
    return resource_root() / "csrc"
