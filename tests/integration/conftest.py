"""Shared fixtures of the integration tests: real sdists, cached under ~/.cache."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkbuild.sources.index import fetch_sdist
from sparkbuild.store.cache import Cache, default_cache_root

if TYPE_CHECKING:
    from collections.abc import Callable


HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``integration`` on the tests under tests/integration/ only.

    This hook sees every collected item of the session, not only this directory's, so
    each item's path decides (``-m "not integration"`` must still select the unit tests).
    """
    for item in items:
        if item.path.resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def vllm_sdist() -> Callable[[str], Path]:
    """``vllm_sdist("0.33.0")``: the real vllm sdist, through sparkbuild's own index client.

    Downloaded once from the index pip is configured with (sha256 checked against the
    index's) into the user's cache (~/.cache/sparkbuild, or $SPARKBUILD_CACHE as it was when
    the session started), so later sessions need no network.  The path is the cache blob:
    its name is the sha256, not the sdist's file name.  Tests using it are ``network``.
    """
    cache = Cache(default_cache_root())
    fetched: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in fetched:
            fetched[version] = fetch_sdist(cache, "vllm", version)
        return fetched[version]

    return get
