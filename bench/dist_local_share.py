"""Bench: what sccache-dist cannot move off the build host, and what it sends, per unit.

    python bench/dist_local_share.py OUT.json [--vllm VERSION=CUTLASS_DIR] [--unit PATH]...
                                              [--example] [--heavy CU_FILE]
                                              [--flashinfer SITE --flashinfer-unit NAME]...

Each unit's nvcc line is the one the real build runs (sparkbuild.checks.check_plan, as
``check`` compiles it: the example's CMake, or a vLLM release's with the series at 12.1a).
``nvcc --dryrun`` lists its steps; each step is run alone under ``/usr/bin/time`` (CPU
seconds user+sys, wall, peak RSS), with nvcc's temporary files in a directory of the
unit's own, and sorted the way sccache 0.16's dist client runs them:

* remote (a build server): cudafe++, cicc, ptxas, the host compile (``gcc -c``);
* local: ``nvcc --dryrun``, the two ``gcc -E`` that make cudafe++'s and cicc's inputs,
  fatbinary; and what sccache adds: the unit's outer ``nvcc -E`` (its hash), the host
  side preprocessed again with ``-fdirectives-only`` (``rewrite_includes_only``: what is
  shipped), and compressing what is shipped (zlib level 1, timed here in-process).

The local share is local CPU-seconds over all of them.  Bytes: every remote step's inputs
(cpp4.ii, cpp1.ii, the ptx, the ``-fdirectives-only`` host source), zlib level 1 as
sccache ships them (tar and TLS framing not counted), up; its outputs (cudafe++'s
``.cudafe1.*`` and module id, the ptx, the cubin, the host object), zlib level 6, down.
The prototype's proxy measured 10.59 MB up / 4.09 MB down for one heavy unit
(issue 43's prototype): compare with ``--heavy``.

``--flashinfer SITE``: flashinfer's ``fused_moe_120`` module, as flashinfer 0.6.18's own
generator writes it (``gen_cutlass_fused_moe_sm120_module``, ``FLASHINFER_CUDA_ARCH_LIST=
12.1a``: the generated CUTLASS grouped-GEMM sources and the module's ``build.ninja``), in
this interpreter with SITE on its path (flashinfer-python 0.6.18 and the packages it imports,
unpacked there; torch is this interpreter's).  ``--flashinfer-unit NAME``: a source of the
module (its file name); its nvcc line is the one ``ninja -t commands`` gives, run in the
module's directory, with the headers the MoE sources include beyond the toolkit's
(``cublasLt.h``: the nvidia-cublas wheel's ``nvidia/cu13/include``) on ``CPATH``, as
sparkbuild's builder puts them (sparkbuild.flashinfer.build_env).  Its rows are named
``flashinfer 0.6.18 fused_moe_120 NAME``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
REMOTE = {"cudafe++": "cudafe++", "cicc": "cicc", "ptxas": "ptxas"}


def _timed(command: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run a shell command under /usr/bin/time: CPU s, wall s, peak RSS MB, rc."""
    stats = Path(tempfile.mkstemp(prefix="time-")[1])
    started = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-o", str(stats), "-f", "%U %S %M", "bash", "-c",
                           command], env=env, cwd=cwd, capture_output=True, text=True,
                          check=False)
    wall = time.monotonic() - started
    user, system, peak = stats.read_text().split()[-3:]
    stats.unlink()
    return {"cpu_s": round(float(user) + float(system), 3), "wall_s": round(wall, 3),
            "peak_mb": round(int(peak) / 1024, 1), "rc": done.returncode,
            "error": done.stderr[-400:] if done.returncode else None}


def _kind(line: str) -> str:
    tool = Path(shlex.split(line)[0].replace("$CICC_PATH/", "")).name
    if tool in REMOTE:
        return tool
    if tool in ("gcc", "g++", "c++", "cc"):
        return "gcc -E" if " -E " in f" {line} " else "host compile"
    return tool


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def _zlib(path: Path, level: int) -> tuple[int, int, float]:
    data = path.read_bytes()
    started = time.process_time()
    packed = zlib.compress(data, level)
    return len(data), len(packed), time.process_time() - started


