"""Hostile cases of what runs on a node.

The profile, ``--venv``, ``verify --installed``, a built wheel's inner structure and the
manifest.  Each case is a :class:`~corpus.cases.Case`; :data:`CASES` joins the corpus in
:func:`corpus.cases._all_cases`.

A wheelhouse here is *resealed*: whatever was done to a wheel or the manifest, the lock
and the manifest vouch for the result, so the wheelhouse's hashes agree and only a look
inside (or at the venv) can refuse it.  Each case names, in a comment, the root cause it
stands for.
"""

from __future__ import annotations

import contextlib
import json
import os
import py_compile
import shutil
import signal
import stat
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from corpus.cases import CLI, VERIFY, Case, Invocation, _installed, _no_venv, _site
from sparkbuild.errors import RecipeError, UsageError, VerifyError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

INSTALL = ("sparkbuild.node.install",)
INSTALLED = ("sparkbuild.node.installed_check",)
DOCTOR_NODE = ("sparkbuild.node.preflight",)
PATCH = ("sparkbuild.patches.engine",)
PWNED = "pwned-by-corpus-node"
"""A file a hostile payload would create: it must never appear."""
DIST = f"{b.PACKAGE}-{b.VERSION}.dist-info"
WHEEL_NAME = f"{b.PACKAGE}-{b.VERSION}-py3-none-any.whl"
METADATA = f"Metadata-Version: 2.1\nName: {b.PACKAGE}\nVersion: {b.VERSION}\n".encode()
WHEEL_FILE = b"Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
ISOLATED = {"PIP_CONFIG_FILE": os.devnull}


# -- resealed wheelhouses -------------------------------------------------------------------


def _members(*extra: tuple[str, bytes], metadata: bytes = METADATA
             ) -> list[tuple[str, bytes]]:
    """The demo wheel's members (its module, METADATA, WHEEL) and ``extra``, in order."""
    return [(f"{b.PACKAGE}/__init__.py", b"VALUE = 1\n"), *extra,
            (f"{DIST}/METADATA", metadata), (f"{DIST}/WHEEL", WHEEL_FILE)]


def _record(members: Sequence[tuple[str, bytes]], *, omit: Sequence[str] = (),
            absent: Sequence[str] = (), lie: Sequence[str] = ()) -> bytes:
    """RECORD of ``members`` (each name once): ``omit`` left out, ``absent`` listed though no
    member has it, ``lie`` listed with the hash of other bytes."""
    rows = [_row(name, b"other bytes" if name in lie else data)
            for name, data in dict(members).items() if name not in omit]
    rows += [_row(name, b"") for name in absent]
    return ("".join(rows) + f"{DIST}/RECORD,,\n").encode()


def _row(name: str, data: bytes) -> str:
    return f"{name},sha256={b._record_digest(data)},{len(data)}\n"


def _seal(out: Path, *, role: str = "built", pylock: bool = False,
          edit: Callable[[dict[str, object]], None] | None = None) -> Path:
    """Lock and manifest that vouch for every wheel in ``out`` (``pylock``: a pylock.toml
    too; ``edit``: changes the manifest before it is written)."""
    from sparkbuild.wheelhouse.pylock import PylockWheel, write_pylock

    wheels = sorted(out.glob("*.whl"))
    lock = out / "requirements.lock"
    lock.write_text("".join(f"{b.PACKAGE}=={b.VERSION} --hash=sha256:{b.sha256_of(w)}\n"
                            for w in wheels), encoding="utf-8")
    files = {lock.name: b.sha256_of(lock)}
    if pylock:
        env = {"sys_platform": sys.platform, "platform_machine": os.uname().machine,
               "python_version": f"{sys.version_info.major}.{sys.version_info.minor}"}
        written = write_pylock(out, [PylockWheel(b.PACKAGE, b.VERSION, w.name,
                                                 w.stat().st_size, b.sha256_of(w))
                                     for w in wheels], env=env, python=env["python_version"],
                               package=b.PACKAGE)
        files[written.name] = b.sha256_of(written)
    manifest: dict[str, object] = {
        "schema": 1, "target": {"cuda_archs": ["12.1a"]},
        "wheels": [{"file": w.name, "name": b.PACKAGE, "version": b.VERSION,
                    "sha256": b.sha256_of(w), "size": w.stat().st_size, "role": role}
                   for w in wheels],
        "files": files}
    if edit is not None:
        edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def _crafted(work: Path, members: Sequence[tuple[str, bytes]], record: bytes | None = None,
             *, role: str = "built", symlinks: Sequence[str] = (), pylock: bool = False
             ) -> Path:
    """A resealed wheelhouse whose one wheel holds exactly ``members`` (duplicates kept, in
    order) and ``record`` (default: a true RECORD of them)."""
    out = work / "wheelhouse"
    out.mkdir(parents=True)
    with warnings.catch_warnings(), zipfile.ZipFile(out / WHEEL_NAME, "w") as archive:
        warnings.simplefilter("ignore")  # "Duplicate name": the point of some cases
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            if name in symlinks:
                info.create_system = 3
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data)
        archive.writestr(f"{DIST}/RECORD", record if record is not None else _record(members))
    return _seal(out, role=role, pylock=pylock)


def _verify(make: Callable[[Path], Path]) -> Callable[[Path], Invocation]:
    return lambda work: Invocation(["verify", str(make(work))])


