"""Hostile cases of what a node trusts in a wheelhouse: who decides what ``verify`` judges,
what ``install --from pylock`` installs, what ``verify --installed`` owns after uv, the
manifest's target and sizes, ``--venv`` under a file, and a wheelhouse for another machine.

A wheelhouse here is resealed, as in :mod:`corpus.cases_node`: the lock and the manifest
vouch for whatever was done, so only the files themselves can refuse it.  The built wheel
of the judging cases holds a library of one trap-only kernel, read by the stand-in
cuobjdump of :mod:`support.jit_caches` (nothing is compiled): a wheelhouse that passes
``verify`` while it holds one hid it.  Each group names, above it, the root cause it
answers; every case failed against the code before.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from corpus import builders as b
from corpus.cases import CLI, VERIFY, Case, Invocation, _no_venv
from corpus.cases_node import (
    INSTALL,
    INSTALLED,
    ISOLATED,
    PWNED,
    _crafted,
    _members,
    _nothing_ran,
    _seal,
)
from sparkbuild.errors import UsageError, VerifyError
from support.jit_caches import cuobjdump_env, library, record_row

if TYPE_CHECKING:
    from collections.abc import Callable

LABEL = "sm121a.0123abcd"
LABELLED = f"1.0+{LABEL}"
STUB = "_ZN4demo17fp4_gemm_sm121_kernelEv"
STUB_REFUSED = "only trap or print and exit"
SBOM_MEMBER = "sboms/sbom.cdx.json"
OWN_SBOM = json.dumps({"bomFormat": "CycloneDX", "metadata": {"tools": {"components": [
    {"type": "application", "name": "sparkbuild", "version": "0.1.0"}]}}}).encode()

# -- a built wheel and its wheelhouse -------------------------------------------------------


def _wheel(out: Path, version: str = "1.0", *, tag: str = "py3-none-any",
           sbom: bool = False, gpu: bool = True, init: bytes = b"VALUE = 1\n") -> Path:
    """The demo wheel at ``version`` and ``tag``: its module, a library of one trap-only
    kernel (``gpu``), sparkbuild's own SBOM (``sbom``), a true RECORD."""
    out.mkdir(parents=True, exist_ok=True)
    dist = f"{b.PACKAGE}-{version}.dist-info"
    pure = "true" if tag.endswith("-none-any") else "false"
    members = {f"{b.PACKAGE}/__init__.py": init,
               **({f"{b.PACKAGE}/_C.so": library(native=(), stubs=(STUB,))} if gpu else {}),
               f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {b.PACKAGE}\n"
                                   f"Version: {version}\n".encode(),
               f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: "
                                f"{pure}\nTag: {tag}\n".encode(),
               **({f"{dist}/{SBOM_MEMBER}": OWN_SBOM} if sbom else {})}
    rows = "".join(record_row(name, data) for name, data in members.items())
    path = out / f"{b.PACKAGE}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr(f"{dist}/RECORD", rows + f"{dist}/RECORD,,\n")
    return path


def _sealed(out: Path, wheel: Path, version: str, *, role: str = "built",
            edit: Callable[[dict[str, object]], None] | None = None) -> Path:
    """Lock and manifest that vouch for ``wheel`` (target 12.1a; ``edit`` changes the
    manifest before it is written)."""
    digest = b.sha256_of(wheel)
    lock = out / "requirements.lock"
    lock.write_text(f"{b.PACKAGE}=={version} --hash=sha256:{digest}\n", encoding="utf-8")
    manifest: dict[str, object] = {
        "schema": 1, "target": {"cuda_archs": ["12.1a"]},
        "wheels": [{"file": wheel.name, "name": b.PACKAGE, "version": version,
                    "sha256": digest, "size": wheel.stat().st_size, "role": role}],
        "files": {lock.name: b.sha256_of(lock)}}
    if edit is not None:
        edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def _house(version: str = LABELLED, *, role: str = "built", sbom: bool = False,
           tag: str = "py3-none-any", gpu: bool = True,
           edit: Callable[[dict[str, object]], None] | None = None
           ) -> Callable[[Path], Path]:
    def make(work: Path) -> Path:
        out = work / "wheelhouse"
        return _sealed(out, _wheel(out, version, tag=tag, sbom=sbom, gpu=gpu), version,
                       role=role, edit=edit)

    return make


def _judged(make: Callable[[Path], Path]) -> Callable[[Path], Invocation]:
    """``verify`` of the wheelhouse with the stand-in cuobjdump."""
    return lambda work: Invocation(["verify", str(make(work))],
                                   env=cuobjdump_env(work / "tools"))


