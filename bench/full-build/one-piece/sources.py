"""Which GitHub sources of a vendor plan the `fetch` snapshots here hold, at the pinned commit.

    python bench/full-build/one-piece/sources.py PLAN.json [--recipe RECIPE]
        [--snapshots /work/.mirror] [--link /tmp/rb/git] [--out sources.json]

PLAN.json: ``sparkbuild vendor --tree TREE --plan --json`` of the prepared tree.  GitHub is
unreachable from the build host; a recipe's ``[vendor] mirrors`` maps
``https://github.com/`` to ``file:///tmp/rb/git/``, and that directory is filled with links to
the snapshots the `fetch` tool brought (``SNAPSHOTS/OWNER+NAME/repo``, a bare git directory).
For each planned source this says whether a snapshot of its repository (or of a fork that
holds the same commits, :data:`FORKS`) is here and whether the pinned ref is in it; for a
ref that is there, each submodule at that commit the same way.  With ``--link`` every source
whose ref is there is linked as ``LINK/OWNER/NAME`` and ``LINK/OWNER/NAME.git`` (as the URL
spells it), the layout the mirror expects.

Each source also carries what the 12.1a and 9.0a builds do with it (:data:`ROLES`), read
from vLLM 0.29.0's ``CMakeLists.txt`` and ``cmake/external_projects/*.cmake`` (with CUDA
13, where ``12.0f`` lists take a ``12.1a`` target: ``cuda_archs_loose_intersection``'s
family fallback).  The plan's crates (vLLM's Rust frontend) need crates.io, asked once,
unless RECIPE leaves them out (``[vendor] crates = false``); RECIPE's ``[vendor] exclude``
is checked against the roles (an excluded source the build needs is named).
Exit status 1 when a source the build cannot do without is missing or excluded, or
crates.io does not answer for crates the recipe keeps.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

FORKS = {
    "vllm-project/flashkda": ("MoonshotAI/FlashKDA",),
    "deepseek-ai/deepgemm": ("sgl-project/DeepGEMM",),
    "vllm-project/flashmla": ("anyunshan/vllm_FlashMLA",),
}
"""Repositories whose snapshot may hold a source's commits (the fork it was made from, or a
fork of it); the commit itself is checked, never assumed."""

ROLES: dict[str, dict[str, str]] = {
    "cutlass": {"12.1a": "compiled: headers of _C, _C_stable_libtorch, _moe_C and qutlass",
                "9.0a": "compiled: headers of _C, _C_stable_libtorch, _moe_C"},
    "vllm-flash-attn": {"12.1a": "compiled: _vllm_fa2_C (FA2_ARCHS 12.1a with the series); "
                                 "configure runs its CMakeLists (FetchContent_MakeAvailable)",
                        "9.0a": "compiled: _vllm_fa2_C and _vllm_fa3_C"},
    "flashkda": {"12.1a": "compiled: _flashkda_C (FLASH_KDA_SUPPORT_ARCHS 12.0f with CUDA 13; "
                          "12.1a added by the series for CUDA 12.9)",
                 "9.0a": "compiled: _flashkda_C (9.0a)"},
    "qutlass": {"12.1a": "compiled: _qutlass_C (QUTLASS_SM120_ARCHS 12.0f with CUDA 13)",
                "9.0a": "configure: populated; no 9.0 arch, nothing compiled"},
    "deepgemm": {"12.1a": "compiled: _deep_gemm_C's python_api.cpp by tools/build_deepgemm_C.py "
                          "(DEEPGEMM_SUPPORT_ARCHS 12.0f with CUDA 13); its headers installed "
                          "for runtime JIT",
                 "9.0a": "compiled: _deep_gemm_C (9.0a)"},
    "flashmla": {"12.1a": "configure: flashmla.cmake reads flash_mla/flash_mla_interface.py "
                          "(file(READ)) whatever the arch; no 12.x arch, nothing compiled",
                 "9.0a": "compiled: _flashmla_C and _flashmla_extension_C (9.0a)"},
    "fmha_sm100": {"12.1a": "installed: install(FILES) of named python files and "
                            "install(DIRECTORY) of csrc/, cute/, cutlass/ (component fmha_sm100; "
                            "setup.py installs every component with check_call: an empty tree "
                            "fails the build); nothing compiled",
                   "9.0a": "installed, as at 12.1a"},
    "tml_fa4": {"12.1a": "optional: install(CODE) globs flash_attn/cute/*.py (an empty tree "
                         "installs nothing; vllm.third_party.tml_fa4 is then absent)",
                "9.0a": "optional, as at 12.1a"},
    "triton_kernels": {"12.1a": "optional: install(DIRECTORY) of its python files (an empty "
                                "SOURCE_SUBDIR, which `[vendor] exclude` makes, installs "
                                "nothing; vllm.third_party.triton_kernels is then absent)",
                       "9.0a": "optional, as at 12.1a"},
}
"""What each build does with a source: "compiled", read at "configure" or "installed" by
name (each needed), or "optional" (the recipe can leave it out: ``[vendor] exclude``)."""

CRATES_INDEX = "https://index.crates.io/config.json"
"""What ``cargo vendor`` reads first: the plan's crates (vLLM's Rust frontend) need it."""

_GITHUB = re.compile(r"^https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", re.IGNORECASE)


def github(url: str) -> tuple[str, str] | None:
    """(owner, name) of a GitHub URL, as spelled; None for any other URL."""
    match = _GITHUB.match(url.strip())
    return (match.group(1), match.group(2)) if match else None


def snapshot_dirs(root: Path) -> dict[str, Path]:
    """owner/name (lower case) -> the git directory of each snapshot under ``root``."""
    found: dict[str, Path] = {}
    for repo in sorted(root.glob("*+*/repo")):
        owner, _, name = repo.parent.name.partition("+")
        git = repo / ".git" if (repo / ".git").is_dir() else repo
        found[f"{owner}/{name}".lower()] = git
    return found


def _git(git_dir: Path, *args: str) -> str | None:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True,
                          text=True, check=False, timeout=120)
    return done.stdout if done.returncode == 0 else None


def commit_of(git_dir: Path, ref: str) -> str | None:
    out = _git(git_dir, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    return out.strip() if out else None


def submodules_at(git_dir: Path, commit: str) -> list[dict[str, str]]:
    """Each submodule of ``commit``: path, url (from .gitmodules) and the gitlink's commit."""
    text = _git(git_dir, "show", f"{commit}:.gitmodules") or ""
    urls: dict[str, str] = {}
    path = None
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        if key.strip() == "path":
            path = value.strip()
        elif key.strip() == "url" and path:
            urls[path] = value.strip()
    found = []
    for line in (_git(git_dir, "ls-tree", "-r", commit) or "").splitlines():
        meta, _, where = line.partition("\t")
        _mode, kind, sha = meta.split()
        if kind == "commit":
            found.append({"path": where, "url": urls.get(where, ""), "commit": sha})
    return found


