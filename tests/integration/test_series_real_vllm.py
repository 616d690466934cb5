"""Acceptance of the sm_121 series on the real vllm 0.11.0 and 0.33.0 sdists from the index.

The trees come through the project's own code: ``prepare_tree`` (fetch from the index into
the cache under ~/.cache, extract, apply the series) for the patched tree, ``fetch_source``
for a pristine one to compare with.  Then, per release:

* the statuses (0.11.0: all applied; 0.33.0 ships its own shuffle guard and SM12x family
  guard), idempotence, and a revert back to the pristine bytes;
* the arch criterion at 12.1a with the tree's own cmake/utils.cmake, at every CUDA version
  the tree distinguishes: CUDA_ARCHS holds native 12.1 code and every list with an arch- or
  family-specific SM12x entry -- in CMakeLists.txt, cmake/utils.cmake and
  cmake/external_projects -- gives 12.1a (never plain 12.0/12.1); no list without an SM12x
  or +PTX entry changed;
* 0.11.0's ``enable_sm120_only`` guard is widened to the SM12x family, and a kernel built
  through it for sm_121a has its body (SASS) only after the series;
* a translation unit calling every ``fp32_vec*_to_e2m1`` overload of the patched
  nvfp4_utils.cuh compiles for plain sm_121 with no hardware E2M1 convert in its SASS, and
  for sm_121a with one per pair of values (the unpatched header does not compile for sm_121);
* the shuffle kernel bounds both indices; other raw uses of the instruction are reported.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from corpus.builders import tree_digest
from sparkbuild.cli import main
from sparkbuild.patches.edits.arch_lists import misses
from sparkbuild.patches.edits.shuffle_guard_check import guard_present
from sparkbuild.patches.engine import apply_series, revert_series
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.patches.report import ALREADY, APPLIED, NOT_APPLIED
from sparkbuild.proc import run
from sparkbuild.recipe import REPO_ROOT, Recipe, load_recipe
from sparkbuild.sources.fetch import fetch_source
from sparkbuild.toolchain.arch_eval import distinct_verdicts, evaluate_tree
from sparkbuild.toolchain.archs import tree_arch_lists
from sparkbuild.toolchain.tools import find_nvcc

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.network

EXPECTED = {
    "0.11.0": [APPLIED, APPLIED, APPLIED, APPLIED],
    "0.33.0": [APPLIED, APPLIED, ALREADY, ALREADY],
}
NVFP4 = "quantization/fp4/nvfp4_utils.cuh"
HW_CONVERT = re.compile(r"F2FP\S*E2M1")
_OVERLOAD = re.compile(
    r"__device__[^;{}]*?\b(fp32_vec\w*_to_e2m1)\s*\(\s*(float2?)\s*\(\s*&\s*\w+\s*\)\s*\[\s*(\d+)\s*\]"
)


@dataclass
class Release:
    version: str
    recipe: Recipe
    pristine: Path
    tree: Path
    statuses: list[str]
    raw_uses: list[tuple[Path, int]]


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def release(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    version = request.param
    recipe = load_recipe(REPO_ROOT / "recipes" / "vllm-0.33.0.toml")
    spec = f"pypi:vllm=={version}"
    root = tmp_path_factory.mktemp(f"vllm-{version}")
    pristine = fetch_source(spec, root / "pristine", recipe=None).tree
    prepared = prepare_tree(spec, root / "prepared", recipe)
    yield Release(
        version,
        recipe,
        pristine,
        prepared.tree,
        [p.status for p in prepared.series.patches],
        prepared.series.raw_instruction_uses,
    )
    shutil.rmtree(root, ignore_errors=True)  # two full vLLM trees per release


def test_statuses_after_prepare(release: Release) -> None:
    assert release.statuses == EXPECTED[release.version]


def test_reapply_changes_nothing_and_revert_restores_the_sdist(release: Release) -> None:
    patched = tree_digest(release.tree)
    again = apply_series(release.tree, release.recipe)
    assert [p.status for p in again.patches] == [ALREADY] * 4
    assert tree_digest(release.tree) == patched

    reverted = revert_series(release.tree, release.recipe)
    guard = ALREADY if release.version == "0.33.0" else NOT_APPLIED
    assert [p.status for p in reverted.patches] == [NOT_APPLIED, NOT_APPLIED, guard, guard]
    assert tree_digest(release.tree) == tree_digest(release.pristine)

    assert [p.status for p in apply_series(release.tree, release.recipe).patches] == (
        EXPECTED[release.version]
    )
    assert tree_digest(release.tree) == patched


def test_cli_status_json_on_the_patched_tree(
    release: Release, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["patch", "status", str(release.tree), "--recipe", str(release.recipe.path),
                 "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [p["status"] for p in report["patches"]] == [ALREADY] * 4
    lists = report["patches"][0]["details"]["lists"]
    assert lists and all(row["before"] == row["after"] for row in lists)
    family = report["patches"][3]["details"]
    if release.version == "0.33.0":
        assert [g["file"] for g in family["family_guards"]] == [
            "csrc/cutlass_extensions/common.hpp"]
        assert [t["file"] for t in family["tuning_left_alone"]] == ["csrc/launch_bounds_utils.h"]


def _misses(tree: Path, cuda: str | None) -> tuple[list[str], list[tuple[str, str, list[str]]]]:
    """Where the tree misses the criterion at 12.1a, and (cuda, list, value) of each
    list with an arch- or family-specific SM12x entry."""
    found = tree_arch_lists(tree)
    evaluations = evaluate_tree(tree, found, ["12.1a"], distinct_verdicts(tree, found.lists, cuda))
    problems = [f"{m.cuda}: {m.problem}" for m in misses(found, evaluations, "12.1a", "12.1")]
    values = [(e.cuda, found.lists[i].where, list(v)) for e in evaluations
              for i, v in e.results.items() if found.lists[i].has_specific(12)]
    return problems, values


def test_the_arch_criterion_holds_at_every_cuda_version(release: Release) -> None:
    problems, values = _misses(release.tree, "13.0")
    assert problems == []
    assert values and all(v in (["12.1a"], ["12.1f"], ["12.0f"]) for _, _, v in values), values
    before, _ = _misses(release.pristine, "13.0")
    assert before  # the series had work to do
    if release.version == "0.33.0":
        places = {where.split(":")[0] for _, where, _ in values}
        assert {"CMakeLists.txt", "cmake/utils.cmake",
                "cmake/external_projects/qutlass.cmake"} <= places
        cudas = {cuda for cuda, _, _ in values}
        assert {"12.9", "13.0", "13.4"} <= cudas  # the 12.8/12.9 branch and both CUDA 13 ones
        assert any("CUDA_ARCHS is 12.0" in p for p in before)


def test_lists_without_sm12x_or_ptx_entries_are_untouched(release: Release) -> None:
    """(A ``+PTX`` list that gives the target PTX only gets 12.1a: test_arch_ptx_real_vllm.)"""
    def others(tree: Path) -> list[tuple[str, str, list[str]]]:
        return [(a.variable, a.where, a.values) for a in tree_arch_lists(tree).lists
                if not a.has_major(12) and not any(v.endswith("+PTX") for v in a.values)]

    assert others(release.tree) == others(release.pristine)
    assert others(release.tree)


def _translation_unit(header: Path) -> tuple[str, int]:
    """A kernel calling every overload of the header; and how many E2M1 pairs it converts."""
    overloads = sorted(set(_OVERLOAD.findall(header.read_text(encoding="utf-8"))))
    assert len(overloads) >= 2, overloads
    body, pairs = [], 0
    for index, (name, element, count) in enumerate(overloads):
        n = int(count)
        fill = "in[i]" if element == "float" else "make_float2(in[2 * i], in[2 * i + 1])"
        body += [
            f"  {element} a{index}[{n}];",
            f"  for (int i = 0; i < {n}; ++i) a{index}[i] = {fill};",
            f"  sink(out + {2 * index}, vllm::{name}(a{index}));",
        ]
        pairs += n if element == "float2" else n // 2
    source = "\n".join([
        "#include <cstdint>",
        "namespace at { struct Half; struct BFloat16; }",
        f'#include "{NVFP4}"',
        "__device__ void sink(uint32_t* out, uint32_t v) { out[0] = v; }",
        "template <class W> __device__ auto sink(uint32_t* out, W w) -> decltype(w.hi, void()) {",
        "  out[0] = w.lo; out[1] = w.hi; }",
        "__global__ void every_overload(const float* in, uint32_t* out) {",
        *body,
        "}",
        "",
    ])
    return source, pairs


def _cuobjdump() -> Path:
    wheel = importlib.util.find_spec("nvidia")  # the nvidia-cuda-cuobjdump wheel's namespace
    for root in (wheel.submodule_search_locations or []) if wheel else []:
        found = sorted(Path(root).glob("*/bin/cuobjdump"))
        if found:
            return found[0]
    on_path = shutil.which("cuobjdump")
    assert on_path, "cuobjdump not found: pip install nvidia-cuda-cuobjdump"
    return Path(on_path)


def _compile(workdir: Path, tree: Path, source: str, arch: str, *, check: bool = True) -> str:
    stubs = workdir / "stubs" / "torch" / "headeronly" / "util"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "Half.h").write_text("namespace c10 { struct Half; }\n")
    (stubs / "BFloat16.h").write_text("namespace c10 { struct BFloat16; }\n")
    unit = workdir / "every_overload.cu"
    unit.write_text(source)
    cubin = workdir / f"every_overload.{arch}.cubin"
    result = run(
        [str(find_nvcc().path), "-std=c++17", f"-arch={arch}", "-cubin",
         f"-I{tree / 'csrc'}", f"-I{workdir / 'stubs'}", "-o", str(cubin), str(unit)],
        check=check,
        timeout=300,
    )
    if not check:
        return result.output if result.returncode else ""
    return run([str(_cuobjdump()), "-sass", str(cubin)], timeout=120, echo=False).output


@pytest.mark.nvcc
def test_nvfp4_header_compiles_for_sm121_and_sm121a(release: Release, tmp_path: Path) -> None:
    source, pairs = _translation_unit(release.tree / "csrc" / NVFP4)
    plain = _compile(tmp_path, release.tree, source, "sm_121")
    assert HW_CONVERT.findall(plain) == []
    assert "every_overload" in plain
    specific = _compile(tmp_path, release.tree, source, "sm_121a")
    assert len(HW_CONVERT.findall(specific)) == pairs

    unpatched, _ = _translation_unit(release.pristine / "csrc" / NVFP4)
    error = _compile(tmp_path / "pristine", release.pristine, unpatched, "sm_121", check=False)
    assert "e2m1x2" in error and "sm_121" in error


def test_shuffle_kernel_guard_is_in_the_kernel(release: Release) -> None:
    found = guard_present(release.tree)
    assert found is not None and "shuffleInputRowsKernel" in found
    if release.version == "0.11.0":
        assert guard_present(release.pristine) is None
        kernel = (release.tree / "csrc/moe/moe_permute_unpermute_op.cu").read_text()
        assert "if (blockIdx.x >= num_dst_rows) return;" in kernel
        assert "if (source_row_idx < 0 || source_row_idx >= num_src_rows) {" in kernel


def test_other_raw_uses_are_reported_not_fatal(release: Release) -> None:
    files = {path.as_posix() for path, _ in release.raw_uses}
    assert not any(name.endswith(("nvfp4_utils.cuh", "e2m1.cuh")) for name in files)
    if release.version == "0.33.0":
        assert "csrc/fused_minimax_m3_qknorm_rope_kv_insert_kernel.cu" in files
        assert "csrc/nvfp4_ds_mla_cache_kernels.cu" not in files  # only a comment there
    else:
        assert release.raw_uses == []


GUARDED_KERNEL = """\
#include <cstdio>
#include "cutlass_extensions/common.hpp"

