"""Hostile cases of what a person reads, and of the air-gapped flow's own files.

Text from outside (a model config's architecture, a file name in the tree, a command-line
glob) must not drive the terminal; a bundle must carry the files its recipe names, so that
``wheel --bundle`` builds where the originals are not; what a run says of itself must be
true of that run (its compiled units, its packaging scratch), must show progress without a
terminal, and an unreachable remote names the ways to build without it.  The root cause each
group answers is named above it; every group holds cases that failed against the code before.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from corpus.cases import CLI, Case, Invocation, _wheel_args, prepared_tree
from corpus.cases_inputs import buildable_sdist
from sparkbuild.errors import NetworkError, RecipeError
from sparkbuild.store.cache import Cache
from support.jit_caches import WHEEL_NAME, JitCache, cuobjdump_env
from support.wheels import zipped_wheel

if TYPE_CHECKING:
    from collections.abc import Callable

AOT = ("sparkbuild.flashinfer.module_set",)
WHEEL = ("sparkbuild.pipeline",)
BUNDLE = ("sparkbuild.bundle.read", "sparkbuild.bundle.write")
PREPARE = ("sparkbuild.patches.prepare", "sparkbuild.sources.fetch")
RAW = ("\x1b", "\x9b", "\x07", "\u202e")
"""What a terminal acts on: ESC (every CSI and OSC sequence), C1's one-byte CSI, BEL (the
end of an OSC title), and the right-to-left override."""
EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


def _run(args: list[str], *, env: dict[str, str] | None = None) -> str:
    """A run the case needs before its own (a first build, a bundle); must succeed."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "SPARKBUILD_QUIET": "", **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stderr


# -- an architecture from the model's config cannot drive the terminal ---------------
# `flashinfer-aot --list` printed the config's architectures[0] as it was: rich passes ESC
# through, so a config could retitle the terminal, clear it or hide a link.  Every line a
# person reads now goes through console.say (terminal_safe); --json stays exact.