def _install(make: Callable[[Path], Path], *extra: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        venv = work / "venv"
        return Invocation(["install", str(make(work)), "--venv", str(venv), *extra],
                          env=dict(ISOLATED), after=_nothing_ran(work, _no_venv(venv)))

    return build


def _nothing_ran(work: Path, also: Callable[[], None]) -> Callable[[], None]:
    def check() -> None:
        also()
        ran = [p for p in work.rglob(f"*{PWNED}*") if not p.name.endswith(".whl")]
        assert not ran, f"a hostile payload ran: {ran}"

    return check


def _payload(work: Path) -> bytes:
    """Python that leaves a file named PWNED in ``work`` when it runs."""
    return f"open({str(work / PWNED)!r}, 'w').close()\n".encode()


def _entry_points(section: str, name: str) -> tuple[str, bytes]:
    return (f"{DIST}/entry_points.txt", f"[{section}]\n{name} = demo:main\n".encode())


# Root cause 3: the structure of a wheel, each way in; M(work) -> members of the wheel.
STRUCTURE: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "duplicate-entry": ("zip entries are named demo/__init__.py", lambda w: _crafted(
        w, [*_members(), (f"{b.PACKAGE}/__init__.py", _payload(w))])),
    "record-omits-member": ("demo/extra.py is not listed in RECORD", lambda w: _crafted(
        w, m := _members((f"{b.PACKAGE}/extra.py", _payload(w))),
        _record(m, omit=[f"{b.PACKAGE}/extra.py"]))),
    "record-lists-absent": ("RECORD lists demo/gone.py, which the wheel does not hold",
                            lambda w: _crafted(w, m := _members(),
                                               _record(m, absent=[f"{b.PACKAGE}/gone.py"]))),
    "dotdot-member": ("climbs out with ..", lambda w: _crafted(
        w, _members((f"../../{PWNED}.py", b"")))),
    "absolute-member": ("an absolute name", lambda w: _crafted(
        w, _members((f"/tmp/{PWNED}.py", b"")))),
    "bidi-member": ("U+202E", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}/\u202eyp.txt", b"")))),
    "newline-member": ("U+000A", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}/x\nRECORD", b"")))),
    "backslash-member": ("a backslash in its name", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}\\..\\..\\{PWNED}.py", b"")))),
    "pth-member": ("a .pth file: the interpreter runs it at every start", lambda w: _crafted(
        w, _members(("zz-corpus.pth", b"import os; " + _payload(w))))),
    "data-pth-member": ("a .pth file", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}-{b.VERSION}.data/purelib/zz.pth", _payload(w))))),
    "sitecustomize-member": ("a module the interpreter imports at every start",
                             lambda w: _crafted(w, _members(("sitecustomize.py", _payload(w))),
                                                role="pin")),
    "console-script-python3": ("would replace the venv's own bin/python3", lambda w: _crafted(
        w, _members(_entry_points("console_scripts", "python3")))),
    "console-script-python-version": ("bin/python3.11", lambda w: _crafted(
        w, _members(_entry_points("console_scripts", "python3.11")))),
    "gui-script-pip": ("would replace the venv's own bin/pip", lambda w: _crafted(
        w, _members(_entry_points("gui_scripts", "pip")))),
    "console-script-climbs": ("not a plain file name for bin/", lambda w: _crafted(
        w, _members(_entry_points("console_scripts", f"../../{PWNED}")))),
    "data-script-activate": ("would replace the venv's own bin/activate", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}-{b.VERSION}.data/scripts/activate", b"")))),
    "data-pyvenv-cfg": ("would replace the venv's own pyvenv.cfg", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}-{b.VERSION}.data/data/pyvenv.cfg",
                     b"include-system-site-packages = true\n")))),
    "symlink-member": ("a symbolic link member", lambda w: _crafted(
        w, _members((f"{b.PACKAGE}/etc", b"/etc")), symlinks=[f"{b.PACKAGE}/etc"])),
    "metadata-version-lies": ("its METADATA says demo 6.6.6", lambda w: _crafted(
        w, _members(metadata=METADATA.replace(b"1.0", b"6.6.6")))),
    "record-hash-lies": ("demo/__init__.py is not the file its RECORD row describes",
                         lambda w: _crafted(w, m := _members(),
                                            _record(m, lie=[f"{b.PACKAGE}/__init__.py"]))),
    "two-dist-infos": ("2 .dist-info directories", lambda w: _crafted(
        w, _members(("other-1.0.dist-info/METADATA", METADATA)))),
}
STRUCTURE_INSTALLED = ("duplicate-entry", "record-omits-member", "dotdot-member",
                       "pth-member", "console-script-python3", "newline-member")
"""The ones also run through ``install``: the probe's, which pip ran or let through."""


# -- root cause 7: the manifest's wheels against the files --------------------------------


def _manifest_edit(edit: Callable[[dict[str, object]], None]) -> Callable[[Path], Path]:
    def make(work: Path) -> Path:
        out = work / "wheelhouse"
        b.pure_wheel(out)
        return _seal(out, edit=edit)

    return make


def _listed_twice(manifest: dict[str, object]) -> None:
    wheels = manifest["wheels"]
    assert isinstance(wheels, list)
    wheels.append(dict(wheels[0]))


