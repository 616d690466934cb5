"""flashinfer-jit-cache wheels made member by member, hostile ones among them, and a
stand-in for cuobjdump that reads the libraries they hold: nothing is compiled.

A library made here is ``\\x7fELF`` and then one line per kernel, ``native NAME`` or
``stub NAME`` (a printf + trap body at sm_121a).  :func:`fake_cuobjdump` writes a script
that answers ``-lelf -lptx``, ``-symbols``, ``-ptx``, ``-sass`` and ``-xelf all`` of such a
file as cuobjdump would of a library built for sm_121a; ``SPARKBUILD_CUOBJDUMP`` and
``SPARKBUILD_NVDISASM`` point sparkbuild at it (:func:`cuobjdump_env`).  With
``FAKE_CUOBJDUMP_INTERRUPT`` set it sends its parent (sparkbuild) SIGINT, as a Ctrl-C would.
"""

from __future__ import annotations

import base64
import hashlib
import stat
import sys
import textwrap
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

PACKAGE = "flashinfer_jit_cache"
VERSION = "0.6.18+cu130"
TAG = "py3-none-linux_x86_64"
WHEEL_NAME = f"{PACKAGE}-{VERSION}-{TAG}.whl"
DIST_INFO = f"{PACKAGE}-{VERSION}.dist-info"
RECORD = f"{DIST_INFO}/RECORD"
NATIVE_KERNEL = "_Z12sample_top_kPfi"


def module_member(module: str) -> str:
    return f"{PACKAGE}/jit_cache/{module}/{module}.so"


def library(*, native: tuple[str, ...] = (NATIVE_KERNEL,), stubs: tuple[str, ...] = ()
            ) -> bytes:
    """A library :func:`fake_cuobjdump` reads: these kernels at sm_121a."""
    lines = [f"native {name}" for name in native] + [f"stub {name}" for name in stubs]
    return b"\x7fELF\n" + "".join(f"{line}\n" for line in lines).encode()


def record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


@dataclass
class JitCache:
    """The members of a jit-cache wheel, RECORD made from them unless told otherwise."""

    modules: dict[str, bytes] = field(default_factory=lambda: {"sampling": library()})
    version: str = VERSION
    extra: dict[str, bytes] = field(default_factory=dict)
    """More members, each listed in RECORD, written before RECORD."""
    last: dict[str, bytes] = field(default_factory=dict)
    """Members written after RECORD (still listed in it), so one of them is the last."""
    unlisted: tuple[str, ...] = ()
    """Members RECORD leaves out."""
    tweak: dict[str, Callable[[zipfile.ZipInfo], None]] = field(default_factory=dict)
    """Changes to a member's zip entry (flags, compression, mode) after it is written."""
    requires: bool = False
    """METADATA's Requires-Dist on flashinfer-python (a wheelhouse's lock must then hold it)."""

    def members(self) -> dict[str, bytes]:
        init = f"__version__ = {self.version!r}\n".encode()
        needs = (f"Requires-Dist: flashinfer-python=={self.version.split('+')[0]}\n"
                 if self.requires else "")
        metadata = (f"Metadata-Version: 2.1\nName: flashinfer-jit-cache\n"
                    f"Version: {self.version}\n{needs}\n").encode()
        wheel = f"Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: false\nTag: {TAG}\n"
        dist_info = f"{PACKAGE}-{self.version}.dist-info"
        return {f"{PACKAGE}/__init__.py": init,
                **{module_member(name): data for name, data in self.modules.items()},
                **self.extra, f"{dist_info}/METADATA": metadata,
                f"{dist_info}/WHEEL": wheel.encode()}

    def write(self, directory: Path, name: str | None = None) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        dist_info = f"{PACKAGE}-{self.version}.dist-info"
        first, last = self.members(), self.last
        rows = "".join(record_row(n, d) for n, d in {**first, **last}.items()
                       if n not in self.unlisted) + f"{dist_info}/RECORD,,\n"
        path = directory / (name or f"{PACKAGE}-{self.version}-{TAG}.whl")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data in [*first.items(), (f"{dist_info}/RECORD", rows.encode()),
                                 *last.items()]:
                archive.writestr(member, data)
        if self.tweak:
            retouch(path, self.tweak)
        return path


