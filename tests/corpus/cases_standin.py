"""Hostile cases of a source built from another commit than the tree's pin, and of
``check --list-targets``.

A source is built at its pin or named by the recipe as a stand-in (``[[vendor.stand_in]]``):
a remote that answers a commit-like pin with a branch or tag of that name (another commit)
is refused before anything compiles; with an entry naming it, the stand-in is accepted and
said.  A malformed entry is a named recipe error, never a traceback and never ignored.
``check --list-targets`` prints exactly one JSON object on bad input.

The dependency is a local bare repository under ``WORK/git/`` reached over ``file://``
through the recipe's mirror rule (or ``--mirror``); nothing leaves the machine.  Each
:class:`~corpus.cases.Case` joins the corpus in :func:`corpus.cases._all_cases`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from corpus.cases import Case, Invocation
from sparkbuild.errors import RecipeError, SourceError, UsageError, VerifyError

if TYPE_CHECKING:
    from collections.abc import Callable

PIN = "c0ffee1234"
"""The tree's GIT_TAG: commit-like, and no commit of the dependency."""
URL = "https://github.com/corpus/dep.git"
MIRROR = "https://github.com/=file://{work}/git/"
CMAKE = f"""\
cmake_minimum_required(VERSION 3.26)
project(demo LANGUAGES CXX)
include(FetchContent)
FetchContent_Declare(dep GIT_REPOSITORY {URL} GIT_TAG {PIN})
FetchContent_MakeAvailable(dep)
"""
BUNDLE = ("sparkbuild.bundle.write", "sparkbuild.vendoring.plan")
WHEEL = ("sparkbuild.pipeline", "sparkbuild.vendoring.plan")
LIST = ("sparkbuild.compile.extension_set",)


def _dependency(work: Path, *, shadow: str = "branch") -> str:
    """``WORK/git/corpus/dep.git``: one commit, with a ``shadow`` (branch or tag) named PIN
    that points at it; returns the commit."""
    repo = b.write_tree(work / "dep-work", {"CMakeLists.txt": "project(dep)\n",
                                            "include/dep.h": "// dep\n"})
    b.git(repo, "init", "-q", "-b", "main")
    b.git(repo, "add", "-A")
    b.git(repo, "commit", "-q", "-m", "dep")
    b.git(repo, "tag" if shadow == "tag" else "branch", PIN)
    bare = work / "git" / "corpus" / "dep.git"
    bare.parent.mkdir(parents=True)
    b.git(work, "clone", "-q", "--bare", str(repo), str(bare))
    return b.git(repo, "rev-parse", "HEAD")


def _recipe(work: Path, vendor: str, *, mirror_in_recipe: bool = True) -> Path:
    """The demo source with a CMakeLists.txt that fetches the dependency at PIN, and its
    recipe (``vendor``: what follows ``[vendor]``'s mirror rule)."""
    tree = b.write_tree(work / "tree", {**b.source_files(), "CMakeLists.txt": CMAKE})
    b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
    mirrors = f'mirrors = ["{MIRROR.format(work=work)}"]\n' if mirror_in_recipe else ""
    text = b.recipe_text(str(tree), "patches/series", extra=f"\n[vendor]\n{mirrors}{vendor}")
    return b.write_recipe(work / "recipe", text)


def _stand_in(used: str, *, url: str = URL, pinned: str = PIN,
              reason: str = "the pin is in no mirror") -> str:
    return (f'\n[[vendor.stand_in]]\nurl = "{url}"\npinned = "{pinned}"\nused = "{used}"\n'
            f'reason = "{reason}"\n')


def _bundle(work: Path, recipe: Path, *extra: str) -> list[str]:
    return ["bundle", "--recipe", str(recipe), "--out", str(work / "out" / "demo.tar.xz"),
            "--cache", str(work / "cache"), "--without-wheels", "--no-closure", *extra]


def _nothing_built(work: Path) -> Callable[[], None]:
    """No wheelhouse, no bundle, no build directory: refused before anything compiled."""

    def check() -> None:
        for path in (work / "wheelhouse", work / "out" / "demo.tar.xz"):
            assert not path.exists(), f"{path} was written"
        builds = [p for p in (work / "cache" / "work").rglob("build*") if p.is_dir()] if (
            work / "cache" / "work").is_dir() else []
        assert not builds, f"a build started: {builds}"

    return check


# -- 1. a copy at another commit than its pin is refused; a named stand-in is not ------------


