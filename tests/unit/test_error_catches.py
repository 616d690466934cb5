"""Who catches the error family (``sparkbuild.errors``), read from the source with :mod:`ast`.

``cli.main`` catches every error to print it.  Anywhere else an ``except`` of the family
either raises (the error again, or one with more context, after cleaning up), or stands in
:data:`RECORDED`: a check that names the failure as one finding among others, a kept result
or speed-up that never fails a run, a more detailed message that falls back to a plainer
one, or the next of several sources tried in turn.  Never does one decide an ordinary
branch: a function that can find nothing returns nothing.  docs/layout.md says the same."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from sparkbuild import errors

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparkbuild"
FAMILY = frozenset(name for name, value in vars(errors).items()
                   if inspect.isclass(value) and issubclass(value, errors.SparkbuildError))

FINDING = "a check that names the failure as one finding among others"
KEPT = "a kept result or a speed-up, which never fails a run"
PLAINER = "a more detailed message or record falls back to a plainer one"
NEXT = "the next of several sources, tried in turn (all failing: raised)"

RECORDED = {
    "cli.py main": "prints the error",
    "cli.py _run": "prints the error",
    "compile/doctor.py _check_nvcc": FINDING,
    "node/preflight.py _run_command": FINDING,
    "node/preflight.py read_built": FINDING,
    "node/installed.py distributions": FINDING,
    "node/installed_check.py _recorded_manifest": FINDING,
    "node/installed_check.py _compare_with_wheels": FINDING,
    "node/installed_check.py _check_own_files": FINDING,
    "node/venv_files.py read_pyvenv_cfg": FINDING,
    "node/venv_files.py _profile_findings": FINDING,
    "team/dist_checks.py client_checks": FINDING,
    "team/dist_checks.py server_checks": FINDING,
    "team/dist_client.py read_status": FINDING,
    "team/dist_client.py token_refusal": FINDING,
    "wheelhouse/verify.py check_lock": FINDING,
    "wheelhouse/verify.py check_requirements": FINDING,
    "wheelhouse/requirements_check.py check_wheelhouse_requirements": FINDING,
    "wheelhouse/wheel_roles.py _holds_own_sbom": FINDING,
    "wheelhouse/destination.py foreign_files": FINDING,
    "store/wheel_check.py wheel_problems": FINDING,
    "patches/engine.py _prepared_or_failed": FINDING,
    "vendoring/patched.py apply_to_source": FINDING,
    "checks/code_forecast.py forecast_code": FINDING,
    "compile/unit_code_watch.py check": FINDING,
    "flashinfer/kept_builds.py kept": KEPT,
    "toolchain/kept_sass.py _record": KEPT,
    "store/cache.py _reuse": KEPT,
    "recipe.py pin_where": PLAINER,
    "recipe.py require_spark_target": PLAINER,
    "toolchain/tools.py describe_toolchain": PLAINER,
    "patches/edits/edit_plan.py toolchain_cuda": PLAINER,
    "wheelhouse/target_tags.py accepted_platforms": PLAINER,
    "bundle/read.py inside": PLAINER,
    "pipeline.py _source_directory": PLAINER,
    "sources/index.py find_file": NEXT,
    "vendoring/fetch.py _fetch_url": NEXT,
}
"""Each catch of the family that does not raise, by ``module function``, and why."""


def _names(node: ast.expr | None) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _names(element)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def _quiet(node: ast.AST) -> bool:
    """Whether ``node`` catches the family without raising anything."""
    if isinstance(node, ast.ExceptHandler) and FAMILY.intersection(_names(node.type)):
        return not any(isinstance(inner, ast.Raise)
                       for statement in node.body for inner in ast.walk(statement))
    if isinstance(node, ast.With):
        return any(isinstance(call := item.context_expr, ast.Call)
                   and isinstance(call.func, ast.Attribute) and call.func.attr == "suppress"
                   and FAMILY.intersection(n for a in call.args for n in _names(a))
                   for item in node.items)
    return False


def _walk(node: ast.AST, function: str) -> list[tuple[ast.AST, str]]:
    """Every node below ``node`` with the name of the innermost function holding it."""
    found = []
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
            else function
        found.append((child, inner))
        found += _walk(child, inner)
    return found


def quiet_catches(root: Path) -> set[str]:
    """``module function`` of every ``except`` (or ``contextlib.suppress``) of the family
    under ``root`` whose handler raises nothing."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {f"{path.relative_to(root).as_posix()} {function}"
                  for node, function in _walk(tree, "-") if _quiet(node)}
    return found


def test_every_quiet_catch_of_the_family_is_one_the_rules_allow() -> None:
    assert sorted(quiet_catches(PACKAGE) - RECORDED.keys()) == []
    assert sorted(RECORDED.keys() - quiet_catches(PACKAGE)) == []  # no stale entry


def test_the_scan_sees_a_quiet_catch_and_lets_a_re_raise_pass(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import contextlib\n"
        "from sparkbuild.errors import RecipeError, SourceError\n"
        "def quiet():\n"
        "    try:\n        pass\n    except RecipeError:\n        return []\n"
        "def wraps():\n"
        "    try:\n        pass\n    except (OSError, SourceError) as exc:\n"
        "        raise RecipeError('x') from exc\n"
        "def suppressed():\n"
        "    with contextlib.suppress(SourceError):\n        pass\n"
        "def other():\n"
        "    try:\n        pass\n    except OSError:\n        return []\n")
    assert quiet_catches(tmp_path) == {"m.py quiet", "m.py suppressed"}