def _directives_only(line: str, temp: Path) -> tuple[str, Path]:
    """The host compile's input preprocessed as sccache ships it with rewrite_includes_only."""
    words = shlex.split(line)
    out = temp / "host-directives-only.ii"
    index = words.index("-o")
    words[index + 1] = str(out)
    words = [w for w in words if w != "-c"]
    return shlex.join([*words[:1], "-E", "-fdirectives-only", *words[1:]]), out


def measure(name: str, argv: list[str], cwd: Path) -> dict[str, Any]:
    """Every step of one unit (see the module docstring)."""
    temp = Path(tempfile.mkdtemp(prefix="dist-share-"))
    env = {**os.environ, "TMPDIR": str(temp)}
    clean = dict(env)  # before nvcc's own variables of the dry run
    nvcc = shlex.join(argv)
    steps: list[dict[str, Any]] = []
    dry = _timed(nvcc + " --dryrun", env, cwd)
    steps.append({"step": "nvcc --dryrun", "where": "local", **dry})
    listed = subprocess.run(nvcc + " --dryrun", shell=True, env=env, cwd=cwd,
                            capture_output=True, text=True, check=False).stderr
    up = down = 0
    for raw in (line[3:] for line in listed.splitlines() if line.startswith("#$ ")):
        assignment = re.match(r"^([A-Z_]+)=(.*)$", raw)
        if assignment:
            value = assignment.group(2).strip('"')
            env[assignment.group(1)] = subprocess.run(
                ["bash", "-c", f"echo {value}"], env=env, capture_output=True, text=True,
                check=False).stdout.strip() if "$" in value else value
            continue
        kind = _kind(raw)
        if kind == "rm" or raw.startswith("-- "):
            continue  # nvcc's own clean-up of a temporary file, or its dependency filter
        before = _files(temp)
        inputs = [temp / Path(w).name for w in shlex.split(raw)
                  if (temp / Path(w).name).is_file() and str(temp) in w]
        entry: dict[str, Any] = {"step": kind}
        if kind == "host compile":
            shipped, source = _directives_only(raw, temp)
            entry["directives_only"] = _timed(shipped, env, cwd)
            inputs = [source] if source.is_file() else []  # its own failure is recorded
        entry.update(_timed(raw, env, cwd))
        after = _files(temp)
        outputs = [temp / n for n, v in after.items() if before.get(n) != v
                   and n != "host-directives-only.ii"]
        outputs += [p for p in _written(raw) if p.is_file() and p.parent != temp]
        if kind in ("cudafe++", "cicc", "ptxas", "host compile"):
            entry["where"] = "remote"
            sent = [_zlib(p, 1) for p in inputs]
            got = [_zlib(p, 6) for p in outputs]
            entry["up_bytes"] = sum(s[1] for s in sent)
            entry["up_raw_bytes"] = sum(s[0] for s in sent)
            entry["down_bytes"] = sum(g[1] for g in got)
            entry["compress_cpu_s"] = round(sum(s[2] for s in sent), 3)
            up += entry["up_bytes"]
            down += entry["down_bytes"]
        else:
            entry["where"] = "local"
        steps.append(entry)
    outer = _timed(_outer(argv), clean, cwd)
    steps.append({"step": "sccache: outer nvcc -E (its hash)", "where": "local", **outer})
    return _totals(name, argv, steps, up, down)


DEPENDENCY_FLAGS = ("--generate-dependencies-with-compile", "-MD", "-MMD")
DEPENDENCY_FILES = ("-o", "-MF", "-MT")


def _outer(argv: list[str]) -> str:
    """The unit preprocessed whole (to stdout), as sccache does for the outer nvcc's hash
    (which takes the dependency file's flags apart: nvcc refuses them with ``-E``)."""
    words: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in DEPENDENCY_FILES:
            skip = True
        elif arg != "-c" and arg not in DEPENDENCY_FLAGS:
            words.append(arg)
    return shlex.join([*words, "-E"]) + " > /dev/null"


