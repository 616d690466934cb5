"""Builders of hostile and broken inputs, written fresh into a test's tmp directory.

Nothing here is committed data: each builder makes its input from scratch (a small
generated "sdist", tarballs with crafted members, recipes, git repositories, fake
compilers), so the corpus stays readable and the inputs cannot rot.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import textwrap
import zipfile
from pathlib import Path

from sparkbuild.recipe import BuildSettings, Recipe, SourcePin, Target

PACKAGE = "demo"
VERSION = "1.0"
TOP = f"{PACKAGE}-{VERSION}"
KERNEL = "csrc/kernel.cu"
KERNEL_TEXT = "// demo kernel\n__global__ void k() {}\nint arch = 90;\n"
PATCHED_LINE = "int arch = 121;\n"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "corpus",
    "GIT_AUTHOR_EMAIL": "corpus@example.invalid",
    "GIT_COMMITTER_NAME": "corpus",
    "GIT_COMMITTER_EMAIL": "corpus@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- a small, well-formed source ---------------------------------------------------------


def source_files(extra_files: int = 0) -> dict[str, str]:
    """The files of the generated source, relative to its top directory."""
    files = {
        "pyproject.toml": f'[project]\nname = "{PACKAGE}"\nversion = "{VERSION}"\n',
        "setup.py": "from setuptools import setup\nsetup()\n",
        KERNEL: KERNEL_TEXT,
        "README.md": "demo source for the hostile-input corpus\n",
    }
    for n in range(extra_files):
        files[f"{PACKAGE}/gen/mod_{n:05d}.py"] = f"VALUE = {n}\n" + "# padding\n" * 40
    return files


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def tree_digest(tree: Path) -> str:
    """sha256 over every path, mode and content under ``tree``: "the same tree", byte for byte."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(tree):
        subdirs.sort()
        base = Path(directory)
        digest.update(f"D {base.relative_to(tree).as_posix()}\n".encode())
        for name in sorted(files):
            path = base / name
            relative = path.relative_to(tree).as_posix()
            digest.update(f"F {relative} {path.lstat().st_mode:o}\n".encode())
            if path.is_symlink():
                digest.update(str(path.readlink()).encode())
            else:
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def good_sdist(directory: Path, *, extra_files: int = 0) -> Path:
    """A gzip tarball with one top directory, like an sdist."""
    path = directory / f"{TOP}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(source_files(extra_files).items()):
            add_bytes(tar, f"{TOP}/{name}", text.encode())
    return path


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def add_link(tar: tarfile.TarFile, name: str, target: str, *, hard: bool = False) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname, info.mtime = target, 1_700_000_000
    tar.addfile(info)


def hostile_tar(directory: Path, name: str, *members: tuple[str, str, str]) -> Path:
    """A tar.gz of a normal sdist plus crafted members ``(kind, name, target_or_text)``.

    kind is ``file``, ``symlink`` or ``hardlink``.
    """
    path = directory / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for member, text in sorted(source_files().items()):
            add_bytes(tar, f"{TOP}/{member}", text.encode())
        for kind, member, payload in members:
            if kind == "file":
                add_bytes(tar, member, payload.encode())
            else:
                add_link(tar, member, payload, hard=kind == "hardlink")
    return path


def hostile_zip(directory: Path, member: str) -> Path:
    path = directory / f"{TOP}.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{TOP}/setup.py", "from setuptools import setup\nsetup()\n")
        archive.writestr(member, "escaped\n")
    return path


