"""``wheel --targets`` never leaves out an extension the package imports at module level
(sparkbuild.checks.start_imports): a made-up tree shaped as vLLM 0.20.0's."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.checks.start_imports import (
    left_out_at_start,
    refuse_left_out_at_start,
    setup_extensions,
)
from sparkbuild.errors import UsageError

SETUP = '''
ext_modules = []
ext_modules.append(CMakeExtension(name="vllm._moe_C"))
ext_modules.append(CMakeExtension(name="vllm.vllm_flash_attn._vllm_fa2_C", optional=True))
ext_modules.append(CMakeExtension(name="vllm._C"))
ext_modules.append(CMakeExtension(name='vllm._C_stable_libtorch'))
# vLLM 0.20+ copies triton_kernels' install tree in every build
ext_modules.append(CMakeExtension(name="vllm.triton_kernels", optional=True))
src = "third_party/triton_kernels"
'''

CUDA_PLATFORM = '''"""the CUDA platform: resolved at every start."""
import os

import vllm._C  # noqa
import vllm._C_stable_libtorch  # noqa

def f():
    import vllm._moe_C  # inside a function: only when called
'''

FUSED_MOE = '''
try:
    import vllm._moe_C  # noqa: guarded
except ImportError:
    pass
if False:
    from vllm.vllm_flash_attn import _vllm_fa2_C
'''


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "setup.py").write_text(SETUP, encoding="utf-8")
    platforms = tmp_path / "vllm" / "platforms"
    platforms.mkdir(parents=True)
    (platforms / "cuda.py").write_text(CUDA_PLATFORM, encoding="utf-8")
    (tmp_path / "vllm" / "fused_moe.py").write_text(FUSED_MOE, encoding="utf-8")
    (tmp_path / "vllm" / "broken.py").write_text("import vllm._C_stable_libtorch\ndef (:\n",
                                                 encoding="utf-8")
    return tmp_path


def test_the_extensions_are_read_from_setup_py_in_its_order(tree: Path) -> None:
    assert setup_extensions(tree) == ["vllm._moe_C", "vllm.vllm_flash_attn._vllm_fa2_C",
                                      "vllm._C", "vllm._C_stable_libtorch",
                                      "vllm.triton_kernels"]


def test_targets_leaving_out_a_module_level_import_are_refused_with_file_and_line(
        tree: Path) -> None:
    with pytest.raises(UsageError) as caught:
        refuse_left_out_at_start(tree, ("_C",))
    error = caught.value
    assert "vllm._C_stable_libtorch (imported at vllm/platforms/cuda.py:5)" in str(error)
    assert error.where == str(tree / "vllm" / "platforms" / "cuda.py") + ":5"
    assert error.hint is not None and "--targets _C,_C_stable_libtorch" in error.hint


def test_guarded_and_nested_imports_and_unparsable_files_do_not_count(tree: Path) -> None:
    # _moe_C and _vllm_fa2_C are only imported in try, if, or a function
    assert left_out_at_start(tree, ("_C", "_C_stable_libtorch")) == {}
    assert left_out_at_start(tree, ("_C_stable_libtorch",)) == {
        "vllm._C": ["vllm/platforms/cuda.py:4"]}


def test_no_targets_builds_everything_and_needs_no_check(tree: Path) -> None:
    assert left_out_at_start(tree, ()) == {}
    refuse_left_out_at_start(tree, ())


def test_allow_unstartable_warns_and_goes_on(tree: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    refuse_left_out_at_start(tree, ("_moe_C",), allow=True)
    err = capsys.readouterr().err
    assert "cannot start" in err and "vllm._C (imported at vllm/platforms/cuda.py:4)" in err


FLASH_ATTN_INIT = '''
from vllm.vllm_flash_attn.interface import FA2_AVAILABLE, FA3_AVAILABLE

if not (FA2_AVAILABLE or FA3_AVAILABLE):
    raise ImportError(
        "vllm.vllm_flash_attn requires the CUDA flash attention extensions "
        "(_vllm_fa2_C or _vllm_fa3_C). On ROCm, use upstream flash_attn."
    )

def later():
    raise ImportError("_moe_C: only if called")
'''


def test_a_module_that_refuses_to_import_without_an_extension_is_named(tree: Path) -> None:
    # --targets _C,_C_stable_libtorch installs, then the model's import fails in
    # vllm/vllm_flash_attn/__init__.py, which raises unless fa2 or fa3 is there
    setup = tree / "setup.py"
    fa3 = 'CMakeExtension(name="vllm.vllm_flash_attn._vllm_fa3_C")\n'
    setup.write_text(setup.read_text() + fa3)
    package = tree / "vllm" / "vllm_flash_attn"
    package.mkdir()
    (package / "__init__.py").write_text(FLASH_ATTN_INIT, encoding="utf-8")
    label = "one of vllm.vllm_flash_attn._vllm_fa2_C, vllm.vllm_flash_attn._vllm_fa3_C"
    assert left_out_at_start(tree, ("_C", "_C_stable_libtorch")) == {
        label: ["vllm/vllm_flash_attn/__init__.py:5"]}
    assert left_out_at_start(tree, ("_C", "_C_stable_libtorch", "_vllm_fa3_C")) == {}
    with pytest.raises(UsageError) as caught:
        refuse_left_out_at_start(tree, ("_C", "_C_stable_libtorch"))
    assert caught.value.hint is not None
    assert "--targets _C,_C_stable_libtorch,_vllm_fa2_C" in caught.value.hint
    assert f"{label} (refused without it at vllm/vllm_flash_attn/__init__.py:5)" in (
        caught.value.what)
