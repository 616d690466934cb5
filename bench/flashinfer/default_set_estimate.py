"""flashinfer 0.6.18's default module set at 12.1a, costed from measured rates: each
family's CPU-seconds per source in a measured unit table, times its sources in the set.

    python bench/flashinfer/default_set_estimate.py SAMPLE_TABLE MODEL_TABLE [--cores N]

SAMPLE_TABLE: ``bench/flashinfer/units-default-sample-12.1a.json`` (one module of each
large family, ``default-sample.toml``); MODEL_TABLE: ``units-model-12.1a.json`` (for the
SM12x group, whose one measured module is ``fused_moe_120``).  A family with no measured
module is costed at the rate named in its row, and the output says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

FAMILIES = (
    # (family, module name prefix in the tables, sources in the default set)
    ("FA2 prefill", "batch_prefill_with_kv_cache_", 480),
    ("FA2 decode", "batch_decode_with_kv_cache_", 144),
    ("persistent batch attention", "batch_attention_with_kv_cache_", 216),
    ("attention sink", "batch_prefill_with_attention_sink_", 80),
    ("XQA", "xqa_", 1168),
    ("SM12x MoE/GEMM group", "fused_moe_120", 188),
)
"""Sources per family of flashinfer 0.6.18's ``gen_all_modules`` at 12.1a (561 modules,
2,318 sources), as counted for ``default-sample.toml``; the SM12x group's 188 are
``fused_moe_120`` 96, ``gemm_sm120`` 28, ``fp4_gemm_cutlass_sm120`` 17,
``mxfp8_gemm_cutlass_sm120`` 11, ``fp4_quantization_121`` 7, ``trtllm_fmha_v2`` 7,
``nvfp4_attention_sm120`` 2 and others."""
DEFAULT_SOURCES = 2318


def rates(path: Path) -> dict[str, tuple[int, float]]:
    """Family -> (units measured, CPU-seconds) in a unit table."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    found: dict[str, tuple[int, float]] = {}
    for family, prefix, _ in FAMILIES:
        units = [u for u in data["units"] if str(u["module"]).startswith(prefix)]
        if units:
            found[family] = (len(units), sum(float(u["seconds"]) for u in units))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("--cores", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    measured = {**rates(args.model), **rates(args.sample)}  # the sample's rate where both
    rows, total, counted = [], 0.0, 0
    for family, _prefix, sources in FAMILIES:
        units, cpu = measured[family]
        rate = cpu / units
        rows.append({"family": family, "sources": sources, "measured_units": units,
                     "cpu_s_per_source": round(rate, 2), "cpu_s": round(rate * sources)})
        total += rate * sources
        counted += sources
    rest = DEFAULT_SOURCES - counted
    light = measured["FA2 decode"][1] / measured["FA2 decode"][0]
    rows.append({"family": "the rest (norm, RoPE, sampling, activation, ...)", "sources": rest,
                 "measured_units": 0, "cpu_s_per_source": round(light, 2),
                 "cpu_s": round(light * rest), "note": "at FA2 decode's rate: not measured"})
    total += light * rest
    report = {"default_set_sources": DEFAULT_SOURCES, "families": rows,
              "cpu_s": round(total), "cpu_hours": round(total / 3600, 2),
              "ideal_wall_s": {str(n): round(total / n) for n in (args.cores or [16, 20])},
              "note": ("the SM12x group is costed at fused_moe_120's rate (its other 92 "
                       "sources are not measured); ideal wall: CPU-seconds / cores, no unit "
                       "longer than the rest, no memory limit")}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
