"""Hostile cases of what a build reads.

A checkout's git config, the cache after a failed step, ``SOURCE_DATE_EPOCH``, recipes,
bundles, diffs, exit codes.  Each case is a :class:`~corpus.cases.Case`; :data:`CASES`
joins the corpus in :func:`corpus.cases._all_cases`.  Every case here fails on code that
lacks the check it names (the root cause each group answers is named above it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from corpus.cases import (
    CLI,
    Case,
    Invocation,
    _cache_read_only,
    _prepare,
    _wheel_args,
    prepared_tree,
    private_tmpfs,
    snapshot,
    unchanged,
)
from sparkbuild.errors import (
    DiskFullError,
    LockTimeoutError,
    PatchError,
    RecipeError,
    SourceError,
    UnsafeArchiveError,
    UsageError,
    VerifyError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

MARK = "ran-from-git-config"
"""The file a hostile git config's command creates: it must never exist."""
PREPARE = ("sparkbuild.patches.prepare", "sparkbuild.sources.fetch")
PATCHING = ("sparkbuild.patches.engine",)
WHEEL = ("sparkbuild.pipeline",)
BUNDLE = ("sparkbuild.bundle.read", "sparkbuild.bundle.write")


def _never_ran(mark: Path, also: Callable[[], None] | None = None) -> Callable[[], None]:
    def check() -> None:
        if also is not None:
            also()
        assert not mark.exists(), f"the checkout's git config ran a command: {mark} exists"

    return check


# -- 5. a checkout's git config runs nothing ---------------------------------------------


def _hook(work: Path, *, passes_input: bool = False) -> tuple[Path, Path]:
    """A script that leaves MARK when git runs it (as an fsmonitor, or a clean filter that
    passes its input through)."""
    mark = work / MARK
    script = work / "hook.sh"
    tail = "cat\n" if passes_input else "exit 1\n"
    script.write_text(f"#!/bin/sh\ntouch '{mark}'\n{tail}", encoding="utf-8")
    script.chmod(0o755)
    return script, mark


def _stat_dirty(repo: Path) -> None:
    """Every file's mtime moved: git status (and git apply) re-read their contents."""
    for path in repo.rglob("*"):
        if path.is_file() and ".git" not in path.relative_to(repo).parts:
            os.utime(path, (1_000_000_000, 1_000_000_000))


def _dirty_checkout(repo: Path) -> None:
    (repo / "README.md").write_text("edited, not committed\n", encoding="utf-8")


def _hostile_checkout(make: Callable[[Path, Path], Path], *, clean_filter: bool = False
                      ) -> Callable[[Path], Invocation]:
    """``prepare --source CHECKOUT`` of the dirty checkout ``make(work, hook)`` returns,
    whose git configuration names ``hook`` (a clean filter's, with ``clean_filter``)."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        hook, mark = _hook(work, passes_input=clean_filter)
        repo = make(work, hook)
        _dirty_checkout(repo)
        inv = _prepare(work, str(repo))
        inv.after = _never_ran(mark)
        return inv

    return build


def _fsmonitor_own(work: Path, hook: Path) -> Path:
    """The issue's case: ``core.fsmonitor`` in the checkout's own config."""
    repo = b.git_source(work / "repo")
    b.git(repo, "config", "core.fsmonitor", str(hook))
    return repo


def _fsmonitor_included(work: Path, hook: Path) -> Path:
    """The same, from a file the checkout's config includes."""
    repo = b.git_source(work / "repo")
    included = work / "included.cfg"
    included.write_text(f"[core]\n\tfsmonitor = {hook}\n", encoding="utf-8")
    b.git(repo, "config", "include.path", str(included))
    return repo


def _fsmonitor_gitfile(work: Path, hook: Path) -> Path:
    """The checkout's ``.git`` is a file naming a git directory elsewhere."""
    repo = b.write_tree(work / "repo", b.source_files())
    b.git(work, "init", "-q", "-b", "main", f"--separate-git-dir={work / 'elsewhere.git'}",
          str(repo))
    b.git(repo, "add", "-A")
    b.git(repo, "commit", "-q", "-m", "demo source")
    b.git(repo, "config", "core.fsmonitor", str(hook))
    return repo