def _written(line: str) -> list[Path]:
    """The files a step names after ``-o`` (the host object lies outside the temp dir)."""
    words = shlex.split(line)
    return [Path(words[i + 1]) for i, w in enumerate(words[:-1]) if w == "-o"]


def _totals(name: str, argv: list[str], steps: list[dict[str, Any]], up: int, down: int
            ) -> dict[str, Any]:
    remote = sum(s["cpu_s"] for s in steps if s["where"] == "remote")
    plain_local = sum(s["cpu_s"] for s in steps if s["where"] == "local"
                      and not s["step"].startswith("sccache"))
    added = (sum(s["cpu_s"] for s in steps if s["step"].startswith("sccache"))
             + sum(s.get("directives_only", {}).get("cpu_s", 0.0) for s in steps)
             + sum(s.get("compress_cpu_s", 0.0) for s in steps))
    total = remote + plain_local
    failed = [s["step"] for s in steps if s.get("rc")]
    return {
        "unit": name, "nvcc": argv, "steps": steps, "failed_steps": failed,
        "cpu_s": round(total, 2), "remote_cpu_s": round(remote, 2),
        "local_cpu_s_plain_nvcc": round(plain_local, 2),
        "local_cpu_s_with_sccache_dist": round(plain_local + added, 2),
        "local_share": round((plain_local + added) / (total + added), 4) if total else None,
        "local_share_plain_nvcc": round(plain_local / total, 4) if total else None,
        "peak_mb_local": max((s["peak_mb"] for s in steps if s["where"] == "local"), default=0),
        "peak_mb_remote": max((s["peak_mb"] for s in steps if s["where"] == "remote"),
                              default=0),
        "up_bytes": up, "down_bytes": down,
    }


def _commands(tree: Path, recipe_path: Path, units: list[str]
              ) -> tuple[Path, list[tuple[str, list[str]]]]:
    from sparkbuild.checks.check_plan import plan_check
    from sparkbuild.recipe import load_recipe

    recipe = load_recipe(recipe_path)
    plan = plan_check(tree, recipe, only=units)
    out = plan.work / "obj"
    out.mkdir(parents=True, exist_ok=True)
    found = []
    for unit in units:
        command = plan.command(unit, out / (unit.replace("/", "__") + ".o"))
        found.append((unit, list(command.argv)))
    return plan.scratch, found


def _check_all() -> Any:
    """bench/check_all.py, for its release recipe (a vLLM release with the series, 12.1a)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_all", Path(__file__).with_name(
        "check_all.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLASHINFER_GENERATE = """
import os, sys
from pathlib import Path
build = Path(sys.argv[1])
import flashinfer.jit.env as jit_env
jit_env.FLASHINFER_WORKSPACE_DIR = build
jit_env.FLASHINFER_JIT_DIR = build / "cached_ops"
jit_env.FLASHINFER_GEN_SRC_DIR = build / "generated"
jit_env.FLASHINFER_JIT_DIR.mkdir(parents=True, exist_ok=True)
jit_env.FLASHINFER_GEN_SRC_DIR.mkdir(parents=True, exist_ok=True)
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm120_module
spec = gen_cutlass_fused_moe_sm120_module()
spec.write_ninja()
print(spec.ninja_path)
"""
"""flashinfer's own generator for fused_moe_120, its work directories under argv[1] (as
sparkbuild's driver sets them)."""


