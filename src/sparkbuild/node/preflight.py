"""``sparkbuild doctor --node``: what a node needs before vLLM's first start, checked there.

Every check has a name, a status (``ok``, ``warn``, ``fail``, ``absent``), a value and a
detail; a missing GPU or missing RDMA is an ``absent`` finding, never a traceback.  The
machine is read through :class:`NodeProbe`: the sysfs and procfs roots, the environment,
the command runner, ``ulimit -n`` and the ptxas probe are all replaceable, so a test can
build a fake ``/sys/class/infiniband`` tree.  What the wheelhouse was built for (archs,
CUDA) comes from the venv's installation record (``sparkbuild install``), and the ptxas
and workspace from the node profile written beside it.

RDMA: for each ``/sys/class/infiniband/DEV/ports/N`` the state, the first GID and the
netdev (``gid_attrs/ndevs/0``, else ``DEV/device/net/*``: what ``ibdev2netdev`` shows).
The ``NCCL_IB_HCA`` value printed is the exact-match form (``=dev1:1,dev2:1``: NCCL
matches by prefix without the ``=``) of the active ports; device names differ between
identical nodes and across reboots, so it is read on each node.  An ``NCCL_IB_HCA`` already
set (in the environment or the venv's profile) without the leading ``=`` is a warning that
names the RDMA devices its prefix takes.  A pinned ``NCCL_IB_GID_INDEX`` is a warning: it breaks
when a link bounces.

The venv must be one: a path that does not exist or holds no ``pyvenv.cfg`` (``/etc``) is a
:class:`UsageError`; a venv whose install record is missing, unreadable or of the wrong
shape fails the ``wheelhouse`` check, named (exit 12), never a traceback.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparkbuild.console import escaped
from sparkbuild.errors import SparkbuildError, UsageError, VerifyError
from sparkbuild.node.fingerprint import read_installation
from sparkbuild.node.profile import (
    ENV_FILE,
    PROFILE_DIR,
    PtxasProbe,
    parse_env_file,
    probe_ptxas,
)
from sparkbuild.proc import run
from sparkbuild.records import Record
from sparkbuild.store.files import usable_path
from sparkbuild.store.user_files import read_user_file

MIN_NOFILE = 65536
"""Below this, loading a large checkpoint overflows the open-file limit."""

Runner = Callable[[list[str]], str | None]
"""Runs a command; its output, or None when the program is missing or fails."""


def _run_command(argv: list[str]) -> str | None:
    try:
        result = run(argv, check=False, echo=False, timeout=60)
    except SparkbuildError:
        return None
    return result.output if result.returncode == 0 else None


@dataclass
class NodeProbe:
    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    command: Runner = _run_command
    nofile: Callable[[], tuple[int, int]] = lambda: resource.getrlimit(resource.RLIMIT_NOFILE)
    ptxas: PtxasProbe = probe_ptxas


CheckStatus = Literal["ok", "warn", "fail", "absent"]
"""A node check's verdict: ``fail`` fails the preflight, the others report."""


@dataclass(frozen=True)
class NodeCheck(Record):
    name: str
    status: CheckStatus
    value: str
    detail: str = ""


@dataclass
class PreflightResult(Record):
    venv: Path
    checks: list[NodeCheck]
    nccl_ib_hca: str | None = None
    rdma: list[dict[str, str]] = field(default_factory=list)

    def summary(self) -> list[str]:
        lines = [f"node preflight (venv {self.venv}):"]
        for check in self.checks:
            lines.append(escaped(f"  [{check.status}] {check.name}: {check.value}"
                                 + (f" -- {check.detail}" if check.detail else "")))
        if self.nccl_ib_hca:
            lines.append(f"NCCL_IB_HCA={self.nccl_ib_hca}")
        return lines

    @property
    def error(self) -> SparkbuildError | None:
        failed = [c for c in self.checks if c.status == "fail"]
        if not failed:
            return None
        return VerifyError(f"the node fails {len(failed)} preflight check(s): "
                           + ", ".join(c.name for c in failed),
                           hint=failed[0].detail or None)


# -- what the wheelhouse was built for -----------------------------------------------------


@dataclass(frozen=True)
class Built:
    archs: tuple[str, ...] = ()
    cuda: str | None = None
    aot_archs: tuple[str, ...] = ()
    profile: dict[str, str] = field(default_factory=dict)
    note: str = ""