def _fsmonitor_worktree(work: Path, hook: Path) -> Path:
    """A linked worktree of a repository whose config sets the fsmonitor."""
    main = b.git_source(work / "main")
    b.git(main, "worktree", "add", "-q", "-b", "other", str(work / "linked"))
    b.git(main, "config", "core.fsmonitor", str(hook))
    return work / "linked"


def _with_submodule(work: Path) -> tuple[Path, Path]:
    """A checkout with a submodule at ``third_party/sub``; both paths."""
    sub = b.git_source(work / "sub")
    repo = b.git_source(work / "repo")
    b.git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub),
          "third_party/sub")
    b.git(repo, "commit", "-q", "-m", "a submodule")
    return repo, repo / "third_party" / "sub"


def _fsmonitor_submodule(work: Path, hook: Path) -> Path:
    """The fsmonitor is in a submodule's config: git status runs git in the submodule."""
    repo, sub = _with_submodule(work)
    b.git(sub, "config", "core.fsmonitor", str(hook))
    _dirty_checkout(sub)
    return repo


def _filtered_repo(repo: Path, hook: Path) -> Path:
    """``repo`` (a git checkout) with every file under a filter whose clean command is
    ``hook``, the files' mtimes moved so that git reads them again."""
    (repo / ".gitattributes").write_text("* filter=corpus\n", encoding="utf-8")
    b.git(repo, "add", ".gitattributes")
    b.git(repo, "commit", "-q", "-m", "attributes")
    b.git(repo, "config", "filter.corpus.clean", str(hook))
    _stat_dirty(repo)
    return repo


def _clean_filter_own(work: Path, hook: Path) -> Path:
    return _filtered_repo(b.git_source(work / "repo"), hook)


def _clean_filter_submodule(work: Path, hook: Path) -> Path:
    repo, sub = _with_submodule(work)
    _filtered_repo(sub, hook)
    return repo


