"""Which runtime wheels of vLLM 0.20.0 the device (nvidia-h200) lacks, and their size.

Resolves vLLM 0.20.0's own runtime requirements (``requirements/cuda.txt`` with
``common.txt``, read from its sdist) for the device's interpreter (CPython 3.12,
manylinux x86_64) with ``uv pip compile``, takes away every project the device's image
holds (the package list of /work/.library/device/KINDS.md), downloads the rest (no
dependencies, the device's platform) and writes their names, versions and sizes as JSON.
torch, torchaudio and torchvision are the device's own (2.11.0, the versions vLLM 0.20.0
pins), so they are never carried.

    python bench/first-start/missing_wheels.py --sdist vllm-0.20.0.tar.gz --kinds KINDS.md \\
        --dest carried/ --out bench/first-start/missing_wheels.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

PLATFORM = "x86_64-manylinux_2_28"
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                 "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def device_packages(kinds: Path) -> set[str]:
    """The projects the device's image holds: the 'Packages:' list of KINDS.md."""
    text = kinds.read_text(encoding="utf-8")
    match = re.search(r"Packages: (.+?)\.\s*$", text, re.MULTILINE)
    if not match:
        raise SystemExit(f"no 'Packages:' list in {kinds}")
    return {canonicalize_name(name.strip()) for name in match.group(1).split(",")}


def requirements(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if "/requirements/" in member.name and member.name.endswith((".txt",)):
                archive.extract(member, into, filter="data")
    (cuda,) = into.glob("*/requirements/cuda.txt")
    return cuda


def resolve(cuda: Path) -> list[tuple[str, str]]:
    result = subprocess.run(
        ["uv", "pip", "compile", str(cuda), "--python-version", "3.12", "--python-platform",
         PLATFORM, "--no-header", "--no-annotate", "--quiet", "--index-url",
         "https://pypi.org/simple", "--no-config"],
        capture_output=True, text=True, check=True)
    pins: list[tuple[str, str]] = []
    for line in result.stdout.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins.append((canonicalize_name(name.split("[")[0]), version.split(";")[0].strip()))
    return pins


def download(name: str, version: str, dest: Path) -> Path | None:
    before = set(dest.glob("*"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--python-version", "3.12", "--implementation", "cp", "--dest", str(dest),
               f"{name}=={version}"]
    for tag in PIP_PLATFORMS:
        command += ["--platform", tag]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    new = set(dest.glob("*")) - before
    found = new or {p for p in dest.glob("*") if canonicalize_name(p.name.split("-")[0]) == name}
    return sorted(found)[0] if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, required=True)
    parser.add_argument("--kinds", type=Path, default=Path("/work/.library/device/KINDS.md"))
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    have = device_packages(args.kinds)
    with tempfile.TemporaryDirectory() as scratch:
        pins = resolve(requirements(args.sdist, Path(scratch)))
    args.dest.mkdir(parents=True, exist_ok=True)
    missing: list[dict[str, Any]] = []
    failed: list[str] = []
    for name, version in pins:
        if name in have:
            continue
        wheel = download(name, version, args.dest)
        if wheel is None:
            failed.append(f"{name}=={version}")
            continue
        missing.append({"name": name, "version": version, "file": wheel.name,
                        "size": wheel.stat().st_size})
    total = sum(item["size"] for item in missing)
    report = {"resolved": len(pins), "on_device": len(pins) - len(missing) - len(failed),
              "missing": missing, "missing_count": len(missing), "total_bytes": total,
              "total_mib": round(total / 2**20, 1), "no_wheel_found": failed}
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{len(missing)} wheels missing on the device, {total / 2**20:.1f} MiB; "
          f"no wheel: {failed}")


if __name__ == "__main__":
    main()
