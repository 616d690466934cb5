"""Install a wheelhouse into a venv with no network: the wheelhouse alone, hashes required.

Nothing is installed from a wheelhouse that was not verified first: every file against
``manifest.json``, the lock's included, by the code ``verify`` runs
(:func:`sparkbuild.wheelhouse.verify.verify_files`), before the venv is created.  pip gets
the lock's verified bytes, and the fingerprint recorded is that of the verified manifest.

pip runs with ``--no-index --find-links DIR --require-hashes -r`` (the verified lock)
and isolated from the machine's pip configuration (``--isolated``,
``PIP_CONFIG_FILE=/dev/null``), so a configured index, find-links directory or constraint
file cannot add or swap a single file.  ``pip check`` then proves the set is consistent
(a conflict an override in the manifest records is reported, any other fails the install:
:mod:`sparkbuild.node.pip_check`), and importing the built package proves it loads
(its compiled extension included).  No file may be a version ``recipes/known_bad.toml``
lists.  pip installs with ``--no-deps``: the lock is the whole closure, and pip check is
the one judge of consistency (pip's resolver would refuse a recorded override outright).
Last, the wheelhouse's fingerprint (the sha256 of its manifest, less the run's measures)
is printed and recorded in the venv with what was installed
(:mod:`sparkbuild.node.fingerprint`), for ``verify --installed``.  A wheelhouse served
over HTTP comes through :mod:`sparkbuild.node.remote`.  ``--from pylock`` installs from
the wheelhouse's
``pylock.toml`` (PEP 751) through ``uv pip install --offline`` instead: the same files and
hashes, named by path; the result says which file was used.  Every entry of that lock must
be a wheel of the wheelhouse that verify checked, beside the lock (no URL, no path
elsewhere, no sdist, archive, VCS or directory), before uv runs; uv reads a copy of the
checked lock (:func:`checked_pylock`).  The built wheels, whose start is checked and whose
modules are imported, are those verify decides from the files
(:mod:`sparkbuild.wheelhouse.wheel_roles`), and one that does not install on the manifest's
declared platform and Python is named before pip or uv runs.

``--venv`` may not hold ``$``, a backtick, ``"``, ``\\`` or a control character: the venv's
``bin/activate`` writes its path into shell code, and an interpreter with CVE-2024-9287
(CPython before 3.11.11, 3.12.8, 3.13.1) runs ``$(...)`` there; nor may it lie under a
file. An install holds a lock beside the venv (``.sparkbuild-install-HASH.lock``, as
``wheel`` holds the cache's: :class:`sparkbuild.store.lock.CacheLock`) that records the
process groups it runs, and marks the venv (``sparkbuild-install.incomplete``) until it is
done: the next install after one that was killed stops what it left running (``python -m
venv``, ensurepip, pip) and makes a venv that run created anew, or reinstalls every file
into one that existed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from sparkbuild.console import escaped, info, shown, step, unsafe_characters
from sparkbuild.errors import (
    DestinationError,
    SparkbuildError,
    ToolchainError,
    UsageError,
    VerifyError,
)
from sparkbuild.node.fingerprint import record_installation
from sparkbuild.node.installed import INSTALLING_MARK
from sparkbuild.node.pip_check import PipCheck, judge_pip_check
from sparkbuild.node.profile import (
    NodeProfile,
    profile_from_manifest,
    resolve_profile,
    write_profile,
)
from sparkbuild.node.start_check import refuse_unstartable, start_modules_of
from sparkbuild.proc import run
from sparkbuild.recipe import check_known_bad
from sparkbuild.records import Record, as_json
from sparkbuild.store.files import usable_path, venv_python
from sparkbuild.store.hashing import sha256_bytes
from sparkbuild.store.lock import CacheLock
from sparkbuild.store.wheel_members import read_text_member
from sparkbuild.wheelhouse.lock import LOCK_NAME, find_uv, parse_lock
from sparkbuild.wheelhouse.manifest import manifest_target, stand_in_line, stand_ins_of
from sparkbuild.wheelhouse.overrides import target_environment
from sparkbuild.wheelhouse.pylock import PYLOCK_NAME, installable_copy, pylock_disagreements
from sparkbuild.wheelhouse.standards import present_wheels
from sparkbuild.wheelhouse.verify import verify_files

if TYPE_CHECKING:
    from sparkbuild.wheelhouse.lock import LockedRequirement
    from sparkbuild.wheelhouse.verify import CheckedFiles

PIP_TIMEOUT = 3600.0
_ISOLATED = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
             "PYTHONPATH": "", "PYTHONNOUSERSITE": "1"}
"""The venv's pip, pip check and import see the venv alone: with the caller's PYTHONPATH
(sparkbuild's own site, holding setuptools), pip takes setuptools for installed and leaves
it out of the venv, pip check passes on it, and vLLM's first start, without that
PYTHONPATH, fails on ``import setuptools``.  An empty
PYTHONPATH is an unset one for Python."""
INSTALL_FROM = {"lock": LOCK_NAME, "pylock": PYLOCK_NAME}
"""``install --from``: the file each choice installs from."""


@dataclass
class InstallResult(Record):
    json_order: ClassVar[tuple[str, ...]] = ("venv", "created", "installed", "stand_ins")

    venv: Path
    created: bool
    installed: list[str]
    imported: list[str]
    pip_check: PipCheck = field(default_factory=PipCheck)
    notes: list[str] = field(default_factory=list, metadata=as_json(skip=True))
    fingerprint: str = ""
    """The wheelhouse's fingerprint (sparkbuild.node.fingerprint), recorded in the venv."""
    origin: str = field(default="", metadata=as_json("wheelhouse"))
    installed_from: str = LOCK_NAME
    """The wheelhouse file the projects were installed from (requirements.lock, pylock.toml)."""
    profile: NodeProfile | None = None
    """The node profile written into the venv (sparkbuild.node.profile)."""
    stand_ins: list[dict[str, str]] = field(default_factory=list)
    """Sources the wheelhouse's build took from another commit than the tree's pin."""

    def summary(self) -> list[str]:
        made = "created" if self.created else "existing"
        tool = "uv" if self.installed_from == PYLOCK_NAME else "pip"
        return [f"installed {len(self.installed)} projects into {made} venv {self.venv} "
                f"from {self.installed_from} ({tool})",
                *self.pip_check.summary(),
                f"  imported: {', '.join(self.imported) or 'nothing to import'}",
                *(self.profile.summary() if self.profile else []),
                *[f"  {escaped(stand_in_line(s))}" for s in self.stand_ins],
                f"wheelhouse fingerprint: {self.fingerprint or 'not recorded'}"]

    @property
    def error(self) -> SparkbuildError | None:
        return self.pip_check.error


def python_for(version: str | None) -> str:
    """An interpreter of the wheelhouse's Python version: this one, or ``pythonX.Y``."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not version or version == here:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        raise ToolchainError(f"the wheelhouse is for Python {version}; python{version} is not "
                             "on PATH", hint=f"install Python {version} or pass a venv of it")
    return found


ACTIVATE_UNSAFE = frozenset('$`"\\')
"""What ``bin/activate`` must not get in the venv's path (with any control character)."""


def check_venv_path(venv: Path) -> Path:
    """``--venv``, or :class:`UsageError` naming why not: too long for the system, or a
    character that ``bin/activate`` would run (CVE-2024-9287) or that would break a line."""
    usable_path(venv, "--venv")
    text = str(venv.absolute())
    found = [repr(c) for c in sorted(set(text) & ACTIVATE_UNSAFE)] + unsafe_characters(text)
    if not found:
        _refuse_under_file(venv.absolute())
        return venv
    raise UsageError(
        f"--venv holds {', '.join(found)}: bin/activate writes the venv's path into shell "
        "code, and an interpreter with CVE-2024-9287 (CPython before 3.11.11, 3.12.8 and "
        "3.13.1) runs $(...) and backticks there; a control character breaks the profile's "
        "lines", where=shown(text),
        hint='choose a venv path without $, `, ", \\ or control characters')


def _refuse_under_file(venv: Path) -> None:
    """:class:`UsageError` when what lies nearest above ``venv`` is not a directory (a file,
    a link to one or to nothing): no venv can be made under it."""
    for parent in venv.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                what = "a symbolic link" if parent.is_symlink() else "a file"
                raise UsageError(f"--venv lies under {shown(str(parent))}, which is {what}, "
                                 "not a directory: no venv can be made there",
                                 where=shown(str(venv)),
                                 hint="choose a venv path under a directory")
            return


def install_lock(venv: Path) -> CacheLock:
    """The lock of installs into ``venv``, beside it: its name is a hash of the venv's."""
    digest = hashlib.sha256(os.fsencode(venv.name)).hexdigest()[:12]
    return CacheLock(venv.parent / f".sparkbuild-install-{digest}.lock")


def refuse_foreign(venv: Path) -> None:
    """:class:`DestinationError` unless ``venv`` is a venv, an empty directory or absent
    (before anything is written there)."""
    if venv_python(venv).exists() or not (venv.exists() or venv.is_symlink()):
        return
    inside = [p for p in venv.iterdir() if p.name != INSTALLING_MARK] if venv.is_dir() else []
    if venv.is_symlink() or not venv.is_dir() or inside:
        raise DestinationError("the path is neither a venv nor an empty directory",
                               where=str(venv), hint="choose a new --venv path")


def ensure_venv(venv: Path, version: str | None) -> bool:
    """Create ``venv`` unless it is one already; True when it was created."""
    if venv_python(venv).exists():
        return False
    refuse_foreign(venv)
    step(f"creating the venv {venv}")
    run([python_for(version), "-m", "venv", venv], timeout=PIP_TIMEOUT)
    return True


def _interrupted(venv: Path) -> bool:
    """Whether an install into ``venv`` was cut short (its mark is there; the lock is held,
    so that install is gone).  A venv it created is emptied; True: one that existed before
    it is reinstalled file for file."""
    mark = venv / INSTALLING_MARK
    if not mark.is_file() or mark.is_symlink():
        return False
    created = mark.read_text(encoding="utf-8", errors="replace").strip() == "created"
    info(f"an install into {venv} did not finish: "
         + ("making the venv anew" if created else "reinstalling every file"))
    if created:
        _remove_new_venv(venv, existed=True)
    return not created


def _remove_new_venv(venv: Path, existed: bool) -> None:
    """Remove what this run put at ``venv``; an empty directory that was there stays."""
    if not existed:
        shutil.rmtree(venv, ignore_errors=True)
    elif venv.is_dir():
        for child in venv.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def import_names(wheel: Path) -> list[str]:
    """The top-level modules a wheel installs: top_level.txt, else its file list."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = [n for n in names if n.count("/") == 1 and
                     n.endswith(".dist-info/top_level.txt")]
        if top_level:
            text = read_text_member(archive, top_level[0], str(wheel))
            return sorted({line.strip() for line in text.splitlines() if line.strip()})
    found = set()
    for name in names:
        head, _, rest = name.partition("/")
        if head.endswith((".dist-info", ".data")):
            continue
        if rest == "__init__.py":
            found.add(head)
        elif not rest and head.endswith((".py", ".so")):
            found.add(head.split(".", 1)[0])
    return sorted(found)


def built_wheels(checked: CheckedFiles) -> list[Path]:
    """The wheels this build made, as verify decides them from the files."""
    return [checked.directory / file for file in checked.built]


def _pip(python: Path, *args: str | os.PathLike[str]) -> str:
    return run([python, "-m", "pip", "--isolated", *args], env=_ISOLATED,
               timeout=PIP_TIMEOUT).output


def _uv_pylock(python: Path, pylock_text: str, *, reinstall: bool = False) -> None:
    """``uv pip install --offline -r pylock.toml``: the checked lock's files by path (a copy,
    :func:`checked_pylock`), hashes checked."""
    with tempfile.TemporaryDirectory(prefix="sparkbuild-pylock-") as scratch:
        pylock = Path(scratch) / PYLOCK_NAME
        pylock.write_text(pylock_text, encoding="utf-8")
        run([find_uv(), "pip", "install", "--offline", "--no-cache", "--no-config",
             "--preview-features", "pylock", *(["--reinstall"] if reinstall else []),
             "--python", python, "-r", pylock],
            env={**_ISOLATED, "UV_NO_PROGRESS": "1", "UV_PYTHON_DOWNLOADS": "never"},
            timeout=PIP_TIMEOUT)


def checked_pylock(checked: CheckedFiles) -> str:
    """``pylock.toml`` as uv gets it, or :class:`VerifyError` before uv runs: its bytes the
    ones verify hashed, every entry a wheel of the wheelhouse that verify checked (its file
    beside the lock, its name, version and sha256 the manifest's; no URL, no path elsewhere,
    no sdist, archive, VCS or directory) and every wheel of the wheelhouse in it; each path
    is then made absolute in a copy (:func:`sparkbuild.wheelhouse.pylock.installable_copy`)."""
    directory = checked.directory
    hint = ("nothing was installed: install from requirements.lock (leave out --from "
            "pylock), or rebuild the wheelhouse with `sparkbuild wheel`")
    if PYLOCK_NAME not in checked.actual:
        raise VerifyError("the wheelhouse has no pylock.toml", where=str(directory),
                          hint="a wheelhouse written before sparkbuild wrote one: install "
                          "from its requirements.lock (leave out --from pylock)")
    raw = (directory / PYLOCK_NAME).read_bytes()
    if sha256_bytes(raw) != checked.actual[PYLOCK_NAME]:
        raise VerifyError("pylock.toml changed after it was verified", hint=hint,
                          where=str(directory / PYLOCK_NAME))
    text = raw.decode("utf-8", "replace")
    target = manifest_target(checked.manifest)
    env = target_environment(target.platform, target.python) if target.declared else None
    wheels = {str(w["file"]) for w in checked.manifest["wheels"]}
    present = {file: entry for file, entry in present_wheels(checked.actual).items()
               if file in wheels}
    problems = pylock_disagreements(directory, present, env, text)
    if problems:
        named = "; ".join(f"{shown(file)} ({escaped(problem)})" for file, problem in problems)
        raise VerifyError(f"pylock.toml is not the wheelhouse's: {len(problems)} problem(s): "
                          f"{named}", where=str(directory / PYLOCK_NAME), hint=hint)
    return installable_copy(text, directory)


def verified_wheelhouse(directory: Path) -> CheckedFiles:
    """The wheelhouse checked exactly as ``verify`` checks its files (one piece of code:
    :func:`sparkbuild.wheelhouse.verify.verify_files`), or :class:`VerifyError`."""
    checked = verify_files(directory)
    error = checked.error(hint="nothing was installed: copy the wheelhouse again (then "
                          "`sparkbuild verify DIR`), or rebuild it with `sparkbuild wheel`")
    if error is not None:
        raise error
    if checked.lock_bytes is None:
        raise VerifyError("the wheelhouse has no requirements.lock", where=str(directory))
    return checked


def install_wheelhouse(directory: Path, venv: Path, *, origin: str | None = None,
                       source: str = "lock") -> InstallResult:
    """Install everything ``directory/requirements.lock`` names into ``venv``, offline.

    The whole wheelhouse is verified against its manifest first; pip then reads the lock's
    verified bytes (a copy, not the file), and the fingerprint recorded is that of the
    manifest bytes that were verified.  ``origin``: where it came from (a URL,
    :func:`sparkbuild.node.remote.install_from_url`).  ``source`` ``"pylock"``: from
    ``pylock.toml`` through uv instead (verified with the rest; a local wheelhouse).
    """
    if source not in INSTALL_FROM:
        raise UsageError(f"unknown install source {source!r}",
                         hint=f"--from takes {' or '.join(INSTALL_FROM)}")
    venv = check_venv_path(venv).absolute()
    directory = usable_path(directory, "the wheelhouse path").resolve()
    checked = verified_wheelhouse(directory)
    manifest = checked.manifest
    assert checked.lock_bytes is not None
    locked = parse_lock(checked.lock_bytes.decode("utf-8"), where=str(directory / LOCK_NAME))
    pylock_text = checked_pylock(checked) if source == "pylock" else None
    for item in locked:
        check_known_bad(item.name, item.version, what="wheelhouse file",
                        where=str(directory / LOCK_NAME))
    refuse_unstartable(built_wheels(checked), start_modules_of(manifest))
    refuse_foreign(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(venv.parent, os.W_OK):
        raise UsageError("the directory of --venv is not writable: install keeps its lock "
                         "there, beside the venv", where=str(venv.parent),
                         hint="choose a venv in a directory this user may write")
    with install_lock(venv).held():  # a killed install's children are stopped here
        return _install_into(venv, directory, checked, locked, pylock_text, origin)


def _install_into(venv: Path, directory: Path, checked: CheckedFiles,
                  locked: list[LockedRequirement], pylock_text: str | None,
                  origin: str | None) -> InstallResult:
    """The install itself, under the venv's lock (see :func:`install_wheelhouse`);
    ``pylock_text``: the checked pylock.toml, uv installs from it (None: pip, the lock)."""
    manifest = checked.manifest
    assert checked.lock_bytes is not None
    lock_text = checked.lock_bytes.decode("utf-8")
    reinstall = _interrupted(venv)
    refuse_foreign(venv)
    existed, created = venv.exists(), False
    fresh = not existed or (venv.is_dir() and not venv.is_symlink() and not any(venv.iterdir()))
    try:  # a venv this run made goes again if the install fails: no half-made venv stays
        venv.mkdir(exist_ok=True)
        (venv / INSTALLING_MARK).write_text("created\n" if fresh else "existing\n",
                                            encoding="utf-8")
        created = ensure_venv(venv, manifest_target(manifest).python)
        python = venv_python(venv)
        used = PYLOCK_NAME if pylock_text is not None else LOCK_NAME
        step(f"installing {len(locked)} projects from {origin or directory}/{used} (no index, "
             "hashes required)")
        if pylock_text is not None:
            _uv_pylock(python, pylock_text, reinstall=reinstall)
        else:
            with tempfile.TemporaryDirectory(prefix="sparkbuild-lock-") as scratch:
                lock = Path(scratch) / LOCK_NAME
                lock.write_text(lock_text, encoding="utf-8")
                _pip(python, "install", "--no-index", "--find-links", str(directory),
                     "--require-hashes", "--only-binary", ":all:", "--no-cache-dir", "--no-deps",
                     *(["--force-reinstall"] if reinstall else []), "--requirement", lock)
        check = judge_pip_check(run([python, "-m", "pip", "--isolated", "check"], env=_ISOLATED,
                                    timeout=PIP_TIMEOUT, check=False).output, manifest)
        installed = [f"{r.name}=={r.version}" for r in locked]
        if not check.ok:  # a failed pip check is the error: nothing is imported or recorded
            if fresh:
                _remove_new_venv(venv, existed)
            return InstallResult(venv, created, installed, [], check, installed_from=used)
        modules = [m for wheel in built_wheels(checked) for m in import_names(wheel)]
        if modules:
            with tempfile.TemporaryDirectory() as elsewhere:  # not the cwd's copy of the source
                run([python, "-c", "; ".join(f"import {m}" for m in modules)], cwd=elsewhere,
                    env=_ISOLATED, timeout=PIP_TIMEOUT)
        profile = write_profile(resolve_profile(profile_from_manifest(manifest), venv), venv)
        step(f"node profile written: {profile.profile_sh} (sourced by {venv}/bin/activate) "
             f"and {profile.env_file} (systemd's EnvironmentFile=)")
        recorded = record_installation(venv, checked.manifest_bytes, origin or str(directory),
                                       [entry.to_dict() for entry in profile.entries])
    except BaseException:
        if fresh:  # all that is there now is this run's
            _remove_new_venv(venv, existed)
        raise
    (venv / INSTALLING_MARK).unlink()
    step(f"wheelhouse fingerprint: {recorded.fingerprint} (recorded in the venv)")
    return InstallResult(venv, created, installed, modules, check,
                         fingerprint=recorded.fingerprint, origin=recorded.origin,
                         installed_from=used, profile=profile, stand_ins=stand_ins_of(manifest))
