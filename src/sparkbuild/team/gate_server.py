"""The heavy units' sccache server of a dist build, and the launcher that routes to it.

:mod:`sparkbuild.team.heavy_gate` says why (sccache 0.16 cannot turn its local fallback
off; its jobserver bounds what one server runs here by the cpus it was started on).  This
module starts that second server beside the build's own (:mod:`.sccache_server`): on its
own port, its own log and -- for a cache in a directory -- its own directory, pinned by
``taskset`` to the local plan's heavy slots, the build's own server to the light ones;
and writes the launcher (``CMAKE_<LANG>_COMPILER_LAUNCHER``, ``FLASHINFER_*_LAUNCHER``)
and the file it reads.  Nothing is split when the local plan's depth already is its
MAX_JOBS (every unit fits here at its peak) or there is one cpu.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbuild.jobplan.ninja_shim import write_wrapper
from sparkbuild.settings import HEAVY_GATE, HEAVY_OUTPUTS
from sparkbuild.team.heavy_gate import GateCpus, cpu_list, split_cpus, write_gate

if TYPE_CHECKING:
    from sparkbuild.jobplan.pools import PoolPlan

HEAVY_LOG = "sccache-heavy.log"
"""The heavy units' server's log, beside the build's own server's."""


@dataclass(frozen=True)
class GateSlots:
    """The local plan's shape: ``slots`` heavy units of its ``jobs``."""

    slots: int
    jobs: int


def gate_slots(pool: PoolPlan | None) -> GateSlots | None:
    """The slots to keep when the dist pool is deeper than the build host holds; None
    when it is not (no dist, or the servers hold no more than the host)."""
    if pool is None or pool.local_depth is None or pool.local_depth >= pool.depth:
        return None
    return GateSlots(pool.local_depth, pool.local_jobs or pool.jobs)


@dataclass(frozen=True)
class GatePlan:
    """The two servers' cpus and ports, and the launcher's files."""

    cpus: GateCpus
    heavy_port: int
    launcher: Path
    gate_file: Path
    outputs: Path

    def client_env(self) -> dict[str, str]:
        """What the build's processes need besides the light server's variables."""
        return {HEAVY_GATE.name: str(self.gate_file), HEAVY_OUTPUTS.name: str(self.outputs)}

    def describe(self) -> str:
        return (f"heavy units' sccache on 127.0.0.1:{self.heavy_port}, cpus "
                f"{cpu_list(self.cpus.heavy)} ({len(self.cpus.heavy)} local slot(s)); the "
                f"others' on cpus {cpu_list(self.cpus.light)}")


def plan_gate(slots: GateSlots | None, *, sccache: Path, heavy_port: int, work: Path,
              allowed: set[int] | None = None) -> GatePlan | None:
    """The gate for ``slots`` on this process's cpus (``allowed``), or None: nothing to
    split, or no ``taskset`` to pin a server with."""
    if slots is None or shutil.which("taskset") is None:
        return None
    cpus = split_cpus(allowed if allowed is not None else os.sched_getaffinity(0),
                      slots.slots, slots.jobs)
    if cpus is None:
        return None
    gate = work / "sccache-gate"
    outputs = gate / "heavy-outputs"
    shutil.rmtree(outputs, ignore_errors=True)  # an earlier build's lists
    gate_file = write_gate(gate / "gate.json", sccache=str(sccache), heavy_port=heavy_port,
                           cpus=cpus, outputs=outputs)
    launcher = write_wrapper(gate / "sccache", sys.executable,
                             Path(__file__).resolve().parents[2],
                             module="sparkbuild.team.heavy_gate")
    return GatePlan(cpus, heavy_port, launcher, gate_file, outputs)


def heavy_environment(server_env: dict[str, str], gate: GatePlan, logs: Path
                      ) -> dict[str, str]:
    """The heavy units' server's variables: the build's server's, on its own port and log,
    and, for a cache in a directory, a directory of its own (sccache's local cache serves
    one server at a time)."""
    (logs / HEAVY_LOG).unlink(missing_ok=True)  # this build's steps alone
    env = {**server_env, "SCCACHE_SERVER_PORT": str(gate.heavy_port),
           "SCCACHE_ERROR_LOG": str(logs / HEAVY_LOG)}
    if "SCCACHE_DIR" in env:
        env["SCCACHE_DIR"] = env["SCCACHE_DIR"].rstrip("/") + "-heavy"
    return env
