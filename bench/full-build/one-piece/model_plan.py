"""The vendor plan of a prepared tree as ``bundle`` and ``wheel`` make it for a recipe.

    python bench/full-build/one-piece/model_plan.py TREE --recipe RECIPE --cache CACHE

Printed as JSON (``VendorPlan.to_dict()``): the recipe's ``[vendor]`` choices and
``[[vendor.stand_in]]`` entries applied, and, for a recipe with ``[model]``, the sources only
left-out extensions use moved to ``excluded`` with their placeholders
(``sparkbuild.compile.extension_set``).  Nothing is fetched.  ``sources.py`` reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sparkbuild.compile.extension_set import placeholders_for
from sparkbuild.node.profile import declared_env
from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.fetch import vendor_for_recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--recipe", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe)
    choose = placeholders_for(recipe, profile=declared_env(recipe))
    placeholders = choose(args.tree) if choose else ()
    vendored = vendor_for_recipe(args.tree, Cache(args.cache.resolve()), recipe, offline=True,
                                 wheels=False, placeholders=placeholders)
    print(json.dumps(vendored.plan.to_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