PROFILE_LIMIT = 1 << 20
"""The largest ``node.env`` read (install writes a few KiB)."""


def read_built(venv: Path) -> Built:
    """What the venv was built for, from its install record; ``note`` says why it cannot
    be read (a record missing, unreadable or of the wrong shape)."""
    profile = {}
    env_file = venv / PROFILE_DIR / ENV_FILE
    try:
        if env_file.exists() or env_file.is_symlink():
            profile = parse_env_file(read_user_file(
                env_file, f"the venv's {PROFILE_DIR}/{ENV_FILE}", PROFILE_LIMIT,
                error=VerifyError).decode("utf-8", "replace"))
        manifest = read_installation(venv).manifest()
        build = _mapping(manifest, "build")
        nvcc = _mapping(manifest, "toolchain").get("nvcc") or ""
        archs = _strings(build, "archs")
        aot = _strings(_mapping(build, "flashinfer_aot"), "archs")
    except SparkbuildError as exc:
        return Built(profile=profile, note=str(exc))
    cuda = re.match(r"(\d+\.\d+)", str(nvcc))
    return Built(archs, cuda.group(1) if cuda else None, aot, profile)


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise VerifyError(f"the recorded manifest's {key} is a {type(value).__name__}, not an "
                          "object")
    return value


def _strings(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise VerifyError(f"the recorded manifest's {key} is not a list of strings")
    return tuple(value)


def _cap(arch: str) -> str:
    """``12.1a`` -> ``12.1`` (what nvidia-smi's compute_cap prints)."""
    return re.sub(r"[a-z+A-Z]+$", "", arch.replace("+PTX", ""))


# -- the checks ----------------------------------------------------------------------------


def _gpus(probe: NodeProbe) -> tuple[list[tuple[str, str, str]], str]:
    """(name, compute capability, driver) of each GPU, and where they were read."""
    out = probe.command(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                         "--format=csv,noheader"])
    if out:
        rows = [tuple(part.strip() for part in line.split(",")) for line in out.splitlines()
                if line.count(",") >= 2]
        return [(r[0], r[1], r[2]) for r in rows], "nvidia-smi"
    gpus = sorted((probe.procfs / "driver" / "nvidia" / "gpus").glob("*/information"))
    version = probe.procfs / "driver" / "nvidia" / "version"
    driver = ""
    if version.is_file():
        match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", version.read_text())
        driver = match.group(1) if match else ""
    found = []
    for info in gpus:
        model = re.search(r"Model:\s*(.+)", info.read_text())
        found.append((model.group(1).strip() if model else info.parent.name, "", driver))
    return found, "/proc/driver/nvidia"


def _driver_cuda(probe: NodeProbe) -> str | None:
    out = probe.command(["nvidia-smi"])
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", out or "")
    return match.group(1) if match else None


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def gpu_checks(probe: NodeProbe, built: Built,
               found: tuple[list[tuple[str, str, str]], str]) -> list[NodeCheck]:
    """The ``gpu`` and ``driver`` checks of the GPUs ``_gpus`` ``found``."""
    gpus, where = found
    if not gpus:
        return [NodeCheck("gpu", "absent", "no NVIDIA GPU found",
                          "neither nvidia-smi nor /proc/driver/nvidia names one"),
                NodeCheck("driver", "absent", "no NVIDIA driver found")]
    expected = sorted({_cap(a) for a in built.archs})
    caps = sorted({cap for _, cap, _ in gpus if cap})
    names = ", ".join(f"{name} (sm_{cap.replace('.', '')})" if cap else name
                      for name, cap, _ in gpus)
    if not caps:
        gpu = NodeCheck("gpu", "warn", names, f"{where} does not tell the compute capability")
    elif expected and not set(caps) <= set(expected):
        gpu = NodeCheck("gpu", "fail", names, f"the wheelhouse is built for "
                        f"{', '.join(built.archs)}; this GPU is compute {', '.join(caps)}")
    else:
        gpu = NodeCheck("gpu", "ok", names, f"expected compute {', '.join(expected) or '?'}")
    driver = gpus[0][2]
    driver_cuda = _driver_cuda(probe)
    if built.cuda is None or driver_cuda is None:
        check = NodeCheck("driver", "warn", driver or "unknown",
                          f"cannot compare: the driver supports CUDA {driver_cuda or '?'}, "
                          f"the wheels are built with CUDA {built.cuda or '?'}")
    elif _version_tuple(driver_cuda) < _version_tuple(built.cuda):
        check = NodeCheck("driver", "fail", driver, f"supports CUDA {driver_cuda}; the wheels "
                          f"are built with CUDA {built.cuda}: update the driver")
    else:
        check = NodeCheck("driver", "ok", driver, f"supports CUDA {driver_cuda} >= "
                          f"{built.cuda} (the wheels')")
    return [gpu, check]