def locate(url: str, ref: str, snapshots: dict[str, Path]) -> dict[str, Any]:
    """Where ``url`` at ``ref`` is here: the snapshot that holds it, or why none does."""
    repo = github(url)
    if repo is None:
        return {"status": "not on GitHub", "snapshot": None, "commit": None}
    key = f"{repo[0]}/{repo[1]}".lower()
    tried = []
    for candidate in (key, *(f.lower() for f in FORKS.get(key, ()))):
        git = snapshots.get(candidate)
        if git is None:
            continue
        tried.append(candidate)
        commit = commit_of(git, ref)
        if commit:
            return {"status": "here", "snapshot": str(git), "commit": commit,
                    "from": candidate}
    if not tried:
        return {"status": "no snapshot", "snapshot": None, "commit": None}
    head = {c: _git(snapshots[c], "log", "-1", "--format=%H %cs", "HEAD") for c in tried}
    return {"status": "ref not in snapshot", "snapshot": str(snapshots[tried[0]]),
            "commit": None, "snapshot_heads": {c: (h or "").strip() for c, h in head.items()}}


def check(plan: dict[str, Any], snapshots: dict[str, Path]) -> list[dict[str, Any]]:
    rows = []
    for source in plan.get("sources", []):
        url, ref = str(source.get("url", "")), str(source.get("ref") or "")
        stand_in = source.get("stand_in")
        if isinstance(stand_in, dict):  # the recipe's [[vendor.stand_in]]: its commit is built
            ref = str(stand_in.get("used") or ref)
        row: dict[str, Any] = {"name": source["name"], "url": url, "ref": ref,
                               **locate(url, ref, snapshots),
                               "role": ROLES.get(str(source["name"]), {})}
        if row["status"] == "here":
            row["submodules"] = [{**locate(sub["url"], sub["commit"], snapshots), **sub}
                                 for sub in submodules_at(Path(row["snapshot"]),
                                                          row["commit"])]
        rows.append(row)
    return rows


