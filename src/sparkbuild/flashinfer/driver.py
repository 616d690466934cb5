"""The driver of flashinfer's own builder: run by the build environment's interpreter.

This file is a script, not a part of sparkbuild that runs in sparkbuild's process: the
builder (:mod:`sparkbuild.flashinfer.builder`) runs it as ``PYTHON driver.py PLAN.json`` with
the pinned flashinfer-python wheel installed beside the build environment's torch.  It
imports only the standard library and flashinfer (torch is the one flashinfer imported).

The plan (JSON, written by the builder) names the work and one of two module sets:

* ``specs``: an explicit list, each ``{"name", "gen": "module:function", "args",
  "kwargs"}`` (the model's set, :mod:`sparkbuild.flashinfer.module_set`).  Each generator of
  flashinfer 0.6.18 is called as written; a dtype argument is ``{"dtype": "bfloat16"}``.  The
  spec flashinfer returns must carry the name sparkbuild predicted, or the build stops
  before anything compiles.  Then ``flashinfer.jit.core.build_jit_specs`` (flashinfer's
  builder: one ninja over every module's ``build.ninja``) and the ``.so`` files copied to
  ``out/NAME/NAME.so``.
* ``aot_args``: flashinfer's default set, ``flashinfer.aot.main`` with those options, and
  sparkbuild's ``--only GLOB`` (repeatable) keeping the modules whose name matches.  The
  wheel keeps its sources in ``flashinfer/data/``; ``aot.main`` reads them from a source
  checkout's layout, so a staged root of links is passed to it.

Before anything compiles, ``specs.json`` in the build directory lists every module with its
sources, flags and link flags (what the builder reports and the unit table is keyed by).
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

SPECS_FILE = "specs.json"
"""What the driver writes into the build directory once the specs are generated."""


def argument(value: Any, torch: Any) -> Any:
    """A plan argument as the generator takes it: ``{"dtype": NAME}`` is ``torch.NAME``."""
    if isinstance(value, dict) and set(value) == {"dtype"}:
        dtype = getattr(torch, str(value["dtype"]), None)
        if dtype is None:
            raise SystemExit(f"driver: torch has no dtype {value['dtype']!r}")
        return dtype
    return value


def spec_record(spec: Any) -> dict[str, Any]:
    """What ``specs.json`` says of one generated spec."""
    sources = [str(Path(s)) for s in getattr(spec, "sources", [])]
    return {"name": spec.name, "sources": sources,
            "extra_ldflags": list(getattr(spec, "extra_ldflags", None) or []),
            "extra_cuda_cflags": list(getattr(spec, "extra_cuda_cflags", None) or [])}


def _set_work_dirs(build: Path) -> Any:
    from flashinfer.jit import env as jit_env

    jit_env.FLASHINFER_WORKSPACE_DIR = build
    jit_env.FLASHINFER_JIT_DIR = build / "cached_ops"
    jit_env.FLASHINFER_GEN_SRC_DIR = build / "generated"
    jit_env.FLASHINFER_JIT_DIR.mkdir(parents=True, exist_ok=True)
    jit_env.FLASHINFER_GEN_SRC_DIR.mkdir(parents=True, exist_ok=True)
    return jit_env


def generate(items: list[dict[str, Any]]) -> list[Any]:
    """Call each item's generator; stop when a spec's name is not the predicted one."""
    torch = sys.modules["torch"]  # imported by flashinfer
    specs: list[Any] = []
    seen: set[str] = set()
    for item in items:
        module, _, function = str(item["gen"]).partition(":")
        generator = getattr(importlib.import_module(module), function)
        spec = generator(*(argument(a, torch) for a in item.get("args", [])),
                         **{k: argument(v, torch) for k, v in item.get("kwargs", {}).items()})
        expected = item.get("name")
        if expected and spec.name != expected:
            raise SystemExit(f"driver: {item['gen']} gave module {spec.name!r}, sparkbuild "
                             f"predicted {expected!r}: the mapping does not match this "
                             "flashinfer")
        if spec.name not in seen:
            seen.add(spec.name)
            specs.append(spec)
    return specs


def copy_built(specs: list[Any], jit_dir: Path, out: Path) -> None:
    """``JIT_DIR/NAME/NAME.so`` -> ``out/NAME/NAME.so`` for every spec."""
    shutil.rmtree(out, ignore_errors=True)
    for spec in specs:
        built = jit_dir / spec.name / f"{spec.name}.so"
        target = out / spec.name / f"{spec.name}.so"
        target.parent.mkdir(parents=True)
        shutil.copy2(built, target)


def build_explicit(plan: dict[str, Any]) -> None:
    build, out = Path(plan["build"]).resolve(), Path(plan["out"]).resolve()
    jit_env = _set_work_dirs(build)
    specs = generate(plan["specs"])
    (build / SPECS_FILE).write_text(json.dumps([spec_record(s) for s in specs], indent=1),
                                    encoding="utf-8")
    print(f"driver: {len(specs)} modules, {sum(len(s.sources) for s in specs)} sources",
          flush=True)
    if plan.get("generate_only"):
        return
    from flashinfer.jit.core import build_jit_specs

    build_jit_specs(specs, verbose=True, skip_prebuilt=False)
    copy_built(specs, Path(jit_env.FLASHINFER_JIT_DIR), out)


def split_only(args: list[str]) -> tuple[list[str], list[str]]:
    """sparkbuild's ``--only GLOB`` options out of flashinfer's own."""
    only, rest, it = [], [], iter(args)
    for arg in it:
        if arg == "--only":
            only.append(next(it, ""))
        elif arg.startswith("--only="):
            only.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return only, rest


def build_default(plan: dict[str, Any]) -> None:
    import flashinfer
    from flashinfer import aot

    only, rest = split_only([str(a) for a in plan["aot_args"]])
    build = Path(plan["build"]).resolve()
    data = Path(flashinfer.__file__).resolve().parent / "data"
    staged = build.parent / "root"
    for rel, target in {"csrc": "csrc", "include": "include", "3rdparty/cutlass": "cutlass",
                        "3rdparty/spdlog": "spdlog"}.items():
        link = staged / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(data / target)
    compile_modules = aot.compile_and_package_modules

    def compile_from_wheel(*a: Any, **k: Any) -> Any:
        k["project_root"] = staged
        return compile_modules(*a, **k)

    aot.compile_and_package_modules = compile_from_wheel
    generate_all = aot.gen_all_modules

    def selected(*a: Any, **k: Any) -> Any:
        specs = generate_all(*a, **k)
        if only:
            chosen = [s for s in specs if any(fnmatch.fnmatchcase(s.name, p) for p in only)]
            if not chosen:
                names = " ".join(sorted(s.name for s in specs))
                raise SystemExit(f"--only {' '.join(only)} matches none of flashinfer's "
                                 f"modules: {names}")
            specs = chosen
        build.mkdir(parents=True, exist_ok=True)
        (build / SPECS_FILE).write_text(json.dumps([spec_record(s) for s in specs], indent=1),
                                        encoding="utf-8")
        return specs

    aot.gen_all_modules = selected
    sys.argv = ["flashinfer.aot", "--out-dir", str(plan["out"]), "--build-dir", str(build),
                *rest]
    aot.main()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: driver.py PLAN.json", file=sys.stderr)
        return 2
    plan = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if "specs" in plan:
        build_explicit(plan)
    else:
        build_default(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
