"""The shared compile cache: URLs, key namespaces, sccache's numbers, the build's variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.compile.tree_build import BuildRequest, build_environment
from sparkbuild.errors import RecipeError, UsageError
from sparkbuild.recipe import load_recipe
from sparkbuild.team.compile_cache import (
    BUILD_ROOT_ENV,
    CacheSpec,
    CompileCacheResult,
    SccacheStats,
    build_root,
    namespace,
    parse_cache_url,
    redact,
    units_by_language,
)
from sparkbuild.team.sccache_server import _environments
from sparkbuild.vendoring.materialize import Materialized

HERE = Path("/nowhere")

# `sccache --show-stats --stats-format=json` after a cold build of the example (abridged
# to the keys sparkbuild reads, values as sccache 0.16.0 printed them).
COLD = {"stats": {
    "compile_requests": 8, "requests_executed": 28,
    "cache_errors": {"counts": {}, "adv_counts": {}},
    "cache_hits": {"counts": {}, "adv_counts": {}},
    "cache_misses": {"counts": {"C/C++": 3, "CUBIN": 5, "CUDA": 5, "CUDA (Device code)": 5,
                                "PTX": 5}, "adv_counts": {"cuda [nvcc]": 5}},
    "cache_timeouts": 0, "cache_read_errors": 0, "non_cacheable_compilations": 5,
    "cache_write_errors": 0, "compilations": 28,
}, "cache_location": "redis", "version": "0.16.0"}


# -- URLs -----------------------------------------------------------------------------------


def test_redis_url_with_database() -> None:
    spec = parse_cache_url("redis://cache.lan:6380/2", relative_to=HERE)
    assert spec.backend == "redis"
    assert spec.settings == {"SCCACHE_REDIS_ENDPOINT": "redis://cache.lan:6380",
                             "SCCACHE_REDIS_DB": "2"}
    assert spec.location == "redis://cache.lan:6380/2"
    assert spec.secrets == {}


def test_redis_default_port_and_credentials_kept_secret() -> None:
    spec = parse_cache_url("redis://team:s3cr%40t@10.0.0.5", relative_to=HERE)
    assert spec.settings["SCCACHE_REDIS_ENDPOINT"] == "redis://10.0.0.5:6379"
    assert spec.secrets == {"SCCACHE_REDIS_USERNAME": "team", "SCCACHE_REDIS_PASSWORD": "s3cr@t"}
    assert "s3cr" not in spec.location
    result = CompileCacheResult(spec, "sparkbuild/x", status="used")
    assert "s3cr" not in json.dumps(result.to_dict()) + "\n".join(result.summary())


@pytest.mark.parametrize("url", ["redis:///0", "redis://host:6379/zero", "redis://h:99999",
                                 "redis://h:1/0?x=1"])
def test_bad_redis_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        parse_cache_url(url, relative_to=HERE)


def test_s3_url_with_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCCACHE_ENDPOINT", raising=False)
    spec = parse_cache_url("s3://builds/sccache/team?endpoint=http://minio.lan:9000"
                           "&region=eu-1", relative_to=HERE)
    assert spec.backend == "s3" and spec.prefix == "sccache/team"
    assert spec.settings == {"SCCACHE_BUCKET": "builds",
                             "SCCACHE_ENDPOINT": "http://minio.lan:9000",
                             "SCCACHE_REGION": "eu-1"}
    assert spec.scoped("sparkbuild/ns")["SCCACHE_S3_KEY_PREFIX"] == "sccache/team/sparkbuild/ns"
    assert "minio.lan" in spec.location


def test_s3_endpoint_from_the_environment_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCCACHE_ENDPOINT", "http://127.0.0.1:9000")
    spec = parse_cache_url("s3://bucket", relative_to=HERE)
    assert spec.prefix == "" and "127.0.0.1:9000" in spec.location
    assert spec.scoped("ns")["SCCACHE_S3_KEY_PREFIX"] == "ns"


@pytest.mark.parametrize("url", ["s3://", "s3://bucket/p?acl=public", "gs://bucket/x"])
def test_bad_s3_and_unknown_schemes(url: str) -> None:
    with pytest.raises(UsageError):
        parse_cache_url(url, relative_to=HERE)


def test_unknown_scheme_error_hides_the_password() -> None:
    with pytest.raises(UsageError) as caught:
        parse_cache_url("memcached://u:hunter2@host:11211", relative_to=HERE)
    assert "hunter2" not in caught.value.render()
    assert redact("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"


def test_local_directories(tmp_path: Path) -> None:
    spec = parse_cache_url("shared/sccache", relative_to=tmp_path)
    assert spec.backend == "local"
    assert spec.location == str(tmp_path / "shared" / "sccache")
    assert spec.scoped("sparkbuild/a/b") == {
        "SCCACHE_DIR": str(tmp_path / "shared" / "sccache" / "sparkbuild" / "a" / "b")}
    assert parse_cache_url(f"file://{tmp_path}/c", relative_to=HERE).location == str(
        tmp_path / "c")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError):
        parse_cache_url(str(tmp_path / "file"), relative_to=HERE)


def test_recipe_key(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    body = '[source]\nspec = "."\n[series]\npath = "series"\n[build]\n'
    recipe.write_text(body + 'compile_cache = "redis://cache:6379"\n')
    assert load_recipe(recipe).build.compile_cache == "redis://cache:6379"
    recipe.write_text(body + "compile_cache = 6379\n")
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe)
    assert "build.compile_cache" in caught.value.what


# -- keys -----------------------------------------------------------------------------------


def test_namespace_separates_toolchains() -> None:
    base = namespace(cuda="13.0.88", torch="2.13.0", label="sm121a.2d49e5c0")
    assert base == "sparkbuild/cuda13.0.88/torch2.13.0/sm121a.2d49e5c0"
    others = {
        namespace(cuda="12.9.86", torch="2.13.0", label="sm121a.2d49e5c0"),
        namespace(cuda="13.0.88", torch="2.12.0", label="sm121a.2d49e5c0"),
        namespace(cuda="13.0.88", torch="2.13.0", label="sm121.2d49e5c0"),
        namespace(cuda="13.0.88", torch="2.13.0", label="sm121a.ffffffff"),
        namespace(cuda=None, torch="2.13.0", label="sm121a.2d49e5c0"),
    }
    assert base not in others and len(others) == 5
    assert namespace(cuda="13 0", torch="2.13.0+cu130", label="x/y") == (
        "sparkbuild/cuda13_0/torch2.13.0+cu130/x_y")


def test_build_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUILD_ROOT_ENV, str(tmp_path / "stable"))
    assert build_root() == tmp_path / "stable" and (tmp_path / "stable").is_dir()
    monkeypatch.setenv(BUILD_ROOT_ENV, "relative/path")
    with pytest.raises(UsageError):
        build_root()


# -- sccache's numbers ------------------------------------------------------------------------


def test_stats_of_a_cold_then_a_warm_build() -> None:
    cold = SccacheStats.from_json(COLD)
    assert (cold.total_hits, cold.total_misses, cold.misses["CUDA"]) == (0, 23, 5)
    warm_json = json.loads(json.dumps(COLD))
    stats = warm_json["stats"]
    stats["cache_hits"]["counts"] = {k: 2 * v for k, v in stats["cache_misses"]["counts"].items()}
    after = SccacheStats.from_json(warm_json)
    delta = after.minus(cold)
    assert delta.misses == {} and delta.hits["CUDA"] == 10 and delta.failures == 0
    assert cold.plus(cold).misses["PTX"] == 10


def test_failures_count_read_write_errors_and_timeouts() -> None:
    broken = json.loads(json.dumps(COLD))
    broken["stats"].update(cache_write_errors=4, cache_read_errors=1, cache_timeouts=2)
    assert SccacheStats.from_json(broken).failures == 7


def test_result_json_has_backend_hits_misses() -> None:
    spec = parse_cache_url("redis://127.0.0.1:6379", relative_to=HERE)
    before = SccacheStats()
    after = SccacheStats.from_json(COLD)
    result = CompileCacheResult(spec, "sparkbuild/ns", "used", before=before, after=after,
                                units={"CUDA": 4, "C/C++": 1})
    data = result.to_dict()
    assert (data["backend"], data["hits"], data["misses"]) == ("redis", 0, 23)
    assert data["misses_by_language"]["CUDA"] == 5 and data["units"]["CUDA"] == 4
    assert data["before"]["misses"] == 0 and data["after"]["misses"] == 23
    assert any("ninja compiled 1 C/C++, 4 CUDA" in line for line in result.summary())


def test_units_by_language() -> None:
    assert units_by_language(["CMakeFiles/_C.dir/csrc/a.cu.o", "CMakeFiles/_C.dir/b.cpp.o",
                              "x/c.cu.o"]) == {"CUDA": 2, "C/C++": 1}


# -- the build's and the server's variables ---------------------------------------------------


def _request(tmp_path: Path, launcher: str) -> BuildRequest:
    deps = Materialized(env={}, cmake_defines={}, wheel_dir=tmp_path / "wheels")
    return BuildRequest(tree=tmp_path / "tree", work=tmp_path, archs="12.1a", jobs=2,
                        nvcc_threads=1, offline=True, deps=deps, launcher=launcher)


def test_build_environment_with_sccache_and_with_ccache(tmp_path: Path) -> None:
    shared = build_environment(_request(tmp_path, "/venv/bin/sccache"), tmp_path / "f.tsv")
    assert "-DCMAKE_CUDA_COMPILER_LAUNCHER=/venv/bin/sccache" in shared["CMAKE_ARGS"].split()
    assert "VLLM_DISABLE_SCCACHE" not in shared
    local = build_environment(_request(tmp_path, "/usr/bin/ccache"), tmp_path / "f.tsv")
    assert local["VLLM_DISABLE_SCCACHE"] == "1" and local["CCACHE_BASEDIR"] == str(tmp_path)


def test_server_gets_the_secrets_the_build_does_not(tmp_path: Path) -> None:
    spec = parse_cache_url("redis://u:pw@127.0.0.1:6379/1", relative_to=HERE)
    server, client = _environments(spec, "sparkbuild/ns", 4242, tmp_path,
                                   ["/var/tmp/sparkbuild-build", "/cache"])
    assert server["SCCACHE_REDIS_PASSWORD"] == "pw"
    assert server["SCCACHE_REDIS_KEY_PREFIX"] == "sparkbuild/ns"
    assert server["SCCACHE_REDIS_DB"] == "1"
    assert not any(key.startswith("SCCACHE_REDIS") for key in client)
    assert client["SCCACHE_SERVER_PORT"] == server["SCCACHE_SERVER_PORT"] == "4242"
    assert client["SCCACHE_BASEDIRS"] == "/var/tmp/sparkbuild-build:/cache"
    assert client["SCCACHE_DIR"] == str(tmp_path / "sccache-fallback")
    local = CacheSpec("local", "/d", prefix="/d")
    assert _environments(local, "ns", 1, tmp_path, [])[0]["SCCACHE_DIR"] == "/d/ns"


@pytest.mark.parametrize("url", ["redis://u:hunter2@host:99999", "redis://u:hunter2@host/abc",
                                 "redis://u:hunter2@host?x=1", "s3://k:hunter2@/prefix"])
def test_a_bad_cache_url_is_refused_without_printing_its_password(url: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_cache_url(url, relative_to=Path())
    shown = f"{caught.value.what} {caught.value.where} {caught.value.hint}"
    assert "hunter2" not in shown and "***" in str(caught.value.where)
