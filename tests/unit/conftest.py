"""Unit tests never start a process: any attempt fails the test."""

from __future__ import annotations

import os
import subprocess
from typing import NoReturn

import pytest


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError(f"unit tests must not spawn processes: {args[:1]!r}")


@pytest.fixture(autouse=True)
def no_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "Popen", _refuse)
    monkeypatch.setattr(os, "system", _refuse)
    monkeypatch.setattr(os, "posix_spawn", _refuse)
    monkeypatch.setattr(os, "posix_spawnp", _refuse)
    monkeypatch.setattr(os, "fork", _refuse)