# -- root cause 1: the profile, from the recipe and from the manifest ---------------------


def _recipe_env(table: str, line: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        tree = b.write_tree(work / "tree", b.source_files())
        b.series_dir(work / "recipe" / "patches", {"0001-arch.diff": b.kernel_patch()})
        text = b.recipe_text("unused", "patches/series") + f"\n[{table}]\n{line}\n"
        recipe = b.write_recipe(work / "recipe", text)
        return Invocation(["patch", "status", str(tree), "--recipe", str(recipe)],
                          after=lambda: _absent(work / PWNED))

    return build


def _absent(path: Path) -> None:
    assert not path.exists(), f"{path} was made: a payload ran"


def _profiled(entry: dict[str, object]) -> Callable[[Path], Path]:
    """A wheelhouse whose manifest records a node profile with ``entry`` in it."""
    def edit(manifest: dict[str, object]) -> None:
        manifest["build"] = {"archs": ["12.1a"], "node_profile": [
            {"key": "VLLM_USE_DEEP_GEMM", "value": "0", "reason": "r", "source": "s"},
            {"reason": "set by the recipe", "source": "recipe corpus.toml", **entry}]}

    return _manifest_edit(edit)


SHELL_VALUE = 'a "b" $HOME `id` \\ c; x=1'


def _profile_round_trip(work: Path) -> Invocation:
    """A value full of shell and systemd syntax: written so that bash reading profile.sh
    (through activate) and node.env (a systemd EnvironmentFile) both get it back as is."""
    out = _profiled({"key": "CORPUS_VALUE", "value": SHELL_VALUE})(work)
    venv = work / "venv"

    def same_value() -> None:
        for script in (f". {venv}/bin/activate", f"set -a; . {venv}/sparkbuild/node.env"):
            got = subprocess.run(["bash", "-c", f'{script} && printf %s "$CORPUS_VALUE"'],
                                 capture_output=True, text=True, check=True,
                                 env={"PATH": "/usr/bin:/bin"}, cwd=work).stdout
            assert got == SHELL_VALUE, f"{script} gives {got!r}"

    return Invocation(["install", str(out), "--venv", str(venv)], env=dict(ISOLATED),
                      after=same_value)


# -- root cause 2: verify --installed ----------------------------------------------------


def _installed_case(change: Callable[[Path, Path], None], *, wheelhouse: bool = True
                    ) -> Callable[[Path], Invocation]:
    """The template venv, ``change(work, venv)`` done to it; verify --installed with its
    wheelhouse, or (``wheelhouse`` False) as after an install over HTTP: not at hand."""
    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        house, venv = _installed(work)
        change(work, venv)
        if not wheelhouse:
            record = venv / "sparkbuild-wheelhouse.json"
            state = json.loads(record.read_text())
            state["wheelhouse"] = "http://127.0.0.1:9/wheelhouse/"
            record.write_text(json.dumps(state))
            return Invocation(["verify", "--installed", str(venv)])
        return Invocation(["verify", "--installed", str(venv), str(house)])

    return build


def _pyc(venv: Path) -> Path:
    (pyc,) = (_site(venv) / b.PACKAGE / "__pycache__").glob("__init__.*.pyc")
    return pyc


def _other_bytecode(work: Path, venv: Path) -> None:
    """The module's bytecode replaced by other code, its header (mtime, size) kept."""
    pyc = _pyc(venv)
    other = work / "other.py"
    other.write_text("print('not the checked source')\n")
    compiled = work / "other.pyc"
    py_compile.compile(str(other), cfile=str(compiled), doraise=True)
    pyc.write_bytes(pyc.read_bytes()[:16] + compiled.read_bytes()[16:])


def _system_site(work: Path, venv: Path) -> None:
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace("include-system-site-packages = false",
                                           "include-system-site-packages = true"))


def _interpreter_wrapper(work: Path, venv: Path) -> None:
    """Each bin/python* that points outside the venv now points at a wrapper."""
    wrapper = work / "wrapper"
    wrapper.write_text(f"#!/bin/sh\ntouch {work / PWNED}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    for link in (venv / "bin").glob("python*"):
        if link.is_symlink() and link.readlink().is_absolute():
            link.unlink()
            link.symlink_to(wrapper)


def _interpreter_script(work: Path, venv: Path) -> None:
    python = venv / "bin" / "python"
    python.unlink()
    python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)


def _appended(relative: str, text: str) -> Callable[[Path, Path], None]:
    def change(work: Path, venv: Path) -> None:
        path = venv / relative
        path.write_text(path.read_text() + text)

    return change


def _dropped(relative: str, text: str = "import os\n") -> Callable[[Path, Path], None]:
    def change(work: Path, venv: Path) -> None:
        path = _site(venv) / relative if not relative.startswith("bin/") else venv / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return change


def _site_linked(work: Path, venv: Path) -> None:
    site = _site(venv)
    elsewhere = work / "elsewhere-site-packages"
    shutil.move(site, elsewhere)
    site.symlink_to(elsewhere, target_is_directory=True)


def _bin_linked(work: Path, venv: Path) -> None:
    """bin/ moved behind a link, a script added where the link leads."""
    elsewhere = work / "elsewhere-bin"
    shutil.move(venv / "bin", elsewhere)
    (venv / "bin").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "vllm").write_text("#!/bin/sh\n")


