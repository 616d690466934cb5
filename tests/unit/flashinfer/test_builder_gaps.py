"""``[flashinfer] aot`` runs after vLLM's build: what it needs is checked before anything
compiles.  Offline, a cache without the builder's wheels (``CACHE/flashinfer-aot/<tag>/``
and its completeness mark) or without the flashinfer-python pin is named with the pins'
gaps; online, the builder's wheels are downloaded in the same place (a network failure
comes first too); a recipe without the pin is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkbuild import pipeline
from sparkbuild.errors import CacheMissError, CommandFailed, RecipeError
from sparkbuild.flashinfer import builder as flashinfer_builder
from sparkbuild.flashinfer import builder_wheels
from sparkbuild.flashinfer.builder_wheels import IMPORT_REQUIREMENTS, ready_builder, running_tag
from sparkbuild.recipe import load_recipe
from sparkbuild.store.cache import Cache
from support.flashinfer_toolkit import make_toolkit

PIN = ('[[pins]]\nname = "flashinfer-python"\nversion = "0.6.18"\n'
       'sha256 = "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"\n')


def _options(tmp_path: Path, *, aot: bool = True, pin: bool = True,
             offline: bool = True) -> pipeline.WheelOptions:
    (tmp_path / "patches").mkdir(exist_ok=True)
    (tmp_path / "patches" / "series").write_text("# empty\n")
    text = ('[recipe]\nname = "r"\npackage = "mini-vllm"\n[source]\nspec = "."\n'
            '[series]\npath = "patches/series"\n[target]\ncuda_archs = ["12.1a"]\n'
            f'[flashinfer]\naot = {"true" if aot else "false"}\n' + (PIN if pin else ""))
    (tmp_path / "r.toml").write_text(text)
    return pipeline.WheelOptions(recipe=load_recipe(tmp_path / "r.toml"), offline=offline)


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    return tree


def _fill(cache: Cache, tag: str, *, wheel: bool = True) -> Path:
    wheel_dir = cache.root / "flashinfer-aot" / tag
    wheel_dir.mkdir(parents=True)
    (wheel_dir / ".sparkbuild-complete").write_text(
        "\n".join(["flashinfer-python==0.6.18", *IMPORT_REQUIREMENTS]) + "\n")
    if wheel:
        (wheel_dir / "flashinfer_python-0.6.18-py3-none-any.whl").write_bytes(b"w")
    return wheel_dir


def test_offline_an_empty_cache_names_the_builder_wheels_and_the_pin(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    with pytest.raises(CacheMissError) as caught:
        pipeline._refuse_runtime_gaps(_options(tmp_path), None, cache, _tree(tmp_path))
    message = str(caught.value)
    assert "2 wheel(s)" in message
    assert "pin flashinfer-python==0.6.18: not in the cache" in message
    assert (f"flashinfer-aot flashinfer-python==0.6.18 and the {len(IMPORT_REQUIREMENTS)} "
            f"wheels its builder imports, for {running_tag()}: not in "
            f"{cache.root / 'flashinfer-aot' / running_tag()}") in message
    assert "`sparkbuild bundle` carries" in (caught.value.hint or "")
    assert "flashinfer's builder wheels" in (caught.value.hint or "")


def test_offline_the_builder_wheels_of_another_interpreter_are_named(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    _fill(cache, "cp399-sparc")
    (gap,) = ready_builder(_options(tmp_path).recipe, cache.root, offline=True)
    assert gap.endswith("; the cache holds them for cp399-sparc only")


def test_offline_a_complete_mark_without_the_wheel_is_a_gap(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    wheel_dir = _fill(cache, running_tag(), wheel=False)
    assert ready_builder(_options(tmp_path).recipe, cache.root, offline=True) == [
        f"flashinfer-aot flashinfer-python==0.6.18: no wheel of it in {wheel_dir}"]


def test_offline_a_mark_for_other_requirements_is_a_gap(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    wheel_dir = _fill(cache, running_tag())
    (wheel_dir / ".sparkbuild-complete").write_text("flashinfer-python==0.6.17\n")
    assert len(ready_builder(_options(tmp_path).recipe, cache.root, offline=True)) == 1


def test_offline_a_filled_cache_has_no_builder_gap(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    _fill(cache, running_tag())
    assert ready_builder(_options(tmp_path).recipe, cache.root, offline=True) == []
    with pytest.raises(CacheMissError) as caught:  # the pin's own wheel is still missing
        pipeline._refuse_runtime_gaps(_options(tmp_path), None, cache, _tree(tmp_path))
    assert "1 wheel(s)" in str(caught.value) and "flashinfer-aot" not in str(caught.value)


def test_without_the_pin_aot_is_refused_before_the_build(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    for offline in (True, False):
        with pytest.raises(RecipeError, match="needs a flashinfer-python pin"):
            pipeline._refuse_runtime_gaps(_options(tmp_path, pin=False, offline=offline),
                                          None, cache, _tree(tmp_path))


def test_aot_off_needs_neither(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    assert ready_builder(_options(tmp_path, aot=False, pin=False).recipe, cache.root,
                         offline=True) == []
    pipeline._refuse_runtime_gaps(_options(tmp_path, aot=False, pin=False), None, cache,
                                  _tree(tmp_path))


def test_online_the_builder_wheels_are_downloaded_before_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    calls: list[list[str]] = []

    def download(command: list[Any], **_: Any) -> None:
        calls.append([str(c) for c in command])
        dest = Path(command[command.index("--dest") + 1])
        (dest / "flashinfer_python-0.6.18-py3-none-any.whl").write_bytes(b"w")

    monkeypatch.setattr(builder_wheels, "run", download)
    options = _options(tmp_path, offline=False)
    pipeline._refuse_runtime_gaps(options, None, cache, _tree(tmp_path))
    (command,) = calls
    assert command[1:4] == ["-m", "pip", "download"]
    assert "flashinfer-python==0.6.18" in command and IMPORT_REQUIREMENTS[0] in command
    wheel_dir = cache.root / "flashinfer-aot" / running_tag()
    assert command[command.index("--dest") + 1] == str(wheel_dir)
    assert ready_builder(options.recipe, cache.root, offline=True) == []
    pipeline._refuse_runtime_gaps(options, None, cache, _tree(tmp_path))
    assert len(calls) == 1  # filled once: the next run downloads nothing


def test_online_a_failed_download_fails_before_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(command: list[Any], **_: Any) -> None:
        raise CommandFailed("pip download failed: network is unreachable")

    monkeypatch.setattr(builder_wheels, "run", no_network)
    cache = Cache(tmp_path / "cache")
    with pytest.raises(CommandFailed, match="network"):
        pipeline._refuse_runtime_gaps(_options(tmp_path, offline=False), None, cache,
                                      _tree(tmp_path))
    assert not (cache.root / "flashinfer-aot" / running_tag() / ".sparkbuild-complete").exists()


def test_a_failed_build_with_only_says_to_switch_the_other_groups_off(
        tmp_path: Path, toolkit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbuild.flashinfer.builder import AotRequest, build_jit_cache

    def builder(command: list[Any], **_: Any) -> None:
        if "pip" not in map(str, command):
            raise CommandFailed("python exited with status 1", hint="read the output above")

    monkeypatch.setattr(flashinfer_builder, "run", builder)
    wheel = tmp_path / "flashinfer_python-0.6.18-py3-none-any.whl"
    wheel.write_bytes(b"w")
    request = AotRequest(flashinfer_wheel=wheel, wheel_dir=tmp_path, python=Path("python"),
                         archs=("12.1a",), out=tmp_path / "out", work=tmp_path / "work",
                         cuda_home=toolkit, cuda_version="13.0",
                         args=("--only", "silu_and_mul"))
    with pytest.raises(CommandFailed) as caught:
        build_jit_cache(request)
    assert "switch the others off too (--add-moe false" in (caught.value.hint or "")
    with pytest.raises(CommandFailed) as caught:
        build_jit_cache(AotRequest(**{**request.__dict__, "args": ("--add-moe", "false")}))
    assert "a unit killed for memory is retried" in (caught.value.hint or "")


def test_offline_a_toolkit_without_the_headers_names_the_pinned_wheels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = make_toolkit(tmp_path / "cuda", headers=())
    monkeypatch.setattr(builder_wheels, "toolkit_root", lambda: bare)
    monkeypatch.setattr(builder_wheels, "environment_site", lambda _python: [])
    cache = Cache(tmp_path / "cache")
    _fill(cache, running_tag())
    gaps = ready_builder(_options(tmp_path).recipe, cache.root, offline=True)
    assert len(gaps) == 2
    assert gaps[0].startswith("nvidia-cublas==") and "cublasLt.h" in gaps[0]
    assert gaps[1].startswith("nvidia-curand==") and "curand_kernel.h" in gaps[1]
    assert all(str(bare) in gap for gap in gaps)


def test_with_dist_the_builders_pool_is_sized_by_the_servers_as_the_compiles_is(
        tmp_path: Path) -> None:
    import dataclasses

    from sparkbuild.flashinfer.builder import AotRequest, _pool_plan
    from sparkbuild.jobplan.pools import GIB
    from sparkbuild.jobplan.team_pool import ServerMemory, TeamFacts

    request = AotRequest(flashinfer_wheel=tmp_path / "w.whl", wheel_dir=tmp_path,
                         python=Path("python"), archs=("12.1a",), out=tmp_path / "out",
                         work=tmp_path / "work", cuda_home=tmp_path, cuda_version="13.0",
                         usable_bytes=27 * GIB)  # the builder's share beside the compile
    local = _pool_plan(request, 5)
    assert local.local_depth is None and local.depth <= 3
    team = TeamFacts(3, 60, ServerMemory(119.2 * GIB, "--dist-server-memory"))
    teamed = _pool_plan(dataclasses.replace(request, team=team), 5)
    # the servers hold more than the builder's share of this machine, within its 5 jobs
    assert teamed.depth == 5 and teamed.jobs == 5
    assert teamed.local_depth == local.depth  # this machine's slots for what falls back
    assert any("from the build servers' memory" in r for r in teamed.reasons)