def truncated_sdist(directory: Path) -> Path:
    good = good_sdist(directory, extra_files=40)
    data = good.read_bytes()
    path = directory / "truncated.tar.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def corrupt_sdist(directory: Path) -> Path:
    """A gzip stream whose middle was overwritten: the CRC or the inflater must notice."""
    good = good_sdist(directory, extra_files=40)
    data = bytearray(good.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path = directory / "corrupt.tar.gz"
    path.write_bytes(bytes(data))
    return path


def not_an_archive(directory: Path) -> Path:
    path = directory / "garbage.tar.gz"
    path.write_bytes(b"<html>404 Not Found</html>\n" * 30)
    return path


def plain_tar_truncated(directory: Path) -> Path:
    """An uncompressed tar cut inside a member's data (no compressor to notice)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        add_bytes(tar, f"{TOP}/big.bin", os.urandom(64 * 1024))
    path = directory / "cut.tar"
    path.write_bytes(buffer.getvalue()[: 20 * 1024])
    return path


def gzip_bomb_header(directory: Path) -> Path:
    """Valid gzip of bytes that are not a tar at all."""
    path = directory / "notatar.tar.gz"
    path.write_bytes(gzip.compress(b"x" * 4096))
    return path


# -- recipes and series ------------------------------------------------------------------


def series_dir(directory: Path, patches: dict[str, str]) -> Path:
    """A series file naming ``patches`` (file name -> text) in order."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in patches.items():
        (directory / name).write_text(text, encoding="utf-8")
    (directory / "series").write_text("".join(f"{name}\n" for name in patches), encoding="utf-8")
    return directory / "series"


def write_series(directory: Path, patches: dict[str, str]) -> Recipe:
    """A series directory holding ``patches`` (file name -> text) in order, and its recipe.

    The recipe is also written as ``recipe.toml`` beside the series, for ``--recipe``.
    """
    series = series_dir(directory, patches)
    recipe_file = directory / "recipe.toml"
    recipe_file.write_text(
        f'[source]\nspec = "pypi:vllm==0.0"\n\n[series]\npath = "{series}"\n', encoding="utf-8"
    )
    return Recipe(recipe_file, "test", SourcePin("pypi:vllm==0.0"), series, Target(),
                  BuildSettings(), ())


def pinned_line(name: str, text: str) -> str:
    """A series line naming patch file ``name`` pinned to the sha256 of ``text``."""
    return f"{name} sha256={hashlib.sha256(text.encode()).hexdigest()}"


def kernel_patch() -> str:
    """A well-formed patch of the generated source's kernel (arch 90 -> 121)."""
    return textwrap.dedent(
        f"""\
        diff --git a/{KERNEL} b/{KERNEL}
        --- a/{KERNEL}
        +++ b/{KERNEL}
        @@ -1,3 +1,3 @@
         // demo kernel
         __global__ void k() {{}}
        -int arch = 90;
        +int arch = 121;
        """
    )


def recipe_text(spec: str, series: str, *, extra: str = "") -> str:
    return (
        textwrap.dedent(
            f"""\
        [recipe]
        name = "corpus"
        package = "{PACKAGE}"

        [source]
        spec = "{spec}"

        [series]
        path = "{series}"

        [target]
        cuda_archs = ["12.1a"]
        platform = "manylinux_2_39_aarch64"
        python = "3.12"

        [build]
        jobs = 1
        job_memory_gib = 2.0
        """
        )
        + extra
    )


def write_recipe(directory: Path, text: str, name: str = "corpus.toml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def good_recipe(
    directory: Path, spec: str = "unused", patches: dict[str, str] | None = None
) -> Path:
    series_dir(
        directory / "patches", {"0001-arch.diff": kernel_patch()} if patches is None else patches
    )
    return write_recipe(directory, recipe_text(spec, "patches/series"))


# -- git ---------------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def git_source(directory: Path) -> Path:
    """A local repository holding the generated source on branch ``main``, tag ``v1.0``."""
    write_tree(directory, source_files())
    git(directory, "init", "-q", "-b", "main")
    git(directory, "add", "-A")
    git(directory, "commit", "-q", "-m", "demo source")
    git(directory, "tag", "v1.0")
    return directory


# -- toolchain ---------------------------------------------------------------------------


def fake_nvcc(directory: Path, release: str) -> Path:
    """A ``nvcc`` script that answers ``--version`` like CUDA ``release`` would."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvcc"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            if [ "$1" = "--version" ] || [ "$1" = "-V" ]; then
              echo "nvcc: NVIDIA (R) Cuda compiler driver"
              echo "Copyright (c) 2005-2024 NVIDIA Corporation"
              echo "Cuda compilation tools, release {release}, V{release}.1"
              echo "Build cuda_{release}.r{release}/compiler.0_0"
              exit 0
            fi
            echo "nvcc fatal   : Unsupported gpu architecture 'compute_121'" >&2
            exit 1
            """
        ),
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def path_without_nvcc() -> str:
    """$PATH minus every directory that holds an ``nvcc``."""
    keep = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not Path(d, "nvcc").exists()
    ]
    return os.pathsep.join(keep)


# -- wheels ------------------------------------------------------------------------------


