"""A placeholder for a source no built extension uses (sparkbuild.vendoring.placeholders),
and where the build finds it (sparkbuild.vendoring.materialize)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.errors import SourceError
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.materialize import materialize
from sparkbuild.vendoring.placeholders import MARKER, Placeholder, write_placeholder
from sparkbuild.vendoring.plan import SourcePlan, VendorPlan

FLASHMLA = Placeholder(
    "flashmla", "only _flashmla_C use it, and the build leaves it out",
    ("flash_mla/flash_mla_interface.py", "csrc/api.cu", "csrc/kernel.h", "data/table.bin"),
    ("_flashmla_C",), "/t/cmake/external_projects/flashmla.cmake:19")


def test_each_file_says_what_it_is(tmp_path: Path) -> None:
    write_placeholder(tmp_path / "p", FLASHMLA)
    said = ("placeholder written by sparkbuild: flashmla is not part of this build (only "
            "_flashmla_C use it, and the build leaves it out)")
    interface = tmp_path / "p" / "flash_mla" / "flash_mla_interface.py"
    assert interface.read_text() == f"raise ImportError({said!r})\n"
    with pytest.raises(ImportError, match="flashmla is not part of this build"):
        exec(compile(interface.read_text(), str(interface), "exec"), {})
    assert (tmp_path / "p" / "csrc" / "api.cu").read_text() == f"// {said}\n"
    assert (tmp_path / "p" / "csrc" / "kernel.h").read_text() == f"// {said}\n"
    assert (tmp_path / "p" / "data" / "table.bin").read_bytes() == b""


def test_the_marker_names_the_placeholder(tmp_path: Path) -> None:
    write_placeholder(tmp_path / "p", FLASHMLA)
    marker = json.loads((tmp_path / "p" / MARKER).read_text())
    assert marker == FLASHMLA.to_dict()
    assert marker["placeholder_files"] == list(FLASHMLA.files)
    assert marker["extensions"] == ["_flashmla_C"]


@pytest.mark.parametrize("relative", ["../escape.py", "/etc/escape.py", "a/../../escape.py",
                                      ""])
def test_a_file_outside_its_directory_is_refused(tmp_path: Path, relative: str) -> None:
    hostile = Placeholder("flashmla", "why", (relative,))
    with pytest.raises(SourceError) as raised:
        write_placeholder(tmp_path / "p", hostile)
    assert "would lie outside its directory" in raised.value.what
    assert not (tmp_path / "escape.py").exists()


def test_the_build_is_pointed_at_the_placeholder(tmp_path: Path) -> None:
    source = SourcePlan("flashmla", "git", "https://x/flashmla.git", "v1",
                        override="FLASH_MLA_SRC_DIR", placeholder=FLASHMLA)
    plan = VendorPlan(Path("/t"), (), (), (), (), None, excluded=(source,))
    stale = tmp_path / "work" / "deps" / "flashmla-placeholder" / "stale.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("left by an earlier build\n")
    out = materialize(plan, Cache(tmp_path / "cache"), tmp_path / "work")
    root = tmp_path / "work" / "deps" / "flashmla-placeholder"
    assert out.sources["flashmla"] == root
    assert out.cmake_defines["FETCHCONTENT_SOURCE_DIR_FLASHMLA"] == str(root)
    assert out.env["FLASH_MLA_SRC_DIR"] == str(root)
    assert (root / "flash_mla" / "flash_mla_interface.py").is_file()
    assert not stale.exists()  # written afresh


def test_an_excluded_source_stays_an_empty_directory(tmp_path: Path) -> None:
    source = SourcePlan("tml_fa4", "git", "https://x/tml.git", "v1")
    plan = VendorPlan(Path("/t"), (), (), (), (), None, excluded=(source,))
    out = materialize(plan, Cache(tmp_path / "cache"), tmp_path / "work")
    root = out.sources["tml_fa4"]
    assert root.name == "tml_fa4-excluded" and list(root.iterdir()) == []
