"""The hostile-input corpus: every case is an input builder, the error class it must
produce, and a fragment of the message it must say.

``tests/integration/test_hostile_corpus.py`` runs each case through the real command line
(``python -m sparkbuild ...``) twice, plain and with ``--json``, and checks the exit code of
the class, the absence of a traceback, the fragment, and the JSON error object.  A case may
also check afterwards that nothing was written where it must not be.

A builder gets an empty directory of its own and returns the :class:`Invocation`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from sparkbuild.errors import (
    CacheMissError,
    DestinationError,
    DiskFullError,
    HashMismatchError,
    NetworkError,
    PatchError,
    PinRefusedError,
    RecipeError,
    SourceError,
    SparkbuildError,
    ToolchainError,
    UnsafeArchiveError,
    UsageError,
    VerifyError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

BAD_SHA = "0" * 64
ESCAPE_MARK = "pwned-by-corpus"


@dataclass
class Invocation:
    args: list[str]
    """Arguments after ``python -m sparkbuild`` (``--json`` is appended by the runner)."""
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    """Variables removed from the environment."""
    wrap: list[str] = field(default_factory=list)
    """A command the CLI runs under (``unshare`` for a private tmpfs); the CLI follows it."""
    after: Callable[[], None] | None = None
    """Postconditions checked after the run (asserts)."""
    secrets: tuple[str, ...] = ()
    """Texts no output of the run may hold (a token the case hands the command)."""
    program: list[str] | None = None
    """Instead of ``python -m sparkbuild``: another command of the project that speaks the
    same way (a bench script: its errors in the error family, ``--json`` too)."""


@dataclass(frozen=True)
class Case:
    id: str
    area: str
    error: type[SparkbuildError] | None
    """None: the right answer is not an error, but success that says ``fragment``."""
    fragment: str
    build: Callable[[Path], Invocation]
    needs: tuple[str, ...] = ()
    """Modules of sparkbuild the command needs; a case whose module is absent fails."""
    says: tuple[str, ...] = ()
    """Text the plain run must print as well (stderr or stdout)."""
    never_says: tuple[str, ...] = ()
    """Text neither run may print anywhere (a raw terminal escape, a stale count)."""


# -- postconditions --------------------------------------------------------------------


def nothing_escaped(root: Path, *extra: Path) -> Callable[[], None]:
    """No file named with ESCAPE_MARK exists outside the archives, under root or above."""

    def check() -> None:
        escaped = [
            p
            for p in root.parent.rglob(f"*{ESCAPE_MARK}*")
            if not p.name.endswith((".tar.gz", ".zip", ".tar"))
        ]
        escaped += [p for p in extra if p.exists() or p.is_symlink()]
        assert not escaped, f"written outside the destination: {escaped}"

    return check


def left_empty(dest: Path, also: Callable[[], None] | None = None) -> Callable[[], None]:
    """The destination is absent or empty: no half-extracted or half-patched tree."""

    def check() -> None:
        if also is not None:
            also()
        leftovers = sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []
        assert not leftovers, f"{dest} holds {leftovers[:5]} after a failed prepare"

    return check


def unchanged(tree: Path, snapshot: dict[str, bytes]) -> Callable[[], None]:
    def check() -> None:
        now = {
            str(p.relative_to(tree)): p.read_bytes()
            for p in tree.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(tree).parts
        }
        assert now == snapshot, "the tree changed although the command failed"

    return check


def snapshot(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes()
        for p in tree.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(tree).parts
    }


# -- archives (prepare) ----------------------------------------------------------------


def _prepare(work: Path, spec: str, **env: str) -> Invocation:
    recipe = b.good_recipe(work / "recipe")
    dest = work / "dest"
    return Invocation(
        ["prepare", "--source", spec, "--dest", str(dest), "--recipe", str(recipe)],
        env=dict(env),
        after=left_empty(dest, nothing_escaped(work)),
    )


def _tar_case(*members: tuple[str, str, str]) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        resolved = tuple((k, n.format(work=work), t.format(work=work)) for k, n, t in members)
        archive = b.hostile_tar(work, f"{b.TOP}-{ESCAPE_MARK}", *resolved)
        return _prepare(work, str(archive))

    return build


def _file_case(
    make: Callable[[Path], Path], *, pin: str | None = None
) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        archive = make(work)
        spec = f"{archive}#sha256={pin}" if pin else str(archive)
        return _prepare(work, spec)

    return build


PREPARE = ("sparkbuild.patches.prepare", "sparkbuild.sources.fetch")
M = ESCAPE_MARK
ARCHIVE_CASES = [
    Case(
        "tar-dotdot",
        "archive",
        UnsafeArchiveError,
        "escapes the destination",
        _tar_case(("file", f"{b.TOP}/../../{M}-dotdot", "escaped\n")),
        PREPARE,
    ),
    Case(
        "tar-absolute",
        "archive",
        UnsafeArchiveError,
        "absolute path",
        _tar_case(("file", "{work}/" + f"{M}-abs", "escaped\n")),
        PREPARE,
    ),
    Case(
        "tar-symlink-out",
        "archive",
        UnsafeArchiveError,
        "points outside the tree",
        _tar_case(
            ("symlink", f"{b.TOP}/{M}-link", "../../../.."),
            ("file", f"{b.TOP}/{M}-link/{M}-via-link", "escaped\n"),
        ),
        PREPARE,
    ),
    Case(
        "tar-symlink-absolute",
        "archive",
        UnsafeArchiveError,
        "points outside the tree",
        _tar_case(("symlink", f"{b.TOP}/{M}-etc", "/etc")),
        PREPARE,
    ),
    Case(
        "tar-write-through-symlink",
        "archive",
        UnsafeArchiveError,
        "written through symlink",
        _tar_case(
            ("symlink", f"{b.TOP}/inner", "csrc"),
            ("file", f"{b.TOP}/inner/{M}-through", "escaped\n"),
        ),
        PREPARE,
    ),
    Case(
        "tar-hardlink-out",
        "archive",
        UnsafeArchiveError,
        "points outside the tree",
        _tar_case(("hardlink", f"{b.TOP}/{M}-hard", "../../etc/passwd")),
        PREPARE,
    ),
    Case(
        "tar-hardlink-absolute",
        "archive",
        UnsafeArchiveError,
        "points outside the tree",
        _tar_case(("hardlink", f"{b.TOP}/{M}-hard", "/etc/passwd")),
        PREPARE,
    ),
    Case(
        "zip-dotdot",
        "archive",
        UnsafeArchiveError,
        "escapes the destination",
        _file_case(lambda d: b.hostile_zip(d, f"{b.TOP}/../../{M}-zip")),
        PREPARE,
    ),
    Case(
        "sdist-truncated",
        "archive",
        UnsafeArchiveError,
        "truncated",
        _file_case(b.truncated_sdist),
        PREPARE,
    ),
    Case(
        "sdist-corrupt",
        "archive",
        UnsafeArchiveError,
        "corrupt",
        _file_case(b.corrupt_sdist),
        PREPARE,
    ),
    Case(
        "tar-truncated-in-member",
        "archive",
        UnsafeArchiveError,
        "truncated",
        _file_case(b.plain_tar_truncated),
        PREPARE,
    ),
    Case(
        "not-an-archive",
        "archive",
        UnsafeArchiveError,
        "not a tar or zip archive",
        _file_case(b.not_an_archive),
        PREPARE,
    ),
    Case(
        "sdist-hash-mismatch",
        "hash",
        HashMismatchError,
        BAD_SHA,
        _file_case(b.good_sdist, pin=BAD_SHA),
        PREPARE,
    ),
]


# -- the package index (prepare --source pypi:) -----------------------------------------


def _index_case(
    *, sha: str | None, version: str = b.VERSION, index: str | None = None, big: bool = False
) -> Callable[[Path], Invocation]:
    """An sdist served by a local ``file://`` PEP 503 index; ``sha`` is what the index says.

    ``big``: 3 MiB of incompressible bytes instead of the small generated sdist.
    """

    def build(work: Path) -> Invocation:
        files = work / "index" / "files"
        files.mkdir(parents=True)
        sdist = b.good_sdist(files)
        if big:
            sdist.write_bytes(os.urandom(3 << 20))
        digest = sha or b.sha256_of(sdist)
        page = work / "index" / "simple" / b.PACKAGE / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(
            f'<a href="../../files/{sdist.name}#sha256={digest}">{sdist.name}</a>\n',
            encoding="utf-8",
        )
        url = index or (work / "index" / "simple").as_uri()
        inv = _prepare(work, f"pypi:{b.PACKAGE}=={version}")
        inv.env.update(_index_env(work, url))
        return inv

    return build


def _index_env(work: Path, url: str) -> dict[str, str]:
    return {
        "PIP_INDEX_URL": url,
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_CONFIG_FILE": os.devnull,
        "SPARKBUILD_CACHE": str(work / "cache"),
    }


INDEX_CASES = [
    Case(
        "index-sdist-hash-mismatch",
        "hash",
        HashMismatchError,
        BAD_SHA,
        _index_case(sha=BAD_SHA),
        PREPARE,
    ),
    Case(
        "index-no-such-version",
        "index",
        SourceError,
        "no sdist of demo 9.9",
        _index_case(sha=None, version="9.9"),
        PREPARE,
    ),
    Case(
        "index-unreachable",
        "network",
        NetworkError,
        "127.0.0.1:9",
        _index_case(sha=None, index="http://127.0.0.1:9/simple"),
        PREPARE,
    ),
]


# -- patches (patch apply) -------------------------------------------------------------


def _patch_case(
    patches: dict[str, str], *, series_only: list[str] | None = None
) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        tree = b.write_tree(work / "tree", b.source_files())
        outside = work / "outside.txt"
        outside.write_text("keep me\n", encoding="utf-8")
        b.series_dir(work / "recipe" / "patches", patches)
        if series_only is not None:
            (work / "recipe" / "patches" / "series").write_text("\n".join(series_only) + "\n")
        recipe = b.write_recipe(work / "recipe", b.recipe_text("unused", "patches/series"))
        before = snapshot(tree)
        keep = unchanged(tree, before)

        def after() -> None:
            keep()
            assert outside.read_text() == "keep me\n", "a patch wrote outside the tree"

        return Invocation(["patch", "apply", str(tree), "--recipe", str(recipe)], after=after)

    return build


def _pinned_ok(work: Path) -> Invocation:
    """The success side of pinning: a series whose pins match applies as usual."""
    tree = b.write_tree(work / "tree", b.source_files())
    b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
    pinned = b.pinned_line("0001-arch.diff", b.kernel_patch())
    (work / "recipe" / "patches" / "series").write_text(f"{pinned}  # reviewed\n")
    recipe = b.write_recipe(work / "recipe", b.recipe_text("unused", "patches/series"))

    def patched() -> None:
        assert (tree / b.KERNEL).read_text(encoding="utf-8").endswith(b.PATCHED_LINE)

    return Invocation(["patch", "apply", str(tree), "--recipe", str(recipe)], after=patched)


def _diff(old: str, new: str, body: str = "@@ -1 +1 @@\n-a\n+b\n") -> str:
    return f"diff --git {old} {new}\n--- {old}\n+++ {new}\n{body}"


PATCHING = ("sparkbuild.patches.engine",)
PATCH_CASES = [
    Case(
        "patch-dotdot",
        "patch",
        PatchError,
        "outside the tree",
        _patch_case({"0001-out.diff": _diff("a/../outside.txt", "b/../outside.txt")}),
        PATCHING,
    ),
    Case(
        "patch-absolute",
        "patch",
        PatchError,
        "outside the tree",
        _patch_case({"0001-abs.diff": _diff("/etc/hostname", "/etc/hostname")}),
        PATCHING,
    ),
    Case(
        "patch-into-git-dir",
        "patch",
        PatchError,
        "outside the tree",
        _patch_case({"0001-git.diff": _diff("a/.git/config", "b/.git/config")}),
        PATCHING,
    ),
    Case(
        "patch-malformed-hunk",
        "patch",
        PatchError,
        "malformed diff",
        _patch_case(
            {
                "0001-bad.diff": _diff(
                    f"a/{b.KERNEL}", f"b/{b.KERNEL}", "@@ -1,3 +1,3 @@\n-int arch = 90;\n"
                )
            }
        ),
        PATCHING,
    ),
    Case(
        "patch-not-a-diff",
        "patch",
        PatchError,
        "not a unified diff",
        _patch_case({"0001-prose.diff": "this is not a diff at all\n"}),
        PATCHING,
    ),
    Case(
        "patch-missing-from-series",
        "patch",
        RecipeError,
        "missing patch file",
        _patch_case({}, series_only=["0001-absent.diff"]),
        PATCHING,
    ),
    Case(
        "patch-differs-from-its-pin",
        "hash",
        HashMismatchError,
        "patch file 0001-arch.diff does not match its pin",
        _patch_case(
            {"0001-arch.diff": b.kernel_patch().replace("arch = 121", "arch = 666")},
            series_only=[b.pinned_line("0001-arch.diff", b.kernel_patch())],
        ),
        PATCHING,
    ),
    Case("patch-pinned-applies", "patch", None, "applied", _pinned_ok, PATCHING),
    Case(
        "patch-second-fails-nothing-kept",
        "patch",
        PatchError,
        "0002-stale",
        _patch_case(
            {
                "0001-arch.diff": b.kernel_patch(),
                "0002-stale.diff": _diff(
                    "a/README.md", "b/README.md", "@@ -1 +1 @@\n-no such line\n+x\n"
                ),
            }
        ),
        PATCHING,
    ),
]


# -- recipes ---------------------------------------------------------------------------


def _recipe_case(text: Callable[[str], str]) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        tree = b.write_tree(work / "tree", b.source_files())
        b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
        recipe = b.write_recipe(work / "recipe", text(b.recipe_text("unused", "patches/series")))
        return Invocation(["patch", "status", str(tree), "--recipe", str(recipe)])

    return build


def _missing_recipe(work: Path) -> Invocation:
    tree = b.write_tree(work / "tree", b.source_files())
    return Invocation(["patch", "status", str(tree), "--recipe", str(work / "absent.toml")])


def _line_of(prefix: str) -> int:
    """The line of the generated recipe that starts with ``prefix``."""
    lines = b.recipe_text("unused", "patches/series").splitlines()
    return next(n for n, line in enumerate(lines, start=1) if line.startswith(prefix))


RECIPE_CASES = [
    Case(
        "recipe-unknown-key",
        "recipe",
        RecipeError,
        "unknown key build.jobz",
        _recipe_case(lambda t: t.replace("jobs = 1", "jobz = 1")),
        PATCHING,
    ),
    Case(
        "recipe-unknown-key-line",
        "recipe",
        RecipeError,
        f"corpus.toml:{_line_of('jobs')}",
        _recipe_case(lambda t: t.replace("jobs = 1", "jobz = 1")),
        PATCHING,
    ),
    Case(
        "recipe-wrong-type",
        "recipe",
        RecipeError,
        "target.python must be str, not float",
        _recipe_case(lambda t: t.replace('python = "3.12"', "python = 3.12")),
        PATCHING,
    ),
    Case(
        "recipe-wrong-type-line",
        "recipe",
        RecipeError,
        f"corpus.toml:{_line_of('python')}",
        _recipe_case(lambda t: t.replace('python = "3.12"', "python = 3.12")),
        PATCHING,
    ),
    Case(
        "recipe-unknown-table",
        "recipe",
        RecipeError,
        "unknown table or key `extras`",
        _recipe_case(lambda t: t + "\n[extras]\nx = 1\n"),
        PATCHING,
    ),
    Case(
        "recipe-incomplete",
        "recipe",
        RecipeError,
        "missing key source.spec",
        _recipe_case(lambda t: t.replace('spec = "unused"\n', "")),
        PATCHING,
    ),
    Case(
        "recipe-not-toml",
        "recipe",
        RecipeError,
        "not valid TOML",
        _recipe_case(lambda t: t.replace("[target]", "[target")),
        PATCHING,
    ),
    Case(
        "recipe-bad-jobs",
        "recipe",
        RecipeError,
        "build.jobs must be a positive integer",
        _recipe_case(lambda t: t.replace("jobs = 1", "jobs = 0")),
        PATCHING,
    ),
    Case(
        "recipe-refused-pin",
        "recipe",
        PinRefusedError,
        "refusing pin flashinfer-python==0.6.17",
        _recipe_case(lambda t: t + '\n[[pins]]\nname = "flashinfer-python"\nversion = "0.6.17"\n'),
        PATCHING,
    ),
    Case(
        "recipe-missing-file",
        "recipe",
        RecipeError,
        "cannot read recipe",
        _missing_recipe,
        PATCHING,
    ),
]


# -- git sources -----------------------------------------------------------------------


def _git_case(ref: str, *, repo_exists: bool = True) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        repo = work / "repo"
        if repo_exists:
            b.git_source(repo)
        return _prepare(work, f"git+{repo.as_uri()}@{ref}")

    return build


def _dirty_dest(work: Path) -> Invocation:
    """prepare into a destination that already holds someone's edited clone."""
    repo = b.git_source(work / "repo")
    recipe = b.good_recipe(work / "recipe")
    dest = work / "dest"
    shutil.copytree(repo, dest)
    (dest / b.KERNEL).write_text("// my local edit\n", encoding="utf-8")
    before = snapshot(dest)
    return Invocation(
        [
            "prepare",
            "--source",
            f"git+{repo.as_uri()}@main",
            "--dest",
            str(dest),
            "--recipe",
            str(recipe),
        ],
        after=unchanged(dest, before),
    )