# -- root causes 9, 11b, 17: doctor --node -----------------------------------------------


def _node_venv(work: Path, record: str | None = None, node_env: str = "") -> Path:
    """A directory that looks like an installed venv to doctor (pyvenv.cfg, a record)."""
    venv = work / "venv"
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    if record is not None:
        (venv / "sparkbuild-wheelhouse.json").write_text(record)
    if node_env:
        (venv / "sparkbuild").mkdir()
        (venv / "sparkbuild" / "node.env").write_text(node_env)
    return venv


def _record_with(manifest: object) -> str:
    return json.dumps({"fingerprint": "sha256:x", "wheelhouse": "w", "distributions": {},
                       "manifest": json.dumps(manifest)})


GOOD_RECORD = _record_with({"build": {"archs": ["12.1a"]}, "toolchain": {"nvcc": "13.0.48"}})
DOCTOR_ENV = {"TRITON_PTXAS_PATH": "", "NCCL_IB_GID_INDEX": ""}


def _doctor(record: str | None = None, node_env: str = "", env: dict[str, str] | None = None
            ) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        venv = _node_venv(work, record, node_env)
        given = {**DOCTOR_ENV, "HOME": str(work), **(env or {})}
        return Invocation(["doctor", "--node", "--venv", str(venv)], env=given,
                          unset=() if "NCCL_IB_HCA" in given else ("NCCL_IB_HCA",))

    return build


# -- root cause 11c and 4: paths ---------------------------------------------------------

LONG = "x" * 300


