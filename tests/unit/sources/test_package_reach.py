"""Which modules a start reaches (sparkbuild.sources.package_reach): a made-up package whose
files import in each of the ways the reader classifies, read with ``ast`` from tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.sources.package_reach import (
    ImportSite,
    PackageImports,
    reached,
    read_package,
    strongest,
)

FILES = {
    "pkg/__init__.py": "import os\n",
    "pkg/platform.py": '''\
"""the start's root: what it imports at the top runs at every start"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import pkg._C
from . import layers
from .helpers import tool as _tool

try:
    import pkg._opt_C
except ImportError:
    pass

if TYPE_CHECKING:
    import pkg.typing_only
else:
    import pkg.runtime_else

with open(__file__):
    import pkg.in_with


def kernels():
    import pkg._moe_C


class Platform:
    import pkg.class_body

    def method(self):
        from pkg import _method_C

cb = lambda: __import__("x") or importlib.import_module("pkg.lambda_mod")
importlib.import_module("pkg.dynamic_top")
''',
    "pkg/layers/__init__.py": "from .attention import backend\n",
    "pkg/layers/attention.py": '''\
import pkg._attn_C


def backend():
    import pkg._lazy_only_C
    return importlib.import_module("pkg.by_name")
''',
    "pkg/helpers.py": "def tool():\n    from .. import nowhere\n",
    "pkg/unreached.py": "import pkg._far_C\n",
    "pkg/typing_only.py": "import pkg._typing_C\n",
    "pkg/runtime_else.py": "",
    "pkg/in_with.py": "",
    "pkg/class_body.py": "",
    "pkg/dynamic_top.py": "",
    "pkg/lambda_mod.py": "",
    "pkg/by_name.py": "",
    "pkg/broken.py": "import pkg._C\ndef (:\n",
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def _sites(imports: PackageImports, module: str) -> dict[str, ImportSite]:
    return {site.name: site for site in imports.sites[module]}


def test_every_module_is_named_by_its_dotted_name(tree: Path) -> None:
    imports = read_package(tree, "pkg")
    assert imports.modules["pkg"] == "pkg/__init__.py"
    assert imports.modules["pkg.layers"] == "pkg/layers/__init__.py"
    assert imports.modules["pkg.layers.attention"] == "pkg/layers/attention.py"
    assert imports.sites["pkg.broken"] == []  # a file that does not parse imports nothing


def test_each_import_is_classified_by_where_it_stands(tree: Path) -> None:
    sites = _sites(read_package(tree, "pkg"), "pkg.platform")
    kinds = {name: site.kind for name, site in sites.items()}
    assert kinds["pkg._C"] == "top"
    assert kinds["pkg.layers"] == "top"  # from . import layers, in the package pkg
    assert kinds["pkg.helpers.tool"] == "top"
    assert kinds["pkg._opt_C"] == "guarded"  # try
    assert kinds["pkg.runtime_else"] == "guarded"  # the else branch of TYPE_CHECKING runs
    assert kinds["pkg.in_with"] == "guarded"
    assert kinds["pkg._moe_C"] == "lazy"  # inside a function
    assert kinds["pkg.class_body"] == "top"  # a class body runs on import
    assert kinds["pkg._method_C"] == "lazy"
    assert kinds["pkg.lambda_mod"] == "lazy"
    assert "pkg.typing_only" not in sites  # only a type checker imports it
    assert (sites["pkg._C"].path, sites["pkg._C"].line) == ("pkg/platform.py", 7)
    assert sites["pkg._C"].where == "pkg/platform.py:7"


def test_import_module_with_a_constant_name_is_of_the_kind_its_place_gives_it(
        tree: Path) -> None:
    imports = read_package(tree, "pkg")
    assert _sites(imports, "pkg.platform")["pkg.dynamic_top"].kind == "top"
    assert _sites(imports, "pkg.layers.attention")["pkg.by_name"].kind == "lazy"


def test_relative_imports_resolve_against_the_package(tree: Path) -> None:
    imports = read_package(tree, "pkg")
    assert "pkg.layers.attention.backend" in _sites(imports, "pkg.layers")
    assert _sites(imports, "pkg.helpers") == {}  # beyond the top package: not an import


def test_a_start_follows_top_and_guarded_imports_but_not_lazy_ones(tree: Path) -> None:
    imports = read_package(tree, "pkg")
    reach = reached(imports, ("pkg.platform",))
    assert reach.roots == ("pkg.platform",)
    for module in ("pkg", "pkg.layers", "pkg.layers.attention", "pkg.helpers",
                   "pkg.runtime_else", "pkg.in_with", "pkg.class_body", "pkg.dynamic_top"):
        assert module in reach.via, module
    for module in ("pkg.typing_only", "pkg.lambda_mod", "pkg.by_name", "pkg.unreached"):
        assert module not in reach.via, module
    assert reach.via["pkg.platform"] is None
    assert reach.chain("pkg.layers.attention") == [
        "pkg.platform", "pkg.layers", "pkg.layers.attention"]


def test_lazy_imports_of_the_roots_alone_are_followed_when_asked(tree: Path) -> None:
    imports = read_package(tree, "pkg")
    reach = reached(imports, ("pkg.platform",), follow_lazy_in_roots=True)
    assert "pkg.lambda_mod" in reach.via  # the root's own function
    assert "pkg.by_name" not in reach.via  # a function of a reached module, not a root


def test_roots_the_package_lacks_are_dropped(tree: Path) -> None:
    reach = reached(read_package(tree, "pkg"), ("pkg.nope", "pkg.unreached"))
    assert reach.roots == ("pkg.unreached",)
    assert set(reach.via) == {"pkg.unreached", "pkg"}


def test_importers_of_an_extension_and_the_strongest_of_them(tree: Path) -> None:
    imports = read_package(tree, "pkg")
    sites = imports.importers_of({"pkg._C"})
    assert sorted(site.where for site in sites) == ["pkg/platform.py:7"]  # broken.py: none
    lazy = imports.importers_of({"pkg._lazy_only_C"})
    assert [site.kind for site in lazy] == ["lazy"]
    mixed = [*lazy, *imports.importers_of({"pkg._opt_C"}), *sites]
    best = strongest(mixed)
    assert best is not None and best.kind == "top"
    assert strongest([]) is None


def test_a_missing_package_reads_as_empty(tmp_path: Path) -> None:
    imports = read_package(tmp_path, "pkg")
    assert imports.modules == {} and imports.sites == {}
