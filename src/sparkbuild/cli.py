"""Command line: parse arguments, call one stage, print its result.  Nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from sparkbuild import __version__
from sparkbuild.console import say, set_verbose
from sparkbuild.errors import InterruptedRun, SparkbuildError, StageResult, UsageError
from sparkbuild.proc import interrupt_on_sigterm
from sparkbuild.recipe import DEFAULT_RECIPE, Recipe, load_recipe
from sparkbuild.team.dist_token import TOKEN_ENV

if TYPE_CHECKING:
    from sparkbuild.store.context import RunContext

Handler = Callable[[argparse.Namespace], StageResult]


def _recipe(args: argparse.Namespace) -> Recipe:
    return load_recipe(Path(args.recipe) if args.recipe else DEFAULT_RECIPE)


def _context(args: argparse.Namespace, recipe: Recipe) -> RunContext:
    """The cache (``--cache``), offline mode and recipe every stage of the command reads."""
    from sparkbuild.store.context import RunContext

    return RunContext.create(
        args.cache, offline=bool(getattr(args, "offline", False)), recipe=recipe
    )


def _prepare(args: argparse.Namespace) -> StageResult:
    from sparkbuild.patches.prepare import prepare_tree

    recipe = _recipe(args)
    return prepare_tree(
        args.source or recipe.source.spec, Path(args.dest), recipe, update_lock=args.update_lock,
        context=_context(args, recipe),
    )


def _patch(args: argparse.Namespace) -> StageResult:
    from sparkbuild.patches import engine

    recipe = _recipe(args)
    action = {
        "status": engine.series_status,
        "apply": engine.apply_series,
        "revert": engine.revert_series,
    }[args.action]
    report = action(Path(args.tree), recipe)
    if args.action == "status" and args.cache:
        from sparkbuild.vendoring.patched import dependency_status

        report.dependencies = dependency_status(Path(args.tree), recipe, Path(args.cache))
    return report


def _vendor(args: argparse.Namespace) -> StageResult:
    from sparkbuild.sources.mirrors import Mirrors
    from sparkbuild.vendoring.plan import FetchChoices, vendor_tree

    return vendor_tree(Path(args.tree), Path(args.cache), plan_only=args.plan,
                       fetching=FetchChoices(mirrors=Mirrors.parse(args.mirror),
                                             sparse=args.sparse))


def _wheel(args: argparse.Namespace) -> StageResult:
    from sparkbuild.pipeline import WheelOptions, build_flashinfer_part, build_wheel
    from sparkbuild.store.cache import default_cache_root

    bundle = Path(args.bundle) if args.bundle else None
    cache = Path(args.cache) if args.cache else None
    opened = None
    if bundle is not None and not args.recipe:
        from sparkbuild.bundle.read import bundled_recipe, open_bundle

        opened = open_bundle(bundle, (cache or default_cache_root()).expanduser().resolve())
        recipe = bundled_recipe(opened)
    else:
        recipe = _recipe(args)
    options = WheelOptions(
        recipe=recipe,
        source=args.source,
        cache=cache,
        out=Path(args.out),
        offline=args.offline or bundle is not None,
        jobs=args.jobs,
        platform=args.platform,
        update_lock=args.update_lock,
        compile_cache=args.compile_cache,
        bundle=bundle,
        opened=opened,
        use_existing_torch=args.use_existing_torch,
        mirrors=tuple(args.mirror),
        closure=not args.no_closure,
        targets=tuple(t for t in (args.targets or "").split(",") if t),
        allow_unstartable=args.allow_unstartable,
        dist=args.dist,
        dist_token_file=Path(args.dist_token_file) if args.dist_token_file else None,
        dist_server_memory_gib=args.dist_server_memory,
        part=args.part,
    )
    return build_flashinfer_part(options) if args.part == "flashinfer" else build_wheel(options)


def _join(args: argparse.Namespace) -> StageResult:
    from sparkbuild.wheelhouse.parts import JoinOptions, join_parts

    return join_parts(JoinOptions(
        parts=tuple(Path(p) for p in args.parts), out=Path(args.out), recipe=_recipe(args),
        cache=Path(args.cache) if args.cache else None, offline=args.offline,
        bundle=Path(args.bundle) if args.bundle else None))


def _bundle(args: argparse.Namespace) -> StageResult:
    from sparkbuild.bundle.write import BundleOptions, make_bundle
    from sparkbuild.compile.extension_set import placeholders_for
    from sparkbuild.node.profile import declared_env
    from sparkbuild.wheelhouse.closure import bundle_runtime_for

    recipe = _recipe(args)
    return make_bundle(BundleOptions(
        recipe=recipe,
        out=Path(args.out),
        tree=Path(args.tree) if args.tree else None,
        cache=Path(args.cache) if args.cache else None,
        with_wheels=not args.without_wheels,
        mirrors=tuple(args.mirror),
        offline=args.offline,
        runtime=bundle_runtime_for(recipe, closure=not args.no_closure, offline=args.offline),
        placeholders=placeholders_for(recipe, profile=declared_env(recipe)),
    ))


def _doctor(args: argparse.Namespace) -> StageResult:
    from sparkbuild.compile.doctor import DoctorOptions, run_doctor

    if args.node:
        from sparkbuild.node.preflight import run_preflight

        return run_preflight(Path(args.venv) if args.venv else None)

    return run_doctor(DoctorOptions(
        tree=Path(args.tree) if args.tree else None, job_memory_gib=args.job_memory_gib,
        compile_cache=args.compile_cache,
        recipe=load_recipe(Path(args.recipe)) if args.recipe else None,
        existing_torch=args.use_existing_torch, dist=args.dist,
        dist_token_file=Path(args.dist_token_file) if args.dist_token_file else None,
        dist_server_memory_gib=args.dist_server_memory,
        build_server=Path(args.build_server) if args.build_server else None,
    ))


def _team(args: argparse.Namespace) -> StageResult:
    from sparkbuild.team.dist_services import run_scheduler, run_server

    if args.role == "scheduler":
        from sparkbuild.store.cache import default_cache_root

        state = Path(args.dir) if args.dir else default_cache_root() / "team" / "scheduler"
        return run_scheduler(
            listen=args.listen, server_key_file=Path(args.server_key_file), state_dir=state,
            client_token_file=Path(args.client_token_file) if args.client_token_file else None,
            systemd=args.systemd)
    return run_server(scheduler=args.scheduler, listen=args.listen,
                      server_key_file=Path(args.server_key_file),
                      cache_dir=Path(args.cache_dir), cpus=args.cpus, systemd=args.systemd)


def _check(args: argparse.Namespace) -> StageResult:
    from sparkbuild.checks.check import check_tree

    recipe = _recipe(args)
    if args.list_targets:
        from sparkbuild.compile.extension_set import list_targets
        from sparkbuild.node.profile import declared_env

        return list_targets(recipe, Path(args.tree) if args.tree else None,
                            _context(args, recipe), profile=declared_env(recipe))
    if not args.tree:
        raise UsageError("check needs --tree TREE", where="check",
                         hint="or --list-targets, which prepares the recipe's source itself")
    return check_tree(Path(args.tree), recipe, only=args.unit, all_units=args.all)


def _lock(args: argparse.Namespace) -> StageResult:
    from sparkbuild.wheelhouse.lock import lock_closure

    recipe = _recipe(args)
    return lock_closure(
        recipe,
        platform=args.platform or recipe.target.platform,
        python=args.python or recipe.target.python,
        out=Path(args.out),
        context=_context(args, recipe),
    )


def _verify(args: argparse.Namespace) -> StageResult:
    from sparkbuild.wheelhouse.verify import verify_wheelhouse

    if args.installed:
        from sparkbuild.node.installed_check import verify_installed

        return verify_installed(Path(args.installed), Path(args.dir) if args.dir else None)
    if not args.dir:
        raise UsageError("verify needs a wheelhouse DIR, or --installed VENV")
    return verify_wheelhouse(Path(args.dir))


def _install(args: argparse.Namespace) -> StageResult:
    from sparkbuild.node.install import install_wheelhouse
    from sparkbuild.node.remote import install_from_url, is_url

    if is_url(args.dir):
        return install_from_url(args.dir, Path(args.venv), source=args.install_from)
    return install_wheelhouse(Path(args.dir), Path(args.venv), source=args.install_from)


def _flashinfer_aot(args: argparse.Namespace) -> StageResult:
    from sparkbuild.flashinfer.builder import AotPlace, build_for_recipe
    from sparkbuild.flashinfer.module_set import listing
    from sparkbuild.store.cache import default_cache_root

    recipe = _recipe(args)
    only = tuple(args.only)
    if args.list:
        return listing(recipe, only)
    if not args.out:
        raise UsageError("flashinfer-aot needs --out DIR to build (or --list)")
    cache = (Path(args.cache) if args.cache else default_cache_root()).expanduser().resolve()
    if recipe.flashinfer.jit_cache is not None:
        from sparkbuild.wheelhouse.verify import take_judged_jit_cache

        return take_judged_jit_cache(recipe, cache, out=Path(args.out), offline=args.offline)
    return build_for_recipe(recipe, AotPlace(
        out=Path(args.out), python=Path(args.python), cache_root=cache,
        work=cache / "work" / f"{recipe.name}-flashinfer-aot", offline=args.offline,
        jobs=args.jobs, only=only))


def _recipe_schema(args: argparse.Namespace) -> StageResult:
    from sparkbuild.recipe_schema import RecipeSchema

    return RecipeSchema()


def _selftest(args: argparse.Namespace) -> StageResult:
    from sparkbuild.checks.selftest import run_e2m1_selftest

    return run_e2m1_selftest(gpu=args.gpu)


def _add_mirror(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mirror", action="append", default=[], metavar="BASE=REPLACEMENT",
        help="fetch URLs starting with BASE from REPLACEMENT instead (git's insteadOf); "
        "repeatable; also [vendor] mirrors in the recipe",
    )


def _team_role(parser: argparse.ArgumentParser, listen: str, key: str
               ) -> argparse.ArgumentParser:
    """``team scheduler`` or ``team server``: the flags both take."""
    parser.add_argument("--listen", required=True, metavar="ADDR:PORT", help=listen)
    parser.add_argument("--server-key-file", required=True, metavar="FILE", help=key)
    parser.add_argument("--systemd", action="store_true", help="print a systemd unit instead")
    _add_common(parser)
    parser.set_defaults(handler=_team)
    return parser


def _add_dist(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--dist", metavar="URL", help=f"{text}: http://HOST:PORT")
    parser.add_argument("--dist-token-file", metavar="FILE", help="the scheduler's client "
                        f"token (default: ${TOKEN_ENV}; never on the command line)")
    parser.add_argument("--dist-server-memory", type=float, metavar="GIB", help="each build "
                        "server's memory (its `doctor --build-server` prints it; default: the "
                        "recipe's [build] dist_server_memory_gib, else like this machine): "
                        "the heavy pool's depth with dist")


VERBOSE_HELP = ("echo every command run and the environment it changes (without it, and "
                "without a terminal, each kind of command is echoed once)")


def _add_common(parser: argparse.ArgumentParser, *, recipe: bool = False) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    # -v after the command too (`sparkbuild wheel -v`); SUPPRESS keeps a -v given before it
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help=VERBOSE_HELP)
    if recipe:
        parser.add_argument(
            "--recipe", metavar="FILE", help=f"recipe TOML (default: {DEFAULT_RECIPE.name})"
        )


def _add_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache", metavar="DIR", help="cache for sdists and git mirrors "
        "(default: $SPARKBUILD_CACHE or ~/.cache/sparkbuild)"
    )


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusal of a command line is a :class:`UsageError`, printed
    by :func:`main` as every error is (as JSON under ``--json``)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message, where=self.prog,
                         hint=f"`{self.prog} --help` lists what it takes")


def _asks_for_json(tokens: Sequence[str]) -> bool:
    """Whether a command line that could not be parsed asked for ``--json`` (or a prefix of
    it that argparse would take)."""
    for token in tokens:
        if token == "--":
            return False
        if len(token) >= 4 and "--json".startswith(token):
            return True
    return False


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sparkbuild",
        description="Build vLLM for DGX Spark (sm_121): source, patch series, offline build, "
        "pinned wheelhouse.",
    )
    parser.add_argument("--version", action="version", version=f"sparkbuild {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("prepare", help="fetch a source and apply the patch series into DIR")
    p.add_argument("--source", metavar="SPEC", help="git+URL@REF, a path, PATH#sha256=HEX, "
                   "or pypi:NAME==VERSION (default: the recipe's)")
    p.add_argument("--dest", metavar="DIR", required=True, help="empty or missing directory")
    p.add_argument("--update-lock", action="store_true", help="re-resolve a branch ref")
    _add_cache(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_prepare)

    p = sub.add_parser("patch", help="status, apply or revert the series on a tree")
    p.add_argument("action", choices=("status", "apply", "revert"))
    p.add_argument("tree", metavar="TREE")
    p.add_argument("--cache", metavar="DIR", help="status: also report each vendored source "
                   "in this cache and what the series' arch edit did to it")
    _add_common(p, recipe=True)
    p.set_defaults(handler=_patch)

    p = sub.add_parser("vendor", help="store everything the build would fetch in a cache")
    p.add_argument("--tree", required=True, metavar="TREE")
    p.add_argument("--cache", required=True, metavar="DIR")
    p.add_argument("--plan", action="store_true", help="list, download nothing")
    p.add_argument("--sparse", action="store_true",
                   help="leave out what a build never reads (docs, media, tests, examples)")
    _add_mirror(p)
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
    p.add_argument("--compile-cache", metavar="URL", help="a compile cache shared through "
                   "sccache: redis://HOST:PORT[/DB], s3://BUCKET/PREFIX or a directory "
                   "(default: the recipe's [build] compile_cache)")
    p.add_argument("--bundle", metavar="FILE",
                   help="build from a bundle (`sparkbuild bundle`): verified, offline; its "
                   "recipe unless --recipe")
    p.add_argument("--use-existing-torch", action="store_true",
                   help="build against the torch installed here (vLLM's use_existing_torch)")
    p.add_argument("--no-closure", action="store_true",
                   help="leave the runtime closure out of the wheelhouse")
    p.add_argument("--targets", metavar="A,B",
                   help="build only these extensions (e.g. _C,_moe_C); default: all")
    p.add_argument("--allow-unstartable", action="store_true",
                   help="let --targets leave out an extension the package imports at "
                   "module level (a part of a build that no node installs)")
    _add_dist(p, "spread the compiles over a team's sccache-dist build servers (default: "
              "the recipe's [build] dist)")
    p.add_argument("--part", choices=("vllm", "flashinfer"),
                   help="build one part of the main job into the part directory --out "
                   "(vLLM's wheels alone, or flashinfer's jit-cache wheel alone), for `join`")
    _add_mirror(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_wheel)

    p = sub.add_parser("join", help="join the parts `wheel --part` built into one wheelhouse "
                       "and verify it")
    p.add_argument("parts", nargs="+", metavar="PART_DIR", help="a part directory")
    p.add_argument("--out", required=True, metavar="DIR", help="wheelhouse directory")
    p.add_argument("--offline", action="store_true", help="no network at all: cache only")
    p.add_argument("--bundle", metavar="FILE", help="the bundle the parts were built from")
    _add_cache(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_join)

    p = sub.add_parser("bundle", help="one archive with all an air-gapped build host needs")
    p.add_argument("--out", required=True, metavar="FILE", help="the bundle (.tar.xz)")
    p.add_argument("--tree", metavar="TREE", help="an already prepared tree (default: "
                   "prepare the recipe's source)")
    p.add_argument("--cache", metavar="DIR", help="dependency cache (default: "
                   "~/.cache/sparkbuild)")
    p.add_argument("--without-wheels", action="store_true",
                   help="leave out the build wheels (a host that has torch)")
    p.add_argument("--offline", action="store_true", help="take everything from the cache")
    p.add_argument("--no-closure", action="store_true",
                   help="carry the pins but not the runtime closure (the node has it)")
    _add_mirror(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_bundle)

    p = sub.add_parser("doctor", help="check the toolchain and choose build parallelism")
    p.add_argument("--tree", metavar="TREE", help="also check torch against this tree's pin")
    p.add_argument("--job-memory-gib", type=float, default=None, metavar="GIB",
                   help="memory budget per compile job (default: the recipe's)")
    p.add_argument("--compile-cache", metavar="URL", help="also check this shared compile "
                   "cache (sccache): redis://HOST:PORT[/DB], s3://BUCKET/PREFIX or a directory")
    p.add_argument("--recipe", metavar="FILE", help="also check this recipe's target (a plain "
                   "12.1 is refused unless it opts in) and take its job_memory_gib, compile_cache "
                   "and dist")
    p.add_argument("--use-existing-torch", action="store_true",
                   help="compare the installed torch, its CUDA and nvcc with the tree's pins")
    p.add_argument("--node", action="store_true", help="check this node before vLLM's first "
                   "start: GPU, driver, ptxas, flashinfer's modules, workspace, nofile, RDMA")
    p.add_argument("--venv", metavar="V", help="with --node: the venv `install` made "
                   "(default: the active one)")
    _add_dist(p, "also check this sccache-dist scheduler: servers, cpus and the client token")
    p.add_argument("--build-server", metavar="DIR", help="with --dist: check this machine as "
                   "a build server with cache directory DIR (root, bubblewrap, the directory, "
                   "the scheduler reached)")
    _add_common(p)
    p.set_defaults(handler=_doctor)

    team = sub.add_parser("team", help="run a team's sccache-dist scheduler or build server")
    roles = team.add_subparsers(dest="role", required=True, metavar="ROLE")
    role = _team_role(roles.add_parser("scheduler", help="the team's sccache-dist scheduler, "
                                       "in the foreground (or --systemd)"),
                      "the address it binds and is reached at (e.g. 192.168.1.10:10600)",
                      "the build servers' JWT HS256 key (generated when missing, mode 600)")
    role.add_argument("--client-token-file", metavar="FILE", help="the builds' token "
                      f"(generated when missing, mode 600; else ${TOKEN_ENV})")
    role.add_argument("--dir", metavar="DIR", help="where its TOML is written (default: "
                      "CACHE/team/scheduler)")
    role = _team_role(roles.add_parser("server", help="a build server of the team (root, "
                                       "bubblewrap), in the foreground (or --systemd)"),
                      "its own address, reached by the scheduler and the builds",
                      "the scheduler's JWT HS256 key (its token is made from it)")
    role.add_argument("--scheduler", required=True, metavar="URL", help="http://HOST:PORT")
    role.add_argument("--cache-dir", required=True, metavar="DIR",
                      help="toolchains, and DIR/overlay, wiped at every start")
    role.add_argument("--cpus", type=int, metavar="N", help="offer N cores (taskset; "
                      "default: every core this process may use)")

    p = sub.add_parser("check", help="compile the units the series changed for the target "
                       "arch, and read their machine code")
    p.add_argument("--tree", metavar="TREE")
    units = p.add_mutually_exclusive_group()
    units.add_argument("--list-targets", action="store_true",
                       help="list the tree's extensions the recipe's [model] needs at its "
                       "target, each with why (the set `wheel` builds); without --tree, "
                       "the recipe's source is prepared in the cache")
    units.add_argument("--unit", action="append", metavar="PATH",
                       help="compile only this unit (tree-relative .cu path; repeatable)")
    units.add_argument("--all", action="store_true",
                       help="compile every CUDA unit the build compiles for the target")
    _add_cache(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_check)

    p = sub.add_parser("lock", help="resolve the runtime closure for a platform, with hashes")
    p.add_argument("--platform", metavar="PLAT")
    p.add_argument("--python", metavar="X.Y")
    p.add_argument("--out", required=True, metavar="DIR")
    _add_cache(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_lock)

    p = sub.add_parser("verify", help="re-hash a wheelhouse and list the CUDA archs inside")
    p.add_argument("dir", metavar="DIR", nargs="?", help="the wheelhouse (with --installed: "
                   "also compare the venv with its wheels)")
    p.add_argument("--installed", metavar="VENV", help="check that a venv `install` made "
                   "still matches its wheelhouse, file for file; prints its fingerprint")
    _add_common(p)
    p.set_defaults(handler=_verify)

    p = sub.add_parser("install", help="install a wheelhouse into a venv, with no network")
    p.add_argument("dir", metavar="DIR", help="the wheelhouse: a directory, or the URL of one "
                   "served over HTTP (its simple/ index)")
    p.add_argument("--venv", required=True, metavar="PATH")
    p.add_argument("--from", dest="install_from", choices=("lock", "pylock"), default="lock",
                   help="install from requirements.lock with pip (default), or from "
                   "pylock.toml (PEP 751) with uv")
    _add_common(p)
    p.set_defaults(handler=_install)

    p = sub.add_parser("flashinfer-aot", help="build flashinfer's kernel modules ahead for the "
                       "recipe's target: a flashinfer-jit-cache wheel")
    p.add_argument("--out", metavar="DIR", help="where the wheel is written")
    p.add_argument("--list", action="store_true", help="print the module set, each module "
                   "with why vLLM reaches it, and build nothing")
    p.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="build (or list) only the set's modules whose name matches; repeatable")
    p.add_argument("--python", default=sys.executable, metavar="PY",
                   help="an interpreter with torch to run flashinfer's builder (default: this one)")
    p.add_argument("--offline", action="store_true", help="take the wheels from the cache only")
    p.add_argument("--jobs", type=int, metavar="N", help="compile jobs (MAX_JOBS)")
    _add_cache(p)
    _add_common(p, recipe=True)
    p.set_defaults(handler=_flashinfer_aot)

    p = sub.add_parser("recipe-schema", help="print the JSON schema of a recipe (on stdout, "
                       "--json or not)")
    _add_common(p)
    p.set_defaults(handler=_recipe_schema, json=True)

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
            say(line)


def _print_error(error: SparkbuildError, as_json: bool) -> None:
    say(error.render(), style="bold red")
    if as_json:
        sys.stdout.write(json.dumps({"error": error.to_dict(), **error.progress}, indent=2)
                         + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    tokens = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(tokens)
    except UsageError as error:
        _print_error(error, _asks_for_json(tokens))
        return error.exit_code
    set_verbose(bool(args.verbose))
    try:
        return _run(args)
    finally:
        set_verbose(True)  # for this run only: Python callers get every echo


def _run(args: argparse.Namespace) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        with interrupt_on_sigterm():  # children run in process groups of their own: see proc
            result: StageResult = args.handler(args)
    except KeyboardInterrupt:
        _print_error(InterruptedRun("interrupted", hint="run the same command again"), as_json)
        return InterruptedRun.exit_code
    except SparkbuildError as error:
        _print_error(error, as_json)
        return error.exit_code
    _print_result(result, as_json)
    if result.error is not None:
        say(result.error.render(), style="bold red")
        return result.error.exit_code
    return 0
