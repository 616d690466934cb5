"""bench/full-build/run.sh with DRY=1: the commands it runs on the build machine (a GPU
machine with no network) for a part and for the whole build in one piece, nothing built;
the payload carried in pieces; the one-piece recipe, the sources check, the report and the
projection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from sparkbuild.recipe import load_recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.script_loader import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "full-build"


ONE_PIECE = BENCH / "one-piece"


def _run(tmp_path: Path, *args: str, devrun: Path | None = None) -> str:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    env = {**os.environ, "DRY": "1", "OUT": str(tmp_path / "out"),
           "FB_ROOT": str(tmp_path / "root"), "FB_DEVRUN": str(devrun or tmp_path / "none")}
    result = subprocess.run([bash, str(BENCH / "run.sh"), *args],
                            env=env, text=True, capture_output=True, timeout=120, check=False,
                            cwd=BENCH.parents[1])
    assert result.returncode == 0, result.stderr
    return result.stdout


def _dry(tmp_path: Path, *parts: str, devrun: Path | None = None) -> list[str]:
    out = _run(tmp_path, "start", "1", *parts, devrun=devrun)
    return [line for line in out.splitlines() if " -m sparkbuild wheel " in line]


def _script(name: str) -> ModuleType:
    return load_script(ONE_PIECE / f"{name}.py")


def test_a_part_builds_its_targets_without_the_closure(tmp_path: Path) -> None:
    (wheel,) = _dry(tmp_path, "part1", "_vllm_fa2_C")
    assert "--offline --bundle" in wheel and "--use-existing-torch" in wheel
    assert "--targets _vllm_fa2_C" in wheel and "--no-closure" in wheel
    assert f"--cache {tmp_path}/root/cache --out {tmp_path}/root/part1/wh --json" in wheel


def test_the_one_piece_build_names_no_targets_and_builds_no_closure(tmp_path: Path) -> None:
    """Every extension, and no runtime closure: the bundle carries none (torch's closure is
    gigabytes, a call carries 64 MiB), so `wheel --offline` must not ask for one."""
    (wheel,) = _dry(tmp_path, "one-piece", "all")
    assert "--targets" not in wheel and "--no-closure" in wheel
    assert "--offline --bundle" in wheel and "--use-existing-torch" in wheel
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


def test_a_single_plan_part_gets_one_max_jobs_in_cold_caches_of_its_own(tmp_path: Path) -> None:
    pools, single = _dry(tmp_path, "pools", "_moe_C", "today", "_moe_C")
    assert "SPARKBUILD_JOB_PLAN" not in pools and f"CCACHE_DIR={tmp_path}/root/ccache " in pools
    assert f"--cache {tmp_path}/root/cache " in pools
    # run.sh builds a part whose name starts with "today" with the single plan
    assert "SPARKBUILD_JOB_PLAN=single" in single
    assert f"CCACHE_DIR={tmp_path}/root/ccache-today " in single
    assert f"--cache {tmp_path}/root/cache-today " in single


def _payload(tmp_path: Path, piece_bytes: int) -> Path:
    """A payload as prep_here.sh cuts it: pieces of payload.tar listed in pieces.txt."""
    src = tmp_path / "payload"
    (src / "whl").mkdir(parents=True)
    (src / "whl" / "dep-1.0-py3-none-any.whl").write_bytes(os.urandom(3000))
    (src / "sparkbuild-0.1.0-py3-none-any.whl").write_bytes(os.urandom(2000))
    (src / "vllm.bundle.tar.xz").write_bytes(os.urandom(5000))
    whole = tmp_path / "payload.tar"
    with tarfile.open(whole, "w") as tar:
        for name in ("whl", "sparkbuild-0.1.0-py3-none-any.whl", "vllm.bundle.tar.xz"):
            tar.add(src / name, arcname=name)
    data, pieces = whole.read_bytes(), tmp_path / "pieces"
    pieces.mkdir()
    listed = []
    for index in range(0, len(data), piece_bytes):
        name = f"payload.tar.{index // piece_bytes:02d}"
        (pieces / name).write_bytes(data[index:index + piece_bytes])
        listed.append(f"{name} {len(data[index:index + piece_bytes])}")
    (pieces / "pieces.txt").write_text("\n".join(listed) + "\n")
    return pieces


def _carried(tmp_path: Path, pieces: Path, call: int, *names: str) -> Path:
    """What one call carries: pieces.txt and the named pieces under .devrun/parts."""
    devrun = tmp_path / f"call{call}"
    (devrun / "parts").mkdir(parents=True)
    shutil.copy(pieces / "pieces.txt", devrun)
    for name in names:
        shutil.copy(pieces / name, devrun / "parts" / name)
    return devrun


def test_a_payload_in_pieces_starts_the_build_once_the_last_piece_is_here(
        tmp_path: Path) -> None:
    """The first call starts the chain though its payload is half here; the call that brings
    the last piece assembles it, and the chain sets up from it and builds."""
    pieces = _payload(tmp_path, 8000)
    names = sorted(p.name for p in pieces.glob("payload.tar.*"))
    assert len(names) == 3
    call1 = _carried(tmp_path, pieces, 1, names[0])
    first = _run(tmp_path, "receive", devrun=call1)
    assert "received payload.tar.00" in first and "payload complete" not in first
    started = _run(tmp_path, "start", "1", "one-piece", "all", devrun=call1)
    assert "waits for the payload's pieces (3 named, 1 here)" in started
    assert " -m sparkbuild wheel " not in started
    assert "waiting for the payload's pieces" in started
    middle = _run(tmp_path, "receive", devrun=_carried(tmp_path, pieces, 2, names[1]))
    assert "payload complete" not in middle and " -m sparkbuild wheel " not in middle
    last = _run(tmp_path, "receive", devrun=_carried(tmp_path, pieces, 3, names[2]))
    root = tmp_path / "root"
    assert f"payload complete: {root}/devrun" in last
    assert f"--target /tmp/site {root}/devrun/whl/dep-1.0-py3-none-any.whl " \
           f"{root}/devrun/sparkbuild-0.1.0-py3-none-any.whl" in last
    (wheel,) = [line for line in last.splitlines() if " -m sparkbuild wheel " in line]
    assert f"--bundle {root}/bin/vllm.bundle.tar.xz " in wheel and "--targets" not in wheel
    assert (root / "devrun" / "vllm.bundle.tar.xz").read_bytes() == \
        (tmp_path / "payload" / "vllm.bundle.tar.xz").read_bytes()
    assert f"sparkbuild verify {root}/one-piece/wh --json" in last  # run.sh's own verify
    assert "NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1" in last
    watched = _run(tmp_path, "watch", "1", "one-piece")
    assert "one-piece finished: rc=0" in watched


def test_a_piece_cut_short_is_never_assembled(tmp_path: Path) -> None:
    pieces = _payload(tmp_path, 8000)
    names = sorted(p.name for p in pieces.glob("payload.tar.*"))
    _run(tmp_path, "receive", devrun=_carried(tmp_path, pieces, 1, *names[:-1]))
    short = _carried(tmp_path, pieces, 2, names[-1])
    last = short / "parts" / names[-1]
    last.write_bytes(last.read_bytes()[:-1])
    out = _run(tmp_path, "receive", devrun=short)
    assert "payload complete" not in out and not (tmp_path / "root" / "devrun").exists()


def test_the_one_piece_recipe_is_vllm_0_29_0_at_12_1a_with_flashinfer_0_6_18(
        tmp_path: Path) -> None:
    compose = _script("compose_recipe")
    out = tmp_path / "elsewhere" / "recipe.toml"
    assert compose.main([str(ONE_PIECE / "recipe.toml"),
                         str(ONE_PIECE / "flashinfer-interim.toml"), "--out", str(out)]) == 0
    recipe = load_recipe(out)
    assert recipe.source.spec == "pypi:vllm==0.29.0"
    assert recipe.source.sha256 == \
        "c03feb07943ecae9e69e7dc424d7c5569ecf8d1292513aef2a4de67af381cd97"
    assert list(recipe.target.cuda_archs) == ["12.1a"]
    assert recipe.target.platform == "manylinux_2_28_x86_64"  # the build machine's, not a Spark's
    (pin,) = recipe.pins
    assert (pin.name, pin.version) == ("flashinfer-python", "0.6.18")
    assert recipe.flashinfer.aot and "--add-moe" in recipe.flashinfer.aot_args
    assert recipe.vendor.crates is False
    assert set(recipe.vendor.exclude) == {"triton_kernels", "tml_fa4"}
    assert recipe.series.is_file()  # the relative series path, made absolute
    # the base names no flashinfer table: a second one would be two sources of truth
    base = tmp_path / "base.toml"
    base.write_text((ONE_PIECE / "recipe.toml").read_text() + "\n[flashinfer]\naot = true\n")
    with pytest.raises(SystemExit, match="belongs to the flashinfer recipe"):
        compose.compose(base, ONE_PIECE / "flashinfer-interim.toml")


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          timeout=60, env={**os.environ, "GIT_AUTHOR_NAME": "t",
                                           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                           "GIT_COMMITTER_EMAIL": "t@t"})
    return done.stdout.strip()


def test_the_sources_check_finds_each_pin_in_the_snapshots_or_names_it(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", cwd=work)
    (work / "a.txt").write_text("a")
    _git("add", "a.txt", cwd=work)
    _git("commit", "-qm", "one", cwd=work)
    _git("tag", "v1.0", cwd=work)
    pinned = _git("rev-parse", "HEAD", cwd=work)
    snapshots = tmp_path / "mirror"
    for name in ("NVIDIA+cutlass", "vllm-project+FlashMLA"):  # as `fetch` lays them out
        (snapshots / name).mkdir(parents=True)
        _git("clone", "-q", "--bare", str(work), str(snapshots / name / "repo"), cwd=tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"crates": 625, "sources": [
        {"name": "cutlass", "url": "https://github.com/nvidia/cutlass.git", "ref": "v1.0"},
        {"name": "flashmla", "url": "https://github.com/vllm-project/FlashMLA", "ref": "f" * 40},
        {"name": "tml_fa4", "url": "https://github.com/vllm-project/tml-fa4.git", "ref": pinned},
        {"name": "fmha_sm100", "url": "https://github.com/vllm-project/MSA.git", "ref": pinned},
    ]}))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('[vendor]\nexclude = ["tml_fa4"]\ncrates = false\n')
    sources, out, link = _script("sources"), tmp_path / "sources.json", tmp_path / "git"
    status = sources.main([str(plan), "--recipe", str(recipe), "--snapshots", str(snapshots),
                           "--link", str(link), "--out", str(out)])
    report = json.loads(out.read_text())
    by_name = {row["name"]: row for row in report["sources"]}
    assert by_name["cutlass"]["status"] == "here" and by_name["cutlass"]["commit"] == pinned
    assert by_name["flashmla"]["status"] == "ref not in snapshot"
    assert by_name["tml_fa4"]["status"] == "no snapshot"
    assert by_name["tml_fa4"]["excluded_by_recipe"]
    # the one tml-fa4 installs only python files: optional; MSA's named files are needed
    assert report["missing_and_needed"]["12.1a"] == ["flashmla", "fmha_sm100"]
    assert report["missing_optional"] == ["tml_fa4"]
    assert report["crates_left_out_by_recipe"] and report["crates_io_reachable"] is None
    assert status == 1
    assert (link / "nvidia" / "cutlass.git").resolve() == (snapshots / "NVIDIA+cutlass" / "repo")
    assert not (link / "vllm-project").exists()


def test_the_report_reads_a_recorded_run_and_judges_it() -> None:
    """Parts 2-3 as bench/full-build/part2-3 records them: the report's figures are
    the files' own, and the simulator's prediction is for the plan the build ran."""
    report = _script("report")
    part = BENCH / "part2-3"
    result = report.report(part, goal_s=1800.0, cores=16, memory_gib=128.0,
                           expect=("_C", "_C_stable_libtorch", "_moe_C"))
    wheel = json.loads((part / "wheel.json").read_text())
    assert result["wall_s"] == wheel["timeline"]["wall_seconds"]
    assert result["compile_s"] == wheel["timeline"]["build"]["compile_wall_seconds"]
    assert result["units"] == len(wheel["units"]) == 100
    assert result["simulated_plan"] == "first_build_rule"  # its pool was the path rule's
    assert result["predicted_compile_s"] and abs(result["prediction_error"]) < 0.2
    assert result["coverage_totals"]["kernels"] == result["coverage_totals"]["native"] == 4634
    assert result["accepted"] and result["max_jobs"] == 16
    # the one-piece acceptance expects 0.29.0's libraries: 0.20.0's parts lack them
    strict = report.report(part, goal_s=1800.0, cores=16, memory_gib=128.0,
                           expect=report.EXPECTED_12_1A)
    assert not strict["accepted"] and "_vllm_fa2_C" in strict["absent_libraries"]
    # a goal the run missed is said
    assert not report.report(part, goal_s=600.0, cores=16, memory_gib=128.0,
                             expect=())["acceptance"]["within_goal"]


def test_the_report_of_nothing_accepts_nothing(tmp_path: Path) -> None:
    result = _script("report").report(tmp_path, goal_s=1800.0, cores=16, memory_gib=128.0,
                                      expect=())
    assert not result["accepted"] and len(result["missing"]) == 3
    assert result["wall_s"] is None and result["predicted_compile_s"] is None


def test_the_projection_adds_measured_phases_to_the_simulated_compile() -> None:
    project = _script("project")
    result = project.project(BENCH / "units-12.1a.json", cores=16, memory_gib=128.0,
                             start_s=90.0, call_s=15.0, calls=4, flashinfer=[0.0, 50000.0])
    rows = {(r["plan"], r["flashinfer_cpu_s"], r["builder"]): r for r in result["rows"]}
    alone = rows[("first_build_rule", 0.0, "pooled")]
    assert alone["compile_s"] == round(result["vllm_compile_s"]["first_build_rule"])
    parts = 150.0 + result["pre_s"] + alone["compile_s"] + result["post_s"] + result["verify_s"]
    assert abs(alone["hold_s"] - parts) <= 1  # rounded figures, each read from a run's files
    assert alone["fits"] and not rows[("first_build_rule", 50000.0, "pooled")]["fits"]
    assert result["kernels"] == {"part1": 1472, "part2-3": 4634}
    largest = result["largest_flashinfer_cpu_s_that_fits"]["first_build_rule"]["pooled"]
    assert 0 < largest < 50000
