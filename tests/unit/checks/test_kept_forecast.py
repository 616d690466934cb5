"""The code forecast kept in the cache (sparkbuild.checks.kept_forecast).

The forecast itself is never run here: a fake stands in for it and counts its calls.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sparkbuild.checks import code_forecast, kept_forecast
from sparkbuild.checks.check_plan import GencodeCoverage
from sparkbuild.checks.code_forecast import CodeForecast, ForecastInputs
from sparkbuild.checks.kept_forecast import NAMESPACE, forecast_key, reusing_forecast
from sparkbuild.recipe import BuildSettings, Recipe, SourcePin, Target
from sparkbuild.store.cache import Cache

MARLIN = GencodeCoverage("csrc/quantization/marlin/marlin.cu", "9.0a",
                         ("arch=compute_80,code=sm_80", "arch=compute_80,code=compute_80"),
                         "ptx", "compute_80")
GENERATOR = "csrc/quantization/marlin/generate_kernels.py"


class FakeForecast:
    def __init__(self, result: CodeForecast) -> None:
        self.result = result
        self.calls = 0

    def __call__(self, inputs: ForecastInputs, recipe: Recipe) -> CodeForecast:
        self.calls += 1
        return self.result


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "csrc" / "quantization" / "marlin").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text('set(MARLIN_ARCHS "8.0+PTX")\n', encoding="utf-8")
    (root / GENERATOR).write_text("print('kernels')\n", encoding="utf-8")
    return root


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


def _inputs(tree: Path, **changes: object) -> ForecastInputs:
    inputs = ForecastInputs(tree=tree, work=tree.parent / "work", python=Path("/usr/bin/python3"),
                            site=None, cmake_defines={"FETCHCONTENT_SOURCE_DIR_CUTLASS": "/c"},
                            env={"VLLM_CUTLASS_SRC_DIR": "/c"}, targets=("_C",))
    return dataclasses.replace(inputs, **changes)  # type: ignore[arg-type]


def _recipe(tmp_path: Path, *, allow_jit: bool = False) -> Recipe:
    return Recipe(path=tmp_path / "r.toml", name="r", source=SourcePin("pypi:vllm==0.20.0"),
                  series=tmp_path / "series", target=Target(("9.0a",), allow_jit=allow_jit),
                  build=BuildSettings(), pins=(), package="vllm")


LACKING = CodeForecast("lacking", 58, {"_C": [MARLIN]}, seconds=6.3, generators=[GENERATOR])


def _twice(tree: Path, cache: Cache, recipe: Recipe, monkeypatch: pytest.MonkeyPatch,
           result: CodeForecast = LACKING, second: ForecastInputs | None = None
           ) -> tuple[FakeForecast, CodeForecast, CodeForecast]:
    fake = FakeForecast(result)
    monkeypatch.setattr(code_forecast, "forecast_code", fake)
    first = reusing_forecast(cache, _inputs(tree), recipe)
    again = reusing_forecast(cache, second or _inputs(tree), recipe)
    return fake, first, again


def test_a_hit_skips_the_forecast_and_gives_an_equal_one(
        tree: Path, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, first, again = _twice(tree, cache, _recipe(tmp_path), monkeypatch)
    assert fake.calls == 1
    assert first.reused is None and again.reused is not None
    assert again.lacking == first.lacking and again.units == 58
    assert again.to_dict()["reused_since"] == again.reused


def test_a_changed_generator_file_is_a_miss(
        tree: Path, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeForecast(LACKING)
    monkeypatch.setattr(code_forecast, "forecast_code", fake)
    reusing_forecast(cache, _inputs(tree), _recipe(tmp_path))
    (tree / GENERATOR).write_text("print('more kernels')\n", encoding="utf-8")
    reusing_forecast(cache, _inputs(tree), _recipe(tmp_path))
    assert fake.calls == 2


@pytest.mark.parametrize("second", [
    {"targets": ("_C", "_moe_C")},
    {"env": {"VLLM_CUTLASS_SRC_DIR": "/other"}},
    {"cmake_defines": {}},
    {"site": Path("/venv/lib/python3.12/site-packages")},
])
def test_what_the_forecast_reads_is_in_the_key(tree: Path, tmp_path: Path,
                                               second: dict[str, object]) -> None:
    recipe = _recipe(tmp_path)
    assert forecast_key(_inputs(tree), recipe) == forecast_key(_inputs(tree), recipe)
    assert forecast_key(_inputs(tree), recipe) != forecast_key(_inputs(tree, **second), recipe)


def test_the_target_allow_jit_and_the_cmake_files_are_in_the_key(tree: Path,
                                                                 tmp_path: Path) -> None:
    key = forecast_key(_inputs(tree), _recipe(tmp_path))
    assert key != forecast_key(_inputs(tree), _recipe(tmp_path, allow_jit=True))
    spark = dataclasses.replace(_recipe(tmp_path), target=Target(("12.1a",)))
    assert key != forecast_key(_inputs(tree), spark)
    (tree / "CMakeLists.txt").write_text('set(MARLIN_ARCHS "8.0+PTX;9.0a")\n', encoding="utf-8")
    assert key != forecast_key(_inputs(tree), _recipe(tmp_path))


def test_a_forecast_that_read_nothing_is_not_kept(
        tree: Path, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _, again = _twice(tree, cache, _recipe(tmp_path), monkeypatch,
                            result=CodeForecast("unknown", reason="no CUDA unit"))
    assert fake.calls == 2 and again.reused is None


def test_a_hand_edited_entry_is_a_miss(
        tree: Path, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = _recipe(tmp_path)
    fake = FakeForecast(LACKING)
    monkeypatch.setattr(code_forecast, "forecast_code", fake)
    reusing_forecast(cache, _inputs(tree), recipe)
    key = forecast_key(_inputs(tree), recipe)
    entry = cache.lookup(NAMESPACE, key)
    assert entry is not None
    entry["forecast"]["lacking"]["_C"][0]["gencode"] = "arch=compute_90a,code=sm_90a"
    cache.record(NAMESPACE, key, entry)
    assert kept_forecast.kept(cache, key, tree) is None
    entry["forecast"]["lacking"] = {}
    cache.record(NAMESPACE, key, json.loads(json.dumps(entry)))
    assert kept_forecast.kept(cache, key, tree) is None  # status lacking, nothing lacking


@pytest.mark.parametrize(("where", "value"), [("status", "clean"), ("coverage", "jit")])
def test_an_entry_with_a_status_or_coverage_the_forecast_never_gives_is_a_miss(
        tree: Path, cache: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        where: str, value: str) -> None:
    recipe = _recipe(tmp_path)
    monkeypatch.setattr(code_forecast, "forecast_code", FakeForecast(LACKING))
    reusing_forecast(cache, _inputs(tree), recipe)
    key = forecast_key(_inputs(tree), recipe)
    entry = cache.lookup(NAMESPACE, key)
    assert entry is not None and kept_forecast.kept(cache, key, tree) is not None
    forecast = entry["forecast"]
    (forecast if where == "status" else forecast["lacking"]["_C"][0])[where] = value
    cache.record(NAMESPACE, key, entry)
    assert kept_forecast.kept(cache, key, tree) is None
