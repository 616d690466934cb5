"""The recorder's part of a vendor plan kept in the cache (sparkbuild.vendoring.kept_plan).

The recorder is never run here: a fake stands in for it and counts its calls.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sparkbuild.recipe import VendorSettings, load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.toolchain.cmake_recorder import BuildRecord, FetchDeclaration
from sparkbuild.vendoring import kept_plan
from sparkbuild.vendoring import sources as vendor_sources
from sparkbuild.vendoring.fetch import vendor_for_recipe
from sparkbuild.vendoring.kept_plan import NAMESPACE, recorder_key, reusing
from sparkbuild.vendoring.plan import RecordedSources, SourcePlan, plan_tree
from sparkbuild.vendoring.sources import Assumption, Recorded

EXAMPLE_RECIPE = Path(__file__).resolve().parents[3] / "examples" / "mini-vllm" / "recipe.toml"
CUTLASS = SourcePlan("cutlass", "git", "https://github.com/NVIDIA/cutlass.git", "v4.2.1",
                     where="CMakeLists.txt:3", submodules=("a", "b"))


class FakeRecorder:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, tree: Path, env: object, torch: str | None) -> RecordedSources:
        self.calls += 1
        return RecordedSources((CUTLASS,), (dataclasses.replace(CUTLASS, name="onednn"),),
                               ("a note",))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "cmake").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("include(cmake/utils.cmake)\n", encoding="utf-8")
    (root / "cmake" / "utils.cmake").write_text("set(X 1)\n", encoding="utf-8")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["torch==2.9.0"]\n', encoding="utf-8")
    return root


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


ENV = {"CMAKE_ARGS": "-DX=1", "PATH": "/usr/bin"}


def _plan_twice(tree: Path, cache: Cache, fake: FakeRecorder,
                env: dict[str, str] | None = None) -> None:
    """Plan with ENV, then with ``env`` (ENV when None)."""
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    plan_tree(tree, env=env or ENV, sources_of=reusing(cache, fake))


def test_a_hit_skips_the_recorder_and_gives_an_equal_plan(tree: Path, cache: Cache) -> None:
    fake = FakeRecorder()
    first = plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    second = plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    assert fake.calls == 1
    assert second == first
    assert second.sources == (CUTLASS,) and second.notes == ("a note",)
    assert first.reused is None and second.reused


def test_the_summary_says_the_plan_was_reused(tree: Path, cache: Cache) -> None:
    from sparkbuild.vendoring.plan import VendorResult

    fake = FakeRecorder()
    _plan_twice(tree, cache, fake)
    plan = plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    lines = VendorResult(plan, cache.root, plan_only=True).summary()
    assert any(line.startswith("vendor plan reused: inputs unchanged since ") for line in lines)


@pytest.mark.parametrize("name", ["CMakeLists.txt", "cmake/utils.cmake", "cmake/new.cmake",
                                  "sub/CMakeLists.txt"])
def test_one_changed_byte_of_a_cmake_file_is_a_miss(tree: Path, cache: Cache, name: str
                                                    ) -> None:
    fake = FakeRecorder()
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    path = tree / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((path.read_bytes() if path.exists() else b"") + b" ")
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    assert fake.calls == 2


def test_a_changed_torch_pin_is_a_miss(tree: Path, cache: Cache) -> None:
    fake = FakeRecorder()
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["torch==2.9.1"]\n',
                                         encoding="utf-8")
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    assert fake.calls == 2


@pytest.mark.parametrize("changed", [{"CMAKE_ARGS": "-DX=2"}, {"PATH": "/opt/bin"},
                                     {"TORCH_CUDA_ARCH_LIST": "12.1a"},
                                     {"MINI_DEP_DIR": "/elsewhere"}])
def test_a_variable_the_runs_read_is_a_miss(tree: Path, cache: Cache,
                                            changed: dict[str, str]) -> None:
    (tree / "cmake" / "utils.cmake").write_text("set(D $ENV{MINI_DEP_DIR})\n", encoding="utf-8")
    fake = FakeRecorder()
    _plan_twice(tree, cache, fake, env={**ENV, **changed})
    assert fake.calls == 2


def test_a_variable_nothing_reads_is_no_miss(tree: Path, cache: Cache,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # a shell's `_` and pytest's PYTEST_CURRENT_TEST differ between two runs of one build
    fake = FakeRecorder()
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another phase")
    monkeypatch.setenv("_", "/usr/bin/unshare")
    plan = plan_tree(tree, env={**ENV, "OLDPWD": "/somewhere"}, sources_of=reusing(cache, fake))
    assert fake.calls == 1 and plan.reused


def test_a_search_path_listing_an_entry_again_is_no_miss(tree: Path, cache: Cache,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # a rebuild that prepends a directory to a PATH that already has it makes the
    # same lookups, the same plan; a new directory in front of the others is a miss
    fake = FakeRecorder()
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/lib:/usr/lib")
    plan_tree(tree, env={**ENV, "PATH": "/site/bin:/usr/bin"}, sources_of=reusing(cache, fake))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/lib:/usr/lib:/opt/lib")
    plan = plan_tree(tree, env={**ENV, "PATH": "/site/bin:/site/bin:/usr/bin:/site/bin"},
                     sources_of=reusing(cache, fake))
    assert fake.calls == 1 and plan.reused
    plan_tree(tree, env={**ENV, "PATH": "/usr/bin:/site/bin"}, sources_of=reusing(cache, fake))
    assert fake.calls == 2


def test_a_changed_recorder_is_a_miss(tree: Path, cache: Cache,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    before = recorder_key(tree, ENV, "2.9.0")
    monkeypatch.setattr(kept_plan, "SCHEMA", kept_plan.SCHEMA + 1)
    assert recorder_key(tree, ENV, "2.9.0") != before
    monkeypatch.undo()
    monkeypatch.setattr(vendor_sources, "VENDOR_ARCHS", ("12.1a",))
    assert recorder_key(tree, ENV, "2.9.0") != before


def _entry_path(cache: Cache) -> Path:
    [path] = (cache.index_dir / NAMESPACE).glob("*.json")
    return path


@pytest.mark.parametrize("corrupt", [
    lambda text: text[: len(text) // 2],
    lambda text: "[]",
    lambda text: json.dumps({**json.loads(text), "sources": "cutlass"}),
    lambda text: json.dumps({**json.loads(text), "sources": [{"name": "cutlass"}]}),
    lambda text: json.dumps({**json.loads(text), "notes": [1]}),
    lambda text: text.replace('"certain": true', '"certain": "yes"', 1),
    lambda text: text.replace('"kind": "git"', '"kind": "svn"', 1),
    lambda text: json.dumps({**json.loads(text), "schema": 0}),
    lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "when"}),
])
def test_a_corrupt_entry_is_a_miss_never_an_error(tree: Path, cache: Cache, corrupt: object
                                                  ) -> None:
    assert callable(corrupt)
    fake = FakeRecorder()
    first = plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    path = _entry_path(cache)
    path.write_text(corrupt(path.read_text(encoding="utf-8")), encoding="utf-8")
    again = plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    assert fake.calls == 2 and again == first and again.reused is None
    assert plan_tree(tree, env=ENV, sources_of=reusing(cache, fake)).reused  # rewritten


# -- through vendor_for_recipe: only with reuse, and the recipe's choices always afresh --


def _recorded(tree: Path, env: object, torch: str | None) -> list[Recorded]:
    declaration = FetchDeclaration("cutlass", "declare", f"{tree}/CMakeLists.txt", (
        "GIT_REPOSITORY", "https://github.com/NVIDIA/cutlass.git", "GIT_TAG", "v4.2.1"))
    return [Recorded(Assumption(name), BuildRecord(declarations=[declaration], complete=True),
                     {}) for name in ("cuda-12.9", "cuda-13.0")]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def record(tree: Path, env: object, torch: str | None) -> list[Recorded]:
        calls.append(1)
        return _recorded(tree, env, torch)

    monkeypatch.setattr("sparkbuild.vendoring.plan.record_assumptions", record)
    return calls


def test_vendor_for_recipe_reuses_only_when_asked(tree: Path, cache: Cache,
                                                  counted: list[int]) -> None:
    recipe = load_recipe(EXAMPLE_RECIPE)
    for _ in range(2):
        vendor_for_recipe(tree, cache, recipe, offline=True, wheels=True)
    assert len(counted) == 2  # `vendor` and `bundle`: always afresh
    first = vendor_for_recipe(tree, cache, recipe, offline=True, wheels=True, reuse=True)
    second = vendor_for_recipe(tree, cache, recipe, offline=True, wheels=True, reuse=True)
    assert len(counted) == 3
    assert second.plan == first.plan and second.plan.reused
    assert [s.name for s in second.plan.sources] == ["cutlass"]


def test_a_changed_vendor_setting_changes_the_reused_plan(tree: Path, cache: Cache,
                                                          counted: list[int]) -> None:
    """The recipe's [vendor] choices are applied to the kept part on every run, so a
    changed setting can never be served a plan made under the old one."""
    recipe = load_recipe(EXAMPLE_RECIPE)
    before = vendor_for_recipe(tree, cache, recipe, offline=True, wheels=True, reuse=True)
    changed = dataclasses.replace(recipe, vendor=VendorSettings(exclude=("cutlass",)))
    after = vendor_for_recipe(tree, cache, changed, offline=True, wheels=True, reuse=True)
    assert [s.name for s in before.plan.sources] == ["cutlass"] and not before.plan.excluded
    assert not after.plan.sources and [s.name for s in after.plan.excluded] == ["cutlass"]
    narrowed = dataclasses.replace(recipe, vendor=VendorSettings(submodules={"cutlass": ()}))
    again = vendor_for_recipe(tree, cache, narrowed, offline=True, wheels=False, reuse=True)
    assert again.plan.sources[0].submodules == () and not again.plan.wheels


def test_what_a_configure_writes_into_the_tree_is_no_miss(tree: Path, cache: Cache) -> None:
    """vLLM's configure writes its dependencies' binary directories into the tree's .deps
    (FETCHCONTENT_BASE_DIR): CMake files, but not the tree's."""
    fake = FakeRecorder()
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    for name in (".deps/cutlass-build/cmake_install.cmake",
                 ".deps/cutlass-build/CMakeFiles/Export/NvidiaCutlassTargets.cmake",
                 "csrc/CMakeFiles/generated.cmake"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("set(GENERATED 1)\n", encoding="utf-8")
    plan_tree(tree, env=ENV, sources_of=reusing(cache, fake))
    assert fake.calls == 1
