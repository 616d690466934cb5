"""The code forecast: which units of the built extensions lack native code, before compile.

A :class:`BuildRecord` written by hand stands for the recorder's output (the recorder
itself runs cmake: tests/integration/test_code_forecast_tree.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.checks.check_plan import units_without_target_sass
from sparkbuild.checks.code_forecast import CodeForecast, judge_forecast, lacking_by_target
from sparkbuild.errors import VerifyError
from sparkbuild.recipe import BuildSettings, Recipe, SourcePin, Target
from sparkbuild.toolchain.cmake_recorder import BuildRecord, TargetRecord

ROOT = Path("/tree")
MARLIN = "csrc/quantization/marlin/marlin.cu"
MOE_MARLIN = "csrc/moe/marlin_moe_wna16/ops.cu"
LAYERNORM = "csrc/layernorm_kernels.cu"
PTX_80 = "-gencode;arch=compute_80,code=sm_80;-gencode;arch=compute_80,code=compute_80"
NATIVE_90A = "-gencode;arch=compute_90a,code=sm_90a"


def _record() -> BuildRecord:
    record = BuildRecord()
    record.targets["_C"] = TargetRecord("_C", sources=[MARLIN, LAYERNORM, "csrc/ops.cpp"])
    record.targets["_moe_C"] = TargetRecord("_moe_C", sources=[MOE_MARLIN])
    record.source_properties = {MARLIN: {"COMPILE_OPTIONS": PTX_80},
                                MOE_MARLIN: {"COMPILE_OPTIONS": PTX_80},
                                LAYERNORM: {"COMPILE_OPTIONS": NATIVE_90A}}
    return record


def _recipe(tmp_path: Path, *, allow_jit: bool = False) -> Recipe:
    return Recipe(path=tmp_path / "r.toml", name="r", source=SourcePin("pypi:vllm==0.20.0"),
                  series=tmp_path / "series", target=Target(("9.0a",), allow_jit=allow_jit),
                  build=BuildSettings(), pins=(), package="vllm")


def test_a_ptx_only_list_is_named_per_built_extension() -> None:
    units, lacking = lacking_by_target(_record(), ROOT, ("9.0a",), ())
    assert units == 3  # the .cpp is no CUDA unit
    assert sorted(lacking) == ["_C", "_moe_C"]
    (marlin,) = lacking["_C"]
    assert (marlin.unit, marlin.kind, marlin.code) == (MARLIN, "ptx", "compute_80")


def test_targets_narrow_the_forecast_to_the_extensions_built() -> None:
    units, lacking = lacking_by_target(_record(), ROOT, ("9.0a",), ("_moe_C",))
    assert units == 1
    assert list(lacking) == ["_moe_C"]


def test_the_same_lists_give_the_spark_no_code_at_all() -> None:
    # 8.0 PTX runs on 12.1 too; 9.0a SASS is no code for the Spark (arch-specific)
    at_spark = {c.unit: c.kind for c in units_without_target_sass(
        {LAYERNORM: ("arch=compute_90a,code=sm_90a",)}, ("12.1a",))}
    assert at_spark == {LAYERNORM: "none"}


def test_lacking_units_are_refused_before_the_build(tmp_path: Path) -> None:
    units, lacking = lacking_by_target(_record(), ROOT, ("9.0a",), ("_C",))
    forecast = CodeForecast("lacking", units, lacking)
    with pytest.raises(VerifyError) as raised:
        judge_forecast(forecast, _recipe(tmp_path))
    assert "nothing was compiled" in raised.value.what
    assert MARLIN in raised.value.what and "PTX only (compute_80)" in raised.value.what
    assert raised.value.where is not None and "code=compute_80" in raised.value.where
    assert "allow_jit" in (raised.value.hint or "")


def test_allow_jit_lets_them_through_with_a_warning(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    units, lacking = lacking_by_target(_record(), ROOT, ("9.0a",), ())
    judge_forecast(CodeForecast("lacking", units, lacking),
                   _recipe(tmp_path, allow_jit=True))
    err = capsys.readouterr().err
    assert "JIT-compile" in err and "_moe_C: 1 unit(s)" in err


def test_a_forecast_that_read_nothing_passes_nothing(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    forecast = CodeForecast("unknown", reason="the recorded CMake gives _C no CUDA unit")
    judge_forecast(forecast, _recipe(tmp_path))
    err = capsys.readouterr().err
    assert "not made" in err and "verify reads the machine code after the build" in err
    assert forecast.to_dict()["status"] == "unknown"


def test_many_units_are_summarised_not_all_printed() -> None:
    record = BuildRecord()
    sources = [f"csrc/marlin/k{i}.cu" for i in range(12)]
    record.targets["_C"] = TargetRecord("_C", sources=sources)
    record.source_properties = {s: {"COMPILE_OPTIONS": PTX_80} for s in sources}
    units, lacking = lacking_by_target(record, ROOT, ("9.0a",), ())
    text = CodeForecast("lacking", units, lacking).describe()
    assert "_C: 12 unit(s)" in text and "and 4 more" in text
    assert len(CodeForecast("lacking", units, lacking).to_dict()["lacking"]["_C"]) == 12