def _dirty_source(work: Path) -> Invocation:
    """prepare from a local checkout with uncommitted edits: kept, and said so."""
    repo = b.git_source(work / "repo")
    (repo / "README.md").write_text("edited, not committed\n", encoding="utf-8")
    inv = _prepare(work, str(repo))
    dest = work / "dest"

    def kept() -> None:
        assert (dest / "README.md").read_text(encoding="utf-8") == "edited, not committed\n"

    inv.after = kept
    return inv


def _dirty_patch(work: Path) -> Invocation:
    """patch apply on a git tree whose uncommitted edit conflicts with the series."""
    tree = b.git_source(work / "tree")
    (tree / b.KERNEL).write_text(b.KERNEL_TEXT + "// uncommitted edit\n", encoding="utf-8")
    recipe = b.good_recipe(work / "recipe")
    before = snapshot(tree)
    return Invocation(
        ["patch", "apply", str(tree), "--recipe", str(recipe)], after=unchanged(tree, before)
    )


GIT_CASES = [
    Case(
        "git-missing-ref",
        "git",
        SourceError,
        "no-such-branch",
        _git_case("no-such-branch"),
        PREPARE,
    ),
    Case(
        "git-missing-repo",
        "git",
        SourceError,
        "no-such-repo",
        lambda w: _git_case("main", repo_exists=False)(w / "no-such-repo"),
        PREPARE,
    ),
    Case("git-dirty-destination", "git", DestinationError, "not empty", _dirty_dest, PREPARE),
    Case("git-dirty-tree-patch", "git", PatchError, f"{b.KERNEL}: hunk #1", _dirty_patch, PATCHING),
    Case("git-dirty-source-kept", "git", None, "uncommitted", _dirty_source, PREPARE),
]


