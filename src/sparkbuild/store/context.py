"""The run's context: which cache, whether the network may be used, which recipe.

Every stage needs these three.  The command line builds one :class:`RunContext` and hands
it down, so that no stage finds ``~/.cache/sparkbuild`` (or the network) on its own when
``--cache DIR`` (or ``--offline``) was given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.store.cache import Cache, default_cache_root

if TYPE_CHECKING:
    from sparkbuild.recipe import Recipe


@dataclass(frozen=True)
class RunContext:
    cache_root: Path
    """Absolute: ``--cache DIR``, else ``$SPARKBUILD_CACHE``, else ``~/.cache/sparkbuild``."""
    offline: bool = False
    """Only the cache may serve: no index, no git remote, no download."""
    recipe: Recipe | None = None
    """The recipe whose pins and lock file apply (None: a source that is not its own)."""

    @classmethod
    def create(
        cls, cache: Path | str | None = None, *, offline: bool = False, recipe: Recipe | None = None
    ) -> RunContext:
        root = Path(cache).expanduser() if cache else default_cache_root()
        return cls(root.resolve(), offline, recipe)

    def cache(self) -> Cache:
        return Cache(self.cache_root)

    def with_recipe(self, recipe: Recipe | None) -> RunContext:
        return dataclasses.replace(self, recipe=recipe)