def pure_wheel(directory: Path, extra: dict[str, bytes] | None = None, *,
               requires: tuple[str, ...] = ()) -> Path:
    """A small, valid pure-Python wheel of the demo package, with a correct RECORD
    (``extra``: more members, each with its RECORD line; ``requires``: its Requires-Dist)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{PACKAGE}-{VERSION}.dist-info"
    requires_dist = "".join(f"Requires-Dist: {name}\n" for name in requires)
    files = {
        f"{PACKAGE}/__init__.py": b"VALUE = 1\n" * 200,
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n{requires_dist}"
            .encode()
        ),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        **(extra or {}),
    }
    record = (
        "".join(
            f"{name},sha256={_record_digest(data)},{len(data)}\n" for name, data in files.items()
        )
        + f"{dist_info}/RECORD,,\n"
    )
    path = directory / f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{dist_info}/RECORD", record)
    return path


def node_wheelhouse(out: Path, *, role: str = "built", requires: tuple[str, ...] = ()) -> Path:
    """A wheelhouse ``install`` takes: one demo wheel (``role``; ``requires``: its
    Requires-Dist), its lock, a manifest that vouches for both (target 12.1a; the wheel holds
    no library: nothing for cuobjdump to read)."""
    wheel = pure_wheel(out, requires=requires)
    digest = sha256_of(wheel)
    lock = out / "requirements.lock"
    lock.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{digest}\n", encoding="utf-8")
    manifest = {
        "schema": 1,
        "target": {"cuda_archs": ["12.1a"]},
        "wheels": [{"file": wheel.name, "name": PACKAGE, "version": VERSION,
                    "sha256": digest, "size": wheel.stat().st_size, "role": role}],
        "files": {lock.name: sha256_of(lock)},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def first_wheel(manifest: dict[str, object]) -> dict[str, object]:
    """The manifest's first wheel entry, for a case that edits it in place."""
    wheels = manifest["wheels"]
    assert isinstance(wheels, list)
    entry = wheels[0]
    assert isinstance(entry, dict)
    return entry


TAMPERED_MEMBER = f"{PACKAGE}/backdoor.py"


def tamper_wheel_and_lock(wheelhouse: Path) -> Path:
    """A tampered wheelhouse: a file added to the wheel with its RECORD line, the new hash put
    into requirements.lock only; manifest.json (which records the lock's hash) unchanged."""
    (wheel,) = wheelhouse.glob("*.whl")
    pure_wheel(wheelhouse, {TAMPERED_MEMBER: b"print('not what was built')\n"})
    lock = wheelhouse / "requirements.lock"
    lock.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{sha256_of(wheel)}\n",
                    encoding="utf-8")
    return wheelhouse


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def big_member_wheelhouse(out: Path, member: str, size: int) -> Path:
    """A wheelhouse whose one wheel holds ``member`` of ``size`` zero bytes (written in
    streaming, so the test itself stays small); RECORD, lock and manifest all agree.  A
    METADATA member gets the demo's headers first, then the zeros."""
    out.mkdir(parents=True, exist_ok=True)
    dist_info = f"{PACKAGE}-{VERSION}.dist-info"
    head = (f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n\n".encode()
            if member.endswith("/METADATA") else b"")
    block = bytes(1 << 20)
    digest = hashlib.sha256(head)
    path = out / f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        rows = []
        if not member.endswith("/METADATA"):
            meta = f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n".encode()
            archive.writestr(f"{dist_info}/METADATA", meta)
            rows.append(f"{dist_info}/METADATA,sha256={_record_digest(meta)},{len(meta)}\n")
        with archive.open(member, "w", force_zip64=True) as stream:
            stream.write(head)
            for _ in range(size // len(block)):
                stream.write(block)
                digest.update(block)
        encoded = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
        rows.append(f"{member},sha256={encoded},{len(head) + size}\n")
        archive.writestr(f"{dist_info}/RECORD", "".join(rows) + f"{dist_info}/RECORD,,\n")
    wheel_digest = sha256_of_streamed(path)
    lock = out / "requirements.lock"
    lock.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{wheel_digest}\n", encoding="utf-8")
    manifest = {"schema": 1, "target": {"cuda_archs": ["12.1a"]},
                "wheels": [{"file": path.name, "name": PACKAGE, "version": VERSION,
                            "sha256": wheel_digest, "size": path.stat().st_size,
                            "role": "built"}],
                "files": {lock.name: sha256_of(lock)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def sha256_of_streamed(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# -- bundles -----------------------------------------------------------------------------


def tiny_bundle(path: Path, recipe_name: str, *, twice: str | None = None) -> Path:
    """A bundle as ``unpack_bundle`` reads it (plan, the recipe it carries, a manifest of
    both); ``twice``: a member the manifest lists a second time, the same entry again."""
    top = "sparkbuild-bundle"
    recipe = recipe_text("unused", "series/series").replace('name = "corpus"',
                                                            f'name = "{recipe_name}"')
    members = {
        "plan.json": json.dumps({"format": 1, "recipe": recipe_name,
                                 "recipe_file": "corpus.toml", "sources": []}).encode(),
        "recipe/corpus.toml": recipe.encode(),
    }
    entries = [f'"{name}": {{"sha256": "{hashlib.sha256(data).hexdigest()}", '
               f'"size": {len(data)}}}' for name, data in members.items()]
    if twice is not None:  # the same entry again: each copy is true, the list is not
        entries += [entry for name, entry in zip(members, entries, strict=True) if name == twice]
    manifest = '{"format": 1, "members": {' + ", ".join(entries) + "}}"
    with tarfile.open(path, "w:xz") as tar:
        for name, data in {**members, "manifest.json": manifest.encode()}.items():
            add_bytes(tar, f"{top}/{name}", data)
    return path
