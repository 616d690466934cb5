"""The image's projects that the node set takes as they are, linked into a venv.

Run by the image's own interpreter (the device's ``python3``, itself a venv at
/opt/torch/.venv: a venv made from it with ``--system-site-packages`` would see the base
interpreter's site-packages, not the image's, so torch would not be there).  For each
``name==version`` of the list (``missing_wheels.py --view-list``) it finds that
distribution among this interpreter's, checks the version, and links its top-level files
and its ``.dist-info`` into VIEW; the venv gets one ``.pth`` line that puts VIEW on its
path.  So the venv sees exactly the node set: these projects from the image, the carried
wheels installed into it, and nothing else of the image's (pip check there judges one
resolution, not the image's other 200 projects).

    python3 image_view.py --list image-view.txt --view VIEW --venv VENV [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import sys
from pathlib import Path
from typing import Any

from missing_wheels import freeze_versions  # the script beside this one
from packaging.utils import canonicalize_name

PTH_NAME = "zz-first-start-image-view.pth"


def installed(path: list[str] | None = None) -> dict[str, metadata.Distribution]:
    """This interpreter's distributions (or those on ``path``), by canonical name."""
    found: dict[str, metadata.Distribution] = {}
    found_on = (metadata.distributions() if path is None
                else metadata.distributions(path=path))
    for dist in found_on:
        name = canonicalize_name(dist.metadata["Name"] or "")
        found.setdefault(name, dist)  # the first on sys.path wins, as for an import
    return found


def top_level(dist: metadata.Distribution) -> tuple[Path, set[str]]:
    """The site directory of ``dist`` and the names it installs there (RECORD's first
    path components; files outside the site directory, such as scripts, are skipped)."""
    site = Path(str(dist.locate_file("")))
    names: set[str] = set()
    for entry in dist.files or []:
        first = Path(str(entry)).parts[0]
        if first not in ("..", "__pycache__"):
            names.add(first)
    return site, names


def link(wanted: dict[str, str], view: Path, path: list[str] | None = None) -> dict[str, Any]:
    """Link each wanted ``name: version`` into ``view``; a project missing, or at another
    version, is a problem (the venv would not be the node set)."""
    dists = installed(path)
    linked, problems = [], []
    view.mkdir(parents=True, exist_ok=True)
    for name, version in sorted(wanted.items()):
        dist = dists.get(name)
        if dist is None or dist.version != version:
            problems.append(f"{name}=={version}: the image has "
                            f"{dist.version if dist else 'nothing'}")
            continue
        site, names = top_level(dist)
        for entry in sorted(names):
            target, source = view / entry, site / entry
            if source.exists() and not target.exists():
                target.symlink_to(source, target_is_directory=source.is_dir())
        linked.append(f"{name}=={version}")
    return {"view": str(view), "linked": linked, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", type=Path, required=True)
    parser.add_argument("--view", type=Path, required=True)
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    wanted = freeze_versions(args.list.read_text())
    result = link(wanted, args.view)
    (site,) = args.venv.glob("lib/python3*/site-packages")
    (site / PTH_NAME).write_text(f"{args.view.resolve()}\n")
    result["pth"] = str(site / PTH_NAME)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"linked {len(result['linked'])} of {len(wanted)} projects from the image into "
          f"{args.view}; problems: {result['problems']}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
