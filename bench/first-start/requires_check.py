"""pip check, ahead of time and offline: would the node's venv meet every requirement?

The first-start venv on the device is the image's site-packages (``--system-site-packages``)
with the carried runtime wheels over it.  ``sparkbuild install`` ends with ``pip check``
there, and a conflict with a version the image holds (vLLM pins some of its requirements
exactly) fails it.  This reads the image's ``pip list --format=freeze`` (taken on the
device by ``fs.sh build``), the wheels that would be installed over it, and the
requirements of vLLM itself (its ``requirements/*.txt`` from the sdist), and prints every
requirement the result would not meet, for CPython 3.12 on Linux x86_64.

    python requires_check.py --freeze device-pip-list.txt --wheels DIR [DIR...] \\
        --sdist vllm-0.20.0.tar.gz [--json out.json]
"""

from __future__ import annotations

import argparse
import email.parser
import json
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from missing_wheels import freeze_versions, requirements  # the script beside this one
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sparkbuild.sources.requirements import read_requirements

ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.3",
               "sys_platform": "linux", "platform_system": "Linux",
               "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist()
                   if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(archive.read(meta).decode("utf-8"))
    return message.get_all("Requires-Dist") or []


def sdist_requirements(sdist: Path) -> list[str]:
    """requirements/cuda.txt with what it includes (-r), as the built wheel declares them:
    the files ``missing_wheels.py`` resolves, read by sparkbuild's requirements reader."""
    with tempfile.TemporaryDirectory() as scratch:
        return [line.text for line in read_requirements(requirements(sdist, Path(scratch)))]


def unmet(requirer: str, lines: list[str], installed: dict[str, str]) -> list[dict[str, Any]]:
    problems = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(ENVIRONMENT):
            continue
        name = canonicalize_name(requirement.name)
        have = installed.get(name)
        if have is None:
            problems.append({"requirer": requirer, "requirement": str(requirement),
                             "have": None})
        elif requirement.specifier and not requirement.specifier.contains(
                Version(have), prereleases=True):
            problems.append({"requirer": requirer, "requirement": str(requirement),
                             "have": have})
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--freeze", type=Path, required=True)
    parser.add_argument("--wheels", type=Path, nargs="*", default=[])
    parser.add_argument("--sdist", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    installed = freeze_versions(args.freeze.read_text())
    wheels = sorted(w for d in args.wheels for w in d.glob("*.whl"))
    for wheel in wheels:  # the carried wheels go over the image's
        name, version, _, _ = parse_wheel_filename(wheel.name)
        installed[canonicalize_name(name)] = str(version)
    installed.setdefault("vllm", "0.20.0")
    problems = unmet("vllm", sdist_requirements(args.sdist), installed)
    for wheel in wheels:
        problems += unmet(wheel.name, wheel_requirements(wheel), installed)
    for p in problems:
        print(f"{p['requirer']}: {p['requirement']} -- have {p['have'] or 'nothing'}")
    if args.json:
        args.json.write_text(json.dumps(problems, indent=2) + "\n")
    print(f"{len(problems)} unmet requirement(s), {len(wheels)} wheels over "
          f"{len(installed) - len(wheels)} image projects", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