def _installed_from(make: Callable[[Path], Path], *extra: str
                    ) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        venv = work / "venv"
        return Invocation(["install", str(make(work)), "--venv", str(venv), *extra],
                          env=dict(ISOLATED), after=_nothing_ran(work, _no_venv(venv)))

    return build


def _target(**target: object) -> Callable[[dict[str, object]], None]:
    def edit(manifest: dict[str, object]) -> None:
        manifest["target"] = target

    return edit


def _no_role(manifest: dict[str, object]) -> None:
    b.first_wheel(manifest).pop("role")


def _libraries_listed(manifest: dict[str, object]) -> None:
    manifest["libraries"] = [{"wheel": b.first_wheel(manifest)["file"], "library": "demo/_C.so"}]


def _no_target_but_build_archs(manifest: dict[str, object]) -> None:
    """No target, the build record's archs kept (the label stripped from the version)."""
    manifest.pop("target")
    manifest["build"] = {"archs": ["12.1a"]}


def _empty_target_with(**more: object) -> Callable[[dict[str, object]], None]:
    def edit(manifest: dict[str, object]) -> None:
        manifest["target"] = {"cuda_archs": []}
        manifest.update(more)

    return edit


# -- item 9: what pylock.toml installs --------------------------------------------------------


def _evil_elsewhere(work: Path) -> Path:
    """A demo wheel outside the wheelhouse whose module leaves PWNED when imported."""
    return _wheel(work / "elsewhere", gpu=False,
                  init=f"open({str(work / PWNED)!r}, 'w').close()\n".encode())


def _pylock_pointing(rewrite: Callable[[str, Path, Path], str]) -> Callable[[Path], Path]:
    """A sealed wheelhouse with pylock.toml; its text passed through ``rewrite(text, work,
    evil wheel)``, and the manifest resealed over the new bytes."""
    def make(work: Path) -> Path:
        out = _crafted(work, _members(), pylock=True)
        evil = _evil_elsewhere(work)
        pylock, genuine = out / "pylock.toml", out / f"{b.PACKAGE}-{b.VERSION}-py3-none-any.whl"
        text = pylock.read_text(encoding="utf-8").replace(
            b.sha256_of(genuine), b.sha256_of(evil)).replace(
            f"size = {genuine.stat().st_size}", f"size = {evil.stat().st_size}")
        pylock.write_text(rewrite(text, work, evil), encoding="utf-8")
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["files"]["pylock.toml"] = b.sha256_of(pylock)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
        return out

    return make


def _path_line(path: str) -> Callable[[str, Path, Path], str]:
    def rewrite(text: str, work: Path, evil: Path) -> str:
        wheel = f"{b.PACKAGE}-{b.VERSION}-py3-none-any.whl"
        return text.replace(f'path = "{wheel}"', f'path = "{path.format(evil=evil)}"')

    return rewrite


def _url_line(text: str, work: Path, evil: Path) -> str:
    wheel = f"{b.PACKAGE}-{b.VERSION}-py3-none-any.whl"
    return text.replace(f'path = "{wheel}"', f'url = "{evil.as_uri()}"')


def _directory_package(text: str, work: Path, evil: Path) -> str:
    """The demo package from a source directory elsewhere (no wheel)."""
    source = b.write_tree(work / "elsewhere-src", b.source_files())
    head, _, _rest = text.partition("[[packages]]")
    return (head + f'[[packages]]\nname = "{b.PACKAGE}"\nversion = "{b.VERSION}"\n'
            f'directory = {{ path = "{source}" }}\n')


# -- item 17: verify --installed after uv ------------------------------------------------------


def _after_uv_install(*, wheelhouse_given: bool) -> Callable[[Path], Invocation]:
    """``install --from pylock`` (through uv), then ``verify --installed`` of that venv."""
    def build(work: Path) -> Invocation:
        out = _crafted(work, _members(), pylock=True)
        venv = work / "venv"
        subprocess.run([*CLI, "install", str(out), "--venv", str(venv), "--from", "pylock"],
                       check=True, capture_output=True, timeout=300,
                       env={**os.environ, **ISOLATED})
        return Invocation(["verify", "--installed", str(venv),
                           *([str(out)] if wheelhouse_given else [])])

    return build


# -- item 24: --venv under a file ----------------------------------------------------------------


