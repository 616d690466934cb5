"""The environment variables: each declared once in sparkbuild.settings, read only there,
typed, and docs/environment.md written from the declarations."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from sparkbuild import settings
from sparkbuild.errors import UsageError
from sparkbuild.settings import (
    BY_NAME,
    JOB_PLAN,
    MAX_JOBS,
    NET_TIMEOUT,
    QUIET,
    SETTINGS,
    Setting,
    markdown_table,
    page_tables,
    written_page,
)

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "sparkbuild"
PAGE = ROOT / "docs" / "environment.md"
NOT_ENVIRONMENT = re.compile(r"SPARKBUILD_(E2M1_\w+|FETCH_KEYWORDS|RECORDED_KEYWORDS)")
"""Names that are no environment variable: the E2M1 header's macros and its test project's
CMake variables, the dependency provider's own CMake lists."""


def test_the_page_shows_exactly_the_declarations() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert page_tables(page) == [markdown_table("you"), markdown_table("sparkbuild")], \
        "run: python -m sparkbuild.settings docs/environment.md"
    assert written_page(page) == page


def test_a_changed_declaration_makes_the_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    page = PAGE.read_text(encoding="utf-8")
    changed = dataclasses.replace(NET_TIMEOUT, default="90")
    monkeypatch.setattr(settings, "SETTINGS", tuple(
        changed if s is NET_TIMEOUT else s for s in SETTINGS))
    assert page_tables(page)[0] != markdown_table("you")
    assert "| `SPARKBUILD_NET_TIMEOUT` | seconds | 90 |" in written_page(page)


def test_every_sparkbuild_variable_the_code_names_is_declared() -> None:
    named: set[str] = set()
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "build_tools").glob("*.cmake")]:
        named |= set(re.findall(r"SPARKBUILD_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
    undeclared = {n for n in named if n not in BY_NAME and not NOT_ENVIRONMENT.fullmatch(n)}
    assert not undeclared, f"declare them in sparkbuild/settings.py: {sorted(undeclared)}"
    assert len(BY_NAME) == len(SETTINGS)


def _reads_outside_settings() -> list[str]:
    """Each place outside settings.py that spells a declared variable's name as a whole
    string, or reads one of them from the environment."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    re.fullmatch(r"SPARKBUILD_[A-Z0-9_]+", node.value)
                    and not NOT_ENVIRONMENT.fullmatch(node.value)):
                found.append(f"{path.name}:{node.lineno}: {node.value}")
            if isinstance(node, ast.Call) and node.args and isinstance(
                    node.args[0], ast.Constant) and node.args[0].value in BY_NAME:
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr in ("get", "getenv")) or (
                        isinstance(func, ast.Name) and func.id == "getenv"):
                    found.append(f"{path.name}:{node.lineno}: reads {node.args[0].value}")
    return found


def test_no_module_but_settings_spells_or_reads_a_variable() -> None:
    assert _reads_outside_settings() == []


@pytest.mark.parametrize(("setting", "value", "wanted"), [
    (NET_TIMEOUT, "soon", "a number of seconds"),
    (NET_TIMEOUT, "-1", "a number of seconds"),
    (NET_TIMEOUT, "nan", "a number of seconds"),
    (MAX_JOBS, "0", "a positive whole number"),
    (MAX_JOBS, "3.5", "a positive whole number"),
    (MAX_JOBS, "-2", "a positive whole number"),
    (JOB_PLAN, "fast", "one of pools, single"),
])
def test_a_value_of_the_wrong_type_is_a_named_usage_error(setting: Setting, value: str,
                                                          wanted: str) -> None:
    environ = {setting.name: value}
    with pytest.raises(UsageError) as raised:
        if setting.kind == "seconds":
            setting.seconds(environ=environ)
        elif setting.kind == "count":
            setting.count(environ=environ)
        else:
            setting.choice(environ=environ)
    assert raised.value.what == f"{setting.name} must be {wanted}, not {value!r}"
    assert raised.value.exit_code == 2


def test_the_readers_read_what_is_set_and_an_empty_value_is_unset() -> None:
    assert NET_TIMEOUT.seconds(environ={}) == 60.0
    assert NET_TIMEOUT.seconds(10.0, environ={"SPARKBUILD_NET_TIMEOUT": " "}) == 10.0
    assert NET_TIMEOUT.seconds(environ={"SPARKBUILD_NET_TIMEOUT": "2.5"}) == 2.5
    assert MAX_JOBS.count(environ={"MAX_JOBS": ""}) is None
    assert MAX_JOBS.count(environ={"MAX_JOBS": " 3 "}) == 3
    assert JOB_PLAN.choice(environ={"SPARKBUILD_JOB_PLAN": "Single"}) == "single"
    assert QUIET.flag(environ={"SPARKBUILD_QUIET": "0"}) is False
    assert QUIET.flag(environ={"SPARKBUILD_QUIET": "yes"}) is True
    assert settings.CACHE.path(environ={"SPARKBUILD_CACHE": "~/c"}) == Path("~/c").expanduser()
    with pytest.raises(TypeError):
        MAX_JOBS.seconds(environ={})  # a reader of another kind is a programming error