def needed(row: dict[str, Any], arch: str) -> bool:
    """A source the build at ``arch`` cannot leave out (:data:`ROLES`)."""
    return not str(row["role"].get(arch, "compiled")).startswith("optional")


def link(rows: list[dict[str, Any]], root: Path) -> list[str]:
    """LINK/OWNER/NAME and LINK/OWNER/NAME.git for each source (and submodule) found here."""
    made = []
    entries = [*rows, *(sub for row in rows for sub in row.get("submodules", []))]
    for entry in entries:
        repo = github(entry["url"])
        if entry["status"] != "here" or repo is None:
            continue
        for name in (repo[1], f"{repo[1]}.git"):
            target = root / repo[0] / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(entry["snapshot"])
            made.append(str(target))
    return made


def reachable(url: str, timeout: float = 20.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("--snapshots", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--link", type=Path, help="fill this mirror directory with links")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--recipe", type=Path, help="its [vendor] exclude and crates")
    parser.add_argument("--no-crates-probe", action="store_true",
                        help="do not ask crates.io whether it answers")
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text(encoding="utf-8"))
    vendor: dict[str, object] = {}
    if args.recipe:
        vendor = tomllib.loads(args.recipe.read_text(encoding="utf-8")).get("vendor", {})
    exclude = {str(name) for name in vendor.get("exclude", []) or []}  # type: ignore[attr-defined]
    rows = check(plan, snapshot_dirs(args.snapshots))
    for row in rows:
        row["excluded_by_recipe"] = row["name"] in exclude
    missing = {arch: [r["name"] for r in rows if needed(r, arch)
                      and (r["status"] != "here" or r["excluded_by_recipe"])]
               for arch in ("12.1a", "9.0a")}
    crates = int(plan.get("crates", 0) or 0)
    crates_kept = bool(vendor.get("crates", True))
    crates_io = (None if args.no_crates_probe or not crates or not crates_kept
                 else reachable(CRATES_INDEX))
    report = {"sources": rows, "crates": crates, "crates_left_out_by_recipe": not crates_kept,
              "crates_io_reachable": crates_io,
              "missing_and_needed": missing,
              "missing_optional": [r["name"] for r in rows if r["status"] != "here"
                                   and not needed(r, "12.1a")]}
    if args.link:
        report["linked"] = link(rows, args.link)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        where = row.get("from") or row.get("snapshot") or ""
        excluded = " (excluded by the recipe)" if row["excluded_by_recipe"] else ""
        print(f"{row['name']:16} {row['status']:20} {row['url']} @ {row['ref']} {where}"
              f"{excluded}")
        for sub in row.get("submodules", []):
            print(f"  + {sub['path']:28} {sub['status']:20} {sub['url']} @ {sub['commit'][:12]}")
    answer = {None: "not asked", True: "answers", False: "unreachable"}[crates_io]
    print(f"crates: {crates} ({'left out by the recipe; ' if not crates_kept else ''}"
          f"`cargo vendor` needs crates.io: {answer})")
    for arch, names in missing.items():
        print(f"missing or excluded at {arch} (needed): {', '.join(names) or 'none'}")
    return 1 if any(missing.values()) or crates_io is False else 0


if __name__ == "__main__":
    sys.exit(main())
