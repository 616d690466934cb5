"""What a build asks of the team, resolved once: the shared compile cache, the sccache-dist
scheduler and the client token's file.  ``wheel`` and ``doctor`` both call
:func:`resolve_team` on their options, so the same flags and recipe give both the same
cache and the same scheduler.

One rule for each: the flag (``--compile-cache``, ``--dist``), else the recipe's
``[build]`` key (``compile_cache``, ``dist``), else none.  A relative cache directory is
taken from the working directory when the flag names it, from the recipe's folder when the
recipe does.  The client token is ``--dist-token-file``, else ``$SPARKBUILD_DIST_TOKEN``:
read and checked by :mod:`.dist_token` when the scheduler is probed, never here.  A token
file without a scheduler is refused.  Each build server's memory is
``--dist-server-memory``, else the recipe's ``[build] dist_server_memory_gib``
(:func:`sparkbuild.jobplan.team_pool.server_memory`: a size that is not one is refused
here, before anything is asked).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sparkbuild.errors import UsageError
from sparkbuild.jobplan.team_pool import ServerMemory, server_memory
from sparkbuild.team.compile_cache import CacheSpec, parse_cache_url

if TYPE_CHECKING:
    from sparkbuild.recipe import Recipe


class TeamFlags(Protocol):
    """The flags a command takes for the team, and its recipe (``wheel``'s, ``doctor``'s)."""

    @property
    def compile_cache(self) -> str | None: ...

    @property
    def dist(self) -> str | None: ...

    @property
    def dist_token_file(self) -> Path | None: ...

    @property
    def dist_server_memory_gib(self) -> float | None: ...

    @property
    def recipe(self) -> Recipe | None: ...


@dataclass(frozen=True, kw_only=True)
class TeamOptions:
    """The cache and the scheduler a build uses, each from one place."""

    cache: CacheSpec | None = None
    """The shared compile cache; None: the local launcher (ccache), if any."""
    dist: str | None = None
    """The sccache-dist scheduler's URL; None: every unit compiles on this machine."""
    token_file: Path | None = None
    """The client token's file; None: ``$SPARKBUILD_DIST_TOKEN``."""
    server_memory: ServerMemory | None = None
    """Each build server's memory, which sizes the heavy pool with dist; None: the build
    host's usable memory counts as a server's."""

    @property
    def shared(self) -> bool:
        """A shared cache or a scheduler: the build runs under the stable build root."""
        return self.cache is not None or self.dist is not None


def resolve_team(flags: TeamFlags) -> TeamOptions:
    """``flags`` resolved by the rule of the module docstring (UsageError for a cache URL
    that cannot be read, or a token file without a scheduler)."""
    recipe = flags.recipe
    cache: CacheSpec | None = None
    if flags.compile_cache:
        cache = parse_cache_url(flags.compile_cache, relative_to=Path.cwd())
    elif recipe is not None and recipe.build.compile_cache:
        cache = parse_cache_url(recipe.build.compile_cache, relative_to=recipe.path.parent)
    dist = flags.dist or (recipe.build.dist if recipe is not None else None) or None
    if dist is None and flags.dist_token_file is not None:
        raise UsageError("--dist-token-file needs a scheduler: --dist URL or the "
                         "recipe's [build] dist")
    memory = server_memory(flags.dist_server_memory_gib,
                           recipe.build.dist_server_memory_gib if recipe is not None else None)
    return TeamOptions(cache=cache, dist=dist, token_file=flags.dist_token_file,
                       server_memory=memory)