def _aot_recipe(work: Path, *, architecture: str | None = None,
                in_recipe: str | None = None) -> Path:
    """A recipe whose [model] config names ``architecture`` (or whose [model] table gives
    ``in_recipe``, a TOML string, as its architecture)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "series").write_text("# empty\n", encoding="utf-8")
    config = {"architectures": [architecture or "DemoForCausalLM"], "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 128, "torch_dtype": "bfloat16"}
    (work / "config.json").write_text(json.dumps(config), encoding="utf-8")
    path = work / "ux.toml"
    path.write_text(textwrap.dedent("""\
        [recipe]
        name = "ux"
        [source]
        spec = "."
        [series]
        path = "series"
        [target]
        cuda_archs = ["12.1a"]
        [flashinfer]
        aot = true
        [model]
        config = "config.json"
        """) + (f"architecture = {in_recipe}\n" if in_recipe else ""), encoding="utf-8")
    return path


def _listing(architecture: str | None = None, *, in_recipe: str | None = None,
             only: str | None = None) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        recipe = _aot_recipe(work, architecture=architecture, in_recipe=in_recipe)
        return Invocation(["flashinfer-aot", "--list", "--recipe", str(recipe),
                           *(["--only", only] if only else [])])

    return build


LISTED = "batch_prefill_with_kv_cache_dtype_q_bf16"
"""A module of the set: in the listing and in its JSON."""
NAME_REFUSED = "must be a name of letters, digits and _"
"""An architecture that is no class name is refused where it is read (the recipe or its
config.json), its text shown escaped: it never reaches the listing."""
ARCHITECTURE_CASES = [
    Case("ux-aot-list-architecture-retitles-the-terminal", "output", RecipeError, NAME_REFUSED,
         _listing("Evil\x1b]0;pwned\x07Model"), AOT, says=("\\x1b]0;pwned",),
         never_says=RAW),
    Case("ux-aot-list-architecture-clears-the-screen", "output", RecipeError, NAME_REFUSED,
         _listing("\x1b[2J\x1b[HQwen3ForCausalLM"), AOT, never_says=RAW),
    Case("ux-aot-list-architecture-one-byte-csi", "output", RecipeError, NAME_REFUSED,
         _listing("Qwen\x9b31mForCausalLM"), AOT, says=("\\x9b31m",), never_says=RAW),
    Case("ux-aot-list-architecture-hidden-hyperlink", "output", RecipeError, NAME_REFUSED,
         _listing("\x1b]8;;https://evil.invalid\x1b\\Qwen3ForCausalLM\x1b]8;;\x1b\\"), AOT,
         never_says=RAW),
    Case("ux-aot-list-architecture-turned-round", "output", RecipeError, NAME_REFUSED,
         _listing("Qwen\u202eMLLasuaCroF"), AOT, never_says=RAW),
    Case("ux-aot-list-architecture-forges-a-line", "output", RecipeError, NAME_REFUSED,
         _listing("Qwen\n  fake_module  [default]"), AOT,
         never_says=("\n  fake_module  [default]",)),
    Case("ux-aot-list-architecture-from-the-recipe", "output", RecipeError, NAME_REFUSED,
         _listing(in_recipe='"\\u001b[31mRedForCausalLM"'), AOT, says=("\\x1b[31mRed",),
         never_says=RAW),
    Case("ux-aot-only-glob-in-the-error", "output", RecipeError,
         "matches none of the model's modules",
         _listing(only="\x1b]0;pwned\x07*"), AOT, never_says=RAW),
]


# -- a file name in the tree cannot drive the terminal -------------------------------
# `wheel` named the files a re-prepared tree changed as they were: a file called
# "\x1b]0;...\x07" retitled the terminal of whoever rebuilt.


def _source_directory(work: Path) -> Path:
    """The buildable generated source, unpacked into a directory (``--source DIR``)."""
    with tarfile.open(buildable_sdist(work)) as sdist:
        sdist.extractall(work / "src", filter="data")
    return work / "src" / b.TOP


def _rebuilt_with(name: str) -> Callable[[Path], Invocation]:
    """A first build of a source directory, then ``name`` added to it: the rebuild names
    it among the changed files."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        source = _source_directory(work)
        args = _wheel_args(work, source=source)
        _run(args, env=EPOCH)
        added = source / name
        added.parent.mkdir(parents=True, exist_ok=True)
        added.write_text("added after the first build\n", encoding="utf-8")
        return Invocation(args, env=EPOCH)

    return build


CHANGED = "file(s) changed"
TREE_NAME_CASES = [
    Case("ux-wheel-changed-file-retitles-the-terminal", "output", None, CHANGED,
         _rebuilt_with("notes\x1b]0;pwned\x07.txt"), WHEEL, says=("\\u001b]0;pwned",),
         never_says=RAW),
    Case("ux-wheel-changed-file-clears-the-screen", "output", None, CHANGED,
         _rebuilt_with("docs/\x1b[2J\x1b[3Jwipe.md"), WHEEL, never_says=RAW),
    Case("ux-wheel-changed-file-forges-a-line", "output", None, CHANGED,
         _rebuilt_with("x\n  MISMATCH demo.whl.txt"), WHEEL,
         never_says=("\n  MISMATCH demo.whl.txt",)),
]


# -- a bundle carries every file its recipe names -------------------------------------
# `bundle` carried the recipe, its lock and its series, not its [model] config nor a
# [flashinfer] jit_cache path: `wheel --bundle` on another machine (the default recipe's
# air-gapped flow included) failed to read them.  The recipe now lists what it references,
# the bundle carries each (hashed), and `wheel --bundle` reads the bundle's copies.  Each
# case writes the bundle, removes the originals (as the build host lacks them), then builds.


