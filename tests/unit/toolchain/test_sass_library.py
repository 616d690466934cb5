"""Pairing the cubins ``cuobjdump -xelf all`` extracts with the fatbin headers' archs."""

from __future__ import annotations

from pathlib import Path

from sparkbuild.toolchain.sass_library import paired_cubins


def test_cubins_that_do_not_pair_with_the_headers_are_not_used(tmp_path: Path) -> None:
    for name in ("lib.1.sm_121a.cubin", "lib.2.sm_120.cubin"):
        (tmp_path / name).write_bytes(b"")
    assert paired_cubins(tmp_path, ["sm_121a", "sm_120f"]) is not None
    assert paired_cubins(tmp_path, ["sm_121a", "sm_90a"]) is None  # another arch
    assert paired_cubins(tmp_path, ["sm_121a"]) is None  # another count
