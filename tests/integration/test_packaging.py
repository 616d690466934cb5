"""sparkbuild's own wheel (scikit-build-core) carries its resources, and an install uses them.

The root CMakeLists.txt installs recipes/, patches/, build_tools/ and csrc/ into
sparkbuild/_resources.  These tests build the wheel from this checkout, check that every
resource file is in it byte for byte, install it into a fresh venv and run sparkbuild from
outside the checkout: the recipe, the series, the E2M1 header and the CMake arch script must
all come from that venv's site-packages.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sparkbuild.proc import run

CHECKOUT = Path(__file__).resolve().parents[2]
RESOURCES = "sparkbuild/_resources"
NAMED = (
    "patches/series",
    "csrc/e2m1.cuh",
    "csrc/CMakeLists.txt",
    "build_tools/arch_eval.cmake",
    "build_tools/sparkbuild_provider.cmake",
    "recipes/qwen38next.toml",
    "recipes/known_bad.toml",
)
PROBE = """
import json, sparkbuild
from sparkbuild import resources
from sparkbuild.recipe import DEFAULT_RECIPE, known_bad_path, load_known_bad, load_recipe
recipe = load_recipe(DEFAULT_RECIPE)
print(json.dumps({"package": sparkbuild.__file__, "root": str(resources.resource_root()),
                  "recipe": str(recipe.path), "series": str(recipe.series),
                  "known_bad": str(known_bad_path()),
                  "bad": [[e.name, e.version] for e in load_known_bad(known_bad_path())]}))
"""


def checkout_resources() -> dict[str, Path]:
    """Every file the wheel must carry, by its path under _resources."""
    files = [
        *(CHECKOUT / "recipes").glob("*.toml"),
        CHECKOUT / "patches" / "series",
        *(CHECKOUT / "patches").glob("*.toml"),
        *(CHECKOUT / "patches").glob("*.diff"),
        *(CHECKOUT / "patches").glob("*.patch"),
        *(CHECKOUT / "build_tools").glob("*.cmake"),
        CHECKOUT / "csrc" / "CMakeLists.txt",
        CHECKOUT / "csrc" / "e2m1.cuh",
        *(path for path in (CHECKOUT / "csrc" / "tests").iterdir() if path.is_file()),
    ]
    return {path.relative_to(CHECKOUT).as_posix(): path for path in files}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run(
        [sys.executable, "-m", "pip", "wheel", CHECKOUT, "--no-deps", "--no-build-isolation",
         "-w", out],
        echo=False,
        timeout=600,
    )
    built = sorted(out.glob("sparkbuild-*.whl"))
    assert len(built) == 1, built
    return built[0]


def test_wheel_carries_every_resource(wheel: Path) -> None:
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        members = set(archive.namelist())
        expected = checkout_resources()
        assert set(NAMED) <= set(expected)
        for relative, source in expected.items():
            member = f"{RESOURCES}/{relative}"
            assert member in members, member
            assert archive.read(member) == source.read_bytes(), member
    assert "sparkbuild/py.typed" in members
    assert "sparkbuild/resources.py" in members
    assert not [name for name in members if "__pycache__" in name]


def json_report(output: str) -> dict[str, object]:
    """The ``--json`` object: stdout's pretty-printed JSON after stderr's command echoes."""
    lines = output.splitlines()
    start = lines.index("{")
    report: dict[str, object] = json.loads("\n".join(lines[start:]))
    return report


def _fresh_venv(where: Path, wheel: Path) -> tuple[Path, Path]:
    """A venv holding only the wheel; the test venv's packages stand in for its dependencies.

    Its .pth line adds the test venv's site-packages after its own, without processing the
    .pth files there, so the test venv's editable install of sparkbuild stays out of it.
    """
    run([sys.executable, "-m", "venv", "--without-pip", where], echo=False, timeout=120)
    python = where / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         wheel], echo=False, timeout=300)
    site = Path(sysconfig.get_path("purelib", vars={"base": where, "platbase": where}))
    (site / "test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    return python, site


def test_installed_wheel_uses_its_own_resources(wheel: Path, tmp_path: Path) -> None:
    python, site = _fresh_venv(tmp_path / "venv", wheel)
    # cmake for the arch-list edit, from the test venv (the fresh one has no bin/cmake).
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    probe = run([python, "-c", PROBE], cwd=tmp_path, env=env, echo=False, timeout=120)
    found = json.loads(probe.output.strip().splitlines()[-1])
    root = site / RESOURCES
    assert Path(found["package"]).parent == site / "sparkbuild"
    assert Path(found["root"]) == root
    assert Path(found["recipe"]) == root / "recipes" / "qwen38next.toml"
    assert Path(found["series"]) == root / "patches" / "series"
    assert Path(found["known_bad"]) == root / "recipes" / "known_bad.toml"
    assert ["flashinfer-python", "0.6.17"] in found["bad"]

    # The whole series through the installed copy: the arch edit runs the wheel's
    # build_tools/arch_eval.cmake, the E2M1 edit copies the wheel's csrc/e2m1.cuh.
    tree = tmp_path / "mini-vllm"
    shutil.copytree(CHECKOUT / "examples" / "mini-vllm", tree)
    shipped = sorted(root.rglob("*"))
    applied = run([python, "-m", "sparkbuild", "patch", "--json", "apply", tree],
                  cwd=tmp_path, env=env, echo=False, timeout=300)
    report = json_report(applied.output)
    patches = report["patches"]
    assert isinstance(patches, list)
    assert {patch["status"] for patch in patches} == {"applied"}, report
    copied = tree / "csrc" / "quantization" / "fp4" / "e2m1.cuh"
    assert copied.read_bytes() == (root / "csrc" / "e2m1.cuh").read_bytes()
    assert sorted(root.rglob("*")) == shipped, "sparkbuild wrote into its installed resources"