def _with_model(recipe: Path, config_name: str = "config.json") -> None:
    """``recipe`` gains a [model] table naming ``config_name`` beside it."""
    config = {"architectures": ["DemoForCausalLM"], "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 128, "torch_dtype": "bfloat16"}
    (recipe.parent / config_name).parent.mkdir(parents=True, exist_ok=True)
    (recipe.parent / config_name).write_text(json.dumps(config), encoding="utf-8")
    with recipe.open("a", encoding="utf-8") as text:
        text.write(f'\n[model]\nconfig = "{config_name}"\n')


FLASHINFER = "flashinfer_python-0.6.18-py3-none-any.whl"


def _pinned_flashinfer(recipe: Path) -> None:
    """The flashinfer-python pin a jit-cache needs: a small wheel of that name and version,
    pinned by its sha256 and put in the cache the bundle is written from (as an online run
    leaves it), so that no index is asked."""
    wheel = recipe.parent / "pins" / FLASHINFER
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(zipped_wheel({
        "flashinfer/__init__.py": "",
        "flashinfer_python-0.6.18.dist-info/METADATA":
            "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.18\n",
        "flashinfer_python-0.6.18.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}))
    cache = Cache(recipe.parent.parent / "cache")
    digest = cache.put_file(wheel)
    cache.record("pins", "flashinfer-python==0.6.18",
                 {"url": wheel.as_uri(), "filename": FLASHINFER, "sha256": digest})
    with recipe.open("a", encoding="utf-8") as text:
        text.write(f'\n[[pins]]\nname = "flashinfer-python"\nversion = "0.6.18"\n'
                   f'sha256 = "{digest}"\n')


def _with_jit_cache(recipe: Path, *, linked: bool = False) -> None:
    """``recipe`` gains a [flashinfer] jit_cache path (through a symbolic link: ``linked``)
    and the flashinfer-python pin it goes with."""
    wheel = JitCache().write(recipe.parent / "prebuilt")
    if linked:
        (recipe.parent / "links").mkdir()
        (recipe.parent / "links" / WHEEL_NAME).symlink_to(wheel)
        wheel = recipe.parent / "links" / WHEEL_NAME
    digest = b.sha256_of(wheel)
    with recipe.open("a", encoding="utf-8") as text:
        text.write(f'\n[flashinfer]\njit_cache = {{ path = "{wheel.relative_to(recipe.parent)}",'
                   f' sha256 = "{digest}" }}\n')
    _pinned_flashinfer(recipe)


def _bundled_then_built(*add: Callable[[Path], None]) -> Callable[[Path], Invocation]:
    """``bundle`` of a prepared tree whose recipe ``add`` extends, the recipe's directory
    then removed, and ``wheel --bundle`` into a fresh cache."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        sdist = buildable_sdist(work)
        recipe = b.good_recipe(work / "recipe")
        for extend in add:
            extend(recipe)
        tree = work / "tree"
        _run(["prepare", "--source", str(sdist), "--dest", str(tree), "--recipe", str(recipe)])
        bundle = work / "out" / "b.tar.xz"
        tools = cuobjdump_env(work / "tools")
        _run(["bundle", "--tree", str(tree), "--recipe", str(recipe), "--cache",
              str(work / "cache"), "--no-closure", "--out", str(bundle)], env=tools)
        shutil.rmtree(work / "recipe")  # the build host has the bundle alone
        shutil.rmtree(tree)
        return Invocation(["wheel", "--bundle", str(bundle), "--cache", str(work / "host"),
                           "--out", str(work / "wheelhouse")], env={**EPOCH, **tools},
                          after=_wheelhouse_holds(work / "wheelhouse", "demo-", *(
                              ["flashinfer_jit_cache-"] if _jit in add or _linked_jit in add
                              else [])))

    return build


def _jit(recipe: Path) -> None:
    _with_jit_cache(recipe)


def _linked_jit(recipe: Path) -> None:
    _with_jit_cache(recipe, linked=True)


def _model(recipe: Path) -> None:
    _with_model(recipe)


def _model_in_a_folder(recipe: Path) -> None:
    _with_model(recipe, "models/demo/config.json")


def _wheelhouse_holds(out: Path, *prefixes: str) -> Callable[[], None]:
    def check() -> None:
        names = sorted(p.name for p in out.glob("*.whl"))
        missing = [p for p in prefixes if not any(n.startswith(p) for n in names)]
        assert not missing, f"the wheelhouse holds {names}, none starting {missing}"

    return check


def _bundle_without_the_config(work: Path) -> Invocation:
    """The recipe names a config that is not there: refused before any long step."""
    work.mkdir(parents=True, exist_ok=True)
    tree, recipe = prepared_tree(work)
    _with_model(recipe)
    (recipe.parent / "config.json").unlink()
    cache = work / "cache"

    def nothing_done() -> None:
        left = sorted(p.name for p in (cache / "work").rglob("*")) if cache.exists() else []
        assert not [n for n in left if not n.endswith(".lock")], f"work done first: {left}"
        assert not (work / "out").exists(), "a bundle was begun"

    return Invocation(["bundle", "--tree", str(tree), "--recipe", str(recipe), "--cache",
                       str(cache), "--offline", "--without-wheels", "--out",
                       str(work / "out" / "b.tar.xz")], after=nothing_done)


BUILT = "built demo-1.0-py3-none-any.whl"
TAKEN = "built   flashinfer_jit_cache-0.6.18+cu130.sm121a."
RECIPE_FILE_CASES = [
    Case("ux-bundle-carries-the-model-config", "bundle", None, BUILT,
         _bundled_then_built(_model), BUNDLE),
    Case("ux-bundle-carries-a-model-config-in-a-folder", "bundle", None, BUILT,
         _bundled_then_built(_model_in_a_folder), BUNDLE),
    Case("ux-bundle-carries-the-jit-cache-wheel", "bundle", None, BUILT,
         _bundled_then_built(_jit), BUNDLE, says=(TAKEN,)),
    Case("ux-bundle-carries-a-linked-jit-cache-wheel", "bundle", None, BUILT,
         _bundled_then_built(_linked_jit), BUNDLE, says=(TAKEN,)),
    Case("ux-bundle-carries-the-model-and-the-jit-cache", "bundle", None, BUILT,
         _bundled_then_built(_model, _jit), BUNDLE),
    Case("ux-bundle-refuses-a-config-it-cannot-carry-first", "bundle", RecipeError,
         "[model] config is not a file a bundle can carry", _bundle_without_the_config,
         BUNDLE),
]


# -- a rebuild's packaging scratch is its own, cleared when it finishes -------------------
# setuptools leaves build/bdist.PLATFORM after a build that finished, and every rebuild
# then said "the packaging scratch of an earlier build that did not finish".  A build that
# finishes clears its own scratch now; an interrupted one's is still named (cases_inputs).

SCRATCH = "the packaging scratch of an earlier build"


def _rebuilt(change: Callable[[Path], None] | None = None) -> Callable[[Path], Invocation]:
    """A first build, then (``change`` applied to the source directory) the same again."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        source = _source_directory(work)
        args = _wheel_args(work, source=source)
        _run(args, env=EPOCH)
        if change is not None:
            change(source)
        return Invocation(args, env=EPOCH, after=_no_scratch_left(work))

    return build


def _no_scratch_left(work: Path) -> Callable[[], None]:
    def check() -> None:
        tree = work / "cache" / "work" / "corpus" / "tree"
        left = sorted(p.name for p in tree.glob("build/bdist.*"))
        assert not left, f"a finished build left its packaging scratch: {left}"

    return check


def _edit_module(source: Path) -> None:
    (source / b.PACKAGE / "__init__.py").write_text("VALUE = 2\n", encoding="utf-8")


def _three_builds(work: Path) -> Invocation:
    inv = _rebuilt(_edit_module)(work)
    _run(inv.args, env=EPOCH)
    return inv


SCRATCH_CASES = [
    Case("ux-wheel-rebuild-says-no-unfinished-scratch", "output", None, CHANGED,
         _rebuilt(), WHEEL, never_says=(SCRATCH,)),
    Case("ux-wheel-rebuild-of-a-changed-module-says-no-unfinished-scratch", "output", None,
         "1 file(s) changed", _rebuilt(_edit_module), WHEEL, never_says=(SCRATCH,)),
    Case("ux-wheel-third-build-says-no-unfinished-scratch", "output", None, CHANGED,
         _three_builds, WHEEL, never_says=(SCRATCH,)),
]


# -- a rebuild's units are the ones it compiled -------------------------------------------
# The timeline took the units of ".ninja_log"'s last run as this build's: a rebuild with
# nothing to do adds no line, so it reported the build before's units as its own (and a
# rebuild slower than the last run, whose clock did not seem to restart, reported them all).
# The ninja wrapper now records the lines each run added, and the timeline reads those.
# The source here compiles like vLLM's setup.py: its build runs the ninja CMake was given
# (CMAKE_MAKE_PROGRAM) over a build.ninja of CMake's rule names; a "compile" sleeps for the
# seconds its source's first line says, then copies it.

NINJA_SETUP = """\
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import setup

if "bdist_wheel" in sys.argv:
    args = shlex.split(os.environ.get("CMAKE_ARGS", ""))
    ninja = next(a.split("=", 1)[1] for a in args if a.startswith("-DCMAKE_MAKE_PROGRAM="))
    build = Path("build", "demo-ninja").resolve()
    build.mkdir(parents=True, exist_ok=True)
    units = sorted(Path("csrc").resolve().glob("*.cpp"))
    text = ["rule CXX_COMPILER__demo_unscanned_Release",
            "  command = sleep $$(head -n1 $in) && cp $in $out",
            "  description = Building CXX object $out"]
    text += [f"build CMakeFiles/demo.dir/csrc/{u.name}.o: CXX_COMPILER__demo_unscanned_Release"
             f" {u}" for u in units]
    (build / "build.ninja").write_text("\\n".join(text) + "\\n")
    subprocess.run([ninja, "-C", str(build), "-j1"], check=True)
setup()
"""


def ninja_source(work: Path, seconds: dict[str, str]) -> Path:
    """A source directory whose build compiles ``csrc/NAME.cpp`` for each ``seconds`` entry
    (its compile's seconds) through the build's ninja."""
    source = _source_directory(work)
    (source / "setup.py").write_text(NINJA_SETUP, encoding="utf-8")
    for name, delay in seconds.items():
        (source / "csrc" / f"{name}.cpp").write_text(f"{delay}\n", encoding="utf-8")
    return source


def _rebuilt_units(first: dict[str, str], then: dict[str, str]
                   ) -> Callable[[Path], Invocation]:
    """A first build of units ``first``, then the source's files ``then`` names rewritten
    (``csrc/NAME.cpp``: a unit's seconds; another file: its text)."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        source = ninja_source(work, first)
        args = _wheel_args(work, source=source)
        _run(args, env=EPOCH)
        for name, text in then.items():
            (source / name).write_text(f"{text}\n", encoding="utf-8")
        return Invocation(args, env=EPOCH)

    return build


UNITS = "units; compile wall"
COMPILED = "compiled units)"
"""Said by the build in both runs; the units table is checked in each run's own words: the
summary's count, and the JSON's ``units`` (a unit's entry names its ``path``)."""
UNIT_CASES = [
    Case("ux-wheel-rebuild-compiled-nothing-says-0-units", "output", None, COMPILED,
         _rebuilt_units({"a": "0.1", "b": "0.1"}, {}), WHEEL, says=(f"  0 {UNITS}",),
         never_says=(f"  2 {UNITS}", '"path": "csrc/')),
    Case("ux-wheel-rebuild-of-a-readme-says-0-units", "output", None, COMPILED,
         _rebuilt_units({"a": "0.1", "b": "0.1", "c": "0.1"}, {"README.md": "read me"}),
         WHEEL, says=(f"  0 {UNITS}",), never_says=(f"  3 {UNITS}", '"path": "csrc/')),
    Case("ux-wheel-slow-rebuild-of-one-unit-says-1-unit", "output", None, COMPILED,
         _rebuilt_units({"a": "0.05", "b": "0.05"}, {"csrc/a.cpp": "1.5"}), WHEEL,
         says=(f"  1 {UNITS}",), never_says=(f"  2 {UNITS}", '"path": "csrc/b.cpp"')),
]


# -- progress without a terminal ----------------------------------------------------------
# With its output in a file, `wheel` said nothing while it compiled and `bundle` nothing
# while it hashed and compressed (minutes for vLLM): progress was a bar or nothing.  Now a
# plain line comes at each tenth and every 30 s (console.PlainProgress).


def _first_build_of_units(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    source = ninja_source(work, {name: "0.2" for name in "abcd"})
    return Invocation(_wheel_args(work, source=source), env=EPOCH)


def _bundle_of_a_prepared_tree(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    tree, recipe = prepared_tree(work)
    return Invocation(["bundle", "--tree", str(tree), "--recipe", str(recipe), "--cache",
                       str(work / "cache"), "--offline", "--without-wheels", "--no-closure",
                       "--out", str(work / "out" / "b.tar.xz")])


PROGRESS_CASES = [
    Case("ux-wheel-compile-progress-in-a-log", "output", None, "compiling: 4/4 (100%)",
         _first_build_of_units, WHEEL, says=("compiling: 1/4 (25%)",)),
    Case("ux-bundle-hashing-progress-in-a-log", "output", None, "members: ",
         _bundle_of_a_prepared_tree, BUNDLE, says=("hashing the bundle's",)),
    Case("ux-bundle-compressing-progress-in-a-log", "output", None, "(100%)",
         _bundle_of_a_prepared_tree, BUNDLE, says=("compressing the bundle's",)),
    Case("ux-wheel-bundle-checking-progress-in-a-log", "output", None, BUILT,
         _bundled_then_built(), BUNDLE, says=("checking the bundle's",)),
]


# -- bundle's summary names no None ---------------------------------------------------------
# A source fetched by URL has no commit (and, unpinned, no URL_HASH): `bundle` said
# "@ None = None" of it, in its step line and its summary.


def _bundle_with_url_source(hashed: bool) -> Callable[[Path], Invocation]:
    """``bundle`` of a prepared tree whose CMake fetches a tarball by URL (pinned by
    URL_HASH with ``hashed``)."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        (work / "dep" / "dep-1").mkdir(parents=True)
        (work / "dep" / "dep-1" / "dep.h").write_text("int dep;\n", encoding="utf-8")
        archive = work / "dep.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(work / "dep" / "dep-1", arcname="dep-1")
        pin = f" URL_HASH SHA256={b.sha256_of(archive)}" if hashed else ""
        source = b.write_tree(work / "src", {**b.source_files(), "CMakeLists.txt": (
            "cmake_minimum_required(VERSION 3.26)\nproject(demo LANGUAGES NONE)\n"
            f"include(FetchContent)\nFetchContent_Declare(dep URL {archive.as_uri()}{pin})\n"
            "FetchContent_MakeAvailable(dep)\n")})
        recipe = b.good_recipe(work / "recipe")
        tree = work / "tree"
        _run(["prepare", "--source", str(source), "--dest", str(tree), "--recipe", str(recipe)])
        return Invocation(["bundle", "--tree", str(tree), "--recipe", str(recipe), "--cache",
                           str(work / "cache"), "--without-wheels", "--no-closure", "--out",
                           str(work / "out" / "b.tar.xz")])

    return build


NONE_CASES = [
    Case("ux-bundle-url-source-without-a-hash-names-no-none", "output", None, "adding dep (",
         _bundle_with_url_source(hashed=False), BUNDLE, says=("not pinned by the tree",),
         never_says=("None",)),
    Case("ux-bundle-url-source-with-a-hash-names-no-none", "output", None, "adding dep (",
         _bundle_with_url_source(hashed=True), BUNDLE, says=("(SHA256=",),
         never_says=("None",)),
]


# -- an unreachable remote names the ways to build without it -----------------------------
# A git fetch that failed for want of the network said "check the network" (or the mirror
# rules), never `bundle` nor --mirror: on a machine that cannot reach GitHub, the ways to
# build are a mirror, or a bundle written where GitHub is.  One hint now, wherever git
# fetches (sources.git.UNREACHABLE_GIT_HINT).

HINT = "`sparkbuild bundle --out FILE` there, `sparkbuild wheel --bundle FILE` here"
UNREACHABLE_URL = "https://github.invalid/acme/vllm.git"
"""A host no resolver knows: git says "Could not resolve host", as without a network."""


def _prepare_unreachable(url: str, **env: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        recipe = b.good_recipe(work / "recipe")
        return Invocation(["prepare", "--source", f"git+{url}@main", "--dest",
                           str(work / "dest"), "--recipe", str(recipe), "--cache",
                           str(work / "cache")], env=dict(env))

    return build


def _bundle_unreachable(work: Path) -> Invocation:
    """``bundle`` of a recipe whose source is on an unreachable remote (no --tree)."""
    recipe = b.write_recipe(work / "recipe", b.recipe_text(f"git+{UNREACHABLE_URL}@main",
                                                           "patches/series"))
    b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
    return Invocation(["bundle", "--recipe", str(recipe), "--cache", str(work / "cache"),
                       "--without-wheels", "--out", str(work / "out" / "b.tar.xz")])


def _vendor_unreachable(*flags: str) -> Callable[[Path], Invocation]:
    """``vendor`` of a tree whose CMake fetches a git dependency from an unreachable host."""

    def build(work: Path) -> Invocation:
        tree = b.write_tree(work / "tree", {
            "pyproject.toml": '[project]\nname = "demo"\nversion = "1.0"\n',
            "CMakeLists.txt": (
                "cmake_minimum_required(VERSION 3.26)\nproject(demo LANGUAGES NONE)\n"
                "include(FetchContent)\nFetchContent_Declare(dep GIT_REPOSITORY "
                "https://github.invalid/acme/dep.git GIT_TAG v1.0)\n"
                "FetchContent_MakeAvailable(dep)\n")})
        return Invocation(["vendor", "--tree", str(tree), "--cache", str(work / "cache"),
                           *flags])

    return build


HINT_CASES = [
    Case("ux-prepare-unreachable-github-names-bundle-and-mirror", "network", NetworkError,
         HINT, _prepare_unreachable(UNREACHABLE_URL), PREPARE, says=("--mirror BASE=",)),
    Case("ux-prepare-through-a-dead-proxy-names-bundle-and-mirror", "network", NetworkError,
         HINT, _prepare_unreachable("https://github.com/vllm-project/vllm.git",
                                    HTTPS_PROXY="http://127.0.0.1:9",
                                    https_proxy="http://127.0.0.1:9"), PREPARE),
    Case("ux-bundle-of-an-unreachable-source-names-bundle-and-mirror", "network",
         NetworkError, HINT, _bundle_unreachable, BUNDLE),
    Case("ux-vendor-unreachable-dependency-names-bundle-and-mirror", "network",
         NetworkError, HINT, _vendor_unreachable(), ("sparkbuild.vendoring.fetch",)),
    Case("ux-vendor-sparse-unreachable-dependency-names-bundle-and-mirror", "network",
         NetworkError, HINT, _vendor_unreachable("--sparse"),
         ("sparkbuild.vendoring.sparse",)),
]

CASES: list[Case] = [
    *ARCHITECTURE_CASES,
    *TREE_NAME_CASES,
    *RECIPE_FILE_CASES,
    *SCRATCH_CASES,
    *UNIT_CASES,
    *PROGRESS_CASES,
    *NONE_CASES,
    *HINT_CASES,
]