def _venv_named(name: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        out = b.node_wheelhouse(work / "wheelhouse")

        def no_venv() -> None:  # by listing: a stat of the name itself may be refused
            names = sorted(p.name for p in work.iterdir())
            assert names == ["wheelhouse"], names

        return Invocation(["install", str(out), "--venv", str(work / name)],
                          env=dict(ISOLATED), after=_nothing_ran(work, no_venv))

    return build


# -- root cause 15: an install killed with SIGKILL ----------------------------------------

FAKE_PYTHON = """#!/bin/sh
# python3.99 for the corpus: the first `-m venv` starts a venv, records its pid, and hangs
# (the install is killed then); any later call is this machine's python
if [ "$2" = "venv" ] && [ ! -e {flag} ]; then
  touch {flag}
  {python} -m venv --without-pip "$3"
  echo $$ > {pids}
  exec sleep 600
fi
exec {python} "$@"
"""


def _killed_install(work: Path) -> Invocation:
    """``install`` killed with SIGKILL while ``python -m venv`` runs: that stays running
    (its own process group), the venv is half made (no pip).  Then the same install again."""
    out = _seal(_wheel_dir(work), edit=lambda m: m.update(target={"cuda_archs": ["12.1a"],
                                                                    "python": "3.99"}))
    fake = work / "bin" / "python3.99"
    fake.parent.mkdir()
    pids = work / "left-running.pid"
    fake.write_text(FAKE_PYTHON.format(flag=work / "venv-started", python=sys.executable,
                                       pids=pids))
    fake.chmod(0o755)
    venv = work / "venv"
    env = {**os.environ, **ISOLATED, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    first = subprocess.Popen([*CLI, "install", str(out), "--venv", str(venv)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not pids.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.1)
    first.kill()
    first.wait()
    assert pids.exists(), "the first install never reached python -m venv"
    left = int(pids.read_text())

    def recovered() -> None:
        try:
            assert not _alive(left), f"python -m venv of the killed install (pid {left}) " \
                "still runs"
            check = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"],
                                   capture_output=True, check=False)
            assert check.returncode == 0, "the venv the killed install left has no pip"
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(left), signal.SIGKILL)

    return Invocation(["install", str(out), "--venv", str(venv)],
                      env={**ISOLATED, "PATH": env["PATH"]}, after=recovered)


def _wheel_dir(work: Path) -> Path:
    out = work / "wheelhouse"
    b.pure_wheel(out)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- root cause 8: the SBOM's agreement with the manifest ---------------------------------


def _sbom_case(tamper: Callable[[dict[str, object]], None]) -> Callable[[Path], Invocation]:
    """A wheelhouse with its SBOM written from what its manifest says; the SBOM changed by
    ``tamper`` and resealed (the manifest vouches for the changed bytes)."""
    from sparkbuild import __version__
    from sparkbuild.wheelhouse.sbom import BuildFacts, SbomWheel, write_wheelhouse_sbom

    def build(work: Path) -> Invocation:
        out = _wheel_dir(work)
        patches = [{"name": "0001-arch", "sha256": "a" * 64, "status": "applied"}]
        source = {"kind": "git", "url": "file:///src/demo.git", "ref": "main",
                  "commit": "c" * 40}
        toolchain = {"nvcc": "13.0.48", "torch": "2.13.0", "gcc": "14.2.0"}

        def describe(manifest: dict[str, object]) -> None:
            manifest.update(generator=f"sparkbuild {__version__}",
                            recipe={"name": "corpus", "package": b.PACKAGE},
                            local_label="sm121a.0", source_date_epoch=315532800,
                            source=source, patches=patches, toolchain=toolchain)
            wheel = b.first_wheel(manifest)
            facts = BuildFacts(b.PACKAGE, "corpus", 315532800, source=source,
                               patches=patches, toolchain=toolchain, label="sm121a.0")
            sbom = write_wheelhouse_sbom(out, facts, [SbomWheel(
                b.PACKAGE, b.VERSION, "built", str(wheel["file"]), str(wheel["sha256"]))])
            data = json.loads(sbom.read_text())
            tamper(data)
            sbom.write_text(json.dumps(data, indent=2))
            files = manifest["files"]
            assert isinstance(files, dict)
            files[sbom.name] = b.sha256_of(sbom)

        _seal(out, edit=describe)
        return Invocation(["verify", str(out)])

    return build


def _component(data: dict[str, object]) -> dict[str, object]:
    components = data["components"]
    assert isinstance(components, list)
    return components[0]  # type: ignore[no-any-return]


def _strip_pedigree(data: dict[str, object]) -> None:
    _component(data).pop("pedigree")


def _drop_patch_entry(data: dict[str, object]) -> None:
    pedigree = _component(data)["pedigree"]
    assert isinstance(pedigree, dict)
    pedigree["patches"] = []


def _patch_property(data: dict[str, object]) -> None:
    properties = _component(data)["properties"]
    assert isinstance(properties, list)
    for item in properties:
        if item["name"].endswith(":sha256"):
            item["value"] = "b" * 64


def _strip_tools(data: dict[str, object]) -> None:
    metadata = data["metadata"]
    assert isinstance(metadata, dict)
    metadata.pop("tools")


def _rename_purl(data: dict[str, object]) -> None:
    component = _component(data)
    component["purl"] = str(component["purl"]).replace(f"pypi/{b.PACKAGE}@", "pypi/evil@")


# -- root causes 18 and 19: names in output, the manifest's size ----------------------------


def _stray(name: str) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        out = b.node_wheelhouse(work / "wheelhouse")
        (out / name).write_text("stray\n")
        return Invocation(["verify", str(out)])

    return build


def _padded_manifest(command: str) -> Callable[[Path], Invocation]:
    """A true manifest padded to 17 MiB with white space (still valid JSON)."""
    def build(work: Path) -> Invocation:
        out = b.node_wheelhouse(work / "wheelhouse")
        manifest = out / "manifest.json"
        manifest.write_text(manifest.read_text() + " " * (17 << 20))
        if command == "install":
            return Invocation(["install", str(out), "--venv", str(work / "venv")],
                              env=dict(ISOLATED), after=_no_venv(work / "venv"))
        return Invocation(["verify", str(out)])

    return build


SERVED_MIB = 64
"""What the endless server sends of manifest.json before it gives up (no Content-Length)."""


def _served_endless_manifest(work: Path) -> Invocation:
    """A server whose manifest.json never says its length and runs on (64 MiB of white
    space): install from its URL must stop reading at 16 MiB, not fill the disk first."""
    import http.server
    import threading

    class Endless(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()  # HTTP/1.0, no Content-Length: the body runs to the close
            with contextlib.suppress(OSError):
                for _ in range(SERVED_MIB):
                    self.wfile.write(b" " * (1 << 20))

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    venv = work / "venv"

    def stop() -> None:
        server.shutdown()
        server.server_close()
        _no_venv(venv)()
        kept = [p for p in Path(work).rglob("*") if p.is_file()]
        assert not kept, f"the download left {kept}"

    url = f"http://127.0.0.1:{server.server_address[1]}/wheelhouse/"
    return Invocation(["install", url, "--venv", str(venv)], env=dict(ISOLATED), after=stop)


def _manifest_fifo(work: Path) -> Invocation:
    out = b.node_wheelhouse(work / "wheelhouse")
    (out / "manifest.json").unlink()
    os.mkfifo(out / "manifest.json")
    return Invocation(["verify", str(out)])


DEEP = "[" * 100_000 + "]" * 100_000
"""JSON nested deeper than the reader follows (json.loads raises RecursionError)."""


def _deep_manifest(work: Path) -> Invocation:
    out = b.node_wheelhouse(work / "wheelhouse")
    (out / "manifest.json").write_text(DEEP)
    return Invocation(["verify", str(out)])


def _deep_record(work: Path, venv: Path) -> None:
    (venv / "sparkbuild-wheelhouse.json").write_text(DEEP)


def _deep_sbom(work: Path) -> Invocation:
    """The SBOM's components nested deeper than the reader follows, resealed."""
    marker = "CORPUS-DEEP"
    inv = _sbom_case(lambda data: data.update(components=[marker]))(work)
    sbom = Path(inv.args[1]) / "sbom.cdx.json"
    sbom.write_text(sbom.read_text().replace(f'"{marker}"', DEEP))
    manifest = json.loads((sbom.parent / "manifest.json").read_text())
    manifest["files"]["sbom.cdx.json"] = b.sha256_of(sbom)
    (sbom.parent / "manifest.json").write_text(json.dumps(manifest))
    return inv


def _pylock_package_not_table(work: Path) -> Invocation:
    """A pylock.toml whose packages are strings, resealed."""
    out = _crafted(work, _members(), pylock=True)
    (out / "pylock.toml").write_text('lock-version = "1.0"\npackages = ["demo"]\n')
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"]["pylock.toml"] = b.sha256_of(out / "pylock.toml")
    (out / "manifest.json").write_text(json.dumps(manifest))
    return Invocation(["verify", str(out)])


def _sbom_component_not_object(data: dict[str, object]) -> None:
    data["components"] = ["not a component"]


def _installed_pep440(work: Path) -> Invocation:
    """A wheelhouse whose manifest spells demo's version 1.0.0 (PEP 440: 1.0), installed."""
    out = _manifest_edit(lambda m: b.first_wheel(m).update(version="1.0.0"))(work)
    venv = work / "venv"
    subprocess.run([*CLI, "install", str(out), "--venv", str(venv)], check=True,
                   capture_output=True, timeout=300, env={**os.environ, **ISOLATED})
    return Invocation(["verify", "--installed", str(venv)])


CASES: list[Case] = [
    # 1: the node profile, from the recipe (patch status reads it) and from the manifest
    Case("recipe-node-env-key-injection", "profile", RecipeError,
         "is not an environment variable name",
         _recipe_env("node.env", f'"A=1;touch {PWNED};B" = "1"'), PATCH),
    Case("recipe-node-env-key-space", "profile", RecipeError, "'A B'",
         _recipe_env("node.env", '"A B" = "1"'), PATCH),
    Case("recipe-node-env-key-digit-first", "profile", RecipeError,
         "'1X' is not an environment variable name", _recipe_env("node.env", '1X = "1"'),
         PATCH),
    Case("recipe-node-env-value-newline", "profile", RecipeError,
         "the value of X holds U+000A", _recipe_env("node.env",
                                                    'X = "1\\nLD_PRELOAD=/tmp/x.so"'), PATCH),
    Case("recipe-build-env-key-equals", "profile", RecipeError,
         "build.env: 'A=1;B' is not", _recipe_env("build.env", '"A=1;B" = "1"'), PATCH),
    Case("verify-manifest-profile-key-injection", "profile", VerifyError,
         "build.node_profile entry 2", _verify(_profiled(
             {"key": f"A=1;touch {PWNED};B", "value": "1"})), VERIFY),
    Case("install-manifest-profile-key-injection", "profile", VerifyError,
         "is not an environment variable name", _install(_profiled(
             {"key": f"A=1;touch {PWNED};B", "value": "1"})), INSTALL),
    Case("install-manifest-profile-value-newline", "profile", VerifyError,
         "the value of X holds U+000A", _install(_profiled(
             {"key": "X", "value": "1\nLD_PRELOAD=/tmp/x.so"})), INSTALL),
    Case("install-manifest-profile-reason-newline", "profile", VerifyError,
         "the reason or source of X holds U+000A", _install(_profiled(
             {"key": "X", "value": "1", "reason": "r\nLD_PRELOAD=/tmp/x.so"})), INSTALL),
    Case("install-manifest-profile-entry-not-text", "profile", VerifyError,
         "lacks a string key and value", _install(_profiled({"key": "X", "value": 1})),
         INSTALL),
    Case("install-profile-value-read-back-as-is", "profile", None, "node profile",
         _profile_round_trip, INSTALL),
    # 2: verify --installed covers what runs
    Case("verify-installed-bytecode-replaced", "installed", VerifyError,
         "not its checked source __init__.py compiled", _installed_case(_other_bytecode),
         INSTALLED),
    Case("verify-installed-bytecode-replaced-no-wheelhouse", "installed", VerifyError,
         "not its checked source", _installed_case(_other_bytecode, wheelhouse=False),
         INSTALLED),
    Case("verify-installed-system-site-packages", "installed", VerifyError,
         "include-system-site-packages is not false", _installed_case(_system_site),
         INSTALLED),
    Case("verify-installed-system-site-packages-no-wheelhouse", "installed", VerifyError,
         "pyvenv.cfg", _installed_case(_system_site, wheelhouse=False), INSTALLED),
    Case("verify-installed-interpreter-wrapper", "installed", VerifyError,
         "not at an interpreter in pyvenv.cfg's home", _installed_case(_interpreter_wrapper),
         INSTALLED),
    Case("verify-installed-interpreter-script", "installed", VerifyError,
         "bin/python (not a symbolic link to the interpreter",
         _installed_case(_interpreter_script, wheelhouse=False), INSTALLED),
    Case("verify-installed-activate-changed", "installed", VerifyError,
         "bin/activate (changed since the install)",
         _installed_case(_appended("bin/activate", f"touch {PWNED}\n")), INSTALLED),
    Case("verify-installed-activate-fish-changed", "installed", VerifyError,
         "bin/activate.fish (changed since the install)",
         _installed_case(_appended("bin/activate.fish", "\n"), wheelhouse=False), INSTALLED),
    Case("verify-installed-profile-sh-changed", "installed", VerifyError,
         "sparkbuild/profile.sh (changed since the install; not the profile the install "
         "wrote)", _installed_case(_appended("sparkbuild/profile.sh",
                                             "export LD_PRELOAD=/tmp/x.so\n")), INSTALLED),
    Case("verify-installed-node-env-changed", "installed", VerifyError,
         "sparkbuild/node.env (changed since the install; not the profile",
         _installed_case(_appended("sparkbuild/node.env", "LD_PRELOAD=/tmp/x.so\n"),
                         wheelhouse=False), INSTALLED),
    Case("verify-installed-sitecustomize-no-wheelhouse", "installed", VerifyError,
         "sitecustomize.py (no RECORD lists this file)",
         _installed_case(_dropped("sitecustomize.py"), wheelhouse=False), INSTALLED),
    Case("verify-installed-usercustomize-no-wheelhouse", "installed", VerifyError,
         "usercustomize.py (no RECORD lists this file)",
         _installed_case(_dropped("usercustomize.py"), wheelhouse=False), INSTALLED),
    Case("verify-installed-pth-no-wheelhouse", "installed", VerifyError,
         "zz-corpus.pth (no RECORD lists this file)",
         _installed_case(_dropped("zz-corpus.pth"), wheelhouse=False), INSTALLED),
    Case("verify-installed-bin-file-added", "installed", VerifyError,
         "bin/vllm (no wheel of the wheelhouse has this file)",
         _installed_case(_dropped("bin/vllm", "#!/bin/sh\n")), INSTALLED),
    Case("verify-installed-site-packages-symlink", "installed", VerifyError,
         "a symbolic link (to", _installed_case(_site_linked), INSTALLED),
    Case("verify-installed-bin-symlink", "installed", VerifyError,
         "bin (a symbolic link (to", _installed_case(_bin_linked, wheelhouse=False),
         INSTALLED),
    Case("verify-installed-pep440-equal-spelling", "installed", None, "fingerprint",
         _installed_pep440, INSTALLED),
    # 3: a built wheel's structure, in verify and in install
    *[Case(f"verify-wheel-{name}", "wheel", VerifyError, fragment, _verify(make), VERIFY)
      for name, (fragment, make) in STRUCTURE.items()],
    *[Case(f"install-wheel-{name}", "wheel", VerifyError, STRUCTURE[name][0],
           _install(STRUCTURE[name][1]), INSTALL) for name in STRUCTURE_INSTALLED],
    Case("install-pylock-wheel-dotdot-member", "wheel", VerifyError, "climbs out with ..",
         _install(lambda w: _crafted(w, _members((f"../../{PWNED}.py", b"")), pylock=True),
                  "--from", "pylock"), INSTALL),
    # 4: --venv with what activate would run
    *[Case(f"install-venv-{label}", "venv", UsageError, "CVE-2024-9287", _venv_named(name),
           INSTALL)
      for label, name in (("dollar-paren", f"v$(touch {PWNED})"),
                          ("backtick", f"v`touch {PWNED}`"), ("double-quote", 'v"q'),
                          ("backslash", "v\\q"), ("newline", "v\nLD_PRELOAD=x"),
                          ("escape", "v\x1b[2J"))],
    # 7: the manifest's wheels against the files
    Case("verify-manifest-version-disagrees", "manifest", VerifyError,
         "manifest.json says version 9.9.9, the file is version 1.0",
         _verify(_manifest_edit(lambda m: b.first_wheel(m).update(version="9.9.9"))), VERIFY),
    Case("install-manifest-version-disagrees", "manifest", VerifyError,
         "says version 9.9.9", _install(_manifest_edit(
             lambda m: b.first_wheel(m).update(version="9.9.9"))), INSTALL),
    Case("verify-manifest-name-disagrees", "manifest", VerifyError,
         "manifest.json names it iniconfig, the file is demo",
         _verify(_manifest_edit(lambda m: b.first_wheel(m).update(name="iniconfig"))), VERIFY),
    Case("verify-manifest-wheel-listed-twice", "manifest", VerifyError,
         "listed 2 times in manifest.json's wheels", _verify(_manifest_edit(_listed_twice)),
         VERIFY),
    Case("install-manifest-wheel-listed-twice", "manifest", VerifyError, "listed 2 times",
         _install(_manifest_edit(_listed_twice)), INSTALL),
    # 8: the SBOM against the manifest
    Case("verify-sbom-pedigree-stripped", "sbom", VerifyError,
         "its pedigree in sbom.cdx.json is not what the manifest says",
         _sbom_case(_strip_pedigree), VERIFY),
    Case("verify-sbom-patch-left-out", "sbom", VerifyError, "its pedigree",
         _sbom_case(_drop_patch_entry), VERIFY),
    Case("verify-sbom-patch-property-changed", "sbom", VerifyError,
         "its properties in sbom.cdx.json", _sbom_case(_patch_property), VERIFY),
    Case("verify-sbom-tools-stripped", "sbom", VerifyError,
         "its metadata.tools is not what the manifest says", _sbom_case(_strip_tools), VERIFY),
    Case("verify-sbom-purl-renamed", "sbom", VerifyError, "its purl in sbom.cdx.json",
         _sbom_case(_rename_purl), VERIFY),
    # 9 and 11b: doctor --node fails with a named error
    Case("doctor-node-venv-missing", "doctor", UsageError, "the venv does not exist",
         lambda w: Invocation(["doctor", "--node", "--venv", str(w / "no-such-venv")]),
         DOCTOR_NODE),
    Case("doctor-node-venv-is-etc", "doctor", UsageError, "not a venv: it has no pyvenv.cfg",
         lambda w: Invocation(["doctor", "--node", "--venv", "/etc"]), DOCTOR_NODE),
    Case("doctor-node-venv-without-record", "doctor", VerifyError,
         "the venv has no sparkbuild-wheelhouse.json", _doctor(), DOCTOR_NODE),
    Case("doctor-node-record-garbage", "doctor", VerifyError,
         "sparkbuild-wheelhouse.json cannot be read", _doctor("\x00garbage{"), DOCTOR_NODE),
    Case("doctor-node-record-distributions-list", "doctor", VerifyError,
         "distributions must map names to objects",
         _doctor('{"fingerprint": "f", "wheelhouse": "w", "manifest": "{}", '
                 '"distributions": []}'), DOCTOR_NODE),
    Case("doctor-node-record-manifest-not-object", "doctor", VerifyError,
         "its manifest is not a JSON object", _doctor(_record_with([])), DOCTOR_NODE),
    Case("doctor-node-record-build-is-list", "doctor", VerifyError,
         "the recorded manifest's build is a list", _doctor(_record_with({"build": []})),
         DOCTOR_NODE),
    Case("doctor-node-record-archs-not-list", "doctor", VerifyError,
         "the recorded manifest's archs is not a list of strings",
         _doctor(_record_with({"build": {"archs": 5}})), DOCTOR_NODE),
    Case("doctor-node-record-toolchain-string", "doctor", VerifyError,
         "the recorded manifest's toolchain is a str",
         _doctor(_record_with({"toolchain": "13.0"})), DOCTOR_NODE),
    # 11c: paths longer than NAME_MAX
    Case("install-venv-name-too-long", "paths", UsageError, "over NAME_MAX",
         _venv_named(LONG), INSTALL),
    Case("install-wheelhouse-name-too-long", "paths", UsageError,
         "the wheelhouse path has a name of 300 bytes",
         lambda w: Invocation(["install", str(w / LONG), "--venv", str(w / "venv")]), INSTALL),
    Case("verify-path-too-long", "paths", UsageError, "over NAME_MAX",
         lambda w: Invocation(["verify", str(w / LONG)]), VERIFY),
    Case("verify-installed-path-too-long", "paths", UsageError, "over NAME_MAX",
         lambda w: Invocation(["verify", "--installed", str(w / LONG)]), INSTALLED),
    Case("doctor-node-venv-too-long", "paths", UsageError, "over NAME_MAX",
         lambda w: Invocation(["doctor", "--node", "--venv", str(w / LONG)]), DOCTOR_NODE),
    # 15: an install killed with SIGKILL
    Case("install-after-killed-install", "killed", None, "did not finish", _killed_install,
         INSTALL),
    # 17: NCCL_IB_HCA without the leading =
    Case("doctor-node-nccl-hca-prefix-environment", "doctor", None,
         "set in the environment without the leading =",
         _doctor(GOOD_RECORD, env={"NCCL_IB_HCA": "mlx5_1"}), DOCTOR_NODE),
    Case("doctor-node-nccl-hca-prefix-profile", "doctor", None,
         "set in the venv's profile without the leading =",
         _doctor(GOOD_RECORD, node_env="NCCL_IB_HCA=rocep1s0f0:1\n"), DOCTOR_NODE),
    Case("doctor-node-nccl-hca-exclusion-prefix", "doctor", None,
         "write ^=mlx5_1", _doctor(GOOD_RECORD, env={"NCCL_IB_HCA": "^mlx5_1"}), DOCTOR_NODE),
    # 18: a name cannot forge a line of output
    Case("verify-stray-name-newline-quoted", "output", VerifyError,
         '"stray\\n  MISMATCH requirements.lock: ok"', _stray(
             "stray\n  MISMATCH requirements.lock: ok"), VERIFY),
    Case("verify-stray-name-bidi-quoted", "output", VerifyError, '"stray\\u202etxt.whl"',
         _stray("stray\u202etxt.whl"), VERIFY),
    Case("verify-installed-name-newline-quoted", "output", VerifyError,
         'x\\n  OK" (no wheel of the wheelhouse has this file)',
         _installed_case(_dropped("x\n  OK")), INSTALLED),
    # 19: the manifest's size, and what it is
    Case("verify-manifest-over-16-mib", "manifest", VerifyError,
         "manifest.json is over 16 MiB", _padded_manifest("verify"), VERIFY),
    Case("install-manifest-over-16-mib", "manifest", VerifyError,
         "manifest.json is over 16 MiB", _padded_manifest("install"), INSTALL),
    Case("install-served-manifest-endless", "manifest", VerifyError,
         "the file served is over 16777216 bytes", _served_endless_manifest,
         ("sparkbuild.node.remote",)),
    Case("verify-manifest-is-a-fifo", "manifest", VerifyError,
         "manifest.json is not a plain file", _manifest_fifo, VERIFY),
    Case("verify-manifest-nested-too-deeply", "manifest", VerifyError, "nested too deeply",
         _deep_manifest, VERIFY),
    Case("verify-installed-record-nested-too-deeply", "installed", VerifyError,
         "nested too deeply", _installed_case(_deep_record), INSTALLED),
    Case("verify-sbom-nested-too-deeply", "sbom", VerifyError, "nested too deeply",
         _deep_sbom, VERIFY),
    Case("verify-pylock-package-not-a-table", "manifest", VerifyError,
         "pylock.toml (cannot be read: not a PEP 751 lock", _pylock_package_not_table, VERIFY),
    Case("verify-sbom-component-not-an-object", "sbom", VerifyError,
         "sbom.cdx.json (cannot be read: not a CycloneDX BOM with components)",
         _sbom_case(_sbom_component_not_object), VERIFY),
]