def _venv_under_file(relative: str, *, link: bool = False) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        out = b.node_wheelhouse(work / "wheelhouse")
        if link:
            (work / "plain").symlink_to(work / "nowhere")
        else:
            (work / "plain").write_text("a file, not a directory\n")
        return Invocation(["install", str(out), "--venv", str(work / relative)],
                          env=dict(ISOLATED))

    return build


def _profile_message(work: Path) -> Invocation:
    out = b.node_wheelhouse(work / "wheelhouse")
    return Invocation(["install", str(out), "--venv", str(work / "venv")], env=dict(ISOLATED))


def _size(value: object) -> Callable[[dict[str, object]], None]:
    def edit(manifest: dict[str, object]) -> None:
        b.first_wheel(manifest)["size"] = value

    return edit


def _plain_house(edit: Callable[[dict[str, object]], None]) -> Callable[[Path], Path]:
    """The corpus's one-demo-wheel wheelhouse, its manifest changed by ``edit``."""
    def make(work: Path) -> Path:
        out = work / "wheelhouse"
        b.pure_wheel(out)
        return _seal(out, edit=edit)

    return make


FOREIGN = "cp311-cp311-linux_x86_64"
SPARK = {"cuda_archs": ["12.1a"], "platform": "manylinux_2_39_aarch64", "python": "3.12"}