def ptxas_check(probe: NodeProbe, built: Built) -> NodeCheck:
    path = built.profile.get("TRITON_PTXAS_PATH") or probe.env.get("TRITON_PTXAS_PATH")
    if not path:
        return NodeCheck("ptxas", "warn", "none", "the profile names no TRITON_PTXAS_PATH: "
                         "Triton's bundled ptxas rejects sm_121a")
    if not Path(path).is_file():
        return NodeCheck("ptxas", "fail", path, "the profile's ptxas does not exist")
    why = probe.ptxas(Path(path))
    if why is not None:
        return NodeCheck("ptxas", "fail", path, f"does not compile sm_121a: {why}")
    return NodeCheck("ptxas", "ok", path, "compiles sm_121a")


def flashinfer_check(venv: Path, built: Built, gpu_caps: list[str]) -> NodeCheck:
    modules = sorted(venv.glob("lib/python*/site-packages/flashinfer_jit_cache/jit_cache/*/*.so"))
    if not modules:
        return NodeCheck("flashinfer_modules", "warn", "none", "no flashinfer-jit-cache in "
                         "the venv: flashinfer compiles each kernel at first use (needs nvcc)")
    archs = ", ".join(built.aot_archs) or "unrecorded archs"
    caps = {_cap(a) for a in built.aot_archs}
    if gpu_caps and caps and not set(gpu_caps) <= caps:
        return NodeCheck("flashinfer_modules", "fail", f"{len(modules)} modules for {archs}",
                         f"this GPU is compute {', '.join(gpu_caps)}")
    return NodeCheck("flashinfer_modules", "ok", f"{len(modules)} modules for {archs}")


def workspace_check(probe: NodeProbe, built: Built) -> NodeCheck:
    base = built.profile.get("FLASHINFER_WORKSPACE_BASE") or probe.env.get(
        "FLASHINFER_WORKSPACE_BASE") or probe.env.get("HOME", "")
    if not base:
        return NodeCheck("workspace", "fail", "none", "no FLASHINFER_WORKSPACE_BASE and no HOME")
    try:
        Path(base).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=base, prefix=".sparkbuild-probe-"):
            pass
    except OSError as exc:
        return NodeCheck("workspace", "fail", base, f"not writable: {exc.strerror}")
    return NodeCheck("workspace", "ok", base, "writable")


def nofile_check(probe: NodeProbe) -> NodeCheck:
    soft, hard = probe.nofile()
    value = f"soft {soft}, hard {hard}"
    if soft >= MIN_NOFILE or soft < 0:
        return NodeCheck("nofile", "ok", value)
    return NodeCheck("nofile", "warn", value, f"below {MIN_NOFILE}: a large checkpoint can "
                     "overflow it; raise it (ulimit -n, LimitNOFILE= in the unit)")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def rdma_ports(sysfs: Path) -> list[dict[str, str]]:
    """Each RDMA port: device, port, state, first GID, netdev."""
    found = []
    for port in sorted((sysfs / "class" / "infiniband").glob("*/ports/*")):
        device = port.parent.parent
        netdev = _read(port / "gid_attrs" / "ndevs" / "0")
        if not netdev:
            nets = sorted((device / "device" / "net").glob("*"))
            netdev = nets[0].name if nets else ""
        found.append({"device": device.name, "port": port.name,
                      "state": _read(port / "state"), "gid": _read(port / "gids" / "0"),
                      "netdev": netdev, "link_layer": _read(port / "link_layer")})
    return found


def exact_hca(ports: list[dict[str, str]]) -> str | None:
    active = [f"{p['device']}:{p['port']}" for p in ports if "ACTIVE" in p["state"].upper()]
    return "=" + ",".join(active) if active else None