def _patch_filtered_tree(action: str) -> Callable[[Path], Invocation]:
    """``patch ACTION TREE`` on a git checkout whose clean filter runs a command."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        hook, mark = _hook(work, passes_input=True)
        tree = _filtered_repo(b.git_source(work / "tree"), hook)
        recipe = b.good_recipe(work / "recipe")
        return Invocation(["patch", action, str(tree), "--recipe", str(recipe)],
                          after=_never_ran(mark))

    return build


GIT_CONFIG_CASES = [
    Case("git-checkout-fsmonitor", "git", None, "uncommitted",
         _hostile_checkout(_fsmonitor_own), PREPARE),
    Case("git-checkout-fsmonitor-included", "git", None, "uncommitted",
         _hostile_checkout(_fsmonitor_included), PREPARE),
    Case("git-checkout-fsmonitor-gitfile", "git", None, "uncommitted",
         _hostile_checkout(_fsmonitor_gitfile), PREPARE),
    Case("git-checkout-fsmonitor-worktree", "git", None, "uncommitted",
         _hostile_checkout(_fsmonitor_worktree), PREPARE),
    Case("git-checkout-fsmonitor-submodule", "git", None, "uncommitted",
         _hostile_checkout(_fsmonitor_submodule), PREPARE),
    Case("git-checkout-clean-filter", "git", None, "uncommitted",
         _hostile_checkout(_clean_filter_own, clean_filter=True), PREPARE),
    Case("git-checkout-clean-filter-submodule", "git", None, "uncommitted",
         _hostile_checkout(_clean_filter_submodule, clean_filter=True), PREPARE),
    Case("patch-apply-tree-clean-filter", "git", None, "applied", _patch_filtered_tree("apply"),
         PATCHING),
    Case("patch-status-tree-clean-filter", "git", None, "would apply: cleanly",
         _patch_filtered_tree("status"), PATCHING),
]


# -- 12. a git+file:// remote that is no repository is no network trouble ----------------


def _file_remote_a_file(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    (work / "not-a-repo").write_text("a plain file\n", encoding="utf-8")
    return _prepare(work, f"git+{(work / 'not-a-repo').as_uri()}@main")


def _file_remote_dangling_gitfile(work: Path) -> Invocation:
    """A directory whose ``.git`` file names a git directory that is not there."""
    repo = work / "moved"
    repo.mkdir(parents=True)
    (repo / ".git").write_text(f"gitdir: {work / 'gone.git'}\n", encoding="utf-8")
    return _prepare(work, f"git+{repo.as_uri()}@main")


FILE_REMOTE_CASES = [
    Case("git-file-remote-is-a-file", "git", SourceError, "no git repository at",
         _file_remote_a_file, PREPARE),
    Case("git-file-remote-dangling-gitfile", "git", SourceError, "no git repository at",
         _file_remote_dangling_gitfile, PREPARE),
]


# -- 16. a diff declares the mode of a plain file, or is refused ------------------------


def _mode_patch(diff: str, *, link: bool = False) -> Callable[[Path], Invocation]:
    """``patch apply`` of ``diff``; ``link``: the tree holds ``csrc/link.cu`` -> kernel.cu."""

    def build(work: Path) -> Invocation:
        tree = b.write_tree(work / "tree", b.source_files())
        if link:
            (tree / "csrc" / "link.cu").symlink_to("kernel.cu")
        recipe = b.good_recipe(work / "recipe", patches={"0001-mode.diff": diff})
        before = snapshot(tree)
        links = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_symlink())

        def after() -> None:
            unchanged(tree, before)()
            now = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_symlink())
            assert now == links, f"links changed: {links} -> {now}"
            assert (tree / "csrc" / "kernel.cu").read_text() == b.KERNEL_TEXT

        return Invocation(["patch", "apply", str(tree), "--recipe", str(recipe)], after=after)

    return build


NEW_LINK = """\
diff --git a/csrc/evil.cu b/csrc/evil.cu
new file mode 120000
index 0000000..8f0a4c2
--- /dev/null
+++ b/csrc/evil.cu
@@ -0,0 +1 @@
+/etc/passwd
\\ No newline at end of file
"""
RETARGET_LINK = """\
diff --git a/csrc/link.cu b/csrc/link.cu
index 3f5a6b7..8f0a4c2 120000
--- a/csrc/link.cu
+++ b/csrc/link.cu
@@ -1 +1 @@
-kernel.cu
\\ No newline at end of file
+/etc/passwd
\\ No newline at end of file
"""
DELETE_LINK = """\
diff --git a/csrc/link.cu b/csrc/link.cu
deleted file mode 120000
index 3f5a6b7..0000000
--- a/csrc/link.cu
+++ /dev/null
@@ -1 +0,0 @@
-kernel.cu
\\ No newline at end of file
"""
NEW_GITLINK = """\
diff --git a/third_party/x b/third_party/x
new file mode 160000
index 0000000..1234567
--- /dev/null
+++ b/third_party/x
@@ -0,0 +1 @@
+Subproject commit 1234567890123456789012345678901234567890
"""
NEW_EXECUTABLE = """\
diff --git a/build.sh b/build.sh
new file mode 100755
index 0000000..1234567
--- /dev/null
+++ b/build.sh
@@ -0,0 +1,2 @@
+#!/bin/sh
+touch /tmp/x
"""
THROUGH_LINK = RETARGET_LINK.replace("index 3f5a6b7..8f0a4c2 120000\n", "")
"""The same change of where the link points, with no line that declares its mode."""

MODE_CASES = [
    Case("patch-new-symlink", "patch", PatchError, "declares a symbolic link",
         _mode_patch(NEW_LINK), PATCHING),
    Case("patch-retarget-symlink", "patch", PatchError, "declares a symbolic link",
         _mode_patch(RETARGET_LINK, link=True), PATCHING),
    Case("patch-delete-symlink", "patch", PatchError, "declares a symbolic link",
         _mode_patch(DELETE_LINK, link=True), PATCHING),
    Case("patch-retarget-symlink-without-mode", "patch", PatchError,
         "csrc/link.cu, a symbolic link in the tree", _mode_patch(THROUGH_LINK, link=True),
         PATCHING),
    Case("patch-new-submodule", "patch", PatchError, "declares a submodule (gitlink)",
         _mode_patch(NEW_GITLINK), PATCHING),
    Case("patch-new-executable", "patch", PatchError, "declares an executable file",
         _mode_patch(NEW_EXECUTABLE), PATCHING),
]


# -- 11a. TOML and JSON nested beyond the reader ------------------------------------------

DEEP = 20_000


def _deep_recipe(value: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        tree = b.write_tree(work / "tree", b.source_files())
        text = b.recipe_text("unused", "patches/series") + f"\n[flashinfer]\naot_args = {value}\n"
        b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
        recipe = b.write_recipe(work / "recipe", text)
        return Invocation(["patch", "status", str(tree), "--recipe", str(recipe)])

    return build


def _deep_lock(work: Path) -> Invocation:
    """The recipe's lock file (JSON, beside the recipe) nested beyond the reader."""
    repo = b.git_source(work / "repo")
    spec = f"git+{repo.as_uri()}@main"
    b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
    recipe = b.write_recipe(work / "recipe", b.recipe_text(spec, "patches/series"))
    recipe.with_name("corpus.lock.json").write_text("[" * DEEP + "]" * DEEP, encoding="utf-8")
    return Invocation(["prepare", "--dest", str(work / "dest"), "--recipe", str(recipe),
                       "--cache", str(work / "cache")])


