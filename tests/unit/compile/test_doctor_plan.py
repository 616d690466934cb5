"""doctor's build plan and tree reading, as pure functions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

from sparkbuild.compile.doctor import tree_gcc_minimum, tree_torch_pin
from sparkbuild.jobplan.machine import GIB, MachineFacts, parse_meminfo, plan_build

if TYPE_CHECKING:
    from pathlib import Path

# /proc/meminfo of a DGX Spark: 128 GB of unified memory, about 119 GiB visible to Linux.
SPARK_TOTAL = 128 * GIB
SPARK_AVAILABLE = 119 * GIB
# This machine: 24 GB and 2 cores.
SMALL_TOTAL = 24 * 10**9
SMALL_AVAILABLE = 22 * GIB


def test_spark_is_bounded_by_memory_with_the_default_budget() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=SPARK_TOTAL, available_memory_bytes=SPARK_AVAILABLE,
                     cores=20),
        job_memory_gib=6.0)
    # (119 - 4 reserved) / 6 = 19.2 jobs < 20 cores
    assert plan.max_jobs == 19
    assert plan.nvcc_threads == 1
    assert any("bounded by memory" in reason for reason in plan.reasons)
    assert plan.env() == {"MAX_JOBS": "19", "NVCC_THREADS": "1"}


def test_spark_is_bounded_by_cores_with_a_small_budget() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=SPARK_TOTAL, available_memory_bytes=SPARK_AVAILABLE,
                     cores=20),
        job_memory_gib=1.0)
    assert plan.max_jobs == 20
    assert any("bounded by cores" in reason for reason in plan.reasons)


def test_small_machine_is_bounded_by_its_two_cores() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=SMALL_TOTAL, available_memory_bytes=SMALL_AVAILABLE,
                     cores=2),
        job_memory_gib=6.0)
    assert plan.max_jobs == 2
    assert any("cores: 2" in reason for reason in plan.reasons)


def test_memory_budget_shrinks_jobs_on_the_small_machine() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=SMALL_TOTAL, available_memory_bytes=SMALL_AVAILABLE,
                     cores=16),
        job_memory_gib=8.0)
    # 22 GiB available, 2.2 GiB reserved -> 19.8 / 8 = 2 jobs
    assert plan.max_jobs == 2
    assert any("bounded by memory" in reason for reason in plan.reasons)


def test_nvcc_threads_multiply_the_memory_of_a_job() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=SPARK_TOTAL, available_memory_bytes=SPARK_AVAILABLE,
                     cores=20),
        job_memory_gib=6.0, nvcc_threads=2)
    # 115 / (6 * 2) = 9 jobs; 20 cores / 2 threads = 10
    assert (plan.max_jobs, plan.nvcc_threads) == (9, 2)


def test_not_even_one_job_fits_still_plans_one_and_says_so() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=4 * GIB, available_memory_bytes=2 * GIB, cores=8),
        job_memory_gib=6.0)
    assert plan.max_jobs == 1
    assert any("may swap" in reason for reason in plan.reasons)


def test_a_requested_job_count_wins_and_the_pick_is_shown() -> None:
    plan = plan_build(
        MachineFacts(total_memory_bytes=SMALL_TOTAL, available_memory_bytes=SMALL_AVAILABLE,
                     cores=2),
        job_memory_gib=6.0, requested_jobs=5)
    assert plan.max_jobs == 5
    assert any("as requested (doctor would pick 2)" in reason for reason in plan.reasons)


def test_launcher_is_reported() -> None:
    with_ccache = plan_build(
        MachineFacts(total_memory_bytes=SMALL_TOTAL, available_memory_bytes=SMALL_AVAILABLE,
                     cores=2),
        job_memory_gib=6.0, launcher="ccache")
    without = plan_build(
        MachineFacts(total_memory_bytes=SMALL_TOTAL, available_memory_bytes=SMALL_AVAILABLE,
                     cores=2),
        job_memory_gib=6.0)
    assert with_ccache.launcher == "ccache"
    assert any("ccache" in reason for reason in with_ccache.reasons)
    assert without.launcher is None


def test_meminfo_is_parsed_in_bytes() -> None:
    text = "MemTotal:       24684084 kB\nMemFree:         1000 kB\nMemAvailable:   23821804 kB\n"
    assert parse_meminfo(text) == (24684084 * 1024, 23821804 * 1024)
    assert parse_meminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\n") == (2048 * 1024, 1024 * 1024)


def test_torch_pin_from_build_system_requires(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["cmake>=3.26.1", "torch == 2.14.0", "wheel"]\n',
        encoding="utf-8")
    assert tree_torch_pin(tmp_path) == (Version("2.14.0"), "pyproject.toml [build-system]")


def test_torch_pin_from_requirements_files(tmp_path: Path) -> None:
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "build.txt").write_text(
        "cmake>=3.26\n# torch comes next\ntorch==2.8.0  # pinned\n", encoding="utf-8")
    assert tree_torch_pin(tmp_path) == (Version("2.8.0"), "requirements/build.txt")


def test_no_torch_pin(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["torch>=2"]\n',
                                             encoding="utf-8")
    assert tree_torch_pin(tmp_path) is None


def test_gcc_minimum_is_the_strictest_refusal_in_the_tree(tmp_path: Path) -> None:
    (tmp_path / "CMakeLists.txt").write_text(
        'if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS "11.3")\n'
        "  message(FATAL_ERROR old)\nendif()\n"
        'if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS "13")\n'
        "  message(FATAL_ERROR older)\nendif()\n", encoding="utf-8")
    assert tree_gcc_minimum(tmp_path) == Version("13")
    assert tree_gcc_minimum(tmp_path / "missing") is None
