"""--mirror with local file:// repositories: plain and sparse vendoring, submodules too.

Two repositories stand for GitHub ones: ``org/top`` (docs, media, tests, examples and a
submodule whose ``.gitmodules`` URL is ``https://github.com/org/sub.git``) and ``org/sub``.
They live only under ROOT/git/; one rule ``https://github.com/=file://ROOT/git/`` must bring
both, and the cache must record the upstream URLs.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from sparkbuild.sources.mirrors import Mirrors
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.fetch import fetch_plan
from sparkbuild.vendoring.index import source_entry
from sparkbuild.vendoring.plan import SourcePlan, VendorPlan
from sparkbuild.vendoring.unread import referenced_paths, sparse_patterns
from support import git


def _repo(work: Path, files: dict[str, str]) -> None:
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)


def _publish(work: Path, bare: Path) -> None:
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "v1", cwd=work)
    git("tag", "v1", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=work.parent)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    _repo(root / "w" / "sub", {"include/b.h": "// b\n", "docs/y.md": "y", "tests/t.cc": "t"})
    _publish(root / "w" / "sub", root / "git" / "org" / "sub.git")
    top = root / "w" / "top"
    _repo(top, {"include/a.h": "// a\n", "docs/x.md": "x", "media/logo.png": "png",
                "tests/t.cc": "t", "examples/common/h.h": "// h\n", "examples/demo/d.cc": "d"})
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q",
         f"file://{root}/git/org/sub.git", "third_party/sub", cwd=top)
    git("config", "-f", ".gitmodules", "submodule.third_party/sub.url",
         "https://github.com/org/sub.git", cwd=top)
    _publish(top, root / "git" / "org" / "top.git")
    tree = root / "tree"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text('include_directories("${TOP_DIR}/examples/common")\n')
    return root


def _vendored(root: Path, cache_dir: Path, *, sparse: bool) -> list[str]:
    source = SourcePlan(name="top", kind="git", url="https://github.com/org/top.git", ref="v1")
    plan = VendorPlan(root / "tree", (source,), (), (), (), None)
    patterns = sparse_patterns(referenced_paths(root / "tree")) if sparse else None
    mirrors = Mirrors.parse([f"https://github.com/=file://{root}/git/"])
    (entry,) = fetch_plan(plan, cache_dir, mirrors=mirrors, wheels=False, sparse=patterns)
    assert entry.status == "fetched"
    cache = Cache(cache_dir)
    recorded = source_entry(cache, source)
    assert recorded is not None
    assert recorded["url"] == "https://github.com/org/top.git"  # upstream's, not the mirror's
    assert recorded["commit"] == git("rev-parse", "v1^{commit}", cwd=root / "w" / "top")
    with tarfile.open(cache.path_of(str(recorded["sha256"]))) as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


def test_a_mirror_serves_the_source_and_its_submodule(mirror: Path) -> None:
    files = _vendored(mirror, mirror / "cache-plain", sparse=False)
    assert "include/a.h" in files and "third_party/sub/include/b.h" in files
    assert "docs/x.md" in files  # a plain vendoring keeps everything


def test_sparse_vendoring_leaves_out_what_a_build_never_reads(mirror: Path) -> None:
    files = _vendored(mirror, mirror / "cache-sparse", sparse=True)
    assert files == [".gitmodules", "examples/common/h.h", "include/a.h",
                     "third_party/sub/include/b.h"]