def rdma_checks(probe: NodeProbe, ports: list[dict[str, str]]) -> list[NodeCheck]:
    checks = []
    if not ports:
        checks.append(NodeCheck("rdma", "absent", "no RDMA device",
                                f"{probe.sysfs}/class/infiniband is empty or missing"))
    else:
        listing = ", ".join(f"{p['device']} port {p['port']} ==> {p['netdev'] or '?'} "
                            f"({p['state'] or '?'})" for p in ports)
        hca = exact_hca(ports)
        checks.append(NodeCheck("rdma", "ok" if hca else "warn", listing,
                                f"NCCL_IB_HCA={hca}" if hca else "no port is ACTIVE"))
    pinned = probe.env.get("NCCL_IB_GID_INDEX")
    if pinned:
        checks.append(NodeCheck("nccl_ib_gid_index", "warn", pinned, "a pinned GID index "
                                "breaks after a link bounce: unset it, NCCL picks the GID"))
    else:
        checks.append(NodeCheck("nccl_ib_gid_index", "ok", "unset", "NCCL picks the GID"))
    return checks


def nccl_hca_check(probe: NodeProbe, built: Built, ports: list[dict[str, str]]) -> NodeCheck:
    """An ``NCCL_IB_HCA`` already set, in the environment or the profile: without a leading
    ``=`` (after a ``^``, which excludes) NCCL takes each name as a prefix."""
    found = [(where, value) for where, value in (("the venv's profile",
                                                  built.profile.get("NCCL_IB_HCA")),
                                                 ("the environment", probe.env.get("NCCL_IB_HCA")))
             if value]
    exact = exact_hca(ports)
    if not found:
        return NodeCheck("nccl_ib_hca", "ok", "unset", f"NCCL picks the RDMA devices; "
                         f"NCCL_IB_HCA={exact} names exactly the active ports" if exact else
                         "NCCL picks the RDMA devices")
    prefixed = [(where, value) for where, value in found
                if not value.removeprefix("^").startswith("=")]
    if not prefixed:
        return NodeCheck("nccl_ib_hca", "ok", found[0][1], "exact match (leading =)")
    where, value = prefixed[0]
    spec = value.removeprefix("^")
    names = [part.split(":", 1)[0] for part in spec.split(",") if part]
    taken = sorted({p["device"] for p in ports for name in names if p["device"].startswith(name)})
    detail = (f"set in {where} without the leading =: NCCL takes each name as a prefix"
              + (f" (here it takes {', '.join(taken)})" if taken else "")
              + f"; write {'^' if value.startswith('^') else ''}={spec} for exactly these")
    return NodeCheck("nccl_ib_hca", "warn", value, detail)


def checked_venv(venv: Path) -> Path:
    """``venv`` as ``doctor --node`` reads it, or :class:`UsageError`: a path that does not
    exist, or that is no venv (no ``pyvenv.cfg``: ``/etc``)."""
    venv = usable_path(venv, "--venv").absolute()
    hint = "--venv: the venv `sparkbuild install WHEELHOUSE --venv V` made (or activate it)"
    if not venv.is_dir():
        what = "is not a directory" if venv.exists() else "does not exist"
        raise UsageError(f"the venv {what}", where=str(venv), hint=hint)
    if not (venv / "pyvenv.cfg").is_file():
        raise UsageError("not a venv: it has no pyvenv.cfg", where=str(venv), hint=hint)
    return venv


def run_preflight(venv: Path | None = None, probe: NodeProbe | None = None) -> PreflightResult:
    probe = probe or NodeProbe()
    venv = checked_venv(venv or Path(probe.env.get("VIRTUAL_ENV") or sys.prefix))
    built = read_built(venv)
    checks = []
    if built.note:
        checks.append(NodeCheck("wheelhouse", "fail", "unknown", built.note))
    else:
        checks.append(NodeCheck("wheelhouse", "ok", f"built for {', '.join(built.archs)}, "
                                f"CUDA {built.cuda or '?'}"))
    found = _gpus(probe)
    checks += gpu_checks(probe, built, found)
    gpu_caps = sorted({cap for _, cap, _ in found[0] if cap})
    checks.append(ptxas_check(probe, built))
    checks.append(flashinfer_check(venv, built, gpu_caps))
    checks.append(workspace_check(probe, built))
    checks.append(nofile_check(probe))
    ports = rdma_ports(probe.sysfs)
    checks += rdma_checks(probe, ports)
    checks.append(nccl_hca_check(probe, built, ports))
    return PreflightResult(venv, checks, exact_hca(ports), ports)
