"""`sparkbuild lock` of the real vllm 0.33.0 recipe for the Spark, from this x86_64 machine."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import pytest
from packaging.version import Version

from sparkbuild.cli import main
from sparkbuild.recipe import REPO_ROOT
from sparkbuild.wheelhouse.lock import parse_lock

if TYPE_CHECKING:
    from pathlib import Path

FLASHINFER_0_6_18 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"


@pytest.mark.network
def test_lock_vllm_for_manylinux_aarch64_python_312(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["lock", "--recipe", str(REPO_ROOT / "recipes" / "vllm-0.33.0.toml"),
                 "--platform", "manylinux_2_39_aarch64", "--python", "3.12",
                 "--out", str(tmp_path), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    text = (tmp_path / "requirements.lock").read_text()
    locked = {item.key: item for item in parse_lock(text, where="lock")}  # each line hashed

    assert locked["flashinfer-python"].version == "0.6.18"
    assert locked["flashinfer-python"].hashes == (FLASHINFER_0_6_18,)
    assert "torch" in locked and "transformers" in locked
    # vLLM's own requirement (0.7.2.post1) gave way to the recipe's pin
    assert any(r.startswith("flashinfer-python==0.7") for r in report["replaced_by_pins"])
    # markers were evaluated for the target, not this machine's Python 3.11: vLLM's
    # `setuptools>=78.1.1,<81.0.0; python_version > '3.11'` applied
    assert Version(locked["setuptools"].version) < Version("81")
    for line in text.splitlines():
        assert line.startswith(("#", "    --hash=sha256:")) or re.fullmatch(
            r"[A-Za-z0-9._-]+==\S+ \\", line), line
    assert len(locked) > 100 and report["platform"] == "manylinux_2_39_aarch64"
