"""The node profile's entries: defaults, the recipe's additions and drops, the ptxas search."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import VerifyError
from sparkbuild.node.profile import (
    ON_NODE,
    NodeProfile,
    ProfileEntry,
    declared_profile,
    env_file_value,
    find_ptxas,
    parse_env_file,
    profile_from_manifest,
    render_env_file,
    render_profile_sh,
    resolve_profile,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_the_recipe_adds_replaces_and_drops() -> None:
    entries = declared_profile(["12.1a"], {"VLLM_USE_DEEP_GEMM": "1", "EXTRA": "x"},
                               ["FLASHINFER_NO_DOWNLOAD"], "r.toml")
    by_key = {e.key: e for e in entries}
    assert "FLASHINFER_NO_DOWNLOAD" not in by_key
    assert by_key["VLLM_USE_DEEP_GEMM"].value == "1"
    assert by_key["VLLM_USE_DEEP_GEMM"].source == "recipe r.toml"
    assert by_key["FLASHINFER_CUDA_ARCH_LIST"].value == "12.1a"
    assert by_key["TRITON_PTXAS_PATH"].value == ON_NODE


def test_a_manifest_without_a_profile_gets_the_defaults_for_its_archs() -> None:
    entries = profile_from_manifest({"build": {"archs": ["9.0a"]}})
    assert {e.key: e.value for e in entries}["FLASHINFER_CUDA_ARCH_LIST"] == "9.0a"


def _ptxas(root: Path, name: str) -> Path:
    path = root / name / "bin" / "ptxas"
    path.parent.mkdir(parents=True)
    path.write_text("")
    return path


def test_the_first_ptxas_that_takes_sm121a_wins(tmp_path: Path) -> None:
    old, new = _ptxas(tmp_path, "triton"), _ptxas(tmp_path, "cuda")
    env = {"TRITON_PTXAS_PATH": str(old), "CUDA_HOME": str(new.parent.parent), "PATH": ""}
    refusing = {old: "ptxas fatal: Value 'sm_121a' is not defined for option 'gpu-name'"}
    found, source, refused = find_ptxas(env, lambda p: refusing.get(p))
    assert (found, source) == (new, "CUDA_HOME")
    assert refused and "sm_121a" in refused[0]


def test_no_ptxas_leaves_the_entry_out_with_a_note(tmp_path: Path) -> None:
    declared = declared_profile(["12.1a"], {}, [], "r")
    profile = resolve_profile(declared, tmp_path / "venv", env={"PATH": ""},
                              probe=lambda p: "refused")
    keys = [e.key for e in profile.entries]
    if "TRITON_PTXAS_PATH" not in keys:  # no /usr/local/cuda here, or it refused
        assert any(n.startswith("TRITON_PTXAS_PATH left out") for n in profile.notes)
    assert (tmp_path / "venv" / "var" / "flashinfer").is_dir()
    text = render_env_file(profile)
    assert "FLASHINFER_NO_DOWNLOAD=1\n" in text and "export" not in text


# -- nothing in a profile runs or adds a line --------------------------------------------


@pytest.mark.parametrize("value", ["1", "=rocep1s0f0:1,rocep1s0f1:1", "/opt/cuda/bin/ptxas",
                                   'a "b" $HOME `id` \\ c; x=1', " spaced ", "", "#not a comment"])
def test_node_env_reads_back_every_value_as_written(value: str) -> None:
    line = f"KEY={env_file_value(value)}"
    assert parse_env_file(f"# comment\n{line}\n") == {"KEY": value}
    if any(c in value for c in "$`\"\\ ;#"):
        assert line.startswith('KEY="')


@pytest.mark.parametrize(("entry", "problem"), [
    (ProfileEntry("A=1;touch x;B", "1", "r", "s"), "is not an environment variable name"),
    (ProfileEntry("X", "1\nLD_PRELOAD=/tmp/x.so", "r", "s"), "U+000A"),
    (ProfileEntry("X", "1", "r\nLD_PRELOAD=/tmp/x.so", "s"), "the reason or source of X"),
    (ProfileEntry("X", "1", "r", "s\u202e"), "U+202E"),
])
def test_an_entry_that_would_run_or_add_a_line_is_never_written(entry: ProfileEntry,
                                                                problem: str) -> None:
    for render in (render_env_file, render_profile_sh):
        with pytest.raises(VerifyError) as refused:
            render(NodeProfile([entry], []))
        assert problem in refused.value.what


@pytest.mark.parametrize("entry", [{"key": "A B", "value": "1"}, {"key": "X", "value": 1},
                                   {"key": "X", "value": "\x1b[2J"}, "not an entry"])
def test_a_manifests_profile_is_checked_where_it_is_read(entry: object) -> None:
    manifest = {"build": {"node_profile": [entry]}}
    with pytest.raises(VerifyError, match=r"build\.node_profile entry 1"):
        profile_from_manifest(manifest)