def retouch(path: Path, tweak: dict[str, Callable[[zipfile.ZipInfo], None]]) -> None:
    """Rewrite the central directory entries of ``tweak``'s members (their bytes stay)."""
    with zipfile.ZipFile(path, "a") as archive:
        for info in archive.infolist():
            if info.filename in tweak:
                tweak[info.filename](info)
        archive._didModify = True  # type: ignore[attr-defined]  # rewrite the directory


def encrypted(info: zipfile.ZipInfo) -> None:
    info.flag_bits |= 0x1


def compressed_by_method(method: int) -> Callable[[zipfile.ZipInfo], None]:
    def tweak(info: zipfile.ZipInfo) -> None:
        info.compress_type = method

    return tweak


def symbolic_link(info: zipfile.ZipInfo) -> None:
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16


FAKE_CUOBJDUMP = '''\
import os
import signal
import sys
import time

if os.environ.get("FAKE_CUOBJDUMP_INTERRUPT"):  # Ctrl-C while the library is read
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(60)
option, path = sys.argv[1], sys.argv[-1]
with open(path, "rb") as stream:
    data = stream.read()
if not data.startswith(b"\\x7fELF"):
    sys.stdout.write(f"cuobjdump fatal   : Invalid fatbin header in '{path}'\\n")
    sys.exit(1)
kernels = [line.split(" ", 1) for line in data[5:].decode().splitlines() if " " in line]
header = "Fatbin elf code:\\n================\\narch = sm_121a\\ncode version = [1,8]\\n"
if option == "-lelf":
    print("ELF file    1: library.1.sm_121a.cubin")
elif option == "-symbols":
    print(header + "\\nsymbols:")
    for _kind, name in kernels:
        print(f"FUNC          GLOBAL  DEFAULT    ENTRY                                {name}")
elif option == "-sass":
    print(header + "\\n\\tcode for sm_121a\\n")
    for kind, name in kernels:
        print(f"\\t\\tFunction : {name}")
        if kind == "stub":
            body = ["MOV R4, 0x0", "CALL.ABS.NOINC 0x0", "BPT.TRAP 0x1", "EXIT", "BRA 0x40"]
        else:
            body = ["LDG.E R4, desc[UR4][R2.64]", "STG.E desc[UR4][R6.64], R4", "EXIT"]
        for number, text in enumerate(body):
            print(f"        /*{number * 16:04x}*/                   {text} ;")
elif option == "-ptx":
    pass
elif option == "-xelf":  # the one ELF, written where cuobjdump writes it: the cwd
    name = os.path.basename(path).rsplit(".", 1)[0]
    with open(f"{name}.1.sm_121a.cubin", "wb") as cubin:
        cubin.write(data)
else:
    sys.stdout.write(f"fake cuobjdump: {option} is not answered\\n")
    sys.exit(1)
'''


def fake_cuobjdump(directory: Path) -> Path:
    """The stand-in cuobjdump, run by this interpreter."""
    directory.mkdir(parents=True, exist_ok=True)
    body = directory / "fake_cuobjdump.py"
    body.write_text(FAKE_CUOBJDUMP, encoding="utf-8")
    script = directory / "cuobjdump"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        exec '{sys.executable}' '{body}' "$@"
        """), encoding="utf-8")
    script.chmod(0o755)
    return script


def cuobjdump_env(directory: Path) -> dict[str, str]:
    """The environment that points sparkbuild at :func:`fake_cuobjdump` (nvdisasm is only
    looked for: the script stands for it too)."""
    script = fake_cuobjdump(directory)
    return {"SPARKBUILD_CUOBJDUMP": str(script), "SPARKBUILD_NVDISASM": str(script)}
