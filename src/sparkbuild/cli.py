"""Command line: parse arguments, call one stage, print its result.  Nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sparkbuild import __version__
from sparkbuild.console import console
from sparkbuild.errors import InterruptedRun, SparkbuildError, StageResult
from sparkbuild.recipe import DEFAULT_RECIPE, Recipe, load_recipe

Handler = Callable[[argparse.Namespace], StageResult]


def _recipe(args: argparse.Namespace) -> Recipe:
    return load_recipe(Path(args.recipe) if args.recipe else DEFAULT_RECIPE)


def _prepare(args: argparse.Namespace) -> StageResult:
    from sparkbuild.patches.prepare import prepare_tree

    recipe = _recipe(args)
    return prepare_tree(
        args.source or recipe.source.spec, Path(args.dest), recipe, update_lock=args.update_lock
    )


def _patch(args: argparse.Namespace) -> StageResult:
    from sparkbuild.patches import engine

    recipe = _recipe(args)
    action = {
        "status": engine.series_status,
        "apply": engine.apply_series,
        "revert": engine.revert_series,
    }[args.action]
    return action(Path(args.tree), recipe)


def _vendor(args: argparse.Namespace) -> StageResult:
    from sparkbuild.build.vendor import vendor_tree

    return vendor_tree(Path(args.tree), Path(args.cache), plan_only=args.plan)


def _wheel(args: argparse.Namespace) -> StageResult:
    from sparkbuild.pipeline import WheelOptions, build_wheel

    options = WheelOptions(
        recipe=_recipe(args),
        source=args.source,
        cache=Path(args.cache) if args.cache else None,
        out=Path(args.out),
        offline=args.offline,
        jobs=args.jobs,
        platform=args.platform,
        update_lock=args.update_lock,
    )
    return build_wheel(options)


def _doctor(args: argparse.Namespace) -> StageResult:
    from sparkbuild.build.doctor import run_doctor

    return run_doctor(
        tree=Path(args.tree) if args.tree else None, job_memory_gib=args.job_memory_gib
    )


def _check(args: argparse.Namespace) -> StageResult:
    from sparkbuild.build.check import check_tree

    return check_tree(Path(args.tree), _recipe(args), only=args.unit, all_units=args.all)


def _lock(args: argparse.Namespace) -> StageResult:
    from sparkbuild.wheelhouse.lock import lock_closure

    recipe = _recipe(args)
    return lock_closure(
        recipe,
        platform=args.platform or recipe.target.platform,
        python=args.python or recipe.target.python,
        out=Path(args.out),
    )


def _verify(args: argparse.Namespace) -> StageResult:
    from sparkbuild.wheelhouse.verify import verify_wheelhouse

    return verify_wheelhouse(Path(args.dir))


def _install(args: argparse.Namespace) -> StageResult:
    from sparkbuild.wheelhouse.install import install_wheelhouse

    return install_wheelhouse(Path(args.dir), Path(args.venv))


def _selftest(args: argparse.Namespace) -> StageResult:
    from sparkbuild.build.selftest import run_e2m1_selftest

    return run_e2m1_selftest(gpu=args.gpu)


def _add_common(parser: argparse.ArgumentParser, *, recipe: bool = False) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    if recipe:
        parser.add_argument(
            "--recipe", metavar="FILE", help=f"recipe TOML (default: {DEFAULT_RECIPE.name})"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkbuild",
        description="Build vLLM for DGX Spark (sm_121): source, patch series, offline build, "
        "pinned wheelhouse.",
    )
    parser.add_argument("--version", action="version", version=f"sparkbuild {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("prepare", help="fetch a source and apply the patch series into DIR")
    p.add_argument("--source", metavar="SPEC", help="git+URL@REF, a path, PATH#sha256=HEX, "
                   "or pypi:NAME==VERSION (default: the recipe's)")
    p.add_argument("--dest", metavar="DIR", required=True, help="empty or missing directory")
    p.add_argument("--update-lock", action="store_true", help="re-resolve a branch ref")
    _add_common(p, recipe=True)
    p.set_defaults(handler=_prepare)

    p = sub.add_parser("patch", help="status, apply or revert the series on a tree")
    p.add_argument("action", choices=("status", "apply", "revert"))
    p.add_argument("tree", metavar="TREE")
    _add_common(p, recipe=True)
    p.set_defaults(handler=_patch)

    p = sub.add_parser("vendor", help="store everything the build would fetch in a cache")
    p.add_argument("--tree", required=True, metavar="TREE")
    p.add_argument("--cache", required=True, metavar="DIR")
    p.add_argument("--plan", action="store_true", help="list, download nothing")
    _add_common(p)
    p.set_defaults(handler=_vendor)

    p = sub.add_parser("wheel", help="prepare, vendor and build; write a pinned wheelhouse")
    p.add_argument("--source", metavar="SPEC", help="override the recipe's source")
    p.add_argument(
        "--cache", metavar="DIR", help="dependency cache (default: ~/.cache/sparkbuild)"
    )
    p.add_argument("--out", metavar="DIR", default="wheelhouse", help="wheelhouse directory")
    p.add_argument("--offline", action="store_true", help="no network at all: cache only")
    p.add_argument("--jobs", type=int, metavar="N", help="compile jobs (default: doctor's)")
    p.add_argument("--platform", metavar="PLAT", help="download the runtime closure for PLAT")
    p.add_argument("--update-lock", action="store_true", help="re-resolve a branch ref")
    _add_common(p, recipe=True)
    p.set_defaults(handler=_wheel)

    p = sub.add_parser("doctor", help="check the toolchain and choose build parallelism")
    p.add_argument("--tree", metavar="TREE", help="also check torch against this tree's pin")
    p.add_argument("--job-memory-gib", type=float, default=None, metavar="GIB",
                   help="memory budget per compile job")
    _add_common(p)
    p.set_defaults(handler=_doctor)

    p = sub.add_parser("check", help="compile the units the series changed for the target "
                       "arch, and read their machine code")
    p.add_argument("--tree", required=True, metavar="TREE")
    units = p.add_mutually_exclusive_group()
    units.add_argument("--unit", action="append", metavar="PATH",
                       help="compile only this unit (tree-relative .cu path; repeatable)")
    units.add_argument("--all", action="store_true",
                       help="compile every CUDA unit the build compiles for the target")
    _add_common(p, recipe=True)
    p.set_defaults(handler=_check)

    p = sub.add_parser("lock", help="resolve the runtime closure for a platform, with hashes")
    p.add_argument("--platform", metavar="PLAT")
    p.add_argument("--python", metavar="X.Y")
    p.add_argument("--out", required=True, metavar="DIR")
    _add_common(p, recipe=True)
    p.set_defaults(handler=_lock)

    p = sub.add_parser("verify", help="re-hash a wheelhouse and list the CUDA archs inside")
    p.add_argument("dir", metavar="DIR")
    _add_common(p)
    p.set_defaults(handler=_verify)

    p = sub.add_parser("install", help="install a wheelhouse into a venv, with no network")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--venv", required=True, metavar="PATH")
    _add_common(p)
    p.set_defaults(handler=_install)

    p = sub.add_parser("selftest", help="prove a piece of the toolchain on this machine")
    p.add_argument("what", choices=("e2m1",))
    p.add_argument("--gpu", action="store_true", help="also compare on the local GPU")
    _add_common(p)
    p.set_defaults(handler=_selftest)
    return parser


def _print_result(result: StageResult, as_json: bool) -> None:
    if as_json:
        payload = result.to_dict()
        if result.error is not None:
            payload["error"] = result.error.to_dict()
        sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    else:
        for line in result.summary():
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_error(error: SparkbuildError, as_json: bool) -> None:
    console.print(error.render(), style="bold red", markup=False, highlight=False)
    if as_json:
        sys.stdout.write(json.dumps({"error": error.to_dict()}, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    try:
        result: StageResult = args.handler(args)
    except KeyboardInterrupt:
        _print_error(InterruptedRun("interrupted", hint="run the same command again"), as_json)
        return InterruptedRun.exit_code
    except SparkbuildError as error:
        _print_error(error, as_json)
        return error.exit_code
    _print_result(result, as_json)
    if result.error is not None:
        console.print(result.error.render(), style="bold red", markup=False, highlight=False)
        return result.error.exit_code
    return 0
