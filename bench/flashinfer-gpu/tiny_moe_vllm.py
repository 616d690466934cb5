"""vLLM's start on the tiny MoE model with flashinfer's JIT disabled, and the record
(issue 42, item 7; run by tiny_moe_run.sh on the device, README in 2026-12-05-tiny-moe-vllm/).

    python tiny_moe_vllm.py run MODEL --out run.json [--max-new 16]
    python tiny_moe_vllm.py record --reference ref.json --model model.json \\
        --build build.json --runs DIR [DIR ...] --out RESULT.json

``run`` (in the node's venv, VLLM_ENABLE_V1_MULTIPROCESSING=0 so the engine is this process):
``vllm.LLM`` with the FLASHINFER attention backend and enforce_eager, then the greedy tokens
of bench/first-start/first_start.py's prompt (16, as first_start.py's reference makes them),
then one sampled request (temperature 1, top-k 8, top-p 0.9, no seed) so that vLLM's
FlashInfer sampler (VLLM_USE_FLASHINFER_SAMPLER=1) loads its module.  Every
``MissingJITCacheError`` flashinfer raises, caught by vLLM or not, is logged with the
module's name (its ``spec``) to $TINY_MOE_MISSING_LOG: flashinfer is imported first for that.
A start that raises is recorded with the error and the missing module (first_start.py's
``failed_start``).

``record`` joins the reference, each run and its evidence (tiny_moe_run.sh's evidence.json)
into RESULT.json: tokens equal or not, where they differ, the time to the first token, the
modules each run missed and loaded.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for candidate in (HERE, HERE.parent / "first-start"):
    if (candidate / "first_start.py").is_file():
        sys.path.insert(0, str(candidate))
        break
first_start: Any = importlib.import_module("first_start")
"""bench/first-start/first_start.py, or its copy beside this script (the device's bin/)."""

MISSED: list[str] = []


def watch_missing() -> None:
    """Log every MissingJITCacheError flashinfer raises (its spec names the module)."""
    try:
        from flashinfer.jit import core
    except Exception as error:  # recorded, the start goes on and says the rest
        MISSED.append(f"(flashinfer.jit.core not importable: {error})")
        return
    log = os.environ.get("TINY_MOE_MISSING_LOG")
    original = core.MissingJITCacheError.__init__

    def init(self: Any, message: str, spec: Any = None) -> None:
        name = str(getattr(spec, "name", None))
        MISSED.append(name)
        if log:
            with Path(log).open("a", encoding="utf-8") as out:
                out.write(json.dumps({"module": name, "t": time.time()}) + "\n")
        original(self, message, spec)

    core.MissingJITCacheError.__init__ = init


def run(model: Path, max_new: int) -> dict[str, Any]:
    started = time.monotonic()
    watch_missing()
    vllm = first_start._module("vllm")
    LLM, SamplingParams = vllm.LLM, vllm.SamplingParams
    TokensPrompt = first_start._module("vllm.inputs").TokensPrompt
    prompt = [TokensPrompt(prompt_token_ids=first_start.PROMPT)]
    imported = time.monotonic()
    llm = LLM(model=str(model), skip_tokenizer_init=True, enforce_eager=True,
              gpu_memory_utilization=0.3, max_model_len=256, seed=0,
              attention_backend="FLASHINFER")
    ready = time.monotonic()
    first = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=1,
                                                detokenize=False))
    first_token = time.monotonic()
    greedy = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=max_new,
                                                 min_tokens=max_new, ignore_eos=True,
                                                 detokenize=False))
    out: dict[str, Any] = {
        "tokens": list(greedy[0].outputs[0].token_ids),
        "first_token": list(first[0].outputs[0].token_ids), "vllm": vllm.__version__,
        "attention_backend": "FLASHINFER",
        "seconds": {"import": round(imported - started, 2),
                    "engine_start": round(ready - imported, 2),
                    "first_request": round(first_token - ready, 3),
                    "time_to_first_token": round(first_token - started, 2)}}
    try:
        # no per-request seed: vLLM 0.20.0 takes the PyTorch sampler for seeded requests
        # (v1/sample/ops/topk_topp_sampler.py:126-133), and the point is flashinfer's
        sampled = llm.generate(prompt, SamplingParams(temperature=1.0, top_k=8, top_p=0.9,
                                                      max_tokens=8, ignore_eos=True,
                                                      detokenize=False))
        out["sampled_tokens"] = list(sampled[0].outputs[0].token_ids)
    except Exception as error:  # the greedy tokens stand; the sampler's failure is recorded
        out["sampled_error"] = f"{type(error).__name__}: {error}"[:2000]
        out["sampled_missing_jit_module"] = first_start.failed_start(error)["missing_jit_module"]
    out["loaded_libraries"] = first_start.loaded_libraries()
    out["missing_jit_modules_raised"] = list(MISSED)
    out["flashinfer"] = sys.modules["flashinfer"].__version__ if "flashinfer" in sys.modules \
        else None
    return out