def _shadowed_wheel(work: Path, shadow: str = "branch", *, mirror_flag: bool = False
                    ) -> Invocation:
    _dependency(work, shadow=shadow)
    recipe = _recipe(work, "", mirror_in_recipe=not mirror_flag)
    args = ["wheel", "--recipe", str(recipe), "--cache", str(work / "cache"),
            "--out", str(work / "wheelhouse")]
    if mirror_flag:
        args += ["--mirror", MIRROR.format(work=work)]
    return Invocation(args, after=_nothing_built(work))


def _shadowed_bundle(work: Path, *, sparse: bool = False) -> Invocation:
    _dependency(work, shadow="tag")
    recipe = _recipe(work, "sparse = true\n" if sparse else "")
    return Invocation(_bundle(work, recipe), after=_nothing_built(work))


def _accepted(work: Path, *, abbreviated: bool = False, sparse: bool = False) -> Invocation:
    commit = _dependency(work)
    used = commit[:12] if abbreviated else commit.upper()
    vendor = ("sparse = true\n" if sparse else "") + _stand_in(used)
    inv = Invocation(_bundle(work, _recipe(work, vendor)))

    def bundled() -> None:
        assert (work / "out" / "demo.tar.xz").is_file(), "no bundle was written"

    inv.after = bundled
    return inv


# -- 2. a malformed [[vendor.stand_in]] is a named recipe error ------------------------------


def _malformed(vendor: Callable[[str], str]) -> Callable[[Path], Invocation]:
    """``bundle`` with the recipe's [vendor] followed by ``vendor(commit)``."""

    def build(work: Path) -> Invocation:
        commit = _dependency(work)
        return Invocation(_bundle(work, _recipe(work, vendor(commit))),
                          after=_nothing_built(work))

    return build


def _without(key: str, *more: str) -> Callable[[str], str]:
    def vendor(commit: str) -> str:
        dropped = (key, *more)
        return "".join(line + "\n" for line in _stand_in(commit).splitlines()
                       if not line.startswith(tuple(f"{k} =" for k in dropped)))

    return vendor


# -- 3. check --list-targets: one JSON object on bad input -----------------------------------

SETUP = """\
from setuptools import setup
ext_modules = [CMakeExtension(name="demo._C"), CMakeExtension(name="demo._fa3_C")]
setup()
"""
NO_CODE_CMAKE = """\
cmake_minimum_required(VERSION 3.26)
project(demo LANGUAGES CXX)
set_source_files_properties(csrc/c.cu PROPERTIES COMPILE_OPTIONS
  "-gencode;arch=compute_121a,code=sm_121a")
add_library(_C MODULE csrc/c.cu)
add_library(_fa3_C MODULE csrc/h1.cu csrc/h2.cu)
"""
MODEL = """
[model]
config = "no-such-config.json"
"""


def _list_targets(tree: Callable[[Path], Path], extra: str = "") -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
        recipe = b.write_recipe(work / "recipe", b.recipe_text("unused", "patches/series",
                                                               extra=extra))
        return Invocation(["check", "--list-targets", "--tree", str(tree(work)), "--recipe",
                           str(recipe), "--cache", str(work / "cache")])

    return build


def _demo_tree(cmake: str, setup: str = SETUP) -> Callable[[Path], Path]:
    files = {**b.source_files(), "CMakeLists.txt": cmake, "setup.py": setup,
             "csrc/c.cu": "// c\n", "csrc/h1.cu": "// h1\n", "csrc/h2.cu": "// h2\n"}
    return lambda work: b.write_tree(work / "tree", files)


def _file_tree(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "tree").write_text("not a tree\n", encoding="utf-8")
    return work / "tree"