def _deep_pyproject(work: Path) -> Invocation:
    """The source tree's own pyproject.toml, read by ``vendor --plan``."""
    files = {**b.source_files(), "CMakeLists.txt": "project(demo NONE)\n",
             "pyproject.toml": "[build-system]\nrequires = " + "[" * DEEP + "]" * DEEP + "\n"}
    tree = b.write_tree(work / "tree", files)
    return Invocation(["vendor", "--tree", str(tree), "--cache", str(work / "cache"), "--plan"])


DEEP_CASES = [
    Case("recipe-nested-arrays", "recipe", RecipeError, "nested too deeply",
         _deep_recipe("[" * DEEP + "]" * DEEP), PATCHING),
    Case("recipe-nested-inline-tables", "recipe", RecipeError, "nested too deeply",
         _deep_recipe("{a = " * DEEP + "1" + "}" * DEEP), PATCHING),
    Case("recipe-lock-nested-json", "recipe", RecipeError,
         "lock file is not valid JSON: nested too deeply", _deep_lock, PREPARE),
    Case("tree-pyproject-nested", "recipe", RecipeError,
         "pyproject.toml is not valid TOML: nested too deeply", _deep_pyproject,
         ("sparkbuild.vendoring.plan",)),
]


# -- 12. bundles: the manifest first, unsafe members 5, a full disk 13 --------------------

TOP = "sparkbuild-bundle"


def _bundle_recipe(name: str = "bundled") -> bytes:
    return b.recipe_text("unused", "series/series").replace(
        'name = "corpus"', f'name = "{name}"').encode()


