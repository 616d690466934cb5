"""Helpers shared by the integration tests: git with a fixed identity, network namespaces,
and the local pybind11 repository the example's FetchContent clones over ``file://``.

The tests put ``tests/`` on ``sys.path`` (``tests/conftest.py``), so this is ``support``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from sparkbuild.sources.archive import extract_archive
from sparkbuild.sources.index import fetch_sdist
from sparkbuild.store.cache import Cache, default_cache_root

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "mini-vllm"
SERIES = REPO_ROOT / "patches" / "series"

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(*args: str, cwd: Path) -> str:
    """Run git in ``cwd`` (a test's own setup, not the code under test); its stdout."""
    done = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_IDENTITY},
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def unshare_works() -> bool:
    """Whether ``unshare -n`` can run a command with no network (root, or user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], check=False).returncode == 0


def pybind11_bare_repo(root: Path, bare: Path) -> str:
    """A bare repository at ``bare`` holding the pybind11 3.1.0 sdist tagged v3.1.0 (the
    example's pin); returns the tag's commit."""
    sdist = fetch_sdist(Cache(default_cache_root()), "pybind11", "3.1.0")
    extracted = extract_archive(sdist, root / "x")
    work = root / "x" / extracted.top_level[0]
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "pybind11 3.1.0", cwd=work)
    git("tag", "v3.1.0", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    return git("rev-parse", "v3.1.0^{commit}", cwd=work)


def example_recipe(name: str, *, archs: str = '["12.1a"]', build: str = "job_memory_gib = 2.0",
                   tail: str = "") -> str:
    """A recipe for the mini-vllm example with the real series: ``build`` is the body of
    ``[build]``, ``tail`` any further tables (``[build.env]``, ``[[pins]]``)."""
    return f"""[recipe]
name = "{name}"
package = "mini-vllm"
[source]
spec = "{EXAMPLE}"
[series]
path = "{SERIES}"
[target]
cuda_archs = {archs}
[build]
{build}
{tail}"""


INICONFIG_PIN = """[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "f631c04d2c48c52b84d0d0549c99ff3859c98df65b3101406327ecc7d53fbf12"
"""
"""The example's one small runtime pin, for a test recipe's ``tail``."""


FLASHINFER_SHA256 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
"""flashinfer-python 0.6.18's wheel, the pin of the example recipes that build flashinfer."""


def aot_example_recipe(name: str, pybind11: Path, aot_args: list[str]) -> str:
    """The example recipe with pybind11 from a local bare repository, flashinfer's modules
    built ahead (``aot_args``) and the flashinfer-python 0.6.18 pin."""
    cmake_args = (f"-DMINI_VLLM_PYBIND11_GIT_REPOSITORY=file://{pybind11} "
                  "-DMINI_VLLM_PYBIND11_GIT_TAG=v3.1.0")
    return example_recipe(name, tail=f"""[build.env]
CMAKE_ARGS = "{cmake_args}"
[flashinfer]
aot = true
aot_args = {json.dumps(aot_args)}
[[pins]]
name = "flashinfer-python"
version = "0.6.18"
sha256 = "{FLASHINFER_SHA256}"
""")