struct StoreKernel {
  __device__ void operator()(int* out) { out[threadIdx.x] = 121; }
};

template <typename Kernel>
__global__ void launch(int* out) { Kernel{}(out); }

template __global__ void launch<%s<StoreKernel>>(int*);
"""
CUTLASS_STUB = """\
#pragma once
#define CUTLASS_DEVICE __forceinline__ __device__
namespace cutlass { enum class Status { kSuccess }; }
"""


@pytest.mark.nvcc
def test_sm120_guarded_kernel_has_its_body_on_sm121a_only_after_the_series(
    release: Release, tmp_path: Path
) -> None:
    """A kernel wrapped in the tree's own SM120 guard, built for sm_121a before and after."""
    from sparkbuild.toolchain.sass import read_sass
    from sparkbuild.toolchain.tools import torch_include_dirs

    torch = [f"-I{d}" for d in torch_include_dirs()]  # 0.33.0's header includes torch's shim
    wrapper = "enable_sm120_only" if release.version == "0.11.0" else "enable_sm120_family"
    (tmp_path / "cutlass").mkdir()
    (tmp_path / "cutlass" / "cutlass.h").write_text(CUTLASS_STUB)
    unit = tmp_path / "guarded.cu"
    unit.write_text(GUARDED_KERNEL % wrapper)
    stores = {}
    for name, tree in (("pristine", release.pristine), ("patched", release.tree)):
        obj = tmp_path / f"{name}.o"
        run([str(find_nvcc().path), "-std=c++17", "-c", "-gencode",
             "arch=compute_121a,code=sm_121a", f"-I{tree / 'csrc'}", f"-I{tmp_path}", *torch,
             "-o", str(obj), str(unit)], timeout=300)
        (kernel,) = [f for f in read_sass(obj) if f.arch == "sm_121a"]
        stores[name] = kernel.opcode_counts()["STG"]
    if release.version == "0.11.0":
        assert stores == {"pristine": 0, "patched": 1}  # the body was compiled away before
    else:
        assert stores == {"pristine": 1, "patched": 1}  # upstream's family guard already
