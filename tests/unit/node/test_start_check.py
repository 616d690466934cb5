"""``install`` refuses, before anything is installed, a built wheel a start of which imports
a module of its own package that the wheel lacks (sparkbuild.node.start_check): a made-up
wheel shaped as a vLLM one built with ``--targets _C`` (which leaves ``_C_stable_libtorch`` out)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sparkbuild.errors import VerifyError
from sparkbuild.node.start_check import (
    provided_modules,
    refuse_unstartable,
    start_modules_of,
    unresolved_start_imports,
)
from sparkbuild.sources.module_imports import top_level_imports

CUDA_PLATFORM = b'''"""the CUDA platform: resolved at every start."""
import os

import vllm._C  # noqa
from . import interface
import vllm._C_stable_libtorch  # noqa
from vllm.config import VllmConfig

def f():
    import vllm._moe_C  # inside a function: only when called
'''

INTERFACE = b'''
from ..config import VllmConfig
from vllm.platforms import current_platform_is_a_name
'''

GUARDED = b'''
try:
    import vllm._moe_C
except ImportError:
    pass
if False:
    from vllm.vllm_flash_attn import _vllm_fa2_C
import numpy
'''

MEMBERS = {
    "vllm/__init__.py": b"",
    "vllm/_C.abi3.so": b"\x7fELF",
    "vllm/config/__init__.py": b"class VllmConfig: ...\n",
    "vllm/platforms/__init__.py": b"def __getattr__(name): ...\n",
    "vllm/platforms/cuda.py": CUDA_PLATFORM,
    "vllm/platforms/interface.py": INTERFACE,
    "vllm/guarded.py": GUARDED,
    "vllm/unused_path.py": b"import vllm.vllm_flash_attn\n",  # imported by no start module
    "vllm/broken.py": b"import vllm.nowhere\ndef (:\n",
    "vllm/entrypoints/cli.py": b"import vllm.guarded\n",
    "vllm-0.20.0.dist-info/entry_points.txt":
        b"[console_scripts]\nvllm = vllm.entrypoints.cli:main\n",
    "vllm-0.20.0.dist-info/RECORD": b"",
}


def _wheel(tmp_path: Path, *, with_stable: bool, extra: dict[str, bytes] | None = None) -> Path:
    wheel = tmp_path / f"vllm-0.20.0-{int(with_stable)}-cp312-linux_x86_64.whl"
    members = {**MEMBERS, **(extra or {})}
    if with_stable:
        members["vllm/_C_stable_libtorch.cpython-312-x86_64-linux-gnu.so"] = b"\x7fELF"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return wheel


def test_the_missing_extension_is_named_with_the_file_and_line(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, with_stable=False)
    found = unresolved_start_imports(wheel, ["vllm.platforms.cuda"])
    assert found == {"vllm._C_stable_libtorch": ["vllm/platforms/cuda.py:6"]}


def test_a_module_no_start_reaches_is_not_judged(tmp_path: Path) -> None:
    """vllm/unused_path.py imports a missing package, but nothing a start runs imports it;
    without the platform as a start module the missing extension is not reached either."""
    assert unresolved_start_imports(_wheel(tmp_path, with_stable=True),
                                    ["vllm.platforms.cuda"]) == {}
    assert unresolved_start_imports(_wheel(tmp_path, with_stable=False)) == {}


def test_console_scripts_are_start_modules(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, with_stable=True,
                   extra={"vllm/guarded.py": GUARDED + b"import vllm._flashmla_C\n"})
    assert unresolved_start_imports(wheel) == {"vllm._flashmla_C": ["vllm/guarded.py:9"]}


def test_a_named_start_module_the_wheel_lacks_is_a_finding(tmp_path: Path) -> None:
    found = unresolved_start_imports(_wheel(tmp_path, with_stable=True), ["vllm.platforms.rocm"])
    assert found == {"vllm.platforms.rocm": ["start module"]}


def test_install_refuses_it_before_anything_is_installed(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, with_stable=False)
    manifest = {"build": {"start_modules": ["vllm.platforms.cuda"]}}
    refuse_unstartable([_wheel(tmp_path, with_stable=True)], start_modules_of(manifest))
    with pytest.raises(VerifyError) as caught:
        refuse_unstartable([wheel], start_modules_of(manifest))
    assert "vllm._C_stable_libtorch (imported at vllm/platforms/cuda.py:6)" in caught.value.what
    assert caught.value.where == str(wheel)
    assert "nothing was installed" in (caught.value.hint or "")
    assert start_modules_of({}) == [] and start_modules_of({"build": None}) == []


def test_extensions_packages_and_namespace_directories_are_modules() -> None:
    provided = provided_modules([
        "pkg/__init__.py", "pkg/_ext.abi3.so", "pkg/sub/mod.py",
        "pkg/native.cpython-312-x86_64-linux-gnu.so", "pkg/ns/data.txt",
        "pkg-1.dist-info/METADATA"])
    assert {"pkg", "pkg._ext", "pkg.sub", "pkg.sub.mod", "pkg.native", "pkg.ns"} <= provided
    assert not any(m.startswith("pkg-1") for m in provided)


def test_only_unconditional_statements_of_the_module_body_count() -> None:
    found = top_level_imports(CUDA_PLATFORM + GUARDED, "x.py", "vllm.platforms")
    names = {(i.name, i.module) for i in found}
    assert ("vllm._C_stable_libtorch", True) in names
    assert ("vllm.config", True) in names and ("vllm.config.VllmConfig", False) in names
    assert ("vllm.platforms.interface", False) in names  # from . import interface
    assert not any(i.name == "vllm._moe_C" for i in found)  # in a function, in a try
    assert not any("_vllm_fa2_C" in i.name for i in found)  # under if
    assert top_level_imports(b"def (:\n", "bad.py") == []


def test_relative_imports_resolve_against_the_files_package() -> None:
    found = top_level_imports(INTERFACE, "interface.py", "vllm.platforms")
    assert found[0].name == "vllm.config" and found[0].module
    assert top_level_imports(INTERFACE, "interface.py")[0].name == "vllm.platforms"
    assert top_level_imports(b"from .... import x\n", "deep.py", "a.b") == []
