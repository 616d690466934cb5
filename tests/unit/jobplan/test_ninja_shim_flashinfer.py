"""flashinfer's ninja layout through sparkbuild's ninja: a top file ninja runs with ``-f``
(``subninja`` lines) and one ``build.ninja`` per module, its flags file-level variables and
its rules ``compile``/``cuda_compile``.  The heavy edges of the module files join the pool
(declared once, in the top file), each file's edges start longest first, the subninjas by
their longest unit, and each unit is keyed by its file's flags."""

from __future__ import annotations

from pathlib import Path

from sparkbuild.jobplan.ninja_graph import manifest_files, read_graph, read_ninja_file
from sparkbuild.jobplan.ninja_shim import _manifest, assign_pool
from sparkbuild.jobplan.pools import HEAVY_PATTERNS, HEAVY_POOL


def _module(directory: Path, name: str, sources: list[str], flags: str) -> Path:
    path = directory / name / "build.ninja"
    path.parent.mkdir(parents=True)
    lines = ["ninja_required_version = 1.3", f"name = {name}", f"cuda_cflags = {flags}",
             "cflags = -O3", "", "rule cuda_compile",
             "  command = nvcc $cuda_cflags -c $in -o $out",
             "", "rule link", "  command = c++ $in -o $out", ""]
    objects = []
    for source in sources:
        obj = str(directory / name / (Path(source).stem + ".cuda.o"))
        objects.append(obj)
        lines.append(f"build {obj}: cuda_compile /W/site/{source}")
    lines += [f"build {directory / name / (name + '.so')}: link {' '.join(objects)}",
              f"default {directory / name / (name + '.so')}", ""]
    path.write_text("\n".join(lines))
    return path


def _layout(tmp_path: Path) -> Path:
    jit = tmp_path / "cached_ops"
    moe = _module(jit, "fused_moe_120", ["cutlass_gemm_a.cu", "cutlass_gemm_b.cu"], "-DMOE")
    xqa = _module(jit, "xqa_x", ["mha.cu"], "-DXQA")
    top = jit / "tmp" / "flashinfer_jit.ninja"
    top.parent.mkdir()
    top.write_text(f"ninja_required_version = 1.3\nsubninja {xqa}\nsubninja {moe}\n")
    return top


def _plan(**extra: object) -> dict[str, object]:
    return {"pool": HEAVY_POOL, "depth": 2, "tree": "/W", "threshold": 4e9,
            "patterns": list(HEAVY_PATTERNS), "measured": {}, "by_source": {}, "killed": [],
            **extra}


def test_the_f_manifest_is_read_with_its_subninjas(tmp_path: Path) -> None:
    top = _layout(tmp_path)
    jit = top.parent.parent
    assert _manifest(["-v", "-C", str(jit), "-f", str(top), "-j", "2"], jit) == top
    assert _manifest(["-C", str(jit), "-ftmp/flashinfer_jit.ninja"], jit) == top
    assert _manifest(["-C", str(jit)], jit) is None
    files = manifest_files(jit, top)
    assert files[0] == top and len(files) == 3
    edges, _ = read_graph(jit, top)
    compiles = [e for e in edges if e.is_compile]
    links = [e for e in edges if e.is_link]
    assert len(compiles) == 3 and len(links) == 2


def test_each_unit_is_keyed_by_its_files_flags(tmp_path: Path) -> None:
    top = _layout(tmp_path)
    edges, _ = read_graph(top.parent.parent, top)
    keys = {Path(e.source).name: e.flags_key() for e in edges if e.is_compile}
    assert keys["cutlass_gemm_a.cu"] == keys["cutlass_gemm_b.cu"] != keys["mha.cu"]


def test_heavy_units_join_the_pool_declared_in_the_top_file(tmp_path: Path) -> None:
    top = _layout(tmp_path)
    jit = top.parent.parent
    heavy = assign_pool(jit, _plan(), top)
    assert sorted(Path(h).name for h in heavy) == ["cutlass_gemm_a.cuda.o",
                                                    "cutlass_gemm_b.cuda.o"]
    text = top.read_text()
    assert text.startswith(f"pool {HEAVY_POOL}\n  depth = 2\n")
    moe = read_ninja_file(jit / "fused_moe_120" / "build.ninja")
    assert all(e.variables.get("pool") == HEAVY_POOL for e in moe.edges if e.is_compile)
    xqa = read_ninja_file(jit / "xqa_x" / "build.ninja")
    assert all("pool" not in e.variables for e in xqa.edges)
    assert assign_pool(jit, _plan(), top) == heavy  # a second run changes nothing
    assert top.read_text().count(f"pool {HEAVY_POOL}") == 1


def test_units_and_subninjas_start_longest_first(tmp_path: Path) -> None:
    top = _layout(tmp_path)
    jit = top.parent.parent
    seconds = {"site/cutlass_gemm_a.cu": 10.0, "site/cutlass_gemm_b.cu": 140.0,
               "site/mha.cu": 30.0}
    assign_pool(jit, _plan(by_source_seconds=seconds), top)
    moe = read_ninja_file(jit / "fused_moe_120" / "build.ninja")
    assert [Path(e.source).name for e in moe.edges if e.is_compile] == [
        "cutlass_gemm_b.cu", "cutlass_gemm_a.cu"]
    subninjas = [line for line in top.read_text().splitlines() if line.startswith("subninja")]
    assert "fused_moe_120" in subninjas[0] and "xqa_x" in subninjas[1]