def _member(name: str, data: bytes | None = None, *, kind: bytes = tarfile.REGTYPE,
            link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = kind, link, 0
    info.size = len(data) if data is not None else 0
    return info, data


def write_bundle(path: Path, *, listed: dict[str, bytes] | None = None,
                 unlisted: dict[str, bytes] | None = None,
                 raw: tuple[tuple[tarfile.TarInfo, bytes | None], ...] = (),
                 plan: dict[str, object] | None = None, recipe: bytes | None = None,
                 manifest: bytes | None = None, sizes: dict[str, int] | None = None) -> Path:
    """A bundle as ``sparkbuild bundle`` writes one (its manifest first), of a plan and a
    recipe and ``listed``; then ``unlisted`` members, and ``raw`` members as they are.
    ``sizes``: sizes the manifest gives instead of the true ones; ``manifest``: its bytes."""
    members = {
        "plan.json": json.dumps(plan or {"format": 1, "recipe": "bundled",
                                         "recipe_file": "corpus.toml", "sources": []}).encode(),
        "recipe/corpus.toml": recipe if recipe is not None else _bundle_recipe(),
        **(listed or {}),
    }
    entries = {name: {"sha256": hashlib.sha256(data).hexdigest(),
                      "size": (sizes or {}).get(name, len(data))}
               for name, data in members.items()}
    if manifest is None:
        manifest = json.dumps({"format": 1, "members": entries}).encode()
    with tarfile.open(path, "w:xz") as tar:
        for name, data in [("manifest.json", manifest), *members.items(),
                           *(unlisted or {}).items()]:
            info, payload = _member(f"{TOP}/{name}", data)
            tar.addfile(info, io.BytesIO(payload or b""))
        for info, payload in raw:
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return path


def _wheel_bundle(make: Callable[[Path], Path], *, tiny: bool = False
                  ) -> Callable[[Path], Invocation]:
    """``wheel --bundle`` of what ``make`` writes; ``tiny``: the cache on a 1 MiB tmpfs."""

    def build(work: Path) -> Invocation:
        bundle = make(work)
        cache = work / ("tiny" if tiny else "") / "cache"
        cache.parent.mkdir(parents=True, exist_ok=True)
        inv = Invocation(["wheel", "--bundle", str(bundle), "--cache", str(cache), "--out",
                          str(work / "wheelhouse")])
        return private_tmpfs(inv, cache.parent) if tiny else inv

    return build


def _raw(*members: tuple[tarfile.TarInfo, bytes | None]) -> Callable[[Path], Path]:
    return lambda work: write_bundle(work / "b.tar.xz", raw=members)


def _truncated(work: Path) -> Path:
    whole = write_bundle(work / "whole.tar.xz", listed={"tree/noise.bin": os.urandom(1 << 18)})
    cut = work / "cut.tar.xz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return cut


FOUR_MIB = bytes(4 << 20)
BUNDLE_CASES = [
    Case("bundle-member-dotdot", "archive", UnsafeArchiveError, "escapes the destination",
         _wheel_bundle(_raw(_member(f"{TOP}/../../escaped", b"x"))), WHEEL),
    Case("bundle-member-absolute", "archive", UnsafeArchiveError, "absolute path",
         _wheel_bundle(_raw(_member("/tmp/corpus-escaped-absolute", b"x"))), WHEEL),
    Case("bundle-member-symlink-out", "archive", UnsafeArchiveError, "points outside the tree",
         _wheel_bundle(_raw(_member(f"{TOP}/tree/etc", kind=tarfile.SYMTYPE, link="/etc"))),
         WHEEL),
    Case("bundle-member-device", "archive", UnsafeArchiveError, "a character device",
         _wheel_bundle(_raw(_member(f"{TOP}/tree/null", kind=tarfile.CHRTYPE))), WHEEL),
    Case("bundle-truncated", "archive", UnsafeArchiveError, "truncated",
         _wheel_bundle(_truncated), WHEEL),
    Case("bundle-unlisted-member-on-a-full-disk", "disk", VerifyError,
         "tree/big.bin: not in the manifest",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", unlisted={"tree/big.bin":
                                                                        FOUR_MIB}),
                       tiny=True), WHEEL),
    Case("bundle-oversized-member-on-a-full-disk", "disk", VerifyError,
         "tree/big.bin: changed (it holds 4194304 bytes, the manifest says 10)",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", listed={"tree/big.bin":
                                                                      FOUR_MIB},
                                              sizes={"tree/big.bin": 10}), tiny=True), WHEEL),
    Case("bundle-listed-member-fills-the-disk", "disk", DiskFullError, "filled up",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", listed={"tree/big.bin":
                                                                      FOUR_MIB}),
                       tiny=True), WHEEL),
    Case("bundle-member-twice", "trust", VerifyError, "plan.json: in the bundle twice",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", raw=(_member(
             f"{TOP}/plan.json", json.dumps({"format": 1, "recipe": "bundled",
                                             "recipe_file": "corpus.toml",
                                             "sources": []}).encode()),))), WHEEL),
    Case("bundle-plan-names-a-path-outside", "trust", VerifyError,
         "names a path outside the bundle",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", plan={
             "format": 1, "recipe": "bundled", "recipe_file": "../../../../../../etc/hostname",
             "sources": []})), WHEEL),
    Case("bundle-manifest-nested-json", "trust", VerifyError, "nested too deeply",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", manifest=(
             '{"members": ' + "[" * DEEP + "]" * DEEP + "}").encode())), WHEEL),
    Case("bundle-manifest-members-not-a-map", "trust", VerifyError,
         "does not map each member to its sha256",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz",
                                              manifest=b'{"members": ["plan.json"]}')), WHEEL),
    Case("bundle-recipe-nested", "recipe", RecipeError, "nested too deeply",
         _wheel_bundle(lambda w: write_bundle(w / "b.tar.xz", recipe=_bundle_recipe() + (
             "\n[flashinfer]\naot_args = " + "[" * DEEP + "]" * DEEP + "\n").encode())),
         WHEEL),
]


