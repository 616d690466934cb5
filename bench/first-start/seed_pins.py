"""Put the recipe's pinned wheels into a cache as ``wheel`` records them, for a host with
no index: a bundle carries the build's inputs, not the wheelhouse's pins.

    python seed_pins.py RECIPE CACHE WHEEL_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.utils import canonicalize_name

from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache


def main() -> int:
    recipe, cache = load_recipe(Path(sys.argv[1])), Cache(Path(sys.argv[2]))
    wheels = Path(sys.argv[3])
    for pin in recipe.pins:
        stem = canonicalize_name(pin.name).replace("-", "_")
        found = sorted(wheels.rglob(f"{stem}-{pin.version}-*.whl"))
        if not found:
            print(f"no wheel for {pin.requirement} under {wheels}", file=sys.stderr)
            return 1
        digest = cache.put_file(found[0], sha256=pin.sha256)
        cache.record("pins", f"{canonicalize_name(pin.name)}=={pin.version}", {
            "url": f"file://{found[0]}", "filename": found[0].name, "sha256": digest})
        print(f"seeded {pin.requirement}: {found[0].name} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