def flashinfer_units(site: Path, names: list[str], scratch: Path
                     ) -> list[tuple[str, list[str], Path]]:
    """(label, nvcc argv, cwd) of each ``fused_moe_120`` source named in ``names``."""
    env = {**os.environ, "PYTHONPATH": str(site.resolve()),
           "FLASHINFER_CUDA_ARCH_LIST": "12.1a",
           "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")}
    done = subprocess.run([sys.executable, "-c", FLASHINFER_GENERATE, str(scratch / "fi")],
                          env=env, capture_output=True, text=True, check=True)
    ninja = Path(done.stdout.strip().splitlines()[-1])
    text = ninja.read_text(encoding="utf-8")
    found = []
    for name in names:
        match = re.search(rf"^build (\S+): \S+ \S*/{re.escape(name)}$", text, re.MULTILINE)
        if match is None:
            raise SystemExit(f"fused_moe_120 has no source {name}")
        listed = subprocess.run(["ninja", "-f", str(ninja), "-t", "commands", match.group(1)],
                                cwd=ninja.parent, capture_output=True, text=True,
                                check=True).stdout.strip().splitlines()
        found.append((f"flashinfer 0.6.18 fused_moe_120 {name}", shlex.split(listed[-1]),
                      ninja.parent))
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--vllm", metavar="VERSION=CUTLASS_DIR")
    parser.add_argument("--unit", action="append", default=[], metavar="PATH")
    parser.add_argument("--example", action="append", default=[], metavar="PATH",
                        help="a unit of examples/mini-vllm")
    parser.add_argument("--heavy", type=Path, metavar="CU",
                        help="the prototype's heavy unit (torch + cub, -std=c++20 -O3)")
    parser.add_argument("--flashinfer", type=Path, metavar="SITE",
                        help="flashinfer-python 0.6.18 and its imports unpacked here")
    parser.add_argument("--flashinfer-unit", action="append", default=[], metavar="NAME",
                        help="a source of fused_moe_120 (its file name)")
    parser.add_argument("--append", action="store_true",
                        help="keep the rows OUT.json holds and add these")
    args = parser.parse_args(argv)
    from sparkbuild.patches.prepare import prepare_tree
    from sparkbuild.recipe import REPO_ROOT, load_recipe

    rows: list[dict[str, Any]] = (json.loads(args.out.read_text(encoding="utf-8"))["units"]
                                  if args.append and args.out.is_file() else [])

    def save(found: list[dict[str, Any]]) -> None:  # after each unit: nothing measured is lost
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": f"{os.cpu_count()} cores, x86_64, nvcc 13.0; "
                                        "steps run one at a time", "units": found},
                                       indent=1) + "\n", encoding="utf-8")

    def each_unit(label: str, recipe: Path, tree: Path, units: list[str]) -> None:
        prepare_tree(load_recipe(recipe).source.spec, tree, load_recipe(recipe))
        cwd, found = _commands(tree, recipe, units)
        for unit, command in found:
            rows.append(measure(f"{label} {unit}", command, cwd))
            save(rows)

    with tempfile.TemporaryDirectory(prefix="dist-share-") as scratch:
        if args.example:
            each_unit("mini-vllm", REPO_ROOT / "examples" / "mini-vllm" / "recipe.toml",
                      Path(scratch) / "mini-vllm", args.example)
        if args.vllm:
            version, _, cutlass = args.vllm.partition("=")
            os.environ["VLLM_CUTLASS_SRC_DIR"] = cutlass
            each_unit(f"vllm {version}", _check_all().release_recipe(version, Path(scratch)),
                      Path(scratch) / f"vllm-{version}", args.unit)
        if args.heavy:
            import torch.utils.cpp_extension as ext

            includes = [f"-I{p}" for p in ext.include_paths()]
            heavy = ["/usr/local/cuda/bin/nvcc", "-std=c++20", "-O3", "-DNDEBUG",
                     "-Xcompiler=-fPIC", *includes, "-D_GLIBCXX_USE_CXX11_ABI=1",
                     "--expt-relaxed-constexpr", "-gencode", "arch=compute_121a,code=sm_121a",
                     "-c", str(args.heavy.resolve()), "-o", str(Path(scratch) / "heavy.o")]
            rows.append(measure(f"prototype heavy unit {args.heavy.name}", heavy, Path(scratch)))
        if args.flashinfer:
            for label, command, cwd in flashinfer_units(args.flashinfer, args.flashinfer_unit,
                                                        Path(scratch)):
                rows.append(measure(label, command, cwd))
                save(rows)
    save(rows)
    for row in rows:
        print(f"{row['unit']}: {row['cpu_s']} CPU-s, local share {row['local_share']} "
              f"(plain nvcc {row['local_share_plain_nvcc']}), up {row['up_bytes'] / 1e6:.2f} MB, "
              f"down {row['down_bytes'] / 1e6:.2f} MB, failed {row['failed_steps']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