# -- 13. bundle takes wheel's lock and says what wheel says ------------------------------


def _bundle_args(work: Path, tree: Path, recipe: Path, cache: Path) -> list[str]:
    return ["bundle", "--tree", str(tree), "--recipe", str(recipe), "--cache", str(cache),
            "--offline", "--without-wheels", "--out", str(work / "out" / "b.tar.xz")]


def _on_read_only_cache(work: Path, args: Callable[[Path], list[str]]) -> Invocation:
    """``args(cache)`` with the cache read-only (the wrapper of ``wheel``'s own case)."""
    inv = _cache_read_only(work / "ro")
    inv.args = args(Path(inv.args[inv.args.index("--cache") + 1]))
    return inv


def _bundle_read_only_cache(work: Path) -> Invocation:
    tree, recipe = prepared_tree(work)
    return _on_read_only_cache(work, lambda cache: _bundle_args(work, tree, recipe, cache))


def _bundle_while_wheel_holds_the_lock(work: Path) -> Invocation:
    """Another run (flock(1) here) holds ``CACHE/work/corpus.lock``, which wheel takes."""
    tree, recipe = prepared_tree(work)
    cache = work / "cache"
    (cache / "work").mkdir(parents=True)
    return Invocation(_bundle_args(work, tree, recipe, cache),
                      env={"SPARKBUILD_LOCK_TIMEOUT": "1"},
                      wrap=["flock", "-o", str(cache / "work" / "corpus.lock")])


def _wheel_bundle_read_only_cache(work: Path) -> Invocation:
    work.mkdir(parents=True, exist_ok=True)
    bundle = write_bundle(work / "b.tar.xz")
    return _on_read_only_cache(work, lambda cache: [
        "wheel", "--bundle", str(bundle), "--cache", str(cache), "--out",
        str(work / "wheelhouse")])


LOCK_CASES = [
    Case("bundle-read-only-cache", "cache", UsageError, "the cache directory is not writable",
         _bundle_read_only_cache, BUNDLE),
    Case("bundle-waits-for-the-recipe-lock", "cache", LockTimeoutError, "corpus.lock",
         _bundle_while_wheel_holds_the_lock, BUNDLE),
    Case("wheel-bundle-read-only-cache", "cache", UsageError,
         "the cache directory is not writable", _wheel_bundle_read_only_cache, BUNDLE),
]


# -- 14. argument errors under --json print the error object ---------------------------

ARGUMENT_CASES = [
    Case("cli-json-missing-required-argument", "cli", UsageError,
         "the following arguments are required: --venv",
         lambda w: Invocation(["install", str(w / "wheelhouse")]), ()),
    Case("cli-json-invalid-int", "cli", UsageError, "argument --jobs: invalid int value: 'many'",
         lambda w: Invocation(["wheel", "--jobs", "many"]), ()),
    Case("cli-json-unknown-command", "cli", UsageError, "invalid choice: 'frobnicate'",
         lambda w: Invocation(["frobnicate"]), ()),
    Case("cli-json-unrecognized-argument", "cli", UsageError,
         "unrecognized arguments: --bogus", lambda w: Invocation(["verify", str(w), "--bogus"]),
         ()),
    Case("cli-json-invalid-action", "cli", UsageError, "invalid choice: 'explode'",
         lambda w: Invocation(["patch", "explode", str(w)]), ()),
]


# -- 10. SOURCE_DATE_EPOCH is checked before anything is built -------------------------
# -- 6. a failed packaging step does not wedge the cache -------------------------------


