"""A team of Sparks: two "machines" build the example through one shared Redis cache.

Each machine has its own sparkbuild cache, its own working directory and output, its own
sccache server (port and SCCACHE_DIR); they share only the Redis URL and the stable build
root (SPARKBUILD_BUILD_ROOT: the same path on every machine, as it is by default).  The
second machine must compile no CUDA unit: every CUDA compile request is a hit counted from
sccache's stats (the example's units, as ninja lists them in the build log, plus the one
CMake's CUDA compiler check makes), no cudafe++/cicc/ptxas step misses, and the wheel is
byte for byte the first machine's.  Then Redis is killed while a third build compiles: the
build finishes uncached with a warning, and its wheelhouse verifies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.toolchain.sass import list_cuda_archs
from support import example_recipe

if TYPE_CHECKING:
    from integration.conftest import RedisServer

pytestmark = [pytest.mark.network, pytest.mark.nvcc, pytest.mark.slow]

RECIPE_NAME = "mini-vllm-team"
TIMEOUT = 1500
CUDA_STEPS = ("CUDA", "CUDA (Device code)", "PTX", "CUBIN")
INICONFIG_2_3_0 = "f631c04d2c48c52b84d0d0549c99ff3859c98df65b3101406327ecc7d53fbf12"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("team")
    recipe = root / "recipe.toml"
    recipe.write_text(example_recipe(RECIPE_NAME, tail=f"""[[pins]]
name = "iniconfig"
version = "2.3.0"
sha256 = "{INICONFIG_2_3_0}"
"""), encoding="utf-8")
    return {"root": root, "recipe": recipe, "stable": root / "stable"}


def _wheel(team: dict[str, Path], machine: str, url: str,
           ) -> tuple[subprocess.Popen[str], Path]:
    """Start ``sparkbuild wheel --json`` as ``machine``: its own cwd, cache and output."""
    home = team["root"] / f"machine-{machine}"
    home.mkdir(exist_ok=True)
    # another machine: the stable build root is the same path, not the same disk, so the
    # tree and its build directory that the machine before left there are not its own
    # (kept, the file-by-file sync would leave ninja nothing to compile)
    shutil.rmtree(team["stable"] / "work" / RECIPE_NAME / "tree", ignore_errors=True)
    env = {**os.environ, "SPARKBUILD_BUILD_ROOT": str(team["stable"])}
    command = [sys.executable, "-m", "sparkbuild", "wheel", "--recipe", str(team["recipe"]),
               "--cache", str(home / "cache"), "--out", str(home / "wheelhouse"),
               "--compile-cache", url, "--json"]
    stdout, stderr = (home / "wheel.json").open("w"), (home / "wheel.err").open("w")
    with stdout, stderr:
        process = subprocess.Popen(command, cwd=home, env=env, stdout=stdout, stderr=stderr,
                                   text=True)
    return process, home


def _finished(process: subprocess.Popen[str], home: Path) -> tuple[dict[str, Any], str]:
    code = process.wait(timeout=TIMEOUT)
    err = (home / "wheel.err").read_text()
    assert code == 0, err[-4000:]
    return json.loads((home / "wheel.json").read_text()), err


def _log_counts(report: dict[str, Any]) -> tuple[int, int]:
    """CUDA units ninja compiled, and CMake's CUDA compiler checks, from the build log."""
    log = Path(report["build"]["log"]).read_text(errors="replace")
    return log.count("Building CUDA object"), log.count("Detecting CUDA compiler ABI info - done")


def _built_wheel(home: Path) -> Path:
    (wheel,) = sorted((home / "wheelhouse").glob("mini_vllm-*.whl"))
    return wheel


def _archs(wheel: Path, into: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.startswith("mini_vllm/_C")]
        archive.extract(member, into)
    return list_cuda_archs(into / member)


def _sccache_left(stable: Path) -> list[int]:
    """Live sccache servers our builds started (their SCCACHE_BASEDIRS name ``stable``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "exe").readlink().name != "sccache":
                continue
            environ = (entry / "environ").read_bytes()
            state = (entry / "status").read_text()
        except OSError:
            continue
        if str(stable).encode() in environ and "State:\tZ" not in state:
            found.append(int(entry.name))
    return found


def _verify(home: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "sparkbuild", "verify",
                          str(home / "wheelhouse")], capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]


def test_second_machine_compiles_no_cuda_unit(team: dict[str, Path],
                                              redis_server: RedisServer) -> None:
    process, first_home = _wheel(team, "a", redis_server.url)
    first, _ = _finished(process, first_home)
    cold = first["compile_cache"]
    units, checks = _log_counts(first)
    assert units >= 4 and checks == 1
    assert (cold["backend"], cold["status"], cold["hits"]) == ("redis", "used", 0)
    assert cold["misses_by_language"]["CUDA"] == units + checks
    assert cold["units"]["CUDA"] == units
    assert cold["namespace"].startswith("sparkbuild/cuda13.")
    assert redis_server.dbsize() >= cold["misses"]

    process, second_home = _wheel(team, "b", redis_server.url)
    second, err = _finished(process, second_home)
    warm = second["compile_cache"]
    units, checks = _log_counts(second)
    assert second["tree"] == first["tree"]  # the stable build root
    assert warm["basedirs"] != cold["basedirs"]  # ... and another sparkbuild cache
    assert warm["hits_by_language"]["CUDA"] == units + checks, warm
    assert all(warm["misses_by_language"].get(step, 0) == 0 for step in CUDA_STEPS), warm
    assert warm["misses"] == 0 and warm["hits"] == cold["misses"]
    assert "0 miss(es)" in err
    manifest = json.loads((second_home / "wheelhouse" / "manifest.json").read_text())
    assert manifest["build"]["compile_cache"]["hits"] == warm["hits"]
    assert manifest["build"]["launcher"].endswith("sccache")
    assert _built_wheel(second_home).read_bytes() == _built_wheel(first_home).read_bytes()
    assert "sm_121a" in _archs(_built_wheel(second_home), team["root"] / "so-b")
    _verify(second_home)
    assert _sccache_left(team["stable"]) == []


def test_killing_redis_mid_build_goes_on_uncached(team: dict[str, Path],
                                                  redis_server: RedisServer) -> None:
    process, home = _wheel(team, "c", redis_server.url)
    deadline = time.monotonic() + TIMEOUT
    # The first objects are in Redis: the compiles are under way, most still to come.
    while redis_server.dbsize() < 3:
        assert process.poll() is None, (home / "wheel.err").read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    redis_server.kill()
    report, err = _finished(process, home)
    degraded = report["compile_cache"]
    assert degraded["status"] == "degraded", degraded
    assert "failed during the build" in err and "goes on uncached" in err
    assert degraded["warnings"] and degraded["misses"] > 0 and degraded["hits"] == 0
    assert "sm_121a" in _archs(_built_wheel(home), team["root"] / "so-c")
    _verify(home)
    assert _sccache_left(team["stable"]) == []
    # (No byte comparison here: a unit in flight when the server stops is compiled by plain
    # nvcc, whose objects name a per-process temporary file: never the same bytes twice.)
