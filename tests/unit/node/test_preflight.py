"""The node preflight on a made-up sysfs tree and made-up command outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbuild.errors import UsageError
from sparkbuild.node.fingerprint import RECORD_NAME
from sparkbuild.node.preflight import NodeProbe, run_preflight

SMI_QUERY = "NVIDIA GB10, 12.1, 580.95.05\n"
SMI = "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0 |\n"


def _port(sysfs: Path, device: str, port: str, state: str, netdev: str) -> None:
    root = sysfs / "class" / "infiniband" / device / "ports" / port
    (root / "gid_attrs" / "ndevs").mkdir(parents=True)
    (root / "gids").mkdir()
    (root / "state").write_text(state + "\n")
    (root / "gids" / "0").write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
    (root / "gid_attrs" / "ndevs" / "0").write_text(netdev + "\n")


def _venv(tmp_path: Path, archs: list[str], aot: list[str]) -> Path:
    venv = tmp_path / "venv"
    manifest = {"build": {"archs": archs, "flashinfer_aot": {"archs": aot}},
                "toolchain": {"nvcc": "13.0.88"}}
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    (venv / RECORD_NAME).write_text(json.dumps({
        "fingerprint": "sha256:x", "wheelhouse": "w", "distributions": {},
        "manifest": json.dumps(manifest)}))
    module = venv / "lib/python3.12/site-packages/flashinfer_jit_cache/jit_cache/silu/silu.so"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"\x7fELF")
    ptxas = tmp_path / "cuda" / "bin" / "ptxas"
    ptxas.parent.mkdir(parents=True)
    ptxas.write_text("")
    (venv / "sparkbuild").mkdir()
    (venv / "sparkbuild" / "node.env").write_text(
        f"# comment\nTRITON_PTXAS_PATH={ptxas}\nFLASHINFER_WORKSPACE_BASE={tmp_path / 'ws'}\n")
    return venv


def _probe(tmp_path: Path, outputs: dict[str, str], env: dict[str, str] | None = None,
           nofile: int = 1048576) -> NodeProbe:
    def command(argv: list[str]) -> str | None:
        return outputs.get(" ".join(argv[:2]) if len(argv) > 1 else argv[0])

    return NodeProbe(sysfs=tmp_path / "sys", procfs=tmp_path / "proc", env=env or {},
                     command=command, nofile=lambda: (nofile, nofile), ptxas=lambda p: None)


def _by_name(result: object) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in result.to_dict()["checks"]}  # type: ignore[attr-defined]


def test_a_spark_with_two_active_roce_ports(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    _port(sysfs, "rocep1s0f1", "1", "4: ACTIVE", "enp1s0f1np1")
    _port(sysfs, "rocep1s0f0", "1", "4: ACTIVE", "enp1s0f0np0")
    _port(sysfs, "roceP2p1s0f0", "1", "1: DOWN", "enP2p1s0f0np0")
    venv = _venv(tmp_path, ["12.1a"], ["12.1a"])
    outputs = {"nvidia-smi --query-gpu=name,compute_cap,driver_version": SMI_QUERY,
               "nvidia-smi": SMI}
    probe = _probe(tmp_path, outputs)
    asked: list[str] = []
    answer = probe.command

    def counted(argv: list[str]) -> str | None:
        asked.append(" ".join(argv))
        return answer(argv)

    probe.command = counted
    result = run_preflight(venv, probe)
    assert len([a for a in asked if a.startswith("nvidia-smi --query-gpu")]) == 1  # once
    checks = _by_name(result)
    assert {n: c["status"] for n, c in checks.items()} == {
        "wheelhouse": "ok", "gpu": "ok", "driver": "ok", "ptxas": "ok",
        "flashinfer_modules": "ok", "workspace": "ok", "nofile": "ok", "rdma": "ok",
        "nccl_ib_gid_index": "ok", "nccl_ib_hca": "ok"}
    assert result.nccl_ib_hca == "=rocep1s0f0:1,rocep1s0f1:1"  # exact match, active only
    assert "rocep1s0f0 port 1 ==> enp1s0f0np0 (4: ACTIVE)" in checks["rdma"]["value"]
    assert "NCCL_IB_HCA==rocep1s0f0:1,rocep1s0f1:1" in result.summary()[-1]
    assert result.error is None


def test_no_gpu_and_no_rdma_are_findings_and_a_pinned_gid_warns(tmp_path: Path) -> None:
    venv = _venv(tmp_path, ["12.1a"], ["12.1a"])
    result = run_preflight(venv, _probe(tmp_path, {}, env={"NCCL_IB_GID_INDEX": "3"},
                                        nofile=1024))
    checks = _by_name(result)
    assert checks["gpu"]["status"] == "absent" and checks["rdma"]["status"] == "absent"
    assert checks["nccl_ib_gid_index"]["status"] == "warn"
    assert checks["nofile"]["status"] == "warn"
    assert result.nccl_ib_hca is None and result.error is None


def test_another_gpu_or_an_old_driver_fails(tmp_path: Path) -> None:
    venv = _venv(tmp_path, ["12.1a"], ["12.1a"])
    outputs = {"nvidia-smi --query-gpu=name,compute_cap,driver_version":
               "NVIDIA H200, 9.0, 570.1\n",
               "nvidia-smi": SMI.replace("13.0", "12.8")}
    result = run_preflight(venv, _probe(tmp_path, outputs))
    checks = _by_name(result)
    assert checks["gpu"]["status"] == "fail" and checks["driver"]["status"] == "fail"
    assert checks["flashinfer_modules"]["status"] == "fail"
    assert result.error is not None and "gpu" in result.error.what


def test_the_gpu_from_procfs_when_nvidia_smi_is_missing(tmp_path: Path) -> None:
    info = tmp_path / "proc" / "driver" / "nvidia" / "gpus" / "0000:01:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA GB10\n")
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build\n")
    result = run_preflight(_venv(tmp_path, ["12.1a"], []), _probe(tmp_path, {}))
    checks = _by_name(result)
    assert checks["gpu"]["status"] == "warn" and "GB10" in checks["gpu"]["value"]
    assert checks["driver"]["value"] == "580.95.05"


# -- a named error for what is no installed venv; NCCL_IB_HCA's prefix -------------------


def test_a_venv_that_does_not_exist_or_is_no_venv(tmp_path: Path) -> None:
    probe = _probe(tmp_path, {})
    with pytest.raises(UsageError, match="the venv does not exist"):
        run_preflight(tmp_path / "absent", probe)
    with pytest.raises(UsageError, match=r"not a venv: it has no pyvenv\.cfg"):
        run_preflight(tmp_path, probe)


@pytest.mark.parametrize(("record", "said"), [
    (None, f"the venv has no {RECORD_NAME}"),
    ("\x00garbage{", f"{RECORD_NAME} cannot be read"),
    ("[]", "a JSON list, not an object"),
    ('{"distributions": [], "fingerprint": "f", "wheelhouse": "w", "manifest": "{}"}',
     "distributions must map names to objects"),
    (json.dumps({"distributions": {}, "fingerprint": "f", "wheelhouse": "w",
                 "manifest": '{"build": []}'}), "the recorded manifest's build is a list"),
    (json.dumps({"distributions": {}, "fingerprint": "f", "wheelhouse": "w",
                 "manifest": '{"build": {"archs": 5}}'}), "archs is not a list of strings"),
    (json.dumps({"distributions": {}, "fingerprint": "f", "wheelhouse": "w",
                 "manifest": '{"toolchain": "13.0"}'}), "toolchain is a str"),
    (json.dumps({"distributions": {}, "fingerprint": "f", "wheelhouse": "w",
                 "manifest": "[1]"}), "its manifest is not a JSON object"),
])
def test_a_record_missing_or_of_the_wrong_shape_fails_named(tmp_path: Path, record: str | None,
                                                            said: str) -> None:
    venv = _venv(tmp_path, ["12.1a"], [])
    if record is None:
        (venv / RECORD_NAME).unlink()
    else:
        (venv / RECORD_NAME).write_text(record)
    result = run_preflight(venv, _probe(tmp_path, {}))
    check = _by_name(result)["wheelhouse"]
    assert check["status"] == "fail" and said in check["detail"]
    assert result.error is not None and said in (result.error.hint or "")


@pytest.mark.parametrize(("env", "node_env", "status", "said"), [
    ({"NCCL_IB_HCA": "rocep1s0f"}, "", "warn",
     "set in the environment without the leading =: NCCL takes each name as a prefix (here "
     "it takes rocep1s0f0, rocep1s0f1); write =rocep1s0f for exactly these"),
    ({}, "NCCL_IB_HCA=rocep1s0f0:1\n", "warn", "set in the venv's profile"),
    ({"NCCL_IB_HCA": "^rocep1s0f1"}, "", "warn", "write ^=rocep1s0f1"),
    ({"NCCL_IB_HCA": "=rocep1s0f0:1"}, "", "ok", "exact match"),
    ({"NCCL_IB_HCA": "^=rocep1s0f1"}, "", "ok", "exact match"),
    ({}, "", "ok", "NCCL_IB_HCA==rocep1s0f0:1,rocep1s0f1:1 names exactly the active ports"),
])
def test_nccl_ib_hca_without_the_leading_equals_is_flagged(
        tmp_path: Path, env: dict[str, str], node_env: str, status: str, said: str) -> None:
    sysfs = tmp_path / "sys"
    _port(sysfs, "rocep1s0f0", "1", "4: ACTIVE", "enp1s0f0np0")
    _port(sysfs, "rocep1s0f1", "1", "4: ACTIVE", "enp1s0f1np1")
    venv = _venv(tmp_path, ["12.1a"], [])
    env_file = venv / "sparkbuild" / "node.env"
    env_file.write_text(env_file.read_text() + node_env)
    check = _by_name(run_preflight(venv, _probe(tmp_path, {}, env=env)))["nccl_ib_hca"]
    assert check["status"] == status and said in check["detail"], check