def buildable_sdist(directory: Path) -> Path:
    """The generated source as an sdist that setuptools builds into a pure wheel."""
    files = {**b.source_files(), "demo/__init__.py": "VALUE = 1\n",
             "pyproject.toml": textwrap.dedent(f"""\
                 [build-system]
                 requires = ["setuptools>=70.1"]
                 build-backend = "setuptools.build_meta"

                 [project]
                 name = "{b.PACKAGE}"
                 version = "{b.VERSION}"

                 [tool.setuptools]
                 packages = ["{b.PACKAGE}"]
                 """)}
    path = directory / f"{b.TOP}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(files.items()):
            b.add_bytes(tar, f"{b.TOP}/{name}", text.encode())
    return path


def _wheel_with_epoch(epoch: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        args = _wheel_args(work, source=buildable_sdist(work))
        return Invocation(args, env={"SOURCE_DATE_EPOCH": epoch})

    return build


def _epoch_in_recipe(work: Path) -> Invocation:
    tree = b.write_tree(work / "tree", b.source_files())
    b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
    text = b.recipe_text("unused", "patches/series") + 'env = { SOURCE_DATE_EPOCH = "-1" }\n'
    recipe = b.write_recipe(work / "recipe", text)
    return Invocation(["patch", "status", str(tree), "--recipe", str(recipe)])


def _after_a_failed_packaging_step(leftover: str) -> Callable[[Path], Invocation]:
    """A cache whose tree holds what setuptools leaves when bdist_wheel fails half-way (a
    full disk): ``leftover`` under ``build/bdist.*/wheel/``.  The next ``wheel`` builds, and
    its wheel carries nothing of it."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        args = _wheel_args(work, source=buildable_sdist(work))
        first = [*args]
        first[first.index("--out") + 1] = str(work / "first")
        env = {"SOURCE_DATE_EPOCH": "1700000000"}
        warm = subprocess.run([*CLI, *first], capture_output=True, text=True, timeout=900,
                              env={**os.environ, **env})
        assert warm.returncode == 0, warm.stderr[-3000:]
        left = (work / "cache" / "work" / "corpus" / "tree" / "build"
                / f"bdist.{sysconfig.get_platform()}" / "wheel" / leftover)
        left.parent.mkdir(parents=True)
        left.write_text("half written\n", encoding="utf-8")

        def built() -> None:
            wheels = sorted((work / "wheelhouse").glob(f"{b.PACKAGE}-*.whl"))
            assert wheels, "no wheel was written"
            with zipfile.ZipFile(wheels[0]) as archive:
                assert leftover not in archive.namelist(), (
                    f"the wheel carries {leftover}, left by a build that did not finish")

        return Invocation(args, env=env, after=built)

    return build


EPOCH = "SOURCE_DATE_EPOCH must be whole seconds from 315532800"
BUILD_CASES = [
    Case("wheel-source-date-epoch-negative", "build", UsageError, EPOCH,
         _wheel_with_epoch("-1"), WHEEL),
    Case("wheel-source-date-epoch-past-2107", "build", UsageError, EPOCH,
         _wheel_with_epoch("99999999999"), WHEEL),
    Case("wheel-source-date-epoch-before-1980", "build", UsageError, EPOCH,
         _wheel_with_epoch("315532799"), WHEEL),
    Case("wheel-source-date-epoch-not-a-number", "build", UsageError, EPOCH,
         _wheel_with_epoch("yesterday"), WHEEL),
    Case("recipe-source-date-epoch-negative", "recipe", RecipeError, EPOCH, _epoch_in_recipe,
         PATCHING),
    Case("wheel-after-a-failed-packaging-step", "cache", None,
         "the packaging scratch of an earlier build",
         _after_a_failed_packaging_step(f"{b.PACKAGE}-{b.VERSION}.dist-info/METADATA"), WHEEL),
    Case("wheel-after-a-failed-packaging-step-stale-module", "cache", None,
         "the packaging scratch of an earlier build",
         _after_a_failed_packaging_step(f"{b.PACKAGE}/left_by_a_failed_build.py"), WHEEL),
]

CASES: list[Case] = [
    *GIT_CONFIG_CASES,
    *FILE_REMOTE_CASES,
    *MODE_CASES,
    *DEEP_CASES,
    *BUNDLE_CASES,
    *LOCK_CASES,
    *ARGUMENT_CASES,
    *BUILD_CASES,
]