# flashinfer's workspace after a start: what a compile leaves, and what is not a compile
def workspace_kinds(files: list[str]) -> dict[str, list[str]]:
    """first_start.py's kinds of flashinfer's workspace, with the locks on their own:
    flashinfer takes one before it raises MissingJITCacheError, and a lock is no build."""
    kinds: dict[str, list[str]] = first_start.workspace_kinds(files)
    built = kinds["build_products"]
    kinds["locks"] = [path for path in built if path.endswith(".lock")]
    kinds["build_products"] = [path for path in built if not path.endswith(".lock")]
    return kinds


def _load(path: Path) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded


def record_run(directory: Path, ref: dict[str, Any]) -> dict[str, Any]:
    got = _load(directory / "vllm.json")
    evidence = _load(directory / "evidence.json")
    tokens = got.get("tokens", [])
    files = workspace_kinds(evidence.get("flashinfer_jit_files", []))
    row: dict[str, Any] = {
        "run": directory.name, "setting": (directory / "setting.txt").read_text().strip()
        if (directory / "setting.txt").is_file() else None,
        "tokens": tokens, "error": got.get("error"),
        "missing_jit_module": got.get("missing_jit_module"),
        "missing_jit_modules_raised": evidence.get("missing_jit_modules_raised", []),
        **first_start.compare(ref.get("tokens", []), tokens, ref.get("margins", [])),
        "seconds": got.get("seconds"), "sampled_tokens": got.get("sampled_tokens"),
        "sampled_error": got.get("sampled_error"),
        "loaded_flashinfer_jit_cache": [Path(p).name for p in
                                        (got.get("loaded_libraries") or {}).get(
                                            "flashinfer_jit_cache", [])],
        "loaded_from_workspace": (got.get("loaded_libraries") or {}).get(
            "flashinfer_workspace", []),
        "moe_backend_lines": evidence.get("moe_backend_lines", []),
        "attention_backend_lines": evidence.get("attention_backend_lines", []),
        "jit_cache_installed": evidence.get("jit_cache_installed"),
        "flashinfer_workspace": {k: len(v) for k, v in files.items()},
        "flashinfer_workspace_build_products": files["build_products"],
        "nvcc_calls": evidence.get("nvcc_calls"),
        "outbound_connections": evidence.get("outbound_connections"),
        "udp_route_probes": len(evidence.get("udp_route_probes", [])),
        "driver_jit_cache_files": evidence.get("driver_jit_cache_files"),
        "triton_cache_files": evidence.get("triton_cache_files"),
        "vllm_rc": evidence.get("vllm_rc"),
    }
    row["nothing_compiled_or_downloaded"] = bool(evidence) and not files["build_products"] \
        and evidence.get("nvcc_calls") == 0 and evidence.get("outbound_connections") == [] \
        and evidence.get("driver_jit_cache_files") == 0 and not row["loaded_from_workspace"]
    return row


def record(args: argparse.Namespace) -> dict[str, Any]:
    ref = _load(args.reference)
    runs = [record_run(d, ref) for d in args.runs]
    return {"reference_tokens": ref.get("tokens"), "reference_device": ref.get("device"),
            "transformers": ref.get("transformers"),
            "min_reference_margin": min(ref["margins"]) if ref.get("margins") else None,
            "prompt": first_start.PROMPT, "model": _load(args.model),
            "build": {k: v for k, v in _load(args.build).items() if k != "result"},
            "build_seconds": _load(args.build).get("seconds"),
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("model", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--max-new", type=int, default=16)
    p = sub.add_parser("record")
    p.add_argument("--reference", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--build", type=Path, required=True)
    p.add_argument("--runs", type=Path, nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "record":
        out = record(args)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        print(json.dumps([{k: r[k] for k in ("run", "equal", "missing_jit_module",
                                             "missing_jit_modules_raised")}
                          for r in out["runs"]]))
        return 0
    try:
        result = run(args.model, args.max_new)
    except BaseException as error:  # recorded for RESULT.json, then raised for the log
        failed = first_start.failed_start(error)
        failed["missing_jit_modules_raised"] = list(MISSED)
        args.out.write_text(json.dumps(failed, indent=2) + "\n")
        raise
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
