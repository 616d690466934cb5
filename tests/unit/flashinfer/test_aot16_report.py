"""bench/flashinfer-gpu/aot16_report.py on a FABRICATED fixture: every number below is made
up to exercise the report's reading and its prediction, and is no measurement."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.script_loader import load_script

REPO = Path(__file__).resolve().parents[3]
GIB = 1024**3


def _report() -> ModuleType:
    return load_script(REPO / "bench" / "flashinfer-gpu" / "aot16_report.py")


def _fabricated() -> dict[str, str]:
    aot = {"seconds": 400.0, "modules": ["a", "b"], "sources": 3, "size": 1000,
           "wheel": "/x/flashinfer_jit_cache-0.6.18+cu130-py3-none-linux_x86_64.whl",
           "environment": ["compiler launcher: none",
                           "job plan: MAX_JOBS=16, heavy units in pool sparkbuild_heavy of "
                           "depth 5 (measured)"],
           "units": [{"path": "a.cu", "seconds": 10, "cpu_seconds": 9.5, "peak_rss_gib": 2.0,
                      "pool": "sparkbuild_heavy"},
                     {"path": "b.cu", "seconds": 5, "peak_rss_gib": None, "pool": None}]}
    samples = [{"t": 2.0 * i, "used": (4 + i) * GIB, "tree_rss": i * GIB, "procs": i + 1,
                "mem_total": 128 * GIB, "mem_available": (124 - i) * GIB} for i in range(5)]
    verify = {"ok": True, "library_count": 1, "refused_libraries": 0, "seconds": 3.0,
              "libraries": [{"library": "flashinfer_jit_cache/jit_cache/a/a.so", "ok": True,
                             "kernels": {"12.1a": {"native": 7, "ptx": 0, "none": 0, "all": 7}},
                             "unreachable_stubs": [{"kernels": ["k1", "k2"]}]}]}
    return {"aot.json": json.dumps(aot), "verify.json": json.dumps(verify),
            "mem.jsonl": "\n".join(json.dumps(s) for s in samples) + "\n",
            "wall.json": json.dumps({"start": 1.0, "end": 451.0, "wall_s": 450.0, "rc": 0}),
            "machine.txt": f"nproc 16\nMemTotal: {128 * 1024 * 1024} kB\n"
                           f"MemAvailable: {124 * 1024 * 1024} kB\n",
            "table.txt": "measured\n"}


def test_the_record_reads_the_plan_memory_verify_and_puts_the_prediction_beside() -> None:
    report = _report()
    sim = report.schedule_sim()
    rec = report.record(_fabricated(), sim)
    assert rec["missing"] == []
    assert rec["build"]["plan"] == {"max_jobs": 16, "pool": "sparkbuild_heavy", "depth": 5,
                                    "basis": "measured", "line": rec["build"]["plan"]["line"]}
    assert rec["build"]["cpu_seconds"] == 14.5 and rec["build"]["pooled_units"] == 1
    assert rec["memory"]["peak_used_gib"] == 8.0 and rec["memory"]["peak_tree_rss_gib"] == 4.0
    assert rec["memory"]["interval_s"] == 2.0
    assert rec["verify"]["per_library"][0]["accepted_stubs"] == 2
    expected = sim.plans(sim.load(report.TABLE), 16, 128 * GIB)
    assert rec["prediction"]["pools"] == expected["pools"]
    assert rec["prediction"]["first_build_rule"] == expected["first_build_rule"]
    text = report.readme(rec, "fixture")
    assert "MAX_JOBS=16" in text and "450.0 s wall" in text and "peak in use 8.0 GiB" in text


def test_what_did_not_come_back_is_named_and_a_failed_build_keeps_its_plan() -> None:
    report = _report()
    files = _fabricated()
    del files["verify.json"], files["mem.jsonl"]
    files["aot.json"] = json.dumps({"error": {"what": "python exited with status 1"}})
    files["aot-err-tail.txt"] = ("flashinfer-aot: job plan: MAX_JOBS=2, heavy units in pool "
                                 "sparkbuild_heavy of depth 1 (rule)\n")
    rec = report.record(files, report.schedule_sim())
    assert rec["missing"] == ["mem.jsonl", "verify.json"]
    assert rec["build"]["plan"]["max_jobs"] == 2 and rec["build"]["plan"]["basis"] == "rule"
    assert "failed" in report.readme(rec, "fixture")
