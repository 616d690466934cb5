"""wheel --targets: which extensions setup() keeps, and the one a vLLM tree always needs."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.checks.ext_targets import HOOK, TARGETS_VARIABLE, hook_environment, required_targets


def test_triton_kernels_is_kept_when_setup_py_copies_it(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(
        'shutil.copytree(f"{self.build_lib}/vllm/third_party/triton_kernels", "x")\n')
    assert required_targets(tmp_path, ("_C",)) == ("_C", "triton_kernels")
    assert required_targets(tmp_path, ("_C", "triton_kernels")) == ("_C", "triton_kernels")
    assert required_targets(tmp_path, ()) == ()


def test_other_trees_get_exactly_what_was_named(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("setup(ext_modules=[...])\n")
    assert required_targets(tmp_path, ("_C",)) == ("_C",)
    assert required_targets(tmp_path / "missing", ("_C",)) == ("_C",)


@dataclass(frozen=True)
class Extension:
    name: str


def test_the_hook_narrows_setup_to_the_named_extensions(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    env = hook_environment(tmp_path / "work", tmp_path, ("_moe_C",))
    assert env[TARGETS_VARIABLE] == "_moe_C"
    hook = Path(env["PYTHONPATH"].split(":")[0]) / "sitecustomize.py"
    assert hook.read_text() == HOOK
    seen: dict[str, Any] = {}
    fake = types.ModuleType("setuptools")
    fake.setup = lambda **kwargs: seen.update(kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "setuptools", fake)
    monkeypatch.setenv(TARGETS_VARIABLE, env[TARGETS_VARIABLE])
    exec(compile(HOOK, str(hook), "exec"), {})
    fake.setup(ext_modules=[Extension("vllm._C"), Extension("vllm._moe_C")])
    assert seen["ext_modules"] == [Extension("vllm._moe_C")]
    assert hook_environment(tmp_path / "work", tmp_path, ()) == {}
