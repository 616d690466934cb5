"""The driver (a script the build environment runs) is sparkbuild code ruff and mypy check:
its pure parts tested here with a stand-in flashinfer and torch."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.flashinfer import driver


class _Spec:
    def __init__(self, name: str, sources: list[Path]) -> None:
        self.name, self.sources = name, sources
        self.extra_ldflags = ["-lnvrtc"]


@pytest.fixture
def fake_flashinfer(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    torch = types.ModuleType("torch")
    torch.bfloat16 = "torch.bfloat16"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    gen = types.ModuleType("fake_gen")

    def gen_module(*args: Any, **kwargs: Any) -> _Spec:
        calls.append((args, kwargs))
        return _Spec(f"m_{args[0] if args else 'x'}", [Path("/a.cu")])

    gen.gen_module = gen_module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_gen", gen)
    return calls


def test_dtype_arguments_become_torchs(fake_flashinfer: list[tuple[Any, ...]]) -> None:
    specs = driver.generate([{"gen": "fake_gen:gen_module", "name": "m_torch.bfloat16",
                              "args": [{"dtype": "bfloat16"}], "kwargs": {"q": 4}}])
    assert [s.name for s in specs] == ["m_torch.bfloat16"]
    assert fake_flashinfer == [(("torch.bfloat16",), {"q": 4})]


def test_a_name_other_than_predicted_stops_before_anything_compiles(
        fake_flashinfer: list[tuple[Any, ...]]) -> None:
    with pytest.raises(SystemExit, match="predicted 'other'"):
        driver.generate([{"gen": "fake_gen:gen_module", "name": "other", "args": [1]}])


def test_a_module_generated_twice_is_kept_once(fake_flashinfer: list[tuple[Any, ...]]) -> None:
    item = {"gen": "fake_gen:gen_module", "args": [1]}
    assert len(driver.generate([item, item])) == 1


def test_an_unknown_dtype_is_named(fake_flashinfer: list[tuple[Any, ...]]) -> None:
    with pytest.raises(SystemExit, match="no dtype 'float99'"):
        driver.argument({"dtype": "float99"}, sys.modules["torch"])


def test_only_is_split_from_flashinfers_own_options() -> None:
    assert driver.split_only(["--only", "a*", "--add-moe", "false", "--only=b"]) == (
        ["a*", "b"], ["--add-moe", "false"])


def test_the_built_libraries_are_copied_as_flashinfer_lays_them_out(tmp_path: Path) -> None:
    jit = tmp_path / "cached_ops"
    (jit / "m").mkdir(parents=True)
    (jit / "m" / "m.so").write_bytes(b"so")
    (tmp_path / "out" / "stale").mkdir(parents=True)
    driver.copy_built([_Spec("m", [])], jit, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix()
                  for p in (tmp_path / "out").rglob("*")) == ["m", "m/m.so"]


def test_a_spec_record_lists_sources_and_link_flags() -> None:
    record = driver.spec_record(_Spec("m", [Path("/x/a.cu")]))
    assert record == {"name": "m", "sources": ["/x/a.cu"], "extra_ldflags": ["-lnvrtc"],
                      "extra_cuda_cflags": []}


def test_the_usage_is_said_without_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert driver.main([]) == 2
    assert "usage: driver.py PLAN.json" in capsys.readouterr().err
