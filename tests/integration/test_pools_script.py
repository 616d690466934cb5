"""bench/full-build/pools.sh --dry-run: the build machine's commands, in order, nothing run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "full-build" / "pools.sh"


def _dry(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "S": str(tmp_path / "s"), "PY": "PYX"}
    return subprocess.run([bash, str(SCRIPT), "--dry-run", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


def test_dry_run_prints_both_plans_then_the_warm_rebuild(tmp_path: Path) -> None:
    result = _dry(tmp_path, "b1.tar", "_C", "b2.tar")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    wheels = [line for line in lines if " -m sparkbuild wheel " in line]
    assert len(wheels) == 3
    single, pools, rebuild = wheels
    assert "SPARKBUILD_JOB_PLAN=single" in single and "SPARKBUILD_JOB_PLAN=pools" in pools
    assert "--bundle b1.tar" in single and "--bundle b1.tar" in pools
    assert "--bundle b2.tar" in rebuild and "SPARKBUILD_JOB_PLAN=pools" in rebuild
    s = tmp_path / "s"
    # the two plans start cold, each with its own caches; the rebuild reuses the pool's
    assert f"--cache {s}/cache-today" in single and f"CCACHE_DIR={s}/ccache-today" in single
    assert f"--cache {s}/cache-pools" in pools and f"CCACHE_DIR={s}/ccache-pools" in pools
    assert f"--cache {s}/cache-pools" in rebuild and f"CCACHE_DIR={s}/ccache-pools" in rebuild
    for name, line in zip(("today", "pools", "rebuild"), wheels, strict=True):
        assert line.endswith(f"--json > {tmp_path}/out/wheel-{name}.json "
                             f"2> {tmp_path}/out/wheel-{name}.err")
        assert "--targets _C " in line and "--offline" in line
    zero = lines.index(f"env CCACHE_DIR={s}/ccache-pools ccache -z")
    assert lines.index(pools) < zero < lines.index(rebuild)
    assert lines.index(rebuild) < lines.index(f"env CCACHE_DIR={s}/ccache-pools ccache -s")
    assert lines[-1] == f"PYX bench/schedule_sim.py {tmp_path}/out/wheel-pools.json"
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()


def test_dry_run_without_a_second_bundle_skips_the_rebuild(tmp_path: Path) -> None:
    result = _dry(tmp_path, "b1.tar")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" -m sparkbuild wheel ") == 2
    assert "ccache" not in result.stdout.replace("CCACHE_DIR", "").replace("ccache-", "")
    assert "--targets _C_stable_libtorch,triton_kernels " in result.stdout


def test_without_a_bundle_it_stops(tmp_path: Path) -> None:
    result = _dry(tmp_path)
    assert result.returncode != 0 and "bundle" in result.stderr
