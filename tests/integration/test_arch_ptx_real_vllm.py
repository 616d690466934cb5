"""The arch edit on the real vllm 0.11.0, 0.20.0 and 0.33.0 sdists: no PTX-only list is left.

vLLM's Marlin, Marlin MoE, HadaCore and scaled_mm_c2x lists (``"8.0+PTX"``,
``"7.5;8.0;8.7;8.9+PTX"``...) give a 12.1a build PTX only: the tree's own
``cuda_archs_loose_intersection`` lets a ``+PTX`` entry match across majors.  After the
series, at 12.1a and at every CUDA version the tree distinguishes, every list that gives the
target anything gives native 12.1 code, evaluated with the tree's own cmake/utils.cmake; the
``patch status --json`` details hold each such list before (PTX) and after (12.1a).
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

import pytest

from sparkbuild.cli import main
from sparkbuild.patches.edits.arch_lists import jit_only
from sparkbuild.patches.prepare import prepare_tree
from sparkbuild.recipe import REPO_ROOT, load_recipe
from sparkbuild.sources.fetch import fetch_source
from sparkbuild.toolchain.arch_eval import distinct_verdicts, evaluate_tree
from sparkbuild.toolchain.archs import tree_arch_lists

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.network

RECIPE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"


def _ptx_only(tree: Path) -> list[tuple[str, str, str, list[str]]]:
    """(CUDA, variable, where, value) of every list without an SM12x entry that gives 12.1a
    something, but no native code (a +PTX entry's fallback)."""
    found = tree_arch_lists(tree)
    evaluations = evaluate_tree(tree, found, ["12.1a"],
                                distinct_verdicts(tree, found.lists, "13.0"))
    return [(e.cuda, found.lists[i].variable, found.lists[i].where, list(v))
            for e in evaluations for i, v in e.results.items()
            if not found.lists[i].has_major(12) and jit_only(v, "12.1")]


@pytest.fixture(scope="module", params=["0.11.0", "0.20.0", "0.33.0"])
def trees(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[str, Path, Path]]:
    version = request.param
    root = tmp_path_factory.mktemp(f"vllm-ptx-{version}")
    spec = f"pypi:vllm=={version}"
    pristine = fetch_source(spec, root / "pristine", recipe=None).tree
    prepared = prepare_tree(spec, root / "prepared", load_recipe(RECIPE))
    assert prepared.error is None, prepared.error
    yield version, pristine, prepared.tree
    shutil.rmtree(root, ignore_errors=True)


def test_no_list_is_ptx_only_after_the_series(trees: tuple[str, Path, Path]) -> None:
    version, pristine, tree = trees
    before = _ptx_only(pristine)
    names = {variable for _, variable, _, _ in before}
    assert "SCALED_MM_2X_ARCHS" in names and any(n.startswith("MARLIN") for n in names), before
    assert all(len(value) == 1 and value[0].endswith("+PTX") for *_, value in before), before
    assert _ptx_only(tree) == [], version


def test_status_json_records_each_ptx_list_before_and_after(
    trees: tuple[str, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    version, pristine, tree = trees
    assert main(["patch", "status", str(tree), "--recipe", str(RECIPE), "--json"]) == 0
    # On the patched tree the edit is already applied; its details still show every list.
    lists = json.loads(capsys.readouterr().out)["patches"][0]["details"]["lists"]
    names = {variable for _, variable, _, _ in _ptx_only(pristine)}
    rows = [row for row in lists if row["variable"] in names]
    assert {row["variable"] for row in rows} == names, version
    assert all(row["after"] == ["12.1a"] and row["source_after"].endswith(";12.1a")
               for row in rows), rows
