"""bench/full-build/run.sh with DRY=1: the device runner's commands for a part and for the
whole build in one piece (issue 21), nothing built; and its recipe loads."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkbuild.recipe import load_recipe

BENCH = Path(__file__).resolve().parents[2] / "bench" / "full-build"


def _dry(tmp_path: Path, *parts: str, devrun: Path | None = None) -> list[str]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    env = {**os.environ, "DRY": "1", "OUT": str(tmp_path / "out"),
           "FB_ROOT": str(tmp_path / "root"), "FB_DEVRUN": str(devrun or tmp_path / "none")}
    result = subprocess.run([bash, str(BENCH / "run.sh"), "start", "1", *parts],
                            env=env, text=True, capture_output=True, timeout=120, check=False,
                            cwd=BENCH.parents[1])
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if " -m sparkbuild wheel " in line]


def test_a_part_builds_its_targets_without_the_closure(tmp_path: Path) -> None:
    (wheel,) = _dry(tmp_path, "part1", "_vllm_fa2_C")
    assert "--offline --bundle" in wheel and "--use-existing-torch" in wheel
    assert "--targets _vllm_fa2_C" in wheel and "--no-closure" in wheel
    assert f"--cache {tmp_path}/root/cache --out {tmp_path}/root/part1/wh --json" in wheel


def test_the_one_piece_build_names_no_targets_and_keeps_the_closure(tmp_path: Path) -> None:
    (wheel,) = _dry(tmp_path, "one-piece", "all")
    assert "--targets" not in wheel and "--no-closure" not in wheel
    assert f"--out {tmp_path}/root/one-piece/wh" in wheel
    # what comes back is collected even when nothing was built
    assert (tmp_path / "out" / "one-piece.tgz").is_file()


def test_parts_are_built_one_after_the_other_into_their_own_folders(tmp_path: Path) -> None:
    first, second = _dry(tmp_path, "part1", "_vllm_fa2_C",
                         "part3", "_moe_C,_C_stable_libtorch,cumem_allocator")
    assert "--targets _vllm_fa2_C " in first and f"--out {tmp_path}/root/part1/wh" in first
    assert "--targets _moe_C,_C_stable_libtorch,cumem_allocator " in second
    assert f"--out {tmp_path}/root/part3/wh" in second
    # both share one cache: the bundle is imported once
    cache = f"--cache {tmp_path}/root/cache "
    assert cache in first and cache in second


def test_the_recipe_targets_the_spark_alone() -> None:
    recipe = load_recipe(BENCH / "vllm-0.20.0-spark.toml")
    assert list(recipe.target.cuda_archs) == ["12.1a"]
    assert recipe.source.spec == "pypi:vllm==0.20.0"


def test_a_part_with_a_bundle_of_its_own_builds_from_it(tmp_path: Path) -> None:
    devrun = tmp_path / "devrun"
    devrun.mkdir()
    (devrun / "rebuild.bundle.tar.xz").write_bytes(b"")
    cold, warm = _dry(tmp_path, "part2", "_C", "rebuild", "_C", devrun=devrun)
    assert f"--bundle {tmp_path}/root/bin/vllm.bundle.tar.xz " in cold
    assert f"--bundle {tmp_path}/root/bin/rebuild.bundle.tar.xz " in warm
    # the rebuild is warm: the cache the part before it left
    assert f"--cache {tmp_path}/root/cache " in warm


def test_a_today_part_gets_todays_plan_in_cold_caches_of_its_own(tmp_path: Path) -> None:
    pools, today = _dry(tmp_path, "pools", "_moe_C", "today", "_moe_C")
    assert "SPARKBUILD_JOB_PLAN" not in pools and f"CCACHE_DIR={tmp_path}/root/ccache " in pools
    assert f"--cache {tmp_path}/root/cache " in pools
    assert "SPARKBUILD_JOB_PLAN=single" in today
    assert f"CCACHE_DIR={tmp_path}/root/ccache-today " in today
    assert f"--cache {tmp_path}/root/cache-today " in today