# -- toolchain (doctor) ------------------------------------------------------------------

CUDA_VARIABLES = ("CUDACXX", "CUDA_HOME", "CUDA_PATH")
DOCTOR = ("sparkbuild.compile.doctor", "sparkbuild.toolchain.tools")


def _nvcc_nowhere(work: Path) -> Invocation:
    """No nvcc at all: none on PATH, no CUDA variables, /usr/local/cuda hidden by a tmpfs."""
    inv = Invocation(["doctor"], env={"PATH": b.path_without_nvcc()}, unset=CUDA_VARIABLES)
    return private_tmpfs(inv, Path("/usr/local/cuda"))


def _cuda_home_empty(work: Path) -> Invocation:
    return Invocation(
        ["doctor"], env={"CUDA_HOME": str(work / "no-cuda")}, unset=("CUDACXX", "CUDA_PATH")
    )


def _nvcc_old(work: Path) -> Invocation:
    fake = b.fake_nvcc(work / "cuda-12.4" / "bin", "12.4")
    return Invocation(["doctor"], env={"CUDACXX": str(fake)})


TOOLCHAIN_CASES = [
    Case("nvcc-missing", "toolchain", ToolchainError, "nvcc not found", _nvcc_nowhere, DOCTOR),
    Case(
        "nvcc-missing-cuda-home",
        "toolchain",
        ToolchainError,
        "CUDA_HOME points to a missing nvcc",
        _cuda_home_empty,
        DOCTOR,
    ),
    Case(
        "nvcc-too-old",
        "toolchain",
        ToolchainError,
        "nvcc 12.4.1 is too old for sm_121",
        _nvcc_old,
        DOCTOR,
    ),
]


