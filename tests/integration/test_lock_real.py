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
FLASHINFER_0_7_2_POST1 = "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
RELEASE = REPO_ROOT / "recipes" / "vllm-0.33.0.toml"


@pytest.mark.network
def test_lock_vllm_for_manylinux_aarch64_python_312(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["lock", "--recipe", str(RELEASE),
                 "--platform", "manylinux_2_39_aarch64", "--python", "3.12",
                 "--out", str(tmp_path), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    text = (tmp_path / "requirements.lock").read_text()
    locked = {item.key: item for item in parse_lock(text, where="lock")}  # each line hashed

    # the flashinfer-python vllm 0.33.0 itself requires, by the pinned wheel's hash
    assert locked["flashinfer-python"].version == "0.7.2.post1"
    assert locked["flashinfer-python"].hashes == (FLASHINFER_0_7_2_POST1,)
    assert "torch" in locked and "transformers" in locked
    assert locked["torch"].version == "2.14.0"  # requirements/cuda.txt's torch==2.14.0
    assert report["overrides"] == [] and "override" not in text
    # markers were evaluated for the target, not this machine's Python 3.11: vLLM's
    # `setuptools>=78.1.1,<81.0.0; python_version > '3.11'` applied
    assert Version(locked["setuptools"].version) < Version("81")
    for line in text.splitlines():
        assert line.startswith(("#", "    --hash=sha256:")) or re.fullmatch(
            r"[A-Za-z0-9._-]+==\S+ \\", line), line
    assert len(locked) > 100 and report["platform"] == "manylinux_2_39_aarch64"


def old_pin_recipe(tmp_path: Path, override: str | None) -> Path:
    """A copy of the release recipe pinning flashinfer-python 0.6.18 (the qwen38next pin)."""
    text = RELEASE.read_text().replace('version = "0.7.2.post1"', 'version = "0.6.18"')
    text = text.replace(FLASHINFER_0_7_2_POST1, FLASHINFER_0_6_18)
    text = text.replace('"../patches/series"', f'"{REPO_ROOT / "patches" / "series"}"')
    if override:  # in the pin's own table (other tables may follow it)
        pin = f'sha256 = "{FLASHINFER_0_6_18}"\n'
        assert pin in text
        text = text.replace(pin, pin + f'override = "{override}"\n')
    path = tmp_path / "old-pin.toml"
    path.write_text(text)
    return path


@pytest.mark.network
def test_a_pin_contradicting_vllm_fails_unless_it_is_an_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--platform", "manylinux_2_39_aarch64", "--python", "3.12", "--json"]
    code = main(["lock", "--recipe", str(old_pin_recipe(tmp_path, None)),
                 "--out", str(tmp_path / "refused"), *args])
    captured = capsys.readouterr()
    assert code == 14
    error = json.loads(captured.out)["error"]
    assert error["what"] == ("the recipe pins flashinfer-python==0.6.18, but vllm "
                             "(requirements/cuda.txt:13) requires flashinfer-python==0.7.2.post1")
    assert not (tmp_path / "refused" / "requirements.lock").exists()

    reason = "0.6.18 is the version that runs the NVFP4 MoE path on GB10"
    code = main(["lock", "--recipe", str(old_pin_recipe(tmp_path, reason)),
                 "--out", str(tmp_path / "forced"), *args])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    text = (tmp_path / "forced" / "requirements.lock").read_text()
    locked = {item.key: item for item in parse_lock(text, where="lock")}
    assert locked["flashinfer-python"].hashes == (FLASHINFER_0_6_18,)
    assert report["overrides"] == [{
        "pin": "flashinfer-python==0.6.18", "reason": reason,
        "replaced": [{"required_by": "vllm (requirements/cuda.txt:13)",
                      "requirement": "flashinfer-python==0.7.2.post1", "project": "vllm"}]}]
    assert f"# override: flashinfer-python==0.6.18 (reason: {reason})\n" in text
    assert ("#   replaces: vllm (requirements/cuda.txt:13) requires "
            "flashinfer-python==0.7.2.post1\n") in text


def test_a_recipe_pinning_flashinfer_0_6_17_is_refused_with_the_lists_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = old_pin_recipe(tmp_path, None)
    path.write_text(path.read_text().replace('version = "0.6.18"', 'version = "0.6.17"'))
    code = main(["lock", "--recipe", str(path), "--out", str(tmp_path / "out"), "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 14 and error["error"] == "PinRefusedError"
    assert error["what"] == ("refusing pin flashinfer-python==0.6.17: crashes the NVFP4 MoE "
                             "fallback kernel on GB10 (sm_121); 0.6.18 runs")
    assert "known_bad.toml" in error["hint"] and "forum post" in error["hint"]
