"""The tiny MoE model's flashinfer set, built at 9.0a by sparkbuild's flashinfer builder
(issue 42, item 7; run by tiny_moe_run.sh on the device, README in 2026-12-05-tiny-moe-vllm/).

    PYTHONPATH=TOOLS python3 tiny_moe_build.py RECIPE FI_DIR WORK OUT.json [--plan-only]
    (TM_CUDA_HOME, default /usr/local/cuda; TM_JOBS, default 16; TM_ONLY=GLOB builds only the
    modules whose name matches: a rehearsal on a host without cuRAND's headers)

sparkbuild maps the recipe's ``[model]`` to flashinfer's modules for an sm_12x target
(``module_set.recipe_set``; 9.0a is refused there: the mapping is read for sm_12x).  On the
H100 (sm_90) each module of that set is taken for 9.0a as follows:

* arch-generic modules (the fa2 paged prefill, ``sampling``): built as they are, at 9.0a;
* ``fused_moe_120`` (gen_cutlass_fused_moe_sm120_module, sm_120 code only): its sm_90 twin is
  ``fused_moe_90`` (gen_cutlass_fused_moe_sm90_module): 219 generated CUTLASS files and 28
  sources (flashinfer 0.6.18's generator, counted on the build host) against fused_moe_120's
  96 units and 5,134 CPU-s: not built in this hold; the run that needs it names it;
* the ``xqa_*`` modules (gated): vLLM 0.20.0 decodes with XQA/TRT-LLM only where
  supports_trtllm_attention holds, i.e. on family 100 (vllm/utils/flashinfer.py:299-311);
  on sm_90 decode runs on the prefill module: not built.

Not in the set but reached on sm_90: flashinfer's ``auto`` prefill backend takes FA3 on sm90a
(FI/utils.py:545-600), so vLLM's prefill wrapper loads the fa3 twin of the prefill module
(``..._sm90``, FI/jit/attention/modules.py:375-399).  It is built here too (one build, so
the two wheels hold the same objects) and packed only into the second wheel:

* ``set``: the set's modules built at 9.0a (fa2 prefill, sampling);
* ``set-fa3``: the same plus the fa3 twin.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

NOT_BUILT = {
    "fused_moe_120": ("sm_120 code only (gen_cutlass_fused_moe_sm120_module); its sm_90 twin "
                      "fused_moe_90 has 219 generated CUTLASS files and 28 sources (fused_moe_120"
                      ": 96 units, 5,134 CPU-s at 12.1a): beyond this hold, not built"),
    "xqa_": ("gated: vLLM 0.20.0 takes XQA/TRT-LLM decode only on family 100 "
             "(supports_trtllm_attention, vllm/utils/flashinfer.py:299-311); on sm_90 decode "
             "runs on the prefill module"),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str]) -> int:
    from sparkbuild.flashinfer.builder import AotRequest, build_jit_cache
    from sparkbuild.flashinfer.builder_wheels import pinned_flashinfer
    from sparkbuild.flashinfer.jit_cache_wheel import (
        jit_cache_version,
        pack_jit_cache,
        wheel_version,
    )
    from sparkbuild.flashinfer.module_set import ModuleSpec, recipe_set
    from sparkbuild.recipe import load_recipe

    recipe_path, fi_dir, work, out = (Path(a) for a in argv[:4])
    plan_only = "--plan-only" in argv
    recipe = load_recipe(recipe_path)
    pin = pinned_flashinfer(recipe)
    full = recipe_set(recipe)
    assert full is not None, "the recipe has a [model] and no aot_args"
    chosen, not_built = [], []
    for module in full.modules:
        why = next((w for prefix, w in NOT_BUILT.items() if module.name.startswith(prefix)), None)
        if why:
            not_built.append({"name": module.name, "route": module.route, "why": why})
        else:
            chosen.append(module)
    (prefill,) = [m for m in chosen if m.name.startswith("batch_prefill_with_kv_cache")]
    twin = ModuleSpec(prefill.name + "_sm90", prefill.gen, route="sm90 twin",
                      args=("fa3", *prefill.args[1:]),
                      reason="flashinfer's auto prefill backend is fa3 on sm90a "
                             "(FI/utils.py:545-600): vLLM's prefill wrapper loads it on an H100")
    record: dict[str, Any] = {"recipe": str(recipe_path), "model_set_12_1a": [
        {"name": m.name, "route": m.route} for m in full.modules],
        "built_at_9_0a": {"set": [m.name for m in chosen], "twin_not_in_set": twin.name},
        "not_built": not_built, "flashinfer_pin": pin.requirement}
    if plan_only:
        out.write_text(json.dumps(record, indent=1) + "\n")
        return 0
    only = os.environ.get("TM_ONLY")
    if only:
        import fnmatch
        chosen = [m for m in chosen if fnmatch.fnmatchcase(m.name, only)]
        record["only"] = only
    (wheel,) = fi_dir.glob("flashinfer_python-*.whl")
    started = time.monotonic()
    result = build_jit_cache(AotRequest(
        flashinfer_wheel=wheel, wheel_dir=fi_dir, python=Path(sys.executable), archs=("9.0a",),
        out=work / "out", work=work / "work",
        cuda_home=Path(os.environ.get("TM_CUDA_HOME", "/usr/local/cuda")),
        cuda_version="13.0", jobs=int(os.environ.get("TM_JOBS", "16")), sha256=pin.sha256,
        modules=(*chosen, twin), cache_root=work / "cache"))
    record["seconds"] = round(time.monotonic() - started, 1)
    record["result"] = result.to_dict()
    modules = work / "work" / "modules"
    version = jit_cache_version(wheel_version(wheel), "13.0")
    wheels: dict[str, dict[str, Any]] = {}
    for label, names in (("set", [m.name for m in chosen]),
                         ("set-fa3", [m.name for m in chosen] + [twin.name])):
        staged = work / f"modules-{label}"
        shutil.rmtree(staged, ignore_errors=True)
        for name in names:
            (staged / name).mkdir(parents=True)
            shutil.copy2(modules / name / f"{name}.so", staged / name / f"{name}.so")
        packed = pack_jit_cache(staged, work / f"wheel-{label}", version, wheel_version(wheel))
        wheels[label] = {"wheel": str(packed), "bytes": packed.stat().st_size,
                         "sha256": sha256(packed), "modules": names}
    record["wheels"] = wheels
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"seconds": record["seconds"], "wheels": {
        k: {"bytes": v["bytes"], "modules": len(v["modules"])} for k, v in wheels.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
