"""What a bundle and a sparse vendoring leave out, and what they keep because CMake names it."""

from __future__ import annotations

from pathlib import Path

from sparkbuild.bundle.strip import strip_tree
from sparkbuild.vendoring.unread import is_stripped_path, referenced_paths, sparse_patterns


def _files(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)


def test_referenced_paths_come_from_the_tree_s_cmake(tmp_path: Path) -> None:
    (tmp_path / "cmake").mkdir()
    (tmp_path / "CMakeLists.txt").write_text(
        'set(INC "${CUTLASS_DIR}/examples/77_blackwell_fmha;${CUTLASS_DIR}/examples/common")\n'
        "add_subdirectory(tests)\n")
    (tmp_path / "cmake" / "x.cmake").write_text('include("${X}/test/unit/common.cmake")\n')
    (tmp_path / "notes.txt").write_text("docs/ignored because not CMake")
    assert referenced_paths(tmp_path) == {"examples/77_blackwell_fmha", "examples/common",
                                          "test/unit"}


def test_strip_tree_removes_docs_media_tests_and_lists_them(tmp_path: Path) -> None:
    root = tmp_path / "cutlass"
    _files(root, [
        "include/cutlass/gemm.h", "tools/util/include/u.h", "docs/index.md",
        "media/images/big.png", "test/unit/gemm.cu", "examples/common/helper.h",
        "examples/00_basic/basic.cu", "examples/common/diagram.svg", "python/doc/x.rst",
        "csrc/cutlass/.git", "README.md",
    ])
    report = strip_tree(root, "source cutlass", frozenset({"examples/common"}))
    left = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert left == ["README.md", "examples/common/helper.h", "include/cutlass/gemm.h",
                    "tools/util/include/u.h"]
    assert report.paths == ["csrc/cutlass/.git", "docs", "examples/00_basic",
                            "examples/common/diagram.svg", "media", "python/doc", "test"]
    assert report.files == 7


def test_is_stripped_path_agrees_with_the_sparse_patterns(tmp_path: Path) -> None:
    keep = frozenset({"examples/common"})
    assert not is_stripped_path("examples/common/helper.h", keep)
    assert is_stripped_path("examples/00_basic/basic.cu", keep)
    assert is_stripped_path("include/logo.png", keep)
    assert not is_stripped_path("include/cutlass/gemm.h", keep)
    patterns = sparse_patterns(keep)
    assert patterns[0] == "/*"
    assert "!examples/" in patterns and "**/examples/common/" in patterns
    assert patterns.index("!examples/") < patterns.index("**/examples/common/")
    assert patterns[-1].startswith("!*.")  # images stay out of kept directories too
