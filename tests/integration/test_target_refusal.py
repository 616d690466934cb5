"""`wheel` refuses a plain 12.1 target before any work (no network, no cache written)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

from sparkbuild.errors import RecipeError

if TYPE_CHECKING:
    from pathlib import Path

RECIPE = """\
[source]
spec = "pypi:vllm==0.33.0"
[series]
path = "series"
[target]
cuda_archs = ["9.0a", "12.1"]
"""


def test_wheel_refuses_plain_12_1_before_touching_the_cache(tmp_path: Path) -> None:
    recipe = tmp_path / "plain.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    cache, out = tmp_path / "cache", tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "wheel", "--recipe", str(recipe), "--cache",
         str(cache), "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == RecipeError.exit_code, done.stderr
    error = json.loads(done.stdout)["error"]
    assert "targets plain 12.1" in error["what"] and error["where"] == f"{recipe}:6"
    assert "use 12.1a" in error["hint"] and "allow_plain_sm121 = true" in error["hint"]
    assert "Traceback" not in done.stderr
    assert not cache.exists() and not out.exists()
