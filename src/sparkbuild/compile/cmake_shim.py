"""sparkbuild's cmake: a configure that would repeat the last one is skipped.

vLLM's setup.py runs CMake's configure on every build, before ``cmake --build``: 41 s of a
232 s warm rebuild (its ``run_python`` calls import torch again and again), paid even
when one source line changed.  sparkbuild puts this script
first on the build's ``PATH`` as ``cmake``.  A configure (``cmake SOURCE ...``, not
``--build``, ``--install``, ``-E``, ``-P`` or ``--version``) is skipped when the build
directory holds ``CMakeCache.txt`` and ``build.ninja`` from a configure that succeeded
with the same arguments, the same source and build directories, the same real cmake and
the same environment (a search path's repeated entries dropped:
:mod:`sparkbuild.store.env_key`; the pool depth by presence: :data:`SET_AT_BUILD`), and the
same content of every file of the source tree that is not
C, C++ or CUDA code (recorded in ``.sparkbuild-configure.json`` there).  Those files are
what a configure reads: CMake files, and the Python scripts vLLM's CMake runs to generate
kernels (``execute_process``, which CMake does not track); a change to a CMake file would
also be caught by the generated ``build.ninja``, which re-runs CMake when a file the
configure read is newer than its output (``RERUN_CMAKE``).  A changed ``.cu`` file, the
common warm rebuild, leaves the configure as it was.  The FetchContent record the
configure wrote (``$SPARKBUILD_FETCH_LOG``) is kept beside the stamp and given back on a
skip.  Every other call goes to the real cmake
(``$SPARKBUILD_REAL_CMAKE``) unchanged; a skip or the reason for not skipping is said on
stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparkbuild.jobplan.ninja_shim import DEPTH_VARIABLE
from sparkbuild.settings import FETCH_LOG, QUIET, REAL_CMAKE
from sparkbuild.store.env_key import key_value

REAL_VARIABLE = REAL_CMAKE.name
FETCH_LOG_VARIABLE = FETCH_LOG.name
STAMP = ".sparkbuild-configure.json"
FETCH_COPY = ".sparkbuild-configure-fetch.tsv"
VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "PIP_BUILD_TRACKER", "PIP_REQ_TRACKER",
                      "DISPLAY", "COLUMNS", "LINES", "COLORTERM", "LS_COLORS", "WINDOWID",
                      "TMUX", "TMUX_PANE", "STY", "MAIL", "LESS", "PAGER", "EDITOR",
                      QUIET.name})
"""Variables that differ between two identical builds (the shell's login, the terminal,
pip's per-build tracker) and that no CMake file of a build reads."""
VOLATILE_PREFIXES = ("SSH_", "XDG_", "TERM", "DBUS_", "GPG_", "KRB5")
SET_AT_BUILD = frozenset({DEPTH_VARIABLE})
"""Variables a configure reads whose value the build's ninja sets again on every build:
the heavy pool's depth, which :mod:`sparkbuild.jobplan.ninja_shim` writes into the manifest
from the plan file.  Keyed by presence only: doctor's new depth after a first build
measured its units (on 16 cores: 13 by the rule, then 16) leaves the configure
as it was; a build with no pool plan at all still configures afresh."""
_NOT_CONFIGURE = ("--build", "--install", "--open", "-E", "-P", "--version", "--help",
                  "--system-information", "--find-package", "--workflow")


_CODE = frozenset({".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx",
                   ".inl", ".ipp", ".tcc"})
"""Source files a configure does not read: compiled, whose changes ninja follows."""
_NOT_INPUTS = frozenset({"__pycache__", "build", "dist"})


def is_configure(args: list[str]) -> bool:
    return bool(args) and not any(a in _NOT_CONFIGURE or a.startswith("--help") for a in args)


def _option(args: list[str], flag: str, cwd: Path) -> Path | None:
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return (cwd / args[index + 1]).resolve()
        if arg.startswith(flag) and len(arg) > len(flag):
            return (cwd / arg[len(flag):]).resolve()
    return None


def _takes_value(args: list[str], index: int) -> bool:
    return index > 0 and args[index - 1] in ("-S", "-B", "-G", "-T", "-A", "-C", "-D", "-U")


def source_dir(args: list[str], cwd: Path) -> Path | None:
    """The source directory of a configure call (``-S DIR`` or its first bare path)."""
    named = _option(args, "-S", cwd)
    if named is not None:
        return named
    bare = [a for i, a in enumerate(args) if not a.startswith("-") and not _takes_value(args, i)]
    return (cwd / bare[0]).resolve() if bare else None


def build_dir(args: list[str], cwd: Path) -> Path:
    """The build directory of a configure call (``-B DIR``, else the working directory:
    vLLM's setup.py runs ``cmake SOURCE`` in its build directory)."""
    return _option(args, "-B", cwd) or cwd


def tree_inputs(source: Path, build_dir: Path) -> str:
    """sha256 over the path and content of every file under ``source`` that is not C,
    C++ or CUDA code (the build directory, hidden directories such as ``.git`` and the
    series' own record ``.sparkbuild``, caches and egg-info left out)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(source):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if d not in _NOT_INPUTS and not d.startswith(".")
                         and not d.endswith(".egg-info") and here / d != build_dir)
        for name in sorted(files):
            path = here / name
            if path.suffix.lower() in _CODE or path.is_symlink() or not path.is_file():
                continue
            digest.update(str(path.relative_to(source)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def configure_key(args: list[str], cwd: Path, real: str, env: dict[str, str]) -> dict[str, Any]:
    """What a configure's result depends on beyond CMake's own files (values hashed)."""
    source = source_dir(args, cwd)
    tree = (tree_inputs(source, build_dir(args, cwd))
            if source is not None and source.is_dir() else "")
    return {"args": args, "cwd": str(cwd), "cmake": real, "tree": tree,
            "env": {key: _env_digest(key, value) for key, value in sorted(env.items())
                    if key not in VOLATILE and not key.startswith(VOLATILE_PREFIXES)}}


def _env_digest(key: str, value: str) -> str:
    if key in SET_AT_BUILD:
        return "set"
    return hashlib.sha256(key_value(key, value).encode()).hexdigest()[:16]


def why_configure(build_dir: Path, key: dict[str, Any]) -> str | None:
    """None when the configure can be skipped, else why it runs."""
    if not (build_dir / "CMakeCache.txt").is_file() or not (build_dir / "build.ninja").is_file():
        return "no earlier configure here"
    try:
        last = json.loads((build_dir / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no record of the earlier configure"
    if not isinstance(last, dict) or not isinstance(last.get("env", {}), dict):
        return "no record of the earlier configure"
    for part in ("cmake", "cwd", "args", "tree"):
        if last.get(part) != key[part]:
            return {"tree": "a file of the source tree that is not compiled code changed"
                    }.get(part, f"its {part} changed")
    before, now = last.get("env", {}), key["env"]
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    if changed:
        return f"the environment changed: {', '.join(changed[:6])}"
    return None


def _fetch_log() -> Path | None:
    return FETCH_LOG.path()


def main(argv: list[str]) -> int:
    real = str(REAL_CMAKE.path() or "cmake")
    if not is_configure(argv):
        os.execvp(real, [real, *argv])
    cwd = Path.cwd()
    build = build_dir(argv, cwd)
    key = configure_key(argv, cwd, real, dict(os.environ))
    reason = why_configure(build, key)
    fetch_log = _fetch_log()
    if reason is None:
        print("sparkbuild: configure skipped: the same arguments and environment as the "
              f"configure recorded in {build / STAMP} (build.ninja re-runs CMake if one "
              "of its files changed)", file=sys.stderr, flush=True)
        copy = build / FETCH_COPY
        if fetch_log is not None and copy.is_file():
            with fetch_log.open("a", encoding="utf-8") as record:
                record.write(copy.read_text(encoding="utf-8"))
        return 0
    print(f"sparkbuild: configuring ({reason})", file=sys.stderr, flush=True)
    (build / STAMP).unlink(missing_ok=True)
    start = fetch_log.stat().st_size if fetch_log is not None and fetch_log.is_file() else 0
    # Not proc.run: this process is the build's own (started by the tree's setup.py) and
    # keeps to the standard library; cmake's output passes through.
    returncode = subprocess.call([real, *argv])
    if returncode == 0:
        if fetch_log is not None and fetch_log.is_file():
            with fetch_log.open("rb") as record:
                record.seek(start)
                (build / FETCH_COPY).write_bytes(record.read())
        (build / STAMP).write_text(json.dumps(key, indent=1) + "\n", encoding="utf-8")
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