CASES: list[Case] = [
    # 8: the manifest decides neither which wheels are built nor the target they are judged
    # at.  Each fact that a wheel is this build's, alone, against a role of pin or closure.
    Case("trustnode-verify-role-pin-label", "trust", VerifyError,
         f"manifest.json calls it a pin wheel, but its version {LABELLED} carries the "
         "build's label", _judged(_house(role="pin")), VERIFY),
    Case("trustnode-verify-role-pin-trap-still-judged", "trust", VerifyError, STUB_REFUSED,
         _judged(_house(role="pin")), VERIFY),
    Case("trustnode-verify-role-closure-libraries", "trust", VerifyError,
         "calls it a closure wheel, but manifest.json's libraries list its machine code",
         _judged(_house("1.0", role="closure", edit=_libraries_listed)), VERIFY),
    Case("trustnode-verify-role-pin-own-sbom", "trust", VerifyError,
         "calls it a pin wheel, but it holds sparkbuild's SBOM",
         _judged(_house("1.0", role="pin", sbom=True)), VERIFY),
    Case("trustnode-verify-role-pin-recipe-package", "trust", VerifyError,
         f"calls it a pin wheel, but it is the recipe's package {b.PACKAGE}",
         _judged(_house("1.0", role="pin", edit=lambda m: m.update(
             recipe={"name": "corpus", "package": b.PACKAGE}))), VERIFY),
    Case("trustnode-verify-role-missing", "trust", VerifyError,
         "gives it the role None, not one of built, pin, closure",
         _judged(_house(edit=_no_role)), VERIFY),
    Case("trustnode-install-role-pin-label", "trust", VerifyError,
         "calls it a pin wheel, but its version", _installed_from(_house(role="pin")),
         INSTALL),
    Case("trustnode-verify-target-emptied", "trust", VerifyError,
         "its target names no CUDA arch: the built wheels' machine code would be judged for "
         "no GPU (judged for 12.1a", _judged(_house(edit=_empty_target_with())), VERIFY),
    Case("trustnode-verify-target-emptied-trap-still-judged", "trust", VerifyError,
         STUB_REFUSED, _judged(_house(edit=_empty_target_with())), VERIFY),
    Case("trustnode-verify-target-missing-build-record", "trust", VerifyError,
         "has no target: the built wheels' machine code would be judged for no GPU (judged "
         "for 12.1a", _judged(_house("1.0", edit=_no_target_but_build_archs)), VERIFY),
    Case("trustnode-verify-target-emptied-no-label", "trust", VerifyError,
         "holds GPU machine code (sm_121a), but no target arch is named",
         _judged(_house("1.0", edit=_empty_target_with())), VERIFY),
    Case("trustnode-verify-target-other-than-label", "trust", VerifyError,
         "its version's label names 12.1a, the manifest's target 9.0a",
         _judged(_house(edit=_target(cuda_archs=["9.0a"]))), VERIFY),
    Case("trustnode-install-target-emptied", "trust", VerifyError,
         "its target names no CUDA arch", _installed_from(_house(edit=_empty_target_with())),
         INSTALL),
    # 9: every pylock.toml entry is a wheel of the wheelhouse that verify checked
    Case("trustnode-install-pylock-absolute-path", "pylock", VerifyError,
         "installs demo from the path", _installed_from(
             _pylock_pointing(_path_line("{evil}")), "--from", "pylock"), INSTALL),
    Case("trustnode-install-pylock-dotdot-path", "pylock", VerifyError,
         "installs demo from the path '../elsewhere/", _installed_from(
             _pylock_pointing(_path_line("../elsewhere/demo-1.0-py3-none-any.whl")),
             "--from", "pylock"), INSTALL),
    Case("trustnode-install-pylock-url", "pylock", VerifyError,
         "installs demo from the URL 'file://", _installed_from(
             _pylock_pointing(_url_line), "--from", "pylock"), INSTALL),
    Case("trustnode-install-pylock-directory", "pylock", VerifyError,
         "installs demo from its directory", _installed_from(
             _pylock_pointing(_directory_package), "--from", "pylock"), INSTALL),
    # 17: uv's own files, known precisely
    Case("trustnode-verify-installed-after-uv", "installed", None, "fingerprint",
         _after_uv_install(wheelhouse_given=False), INSTALLED),
    Case("trustnode-verify-installed-after-uv-wheelhouse-named", "installed", None,
         "fingerprint", _after_uv_install(wheelhouse_given=True), INSTALLED),
    # 20: the target's types, and each wheel's recorded size
    Case("trustnode-verify-target-list", "manifest", VerifyError,
         "`target` must be an object, not a list", _judged(_house(edit=lambda m: m.update(
             target=[1]))), VERIFY),
    Case("trustnode-install-target-string", "manifest", VerifyError,
         "`target` must be an object, not a string", _installed_from(_plain_house(
             lambda m: m.update(target="12.1a"))), INSTALL),
    Case("trustnode-verify-target-archs-string", "manifest", VerifyError,
         "target.cuda_archs must be a list of strings", _judged(_house(
             edit=_target(cuda_archs="12.1a"))), VERIFY),
    Case("trustnode-install-target-python-number", "manifest", VerifyError,
         "target.python must be a str, not a number", _installed_from(_plain_house(
             _target(cuda_archs=["12.1a"], python=3.12))), INSTALL),
    Case("trustnode-verify-size-lies", "manifest", VerifyError,
         "manifest.json records 5", _judged(_plain_house(_size(5))), VERIFY),
    Case("trustnode-install-size-lies", "manifest", VerifyError,
         "manifest.json records 1", _installed_from(_plain_house(_size(1))), INSTALL),
    Case("trustnode-verify-size-string", "manifest", VerifyError,
         "gives its size as \"856\"", _judged(_plain_house(_size("856"))), VERIFY),
    # 24: --venv under a regular file
    Case("trustnode-install-venv-under-etc-passwd", "venv", UsageError,
         "--venv lies under /etc/passwd, which is a file",
         lambda w: Invocation(["install", str(b.node_wheelhouse(w / "wheelhouse")),
                               "--venv", "/etc/passwd/x"], env=dict(ISOLATED)), INSTALL),
    Case("trustnode-install-venv-deep-under-file", "venv", UsageError,
         "which is a file, not a directory", _venv_under_file("plain/a/b"), INSTALL),
    Case("trustnode-install-venv-under-dangling-link", "venv", UsageError,
         "which is a symbolic link, not a directory", _venv_under_file("plain/v", link=True),
         INSTALL),
    # a new user's run: a wheelhouse declaring another machine than its built wheel's
    Case("trustnode-verify-foreign-built-wheel", "target", VerifyError,
         f"built for {FOREIGN}, which does not install on the manifest's target "
         "manylinux_2_39_aarch64 Python 3.12", _judged(_house(
             "1.0", tag=FOREIGN, gpu=False, edit=_target(**SPARK))), VERIFY),
    Case("trustnode-install-foreign-built-wheel", "target", VerifyError,
         "does not install on the manifest's target", _installed_from(_house(
             "1.0", tag=FOREIGN, gpu=False, edit=_target(**SPARK))), INSTALL),
    Case("trustnode-verify-foreign-python-only", "target", VerifyError,
         "does not install on the manifest's target linux-x86_64 Python 3.12",
         _judged(_house("1.0", tag=FOREIGN, gpu=False, edit=_target(
             cuda_archs=["12.1a"], platform="linux-x86_64", python="3.12"))), VERIFY),
    # and the file bin/activate sources, named
    Case("trustnode-install-says-profile-sh-is-sourced", "profile", None,
         "profile.sh (sourced by", _profile_message, INSTALL),
]
