"""The extensions a build needs for the recipe's model and target
(sparkbuild.compile.extension_set): a made-up vLLM-shaped tree in tmp_path (setup.py, a
package whose modules import the extensions each way, a model registry) and a tiny recorder
output standing for its CMake (the recorder itself runs cmake: tests/integration)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.compile.extension_set import (
    ExtensionSet,
    ModelRoots,
    TreeFacts,
    choose_extensions,
    left_out_sources,
    list_targets,
    model_roots,
    placeholders_for,
)
from sparkbuild.errors import UsageError, VerifyError
from sparkbuild.recipe import load_recipe
from sparkbuild.sources.package_reach import read_package
from sparkbuild.store.context import RunContext
from sparkbuild.toolchain.cmake_recorder import parse_record

SETUP = '''
ext_modules = []
ext_modules.append(CMakeExtension(name="vllm._C"))
ext_modules.append(CMakeExtension(name="vllm._moe_C"))
ext_modules.append(CMakeExtension(name="vllm.vllm_flash_attn._vllm_fa2_C"))
ext_modules.append(CMakeExtension(name="vllm.vllm_flash_attn._vllm_fa3_C"))
ext_modules.append(CMakeExtension(name="vllm._flashmla_C"))
ext_modules.append(CMakeExtension(name="vllm._lazy_C"))
ext_modules.append(CMakeExtension(name="vllm._host_C"))
ext_modules.append(CMakeExtension(name="vllm._deep_gemm_C"))
ext_modules.append(CMakeExtension(name="vllm._cpu_C"))
ext_modules.append(CMakeExtension(name="vllm.triton_kernels"))
src = "third_party/triton_kernels"
'''

PACKAGE = {
    "vllm/__init__.py": "",
    "vllm/platforms/__init__.py": "",
    "vllm/platforms/cuda.py": '''\
import vllm._C


def import_kernels():
    import vllm._moe_C
''',
    "vllm/models/__init__.py": "",
    "vllm/models/mymodel.py": "from vllm.attention import fa\n",
    "vllm/attention/__init__.py": "",
    "vllm/attention/fa.py": "from vllm import vllm_flash_attn\n",
    "vllm/vllm_flash_attn/__init__.py": '''\
try:
    from . import _vllm_fa2_C
    FA2 = True
except ImportError:
    FA2 = False
try:
    from . import _vllm_fa3_C
    FA3 = True
except ImportError:
    FA3 = False
if not (FA2 or FA3):
    raise ImportError("vllm.vllm_flash_attn needs _vllm_fa2_C or _vllm_fa3_C")
''',
    "vllm/ops/__init__.py": "",
    "vllm/ops/lazy.py": '''\
import os

if os.environ.get("VLLM_USE_LAZY_OPS", "1") == "1":
    pass


def run():
    import vllm._lazy_C
''',
    "vllm/ops/mla.py": "import vllm._flashmla_C\n",
    "vllm/ops/gemm.py": "def gemm():\n    import vllm.third_party.deep_gemm\n",
}
SPARK = "-gencode;arch=compute_121a,code=sm_121a"
FLASHMLA_CMAKE = """\
include(FetchContent)
FetchContent_Declare(flashmla GIT_REPOSITORY https://example.invalid/flashmla.git GIT_TAG v1)
FetchContent_MakeAvailable(flashmla)
file(READ ${flashmla_SOURCE_DIR}/flash_mla/flash_mla_interface.py interface)
add_custom_target(_flashmla_C)
"""
CUTLASS_CMAKE = """\
include(FetchContent)
FetchContent_Declare(cutlass GIT_REPOSITORY https://example.invalid/cutlass.git GIT_TAG v4)
FetchContent_MakeAvailable(cutlass)
# headers of _C and _lazy_C
"""
ARCHS = ("12.1a",)
START = ("vllm.platforms.cuda",)
MODEL = ModelRoots("MyModelForCausalLM", "FLASH_ATTN", ("vllm.models.mymodel",))


def _rows(tree: Path, fa3_sources: str, fa3_options: str | None) -> list[tuple[str, ...]]:
    deps = f"{tree}/.deps"
    rows: list[tuple[str, ...]] = [
        ("target", "_C", "sources", f"{tree}/csrc/c.cu;{tree}/csrc/ops.cpp"),
        ("target", "_moe_C", "sources", f"{tree}/csrc/moe.cu"),
        ("target", "_vllm_fa2_C", "sources", f"{deps}/fa-src/fa2.cu"),
        ("target", "_vllm_fa3_C", "sources", fa3_sources),
        ("target", "_lazy_C", "sources", f"{tree}/csrc/lazy.cu"),
        ("target", "_host_C", "sources", f"{tree}/csrc/host.cpp"),
        ("target", "_deep_gemm_C", "sources", f"{deps}/deepgemm-src/api.cpp"),
        ("install", "_deep_gemm_C", "destination", "vllm/third_party/deep_gemm"),
        ("custom", "_flashmla_C", "runs", "OFF"),
        ("custom", "triton_kernels", "runs", "OFF"),
        ("install", "triton_kernels", "destination", "vllm/third_party/triton_kernels"),
        ("declare", "flashmla", f"declare@{tree}/cmake/flashmla.cmake",
         "GIT_REPOSITORY;https://example.invalid/flashmla.git;GIT_TAG;v1"),
        ("fetch", "flashmla", "available", f"{deps}/flashmla-src"),
        ("skipped", "file(READ)", "-", f"{deps}/flashmla-src/flash_mla/flash_mla_interface.py"),
        ("declare", "cutlass", f"declare@{tree}/cmake/cutlass.cmake",
         "GIT_REPOSITORY;https://example.invalid/cutlass.git;GIT_TAG;v4"),
        ("fetch", "cutlass", "available", f"{deps}/cutlass-src"),
    ]
    for unit in (f"{tree}/csrc/c.cu", f"{tree}/csrc/moe.cu", f"{deps}/fa-src/fa2.cu",
                 f"{tree}/csrc/lazy.cu"):
        rows.append(("source", unit, "COMPILE_OPTIONS", SPARK))
    if fa3_options is not None:
        for unit in fa3_sources.split(";"):
            rows.append(("source", unit, "COMPILE_OPTIONS", fa3_options))
    return rows


def _facts(tree: Path, *, fa3_options: str | None = None) -> TreeFacts:
    """The tree's record: FA3's units get no -gencode for the target unless given."""
    fa3 = f"{tree}/.deps/fa-src/h1.cu;{tree}/.deps/fa-src/h2.cu"
    text = "".join("\t".join(row) + "\n" for row in _rows(tree, fa3, fa3_options))
    return TreeFacts(tree, parse_record(text), read_package(tree, "vllm"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "setup.py").write_text(SETUP, encoding="utf-8")
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake" / "flashmla.cmake").write_text(FLASHMLA_CMAKE, encoding="utf-8")
    (tmp_path / "cmake" / "cutlass.cmake").write_text(CUTLASS_CMAKE, encoding="utf-8")
    for name, text in PACKAGE.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def _choose(tree: Path, facts: TreeFacts | None = None, model: ModelRoots | None = MODEL,
            profile: dict[str, str] | None = None) -> ExtensionSet:
    return choose_extensions(facts or _facts(tree), ARCHS, model, START, profile or {})


def _by_target(chosen: ExtensionSet) -> dict[str, tuple[bool, str, str]]:
    return {c.target: (c.built, c.arch, c.reason) for c in chosen.choices}


def test_the_model_set_builds_what_the_start_and_the_model_import(tree: Path) -> None:
    chosen = _choose(tree)
    assert chosen.targets == ("_C", "_moe_C", "_vllm_fa2_C", "triton_kernels")
    got = _by_target(chosen)
    assert "vllm/platforms/cuda.py:1 imports it" in got["_C"][2]
    assert "in a function the start calls" in got["_moe_C"][2]  # a root's own function
    assert "needs one of _vllm_fa2_C, _vllm_fa3_C" in got["_vllm_fa2_C"][2]
    assert "first that compiles something" in got["_vllm_fa2_C"][2]
    assert got["triton_kernels"][2] == "the tree's setup.py copies its output in every build"
    assert chosen.error is None


def test_what_compiles_nothing_at_the_target_is_left_out_with_its_unit_count(tree: Path) -> None:
    got = _by_target(_choose(tree))
    built, arch, reason = got["_vllm_fa3_C"]
    assert (built, arch) == (False, "no_code")
    assert "none of its 2 CUDA unit(s) a -gencode for 12.1a" in reason
    assert got["_flashmla_C"][:2] == (False, "empty")
    assert "_cpu_C" not in got  # no target of a CUDA build: not an extension here


def test_what_only_unreached_code_imports_is_left_out_with_where(tree: Path) -> None:
    got = _by_target(_choose(tree, profile={"VLLM_USE_LAZY_OPS": "0"}))
    built, _, reason = got["_lazy_C"]
    assert not built
    assert reason.startswith("imported only where the start does not reach: vllm/ops/lazy.py:8")
    assert "the node profile sets VLLM_USE_LAZY_OPS=0, which vllm/ops/lazy.py reads" in reason
    assert got["_host_C"][:1] == (False,)
    assert got["_host_C"][2] == "no module of the package imports it"
    # the packages an extension's component installs count as the extension
    assert got["_deep_gemm_C"][0] is False and "vllm/ops/gemm.py:2" in got["_deep_gemm_C"][2]


def test_an_installed_package_the_model_imports_builds_its_extension(tree: Path) -> None:
    (tree / "vllm" / "models" / "mymodel.py").write_text(
        "from vllm.attention import fa\nimport vllm.third_party.deep_gemm\n")
    got = _by_target(_choose(tree))
    assert got["_deep_gemm_C"][0] is True
    assert "vllm/models/mymodel.py:2 imports it" in got["_deep_gemm_C"][2]


def test_the_first_member_that_compiles_serves_a_one_of_refusal(tree: Path) -> None:
    # FA2 compiles no code at the target, FA3 does: FA3 serves, FA2 is left out by arch
    facts = _facts(tree, fa3_options=SPARK)
    facts.record.source_properties.pop(f"{tree}/.deps/fa-src/fa2.cu")
    facts.record.targets["_vllm_fa2_C"].sources.append(f"{tree}/.deps/fa-src/other.cu")
    facts.record.source_properties[f"{tree}/.deps/fa-src/h1.cu"] = {"COMPILE_OPTIONS": SPARK}
    got = _by_target(_choose(tree, facts))
    assert got["_vllm_fa2_C"][:2] == (False, "no_code")
    assert got["_vllm_fa3_C"][0] is True and "_vllm_fa3_C is the first" in got["_vllm_fa3_C"][2]


def test_the_second_member_is_not_needed_once_the_first_serves(tree: Path) -> None:
    got = _by_target(_choose(tree, _facts(tree, fa3_options=SPARK)))
    built, arch, reason = got["_vllm_fa3_C"]
    assert (built, arch) == (False, "native")
    assert reason.startswith("not needed: vllm/vllm_flash_attn/__init__.py:12 needs one of")
    assert reason.endswith("and _vllm_fa2_C serves it")


def test_a_spare_member_a_reached_module_imports_unguarded_is_built(tree: Path) -> None:
    (tree / "vllm" / "attention" / "fa.py").write_text(
        "from vllm import vllm_flash_attn\nimport vllm.vllm_flash_attn._vllm_fa3_C\n")
    got = _by_target(_choose(tree, _facts(tree, fa3_options=SPARK)))
    built, _, reason = got["_vllm_fa3_C"]
    assert built, reason
    assert "vllm/attention/fa.py:2 imports it" in reason


def test_a_member_whose_project_was_not_read_says_so(tree: Path) -> None:
    facts = _facts(tree)
    for name in ("_vllm_fa2_C", "_vllm_fa3_C"):
        del facts.record.targets[name]
    (tree / "cmake" / "fa.cmake").write_text(
        "FetchContent_MakeAvailable(vllm-flash-attn)\n# _vllm_fa2_C _vllm_fa3_C\n")
    facts.record.declarations += parse_record(
        f"declare\tvllm-flash-attn\tdeclare@{tree}/cmake/fa.cmake\tGIT_TAG;v1\n").declarations
    got = _by_target(_choose(tree, facts))
    assert got["_vllm_fa2_C"][:2] == (True, "fetched")
    assert "not known to compile nothing" in got["_vllm_fa2_C"][2]
    assert got["_vllm_fa3_C"][:2] == (False, "fetched")


def test_a_member_known_to_compile_is_taken_before_one_not_read(tree: Path) -> None:
    facts = _facts(tree, fa3_options=SPARK)
    del facts.record.targets["_vllm_fa2_C"]
    (tree / "cmake" / "fa.cmake").write_text(
        "FetchContent_MakeAvailable(vllm-flash-attn)\n# _vllm_fa2_C\n")
    facts.record.declarations += parse_record(
        f"declare\tvllm-flash-attn\tdeclare@{tree}/cmake/fa.cmake\tGIT_TAG;v1\n").declarations
    got = _by_target(_choose(tree, facts))
    assert got["_vllm_fa3_C"][0] is True and got["_vllm_fa2_C"][0] is False


def test_without_a_model_every_extension_is_built_and_no_code_is_refused(tree: Path) -> None:
    chosen = _choose(tree, model=None)
    assert set(chosen.targets) == {c.target for c in chosen.choices}
    assert [c.target for c in chosen.refused] == ["_vllm_fa3_C"]
    error = chosen.error
    assert isinstance(error, VerifyError)
    assert "_vllm_fa3_C (2 CUDA units)" in error.what and "12.1a" in error.what
    assert "[model]" in (error.hint or "") and "--targets" in (error.hint or "")
    assert "(refused before the compile)" in _by_target(chosen)["_vllm_fa3_C"][2]
    assert chosen.left_out_sources == []  # every extension is built: every source needed


def test_a_source_only_left_out_extensions_use_gets_a_placeholder(tree: Path) -> None:
    chosen = _choose(tree)
    (flashmla,) = chosen.left_out_sources  # cutlass's file names _C, which is built
    assert flashmla.name == "flashmla"
    assert flashmla.extensions == ("_flashmla_C",)
    assert flashmla.files == ("flash_mla/flash_mla_interface.py",)  # what CMake reads of it
    assert flashmla.where == f"{tree}/cmake/flashmla.cmake:2"
    assert "only _flashmla_C use it" in flashmla.reason


def test_left_out_sources_skip_a_declaring_file_that_cannot_be_read(tree: Path) -> None:
    facts = _facts(tree)
    (tree / "cmake" / "flashmla.cmake").unlink()
    chosen = _choose(tree, facts)
    assert left_out_sources(facts, chosen.choices) == []


def test_the_set_as_json_and_as_lines(tree: Path) -> None:
    chosen = _choose(tree)
    data = json.loads(json.dumps(chosen.to_dict()))
    assert set(data) == {"archs", "model", "targets", "extensions", "left_out_sources",
                         "notes"}
    assert data["model"]["architecture"] == "MyModelForCausalLM"
    assert data["targets"] == list(chosen.targets)
    fa3 = next(e for e in data["extensions"] if e["target"] == "_vllm_fa3_C")
    assert fa3 == {"name": "vllm.vllm_flash_attn._vllm_fa3_C", "target": "_vllm_fa3_C",
                   "built": False, "reason": fa3["reason"], "arch": "no_code", "units": 2,
                   "native_units": 0}
    assert data["left_out_sources"][0]["placeholder_files"] == [
        "flash_mla/flash_mla_interface.py"]
    lines = chosen.summary()
    assert lines[0] == ("extensions for MyModelForCausalLM (FLASH_ATTN attention) at 12.1a: "
                        f"4 built of {len(chosen.choices)}")
    assert any(line.startswith("  left out _vllm_fa3_C: ") for line in lines)
    assert any(line.startswith("  source flashmla: not fetched") for line in lines)
    assert _choose(tree, model=None).summary()[0].startswith(
        "extensions for every extension (the recipe has no [model]) at 12.1a")


RECIPE = """\
[recipe]
name = "r"
[source]
spec = "pypi:vllm==0.29.0"
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
"""
MODEL_TABLE = """
[model]
architecture = "Qwen3NextForCausalLM"
head_dim = 256
num_attention_heads = 16
num_key_value_heads = 2
attention_backend = "FLASHINFER"
"""
REGISTRY = '''\
_MODELS = {
    "Qwen3NextForCausalLM": ("qwen3_next", "Qwen3NextForCausalLM"),
    "Qwen3NextMTP": ("qwen3_next_mtp", "Qwen3NextMTP"),
}
'''
BACKENDS = '''\
class AttentionBackendEnum:
    FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
'''


def _recipe_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "r.toml"
    path.write_text(RECIPE + extra, encoding="utf-8")
    return path


def test_model_roots_come_from_the_trees_registry_and_backends(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for relative, text in (("vllm/model_executor/models/registry.py", REGISTRY),
                           ("vllm/v1/attention/backends/registry.py", BACKENDS)):
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_text(text, encoding="utf-8")
    plain = model_roots(tree, "vllm", load_recipe(_recipe_file(tmp_path, MODEL_TABLE)))
    assert plain is not None
    assert plain.modules == ("vllm.model_executor.models.qwen3_next",
                             "vllm.v1.attention.backends.flashinfer")
    drafted = model_roots(tree, "vllm", load_recipe(_recipe_file(
        tmp_path, MODEL_TABLE + "speculative_tokens = 3\n")))
    assert drafted is not None
    assert "vllm.model_executor.models.qwen3_next_mtp" in drafted.modules
    empty = model_roots(tmp_path / "nothing", "vllm",
                        load_recipe(_recipe_file(tmp_path, MODEL_TABLE)))
    assert empty is not None and empty.modules == ()
    assert empty.notes == ("the tree's model registry maps no module to Qwen3NextForCausalLM",
                           "the tree's attention backends name no FLASHINFER")


def test_without_a_model_nothing_is_chosen_for_bundle(tmp_path: Path) -> None:
    recipe = load_recipe(_recipe_file(tmp_path, ""))
    assert model_roots(tmp_path, "vllm", recipe) is None
    assert placeholders_for(recipe, profile={}) is None
    assert placeholders_for(load_recipe(_recipe_file(tmp_path, MODEL_TABLE)),
                            profile={}) is not None


@pytest.mark.parametrize("shape", ["missing", "file", "no_cmake", "no_extensions"])
def test_list_targets_refuses_a_tree_it_cannot_read_before_running_anything(
        tmp_path: Path, shape: str) -> None:
    tree = tmp_path / "tree"
    if shape == "file":
        tree.write_text("not a tree\n")
    elif shape != "missing":
        tree.mkdir()
        (tree / "setup.py").write_text("setup(ext_modules=[])\n")
        if shape == "no_extensions":
            (tree / "CMakeLists.txt").write_text("project(x)\n")
    context = RunContext.create(tmp_path / "cache")
    recipe = load_recipe(_recipe_file(tmp_path, MODEL_TABLE))
    with pytest.raises(UsageError) as raised:
        list_targets(recipe, tree, context, profile={})
    expected = "no CMakeExtension" if shape == "no_extensions" else "CMakeLists.txt"
    assert expected in raised.value.what
    assert raised.value.where is not None and str(tree) in raised.value.where


def test_list_targets_prepares_the_source_afresh_each_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier run's prepared tree in the cache's work directory is no obstacle."""
    from sparkbuild.patches import prepare

    context = RunContext.create(tmp_path / "cache")
    recipe = load_recipe(_recipe_file(tmp_path, MODEL_TABLE))
    earlier = context.cache_root / "work" / recipe.name / "list-targets" / "tree"
    (earlier / "vllm").mkdir(parents=True)
    (earlier / "setup.py").write_text("# an earlier run's tree\n")
    seen: list[bool] = []

    def prepare_tree(spec: str, dest: Path, *args: object, **kwargs: object) -> object:
        seen.append(dest.exists())
        raise UsageError("stop here")

    monkeypatch.setattr(prepare, "prepare_tree", prepare_tree)
    with pytest.raises(UsageError, match="stop here"):
        list_targets(recipe, None, context, profile={})
    assert seen == [False]
