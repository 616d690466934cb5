"""``python -m sparkbuild prepare`` as a user runs it: JSON on success, one clear error else.

Sdists and the series are tiny ones made here; each bad input must give an ``error:`` line
on stderr, its own exit code, no traceback, and nothing at --dest (nor a leftover
temporary directory beside it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import (
    DestinationError,
    HashMismatchError,
    PatchError,
    SourceError,
    UnsafeArchiveError,
)
from sparkbuild.patches.series import load_series
from sparkbuild.recipe import REPO_ROOT, load_recipe

if TYPE_CHECKING:
    from pathlib import Path

HELLO = "int main(void) {\n    return 0;\n}\n"
PATCH = """\
diff --git a/hello.c b/hello.c
--- a/hello.c
+++ b/hello.c
@@ -1,3 +1,3 @@
 int main(void) {
-    return 0;
+    return 121;
 }
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def sdist_bytes(files: dict[str, str], *, links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            data = text.encode()
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A recipe with a one-patch series, and a good sdist it applies to."""
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("return-121.diff\n")
    (tmp_path / "patches" / "return-121.diff").write_text(PATCH)
    (tmp_path / "recipe.toml").write_text(
        '[source]\nspec = "unused"\n\n[series]\npath = "patches/series"\n'
    )
    (tmp_path / "good-1.0.tar.gz").write_bytes(
        sdist_bytes({"good-1.0/hello.c": HELLO, "good-1.0/PKG-INFO": "Name: good\n"})
    )
    return tmp_path


def prepare(workspace: Path, source: str, dest: Path, *, as_json: bool = True) -> Run:
    env = {**os.environ, "SPARKBUILD_CACHE": str(workspace / "cache"), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "prepare", "--source", source, "--dest", str(dest),
         "--recipe", str(workspace / "recipe.toml"), *(["--json"] if as_json else [])],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir() if ".sparkbuild-" in p.name)


def test_prepare_prints_one_json_object_and_places_the_patched_tree(workspace: Path) -> None:
    sdist = workspace / "good-1.0.tar.gz"
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    dest = workspace / "out" / "tree"
    run = prepare(workspace, f"{sdist}#sha256={digest}", dest)
    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert set(payload) >= {"tree", "source", "patches"}
    assert payload["tree"] == str(dest)
    assert payload["source"]["kind"] == "sdist"
    assert payload["source"]["sha256"] == digest
    assert [(p["name"], p["status"]) for p in payload["patches"]] == [("return-121", "applied")]
    assert all(set(p) >= {"name", "status", "detail"} for p in payload["patches"])
    assert (dest / "hello.c").read_text() == HELLO.replace("return 0", "return 121")
    assert leftovers(dest) == []


def test_empty_existing_dest_is_used(workspace: Path) -> None:
    dest = workspace / "empty"
    dest.mkdir()
    run = prepare(workspace, str(workspace / "good-1.0.tar.gz"), dest)
    assert run.returncode == 0, run.stderr
    assert (dest / "hello.c").is_file()


def _hostile_sdists(workspace: Path) -> dict[str, Path]:
    good = (workspace / "good-1.0.tar.gz").read_bytes()
    cases = {
        "truncated.tar.gz": good[: len(good) // 2],
        "dotdot.tar.gz": sdist_bytes({"p-1.0/../../evil.txt": "x"}),
        "symlink-out.tar.gz": sdist_bytes({"p-1.0/a": "a"}, links={"p-1.0/l": "../../../etc"}),
        "conflict-1.0.tar.gz": sdist_bytes({"conflict-1.0/hello.c": HELLO.replace("0", "7")}),
    }
    for name, data in cases.items():
        (workspace / name).write_bytes(data)
    return {name: workspace / name for name in cases}


BAD_INPUTS = {
    "unknown-spec": ("svn:nothing", SourceError, "unknown source spec"),
    "missing-path": ("{ws}/nothing.tar.gz", SourceError, "no such file"),
    "missing-ref": ("git+file://{ws}/repo@refs/pull/404/head", SourceError, "does not exist"),
    "hash-mismatch": ("{ws}/good-1.0.tar.gz#sha256=" + "0" * 64, HashMismatchError, "sha256"),
    "truncated": ("{ws}/truncated.tar.gz", UnsafeArchiveError, "truncated"),
    "dotdot-member": ("{ws}/dotdot.tar.gz", UnsafeArchiveError, "escapes the destination"),
    "symlink-out": ("{ws}/symlink-out.tar.gz", UnsafeArchiveError, "points outside"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_clear_error(workspace: Path, case: str) -> None:
    spec, error, message = BAD_INPUTS[case]
    _hostile_sdists(workspace)
    if case == "missing-ref":
        repo = workspace / "repo"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=d", "-c", "user.email=d@e",
                        "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    dest = workspace / "dest"
    run = prepare(workspace, spec.format(ws=workspace), dest)
    assert run.returncode == error.exit_code, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    first = next(line for line in run.stderr.splitlines() if line.startswith("error:"))
    assert message in first
    assert json.loads(run.stdout)["error"]["error"] == error.__name__
    assert not dest.exists()
    assert leftovers(dest) == []
    assert not (workspace.parent / "evil.txt").exists()


def test_conflicting_patch_names_file_and_hunk(workspace: Path) -> None:
    conflict = _hostile_sdists(workspace)["conflict-1.0.tar.gz"]
    dest = workspace / "dest"
    run = prepare(workspace, str(conflict), dest, as_json=False)
    assert run.returncode == PatchError.exit_code
    assert "Traceback" not in run.stderr
    error = next(line for line in run.stderr.splitlines() if line.startswith("error:"))
    assert "hello.c" in error and "hunk" in error
    assert (dest / "hello.c").read_text() == HELLO.replace("0", "7")  # unpatched, whole
    assert leftovers(dest) == []

    as_json = prepare(workspace, str(conflict), workspace / "dest2")
    assert as_json.returncode == PatchError.exit_code
    payload = json.loads(as_json.stdout)
    assert [p["status"] for p in payload["patches"]] == ["failed"]
    assert "hello.c" in payload["patches"][0]["detail"]
    assert payload["error"]["error"] == "PatchError"


def test_non_empty_dest_is_refused_and_left_alone(workspace: Path) -> None:
    dest = workspace / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me\n")
    run = prepare(workspace, str(workspace / "good-1.0.tar.gz"), dest)
    assert run.returncode == DestinationError.exit_code
    assert "Traceback" not in run.stderr
    assert "not empty" in run.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["mine.txt"]
    assert leftovers(dest) == []


def test_workspace_of_a_killed_prepare_is_swept_and_named(workspace: Path) -> None:
    dest = workspace / "dest"
    dead = workspace / ".dest.sparkbuild-999999999-abc"  # no such pid
    (dead / "sdist" / "half").mkdir(parents=True)
    alive = workspace / f".dest.sparkbuild-{os.getpid()}-xyz"  # a prepare still running
    alive.mkdir()
    run = prepare(workspace, str(workspace / "good-1.0.tar.gz"), dest)
    assert run.returncode == 0, run.stderr
    assert not dead.exists() and alive.is_dir()
    assert "interrupted prepare" in run.stderr and "starting clean" in run.stderr


@pytest.mark.network
def test_real_vllm_sdist_from_the_recipes_own_spec(
    vllm_sdist: Callable[[str], Path], tmp_path: Path
) -> None:
    """The 47 MB sdist, the recipe's ``pypi:vllm==0.33.0`` (no --source), the real series."""
    recipe = load_recipe(REPO_ROOT / "recipes" / "vllm-0.33.0.toml")
    blob = vllm_sdist("0.33.0")  # in the user's cache from now on: no download below
    dest = tmp_path / "vllm"
    done = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "prepare", "--dest", str(dest),
         "--recipe", str(recipe.path), "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["source"]["kind"] == "pypi"
    assert payload["source"]["sha256"] == recipe.source.sha256 == blob.name
    assert payload["source"]["url"].endswith("/vllm-0.33.0.tar.gz")
    series = [p.name for p in load_series(recipe.series).patches]
    assert [p["name"] for p in payload["patches"]] == series
    assert "failed" not in {p["status"] for p in payload["patches"]}
    assert "Version: 0.33.0" in (dest / "PKG-INFO").read_text()


def test_relative_sdist_path_in_a_recipe_is_relative_to_the_recipe(workspace: Path) -> None:
    (workspace / "recipe.toml").write_text(
        '[source]\nspec = "good-1.0.tar.gz"\n\n[series]\npath = "patches/series"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "sparkbuild", "prepare", "--dest", str(workspace / "dest"),
         "--recipe", str(workspace / "recipe.toml"), "--json"],
        capture_output=True, text=True, cwd="/", timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["source"]["url"] == (workspace / "good-1.0.tar.gz").as_uri()


@pytest.mark.parametrize("command", [["wheel", "--out", "wh"], ["bundle", "--out", "b.tar.xz"]])
def test_wheel_and_bundle_keep_the_pin_of_a_relative_sdist(tmp_path: Path,
                                                           command: list[str]) -> None:
    # The recipe names its sdist relative to itself, with a wrong sha256: wheel and bundle
    # must refuse it as prepare does, before any other work.
    recipe_dir = tmp_path / "r"
    (recipe_dir / "pkg-1.0").mkdir(parents=True)
    (recipe_dir / "pkg-1.0" / "hello.c").write_text(HELLO)
    with tarfile.open(recipe_dir / "pkg-1.0.tar.gz", "w:gz") as tar:
        tar.add(recipe_dir / "pkg-1.0", arcname="pkg-1.0")
    recipe = recipe_dir / "recipe.toml"
    recipe.write_text(f'[source]\nspec = "pkg-1.0.tar.gz"\nsha256 = "{"0" * 64}"\n'
                      f'[series]\npath = "{REPO_ROOT / "patches" / "series"}"\n'
                      '[target]\ncuda_archs = ["12.1a"]\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "sparkbuild", *command, "--recipe", str(recipe),
                           "--cache", str(tmp_path / "cache")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == HashMismatchError.exit_code, done.stderr[-2000:]
    assert f"expected {'0' * 64}" in done.stderr