CASES = [
    Case("standin-pin-shadowed-by-branch", "standin", SourceError, f"not its pin {PIN}",
         _shadowed_wheel, WHEEL),
    Case("standin-pin-shadowed-by-tag", "standin", SourceError, f"not its pin {PIN}",
         lambda w: _shadowed_wheel(w, "tag"), WHEEL),
    Case("standin-pin-shadowed-mirror-flag", "standin", SourceError, "[[vendor.stand_in]]",
         lambda w: _shadowed_wheel(w, mirror_flag=True), WHEEL),
    Case("standin-pin-shadowed-bundle", "standin", SourceError, f"not its pin {PIN}",
         _shadowed_bundle, BUNDLE),
    Case("standin-pin-shadowed-sparse", "standin", SourceError, f"not its pin {PIN}",
         lambda w: _shadowed_bundle(w, sparse=True), BUNDLE),
    Case("standin-named-accepted-sparse", "standin", None, f"stand-in for the pin {PIN}",
         lambda w: _accepted(w, sparse=True), BUNDLE),
    Case("standin-named-accepted", "standin", None, f"(stand-in for the pin {PIN}: the pin is "
         "in no mirror)", _accepted, BUNDLE),
    Case("standin-named-abbreviated-accepted", "standin", None, f"stand-in for the pin {PIN}",
         lambda w: _accepted(w, abbreviated=True), BUNDLE),
    Case("standin-missing-reason", "standin", RecipeError,
         "a [[vendor.stand_in]] entry lacks reason", _malformed(_without("reason")), BUNDLE),
    Case("standin-missing-url-and-used", "standin", RecipeError,
         "a [[vendor.stand_in]] entry lacks url, used", _malformed(_without("url", "used")),
         BUNDLE),
    Case("standin-blank-pinned", "standin", RecipeError,
         "a [[vendor.stand_in]] entry lacks pinned",
         _malformed(lambda c: _stand_in(c, pinned="   ")), BUNDLE),
    Case("standin-used-not-hex", "standin", RecipeError,
         "vendor.stand_in.used: 'main' is not a commit",
         _malformed(lambda c: _stand_in("main")), BUNDLE),
    Case("standin-pinned-too-short", "standin", RecipeError,
         "vendor.stand_in.pinned: 'c0ffee' is not a commit",
         _malformed(lambda c: _stand_in(c, pinned="c0ffee")), BUNDLE),
    Case("standin-used-is-pinned", "standin", RecipeError,
         "a [[vendor.stand_in]] entry uses the commit it stands in for",
         _malformed(lambda c: _stand_in(PIN)), BUNDLE),
    Case("standin-used-abbreviates-pinned", "standin", RecipeError,
         "uses the commit it stands in for",
         _malformed(lambda c: _stand_in(PIN[:7].upper())), BUNDLE),
    Case("standin-url-not-in-plan", "standin", RecipeError,
         "names https://github.com/corpus/other.git, which the tree does not fetch",
         _malformed(lambda c: _stand_in(c, url="https://github.com/corpus/other.git")), BUNDLE),
    Case("standin-url-misspelt", "standin", RecipeError, "which the tree does not fetch",
         _malformed(lambda c: _stand_in(c, url="https://github.com/corpus/dep-fork")), BUNDLE),
    Case("standin-pinned-not-the-trees", "standin", RecipeError,
         f"names the pin deadbeef12, but the tree pins dep @ {PIN}",
         _malformed(lambda c: _stand_in(c, pinned="deadbeef12")), BUNDLE),
    Case("standin-entry-not-a-table", "standin", RecipeError,
         "[vendor.stand_in] must be a table", _malformed(lambda c: 'stand_in = ["x"]\n'),
         BUNDLE),
    Case("standin-twice", "standin", RecipeError, "two [[vendor.stand_in]] entries",
         _malformed(lambda c: _stand_in(c) + _stand_in(c, url=URL.removesuffix(".git"))),
         BUNDLE),
    Case("standin-reason-control-characters", "standin", RecipeError, "vendor.stand_in holds",
         _malformed(lambda c: _stand_in(c, reason="ok\\u001b]0;pwned\\u0007")), BUNDLE),
    Case("standin-list-targets-missing-tree", "standin", UsageError,
         "not a source tree with a CMakeLists.txt", _list_targets(lambda w: w / "absent"), LIST),
    Case("standin-list-targets-tree-is-a-file", "standin", UsageError,
         "not a source tree with a CMakeLists.txt", _list_targets(_file_tree), LIST),
    Case("standin-list-targets-no-extensions", "standin", UsageError,
         "lists no CMakeExtension",
         _list_targets(_demo_tree(NO_CODE_CMAKE, "from setuptools import setup\nsetup()\n")),
         LIST),
    Case("standin-list-targets-model-config-missing", "standin", RecipeError,
         "cannot read the model's config", _list_targets(_demo_tree(NO_CODE_CMAKE), MODEL), LIST),
    Case("standin-list-targets-no-code-refused", "standin", VerifyError,
         "_fa3_C (2 CUDA units)", _list_targets(_demo_tree(NO_CODE_CMAKE)), LIST),
]
