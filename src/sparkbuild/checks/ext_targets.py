"""``wheel --targets``: build only some of a setuptools tree's CMake extensions.

vLLM's setup.py builds every extension it lists (``_C``, ``_moe_C``, flash-attention 2
and 3, FlashMLA, DeepGEMM, ...) and offers no switch to leave some out.  A proof build on
a machine held for minutes, or a quick check of the kernels a series touches, needs
fewer.  Rather than edit the tree, sparkbuild puts a ``sitecustomize`` on the build's
``PYTHONPATH`` that narrows ``setuptools.setup(ext_modules=...)`` to the extensions named
in ``SPARKBUILD_EXT_TARGETS`` (matched on the last part of the name: ``vllm._moe_C`` is
``_moe_C``) and says on stderr which it left out.  Without the variable it does nothing.

One extension is kept whatever is named: vLLM's setup.py (0.20 and later) copies the
install tree of ``triton_kernels`` after building, unconditionally, so a build without it
fails at its very end, after every extension it builds has compiled.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkbuild.console import info
from sparkbuild.settings import EXT_TARGETS

TARGETS_VARIABLE = EXT_TARGETS.name

HOOK = '''"""Written by sparkbuild (sparkbuild.checks.ext_targets): narrows setup()'s extensions."""
import os
import sys

_wanted = {t.strip() for t in os.environ.get(@VARIABLE@, "").split(",") if t.strip()}
if _wanted:
    import setuptools

    _real_setup = setuptools.setup

    def _narrowed_setup(*args, **kwargs):
        extensions = kwargs.get("ext_modules")
        if extensions:
            kept = [e for e in extensions if e.name.rsplit(".", 1)[-1] in _wanted]
            left = [e.name for e in extensions if e not in kept]
            print(f"sparkbuild: building only {[e.name for e in kept]}; left out: {left}",
                  file=sys.stderr, flush=True)
            kwargs["ext_modules"] = kept
        return _real_setup(*args, **kwargs)

    setuptools.setup = _narrowed_setup
'''.replace("@VARIABLE@", repr(TARGETS_VARIABLE))
"""The build's ``sitecustomize``: it runs without sparkbuild, so the variable's name is
written into it."""


ALWAYS_KEPT = "triton_kernels"
"""Kept when the tree's setup.py copies its output whatever was built (vLLM 0.20+)."""


def required_targets(tree: Path, targets: tuple[str, ...]) -> tuple[str, ...]:
    """``targets`` plus the extensions the tree's setup.py needs in any build."""
    if not targets or ALWAYS_KEPT in targets:
        return targets
    try:
        setup = (tree / "setup.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return targets
    if f"third_party/{ALWAYS_KEPT}" in setup:
        return (*targets, ALWAYS_KEPT)
    return targets


def hook_environment(work: Path, tree: Path, targets: tuple[str, ...]) -> dict[str, str]:
    """The variables that make the build narrow its extensions to ``targets``."""
    required = required_targets(tree, targets)
    if ALWAYS_KEPT in required and ALWAYS_KEPT not in targets:
        info(f"--targets: keeping {ALWAYS_KEPT} too (the tree's setup.py copies its output "
             "in every build)")
    targets = required
    if not targets:
        return {}
    directory = work / "pythonpath"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, TARGETS_VARIABLE: ",".join(targets)}
