"""flashinfer's unit tests: a toolkit of empty files (tests/support/flashinfer_toolkit.py),
and neither this machine's toolkit nor its compiler launchers looked up unless a test says
so."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.flashinfer import builder_wheels, compile_launcher
from support.flashinfer_toolkit import make_toolkit


@pytest.fixture
def toolkit(tmp_path: Path) -> Path:
    return make_toolkit(tmp_path / "cuda")


@pytest.fixture(autouse=True)
def no_toolkit_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder's header check and launcher choice read this machine only when a test
    says so: no toolkit found (the check is skipped), no sccache or ccache."""
    monkeypatch.setattr(builder_wheels, "toolkit_root", lambda: None)
    monkeypatch.setattr(compile_launcher, "find_sccache", lambda: None)
    monkeypatch.setattr(compile_launcher, "find_launcher", lambda: None)