# -- a full disk (a 1 MiB tmpfs in a private mount namespace) ---------------------------


def private_tmpfs(inv: Invocation, mountpoint: Path, size: str = "1m") -> Invocation:
    """Run ``inv`` in a private mount namespace with a ``size`` tmpfs over ``mountpoint``.

    ``unshare -rm`` needs no root (a user namespace); nothing outside the run sees it.
    """
    inv.wrap = [
        "unshare",
        "-rm",
        "sh",
        "-c",
        f'mount -t tmpfs -o size={size} tmpfs "{mountpoint}" && exec "$@"',
        "sh",
    ]
    return inv


def _tiny_disk(mountpoint: Path, inv: Invocation) -> Invocation:
    mountpoint.mkdir(parents=True, exist_ok=True)
    return private_tmpfs(inv, mountpoint)


def _disk_full_extract(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    sdist = b.good_sdist(work, extra_files=1200)  # ~1.5 MB inflated
    recipe = b.good_recipe(work / "recipe")
    tiny = work / "tiny"
    dest = tiny / "dest"
    inv = Invocation(
        ["prepare", "--source", str(sdist), "--dest", str(dest), "--recipe", str(recipe)]
    )
    return _tiny_disk(tiny, inv)


def _disk_full_cache(work: Path) -> Invocation:
    inv = _index_case(sha=None, big=True)(work)
    inv.env["SPARKBUILD_CACHE"] = str(work / "tiny" / "cache")
    return _tiny_disk(work / "tiny", inv)


DISK_CASES = [
    Case("disk-full-extract", "disk", DiskFullError, "filled up", _disk_full_extract, PREPARE),
    Case("disk-full-cache", "disk", DiskFullError, "filled up", _disk_full_cache, PREPARE),
]


# -- the cache: corrupted or missing entries ---------------------------------------------


def _cached_pypi_source(work: Path, *, corrupt: bool) -> Invocation:
    """prepare --source pypi:demo==1.0 once, so the cache holds the sdist; maybe rot it."""
    inv = _index_case(sha=None)(work)
    if corrupt:
        from sparkbuild.sources.index import fetch_sdist
        from sparkbuild.store.cache import Cache

        old = {k: os.environ.get(k) for k in inv.env}
        os.environ.update(inv.env)
        try:
            cache = Cache(Path(inv.env["SPARKBUILD_CACHE"]))
            fetch_sdist(cache, b.PACKAGE, b.VERSION).write_bytes(b"bit rot")
        finally:
            for key, value in old.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return inv


def _refetched_online(work: Path) -> Invocation:
    inv = _cached_pypi_source(work, corrupt=True)
    dest = work / "dest"

    def refetched() -> None:
        assert (dest / b.KERNEL).read_text(encoding="utf-8").endswith(b.PATCHED_LINE)

    inv.after = refetched
    return inv


def _offline_wheel(work: Path, *, corrupt: bool) -> Invocation:
    inv = _cached_pypi_source(work, corrupt=corrupt) if corrupt else _index_case(sha=None)(work)
    cache = inv.env["SPARKBUILD_CACHE"]
    recipe = inv.args[inv.args.index("--recipe") + 1]
    inv.args = [
        "wheel",
        "--offline",
        "--cache",
        cache,
        "--source",
        f"pypi:{b.PACKAGE}=={b.VERSION}",
        "--out",
        str(work / "wheelhouse"),
        "--recipe",
        recipe,
    ]
    inv.env["PIP_INDEX_URL"] = "http://127.0.0.1:9/simple"  # offline must not even try
    inv.after = None
    return inv


CACHE_CASES = [
    Case(
        "cache-corrupt-online-refetched", "cache", None, "is corrupted", _refetched_online, PREPARE
    ),
    Case(
        "cache-miss-offline",
        "cache",
        CacheMissError,
        "--offline",
        lambda w: _offline_wheel(w, corrupt=False),
        ("sparkbuild.pipeline",),
    ),
    Case(
        "cache-corrupt-offline",
        "cache",
        CacheMissError,
        "corrupted",
        lambda w: _offline_wheel(w, corrupt=True),
        ("sparkbuild.pipeline",),
    ),
]


# -- wheelhouses (verify) ----------------------------------------------------------------


def _wheelhouse(work: Path, *, tamper: bool, manifest: bool = True) -> Invocation:
    """A one-wheel wheelhouse with manifest.json and requirements.lock; maybe tampered."""
    out = work / "wheelhouse"
    wheel = b.pure_wheel(out)
    digest = b.sha256_of(wheel)
    lock = out / "requirements.lock"
    lock.write_text(f"{b.PACKAGE}=={b.VERSION} --hash=sha256:{digest}\n", encoding="utf-8")
    if manifest:
        (out / "manifest.json").write_text(
            json.dumps(
                {
                    "target": {"cuda_archs": ["12.1"]},
                    "wheels": [{"file": wheel.name, "sha256": digest, "role": "pin"}],
                    "files": {lock.name: b.sha256_of(lock)},
                }
            ),
            encoding="utf-8",
        )
    if tamper:
        data = bytearray(wheel.read_bytes())
        data[len(data) // 2] ^= 0xFF
        wheel.write_bytes(bytes(data))
    return Invocation(["verify", str(out)])


VERIFY = ("sparkbuild.wheelhouse.verify",)
WHEEL_CASES = [
    Case(
        "wheel-hash-mismatch",
        "hash",
        VerifyError,
        "differs from the manifest's",
        lambda w: _wheelhouse(w, tamper=True),
        VERIFY,
    ),
    Case(
        "wheel-hash-mismatch-lock",
        "hash",
        VerifyError,
        "not the one requirements.lock pins",
        lambda w: _wheelhouse(w, tamper=True),
        VERIFY,
    ),
    Case(
        "wheelhouse-without-manifest",
        "wheelhouse",
        VerifyError,
        "manifest.json is missing",
        lambda w: _wheelhouse(w, tamper=False, manifest=False),
        VERIFY,
    ),
    Case(
        "wheelhouse-directory-missing",
        "wheelhouse",
        VerifyError,
        "the wheelhouse directory does not exist",
        lambda w: Invocation(["verify", str(w / "no-such-wheelhouse")]),
        VERIFY,
    ),
]


# -- every value checked when it is read, nothing left half-done -------------------------

DEAD_PID = 4194305
"""Above Linux's largest pid_max (2**22): no process has it."""


def _recipe_with(old: str, new: str) -> Callable[[Path], Invocation]:
    return _recipe_case(lambda t: t.replace(old, new))


def _pin(name: str) -> Callable[[Path], Invocation]:
    return _recipe_case(lambda t: t + f'\n[[pins]]\nname = "{name}"\nversion = "1.0"\n')


def _known_bad_as_recipe(work: Path) -> Invocation:
    from sparkbuild.recipe import known_bad_path

    tree = b.write_tree(work / "tree", b.source_files())
    return Invocation(["patch", "status", str(tree), "--recipe", str(known_bad_path())])


def _doctor_memory(value: str) -> Callable[[Path], Invocation]:
    return lambda work: Invocation(["doctor", "--job-memory-gib", value])


def _wheel_args(work: Path, *extra: str, cache: Path | None = None,
                source: Path | None = None) -> list[str]:
    """``wheel`` of the small generated sdist (or ``source``), its recipe and cache."""
    work.mkdir(parents=True, exist_ok=True)
    spec = source if source is not None else b.good_sdist(work)
    recipe = b.good_recipe(work / "recipe")
    return ["wheel", "--source", str(spec), "--recipe", str(recipe),
            "--cache", str(cache or work / "cache"), "--out", str(work / "wheelhouse"), *extra]


def _cache_is_a_file(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    (work / "cache-file").write_text("not a directory\n", encoding="utf-8")
    return Invocation(_wheel_args(work, cache=work / "cache-file"))


def _cache_read_only(work: Path) -> Invocation:
    """A read-only bind mount over the cache (root ignores a mode of 0555)."""
    cache = work / "ro-cache"
    cache.mkdir(parents=True)
    inv = Invocation(_wheel_args(work, cache=cache))
    inv.wrap = ["unshare", "-rm", "sh", "-c",
                f'mount --bind "{cache}" "{cache}" && mount -o remount,ro,bind "{cache}" '
                '&& exec "$@"', "sh"]
    return inv


def _manifest_files_null(work: Path, command: str = "verify") -> Invocation:
    inv = _wheelhouse(work, tamper=False)
    out = Path(inv.args[1])
    manifest = out / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["files"] = None
    manifest.write_text(json.dumps(data), encoding="utf-8")
    if command == "install":
        return Invocation(["install", str(out), "--venv", str(work / "venv")],
                          after=_no_venv(work / "venv"))
    return inv

# -- trust only what was checked ----------------------------------------------------------


def _genuine(work: Path) -> Path:
    return b.node_wheelhouse(work / "wheelhouse")


def _tampered(work: Path) -> Path:
    """A tampered copy: a file added to the wheel with its RECORD line, the new
    hash put into requirements.lock only."""
    return b.tamper_wheel_and_lock(b.node_wheelhouse(work / "tampered"))


def _no_venv(venv: Path) -> Callable[[], None]:
    def check() -> None:
        assert not venv.exists(), f"a refused install left {venv} behind"

    return check


def _install_pip_check_fails(work: Path) -> Invocation:
    """A verified wheelhouse whose wheel requires a project it lacks: pip check refuses the
    venv after it was made, and the venv goes."""
    out = b.node_wheelhouse(work / "wheelhouse", role="pin", requires=("absent-dependency-sb23",))
    venv = work / "venv"
    return Invocation(["install", str(out), "--venv", str(venv)], after=_no_venv(venv))


def _journal_without_data(work: Path) -> Invocation:
    tree = b.write_tree(work / "tree", b.source_files())
    recipe = b.good_recipe(work / "recipe")
    journal = tree / ".sparkbuild" / "journal.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text(
        '{"run":"apply","pid":1,"patches":["0001-arch"]}\n{"begin":"0001-arch"}\n'
        f'{{"keep":"{b.KERNEL}","mode":420}}\n', encoding="utf-8")
    return Invocation(["patch", "apply", str(tree), "--recipe", str(recipe)],
                      after=unchanged(tree, snapshot(tree)))


def _unit_outside(work: Path) -> Invocation:
    files = {**b.source_files(), "CMakeLists.txt": "project(demo)\n"}
    tree = b.write_tree(work / "tree", files)
    recipe = b.good_recipe(work / "recipe")
    return Invocation(["check", "--tree", str(tree), "--recipe", str(recipe),
                       "--unit", "../outside.cu"])


def _out_inside_source(work: Path) -> Invocation:
    source = b.write_tree(work / "source", b.source_files())
    args = _wheel_args(work, source=source)
    args[args.index("--out") + 1] = str(source / "wheelhouse")
    return Invocation(args, after=lambda: _absent(source / "wheelhouse"))


def _absent(path: Path) -> None:
    assert not path.exists(), f"{path} was written"


def prepared_tree(work: Path) -> tuple[Path, Path]:
    """``work/tree``, the generated sdist prepared by ``sparkbuild prepare``, and its recipe."""
    work.mkdir(parents=True, exist_ok=True)
    sdist = b.good_sdist(work)
    recipe = b.good_recipe(work / "recipe")
    tree = work / "tree"
    subprocess.run([*CLI, "prepare", "--source", str(sdist), "--dest", str(tree), "--recipe",
                    str(recipe)], check=True, capture_output=True, timeout=300)
    return tree, recipe


def _bundle_partials(work: Path) -> Invocation:
    """A prepared tree, and what a killed ``bundle`` left: its partial and its staging."""
    tree, recipe = prepared_tree(work)
    out = work / "out" / "demo.tar.xz"
    out.parent.mkdir()
    partial = out.with_name(f".{out.name}.partial-{DEAD_PID}")
    partial.write_bytes(b"half an archive")
    staging = work / "cache" / "tmp" / f"bundle-{DEAD_PID}-x1y2z3"
    (staging / "sparkbuild-bundle").mkdir(parents=True)

    def swept() -> None:
        assert out.is_file()
        assert not partial.exists(), f"{partial} is still there"
        assert not staging.exists(), f"{staging} is still there"

    return Invocation(["bundle", "--tree", str(tree), "--recipe", str(recipe), "--cache",
                       str(work / "cache"), "--offline", "--without-wheels", "--out", str(out)],
                      after=swept)


def _disk_full_build_env(work: Path) -> Invocation:
    """``wheel`` with its cache on a 3 MiB tmpfs: ``python -m venv`` cannot finish.  The
    tmpfs goes with the run's mount namespace, so the wrapper itself looks for a half-made
    build environment after the run, and exits 99 if one stayed."""
    tiny = work / "tiny"
    tiny.mkdir(parents=True)
    inv = Invocation(_wheel_args(work, cache=tiny / "cache"))
    buildenv = tiny / "cache" / "buildenv"
    inv.wrap = ["unshare", "-rm", "sh", "-c",
                f'mount -t tmpfs -o size=3m tmpfs "{tiny}" && "$@"; rc=$?; '
                f'if [ -n "$(ls -A "{buildenv}" 2>/dev/null)" ]; then '
                'echo "a half-made build environment stays" >&2; exit 99; fi; exit $rc', "sh"]
    return inv


def _lock_unknown_pin(work: Path) -> Invocation:
    inv = _index_case(sha=None)(work)
    recipe = Path(inv.args[inv.args.index("--recipe") + 1])
    recipe.write_text(b.recipe_text(f"pypi:{b.PACKAGE}=={b.VERSION}", "patches/series")
                      + '\n[[pins]]\nname = "no-such-project-sb23"\nversion = "1.0"\n',
                      encoding="utf-8")
    return Invocation(["lock", "--recipe", str(recipe), "--out", str(work / "locked")],
                      env=inv.env)


def _install_url(url: str) -> Callable[[Path], Invocation]:
    return lambda work: Invocation(["install", url, "--venv", str(work / "venv")],
                                   after=_no_venv(work / "venv"))


def _served_manifest_null(work: Path) -> Invocation:
    """A served wheelhouse whose manifest is damaged: where is the URL, not a scratch path."""
    import functools
    import http.server
    import threading

    _manifest_files_null(work)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(work))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/wheelhouse/"
    venv = work / "venv"

    def stop() -> None:
        server.shutdown()
        _no_venv(venv)()

    return Invocation(["install", url, "--venv", str(venv)], after=stop)


MIXED_INPUT_CASES = [
    Case("recipe-job-memory-zero", "recipe", RecipeError,
         "build.job_memory_gib must be a number of GiB above 0, not 0",
         _recipe_with("job_memory_gib = 2.0", "job_memory_gib = 0"), PATCHING),
    Case("recipe-job-memory-negative", "recipe", RecipeError, "not -1",
         _recipe_with("job_memory_gib = 2.0", "job_memory_gib = -1"), PATCHING),
    Case("recipe-job-memory-nan", "recipe", RecipeError, f"corpus.toml:{_line_of('job_memory')}",
         _recipe_with("job_memory_gib = 2.0", "job_memory_gib = nan"), PATCHING),
    Case("cli-job-memory-gib-zero", "cli", UsageError, "--job-memory-gib must be a number",
         _doctor_memory("0"), ("sparkbuild.compile.doctor",)),
    Case("cli-job-memory-gib-nan", "cli", UsageError, "not nan", _doctor_memory("nan"),
         ("sparkbuild.compile.doctor",)),
    Case("cli-jobs-zero", "cli", UsageError, "--jobs must be a positive integer, not 0",
         lambda w: Invocation(_wheel_args(w, "--jobs", "0")), ("sparkbuild.pipeline",)),
    Case("cli-jobs-negative", "cli", UsageError, "not -3",
         lambda w: Invocation(_wheel_args(w, "--jobs", "-3")), ("sparkbuild.pipeline",)),
    Case("recipe-cuda-archs-empty", "recipe", RecipeError, "target.cuda_archs is empty",
         _recipe_with('cuda_archs = ["12.1a"]', "cuda_archs = []"), PATCHING),
    Case("recipe-cuda-archs-not-an-arch", "recipe", RecipeError,
         "target.cuda_archs: 'sm121' is not a CUDA arch",
         _recipe_with('cuda_archs = ["12.1a"]', 'cuda_archs = ["sm121"]'), PATCHING),
    Case("recipe-pin-name-empty", "recipe", RecipeError, "pins: '' is not a project name",
         _pin(""), PATCHING),
    Case("recipe-pin-name-invalid", "recipe", RecipeError, "'flash infer!' is not a project name",
         _pin("flash infer!"), PATCHING),
    Case("lock-pin-unknown-to-index", "index", RecipeError,
         "pin no-such-project-sb23: the package index has no project of that name",
         _lock_unknown_pin, ("sparkbuild.wheelhouse.lock",)),
    Case("recipe-python-not-a-version", "recipe", RecipeError,
         f"corpus.toml:{_line_of('python')}",
         _recipe_with('python = "3.12"', 'python = "three"'), PATCHING),
    Case("recipe-is-the-known-bad-list", "recipe", RecipeError,
         "this is the known-bad list, not a recipe", _known_bad_as_recipe, PATCHING),
    Case("cache-is-a-file", "cache", UsageError, "cache-file is a file", _cache_is_a_file,
         ("sparkbuild.pipeline",)),
    Case("cache-read-only", "cache", UsageError, "the cache directory is not writable",
         _cache_read_only, ("sparkbuild.pipeline",)),
    Case("manifest-files-null", "wheelhouse", VerifyError, "`files` must map file names",
         _manifest_files_null, VERIFY),
    Case("install-manifest-files-null", "wheelhouse", VerifyError, "`files` must map",
         lambda w: _manifest_files_null(w, "install"), ("sparkbuild.node.install",)),
    Case("install-refused-leaves-no-venv", "wheelhouse", VerifyError,
         "absent-dependency-sb23", _install_pip_check_fails, ("sparkbuild.node.install",)),
    Case("journal-line-without-data", "patch", PatchError, "has no saved data",
         _journal_without_data, PATCHING),
    Case("check-unit-outside-tree", "check", UsageError, "--unit ../outside.cu is outside",
         _unit_outside, ("sparkbuild.checks.check",)),
    Case("wheel-out-inside-source", "wheelhouse", DestinationError,
         "lies inside the source directory", _out_inside_source, ("sparkbuild.pipeline",)),
    Case("bundle-sweeps-dead-partials", "disk", None, "bundle", _bundle_partials,
         ("sparkbuild.bundle.write",)),
    Case("disk-full-build-env", "disk", DiskFullError,
         "the disk filled up while creating the build environment", _disk_full_build_env,
         ("sparkbuild.pipeline",)),
    Case("install-url-refused", "network", NetworkError, "the wheelhouse is served there",
         _install_url("http://127.0.0.1:9/wheelhouse/"), ("sparkbuild.node.remote",)),
    Case("install-url-where-is-the-url", "network", VerifyError,
         "http://127.0.0.1:", _served_manifest_null, ("sparkbuild.node.remote",)),
]



def _install_refused(work: Path, wheelhouse: Path) -> Invocation:
    venv = work / "venv"
    return Invocation(["install", str(wheelhouse), "--venv", str(venv)], after=_no_venv(venv))


_TEMPLATE: dict[str, Path] = {}


def _installed(work: Path) -> tuple[Path, Path]:
    """A genuine wheelhouse and a venv ``sparkbuild install`` made of it (made once, then
    copied: a venv is read here, never run)."""
    if not _TEMPLATE:
        import subprocess
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="corpus-installed-"))
        wheelhouse = _genuine(root)
        subprocess.run([*CLI, "install", str(wheelhouse), "--venv", str(root / "venv")],
                       check=True, capture_output=True, timeout=300,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
        _TEMPLATE.update(wheelhouse=wheelhouse, venv=root / "venv")
    wheelhouse, venv = work / "wheelhouse", work / "venv"
    shutil.copytree(_TEMPLATE["wheelhouse"], wheelhouse)
    shutil.copytree(_TEMPLATE["venv"], venv, symlinks=True)
    return wheelhouse, venv


def _site(venv: Path) -> Path:
    (site,) = venv.glob("lib/python*/site-packages")
    return site


def _venv_with_added_file(work: Path) -> Invocation:
    wheelhouse, venv = _installed(work)
    (_site(venv) / b.PACKAGE / "dropped_in.py").write_text("print('not from a wheel')\n")
    return Invocation(["verify", "--installed", str(venv), str(wheelhouse)])


def _venv_of_tampered_wheel(work: Path) -> Invocation:
    """The venv the old install made of the tampered wheelhouse: the file, its RECORD line,
    and the RECORD's hash in sparkbuild-wheelhouse.json all agree with one another."""
    import hashlib

    wheelhouse, venv = _installed(work)
    site = _site(venv)
    data = b"print('not what was built')\n"
    (site / b.TAMPERED_MEMBER).write_bytes(data)
    record = site / f"{b.PACKAGE}-{b.VERSION}.dist-info" / "RECORD"
    record.write_text(record.read_text() + f"{b.TAMPERED_MEMBER},sha256="
                      f"{b._record_digest(data)},{len(data)}\n")
    installed = venv / "sparkbuild-wheelhouse.json"
    state = json.loads(installed.read_text())
    state["distributions"][b.PACKAGE]["record_sha256"] = hashlib.sha256(
        record.read_bytes()).hexdigest()
    installed.write_text(json.dumps(state))
    return Invocation(["verify", "--installed", str(venv), str(wheelhouse)])


def _venv_against_tampered(work: Path) -> Invocation:
    """The genuine venv against a tampered copy of its own wheelhouse (same manifest)."""
    wheelhouse, venv = _installed(work)
    b.tamper_wheel_and_lock(wheelhouse)
    return Invocation(["verify", "--installed", str(venv), str(wheelhouse)])


def _wheel_as_symlink(work: Path, command: str) -> Invocation:
    wheelhouse = _genuine(work)
    (wheel,) = wheelhouse.glob("*.whl")
    elsewhere = work / "elsewhere" / wheel.name
    elsewhere.parent.mkdir()
    wheel.rename(elsewhere)
    wheel.symlink_to(elsewhere)  # the very same bytes
    if command == "install":
        return _install_refused(work, wheelhouse)
    return Invocation(["verify", str(wheelhouse)])


def _stray_directory_link(work: Path) -> Invocation:
    wheelhouse = _genuine(work)
    outside = work / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the wheelhouse\n")
    (wheelhouse / "simple").symlink_to(outside, target_is_directory=True)
    return Invocation(["verify", str(wheelhouse)])


def _manifest_leaves(work: Path) -> Invocation:
    wheelhouse = _genuine(work)
    outside = b.pure_wheel(work / "outside")
    manifest = json.loads((wheelhouse / "manifest.json").read_text())
    manifest["wheels"].append({"file": f"../outside/{outside.name}", "name": "demo2",
                               "version": "1.0", "sha256": b.sha256_of(outside),
                               "role": "built"})
    (wheelhouse / "manifest.json").write_text(json.dumps(manifest))
    return Invocation(["verify", str(wheelhouse)])


def _big_metadata(work: Path) -> Invocation:
    wheelhouse = b.big_member_wheelhouse(work / "wheelhouse",
                                         f"{b.PACKAGE}-{b.VERSION}.dist-info/METADATA", 64 << 20)
    return Invocation(["verify", str(wheelhouse)])


def _bundle_case(work: Path, *, other: bool) -> Invocation:
    bundle = b.tiny_bundle(work / "b.tar.xz", "bundled",
                           twice=None if other else "recipe/corpus.toml")
    args = ["wheel", "--bundle", str(bundle), "--cache", str(work / "cache"),
            "--out", str(work / "out")]
    if other:
        recipe = b.write_recipe(work, b.recipe_text("unused", "patches/series").replace(
            'name = "corpus"', 'name = "other"'), "other.toml")
        args += ["--recipe", str(recipe)]
    return Invocation(args)


TRUST_CASES = [
    Case("install-tampered-lock-only", "trust", VerifyError, "requirements.lock",
         lambda w: _install_refused(w, _tampered(w)), ("sparkbuild.node.install",)),
    Case("verify-tampered-lock-only", "trust", VerifyError, "requirements.lock",
         lambda w: Invocation(["verify", str(_tampered(w))]), VERIFY),
    Case("verify-installed-file-no-wheel-has", "trust", VerifyError,
         "no wheel of the wheelhouse has this file", _venv_with_added_file, VERIFY),
    Case("verify-installed-tampered-wheel-vs-genuine", "trust", VerifyError,
         f"{b.TAMPERED_MEMBER} (no wheel of the wheelhouse has this file)",
         _venv_of_tampered_wheel, VERIFY),
    Case("verify-installed-vs-tampered-wheelhouse", "trust", VerifyError,
         "the wheelhouse itself fails verify", _venv_against_tampered, VERIFY),
    Case("verify-wheel-symlink-same-bytes", "trust", VerifyError, "a symbolic link",
         lambda w: _wheel_as_symlink(w, "verify"), VERIFY),
    Case("install-wheel-symlink-same-bytes", "trust", VerifyError, "a symbolic link",
         lambda w: _wheel_as_symlink(w, "install"), ("sparkbuild.node.install",)),
    Case("verify-stray-directory-symlink", "trust", VerifyError, "simple (a symbolic link",
         _stray_directory_link, VERIFY),
    Case("verify-manifest-entry-leaves", "trust", VerifyError,
         "leaves the wheelhouse directory", _manifest_leaves, VERIFY),
    Case("verify-metadata-member-64mib", "trust", VerifyError, "is over 16 MiB",
         _big_metadata, VERIFY),
    Case("wheel-bundle-other-recipe", "trust", UsageError,
         "the bundle carries the recipe 'bundled', not 'other'",
         lambda w: _bundle_case(w, other=True), ("sparkbuild.pipeline",)),
    Case("wheel-bundle-member-listed-twice", "trust", VerifyError,
         "lists recipe/corpus.toml twice", lambda w: _bundle_case(w, other=False),
         ("sparkbuild.pipeline",)),
]

BASE_CASES: list[Case] = [
    *ARCHIVE_CASES,
    *INDEX_CASES,
    *PATCH_CASES,
    *RECIPE_CASES,
    *GIT_CASES,
    *TOOLCHAIN_CASES,
    *DISK_CASES,
    *CACHE_CASES,
    *WHEEL_CASES,
    *MIXED_INPUT_CASES,
    *TRUST_CASES,
]

CLI = [sys.executable, "-m", "sparkbuild"]


def _all_cases() -> list[Case]:
    """The base corpus and the cases of its own files: what runs on a node
    (:mod:`corpus.cases_node`) and what a build reads (:mod:`corpus.cases_inputs`)."""
    from corpus import (
        cases_dist,
        cases_inputs,
        cases_inputs2,
        cases_jitcache,
        cases_node,
        cases_settings,
        cases_standin,
        cases_trustnode,
        cases_ux,
    )

    groups = [cases_node, cases_inputs, cases_inputs2, cases_jitcache, cases_standin, cases_dist,
              cases_settings, cases_trustnode, cases_ux]
    return [*BASE_CASES, *(case for group in groups for case in group.CASES)]


CASES: list[Case] = _all_cases()
