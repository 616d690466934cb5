"""The fingerprint covers what the manifest says, less the run's measures and plan."""

from __future__ import annotations

import copy
import json

from sparkbuild.wheelhouse.manifest import RUN_KEYS, manifest_fingerprint, manifest_identity

MANIFEST = {
    "schema": 1,
    "wheels": [{"file": "a-1.0-py3-none-any.whl", "sha256": "1" * 64, "role": "built"}],
    "build": {
        "archs": ["12.1a"], "jobs": 4, "nvcc_threads": 1, "launcher": "/usr/bin/sccache",
        "bundle": "/tmp/x.tar.xz", "compile_cache": {"hits": 3}, "dist": None,
        "pool": {"depth": 2}, "units": [{"path": "a.cu", "seconds": 12.5}],
        "environment": {"TORCH_CUDA_ARCH_LIST": "12.1a", "MAX_JOBS": "4", "NVCC_THREADS": "1"},
        "flashinfer_aot": {"modules": ["silu_and_mul"], "size": 10, "seconds": 30.1,
                           "wheel": "/w/x.whl", "log": "/w/log", "reused_since": None,
                           "environment": ["pool: 2"], "units": []},
    },
}


def _raw(manifest: dict[str, object], indent: int | None = 2) -> bytes:
    return (json.dumps(manifest, indent=indent) + "\n").encode()


def test_two_runs_that_differ_only_in_measures_and_plan_have_one_fingerprint() -> None:
    other = copy.deepcopy(MANIFEST)
    build = other["build"]
    assert isinstance(build, dict)
    build.update(jobs=2, launcher=None, bundle=None, compile_cache=None, pool=None,
                 units=[{"path": "a.cu", "seconds": 99.0}])
    build["environment"].update(MAX_JOBS="2")
    build["flashinfer_aot"].update(seconds=1.0, wheel="/elsewhere/x.whl", units=[{"s": 1}])
    assert _raw(other) != _raw(MANIFEST)
    assert manifest_fingerprint(_raw(other)) == manifest_fingerprint(_raw(MANIFEST))
    # the layout of the bytes is not what is fingerprinted either
    assert manifest_fingerprint(_raw(MANIFEST, None)) == manifest_fingerprint(_raw(MANIFEST))


def test_what_the_wheelhouse_holds_moves_the_fingerprint() -> None:
    base = manifest_fingerprint(_raw(MANIFEST))
    for change in ("wheel", "archs", "env", "modules"):
        other = copy.deepcopy(MANIFEST)
        build = other["build"]
        assert isinstance(build, dict)
        if change == "wheel":
            other["wheels"][0]["sha256"] = "2" * 64  # type: ignore[index]
        elif change == "archs":
            build["archs"] = ["12.0f"]
        elif change == "env":
            build["environment"]["TORCH_CUDA_ARCH_LIST"] = "12.0f"
        else:
            build["flashinfer_aot"]["modules"] = ["sampling"]
        assert manifest_fingerprint(_raw(other)) != base, change


def test_the_identity_drops_every_run_key_and_leaves_the_manifest_whole() -> None:
    kept = copy.deepcopy(MANIFEST)
    identity = manifest_identity(MANIFEST)
    assert kept == MANIFEST
    for where, keys in RUN_KEYS.items():
        holder = identity
        for step in where.split("."):
            holder = holder[step]
        assert not set(keys) & set(holder), where
    assert identity["build"]["archs"] == ["12.1a"]
    assert identity["build"]["environment"] == {"TORCH_CUDA_ARCH_LIST": "12.1a"}


def test_bytes_that_are_no_manifest_are_fingerprinted_as_they_are() -> None:
    import hashlib

    for raw in (b"not json", b"[1, 2]", b"\xff\xfe"):
        assert manifest_fingerprint(raw) == "sha256:" + hashlib.sha256(raw).hexdigest()
