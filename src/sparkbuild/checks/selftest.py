"""``sparkbuild selftest e2m1``: prove csrc/e2m1.cuh on this machine.

Builds csrc/ (a CMake project: cmake + ninja driving nvcc) and runs, in order:

1. the header through the plain C++17 compiler, no CUDA headers (named rounding cases);
2. the exhaustive host check: all 2^32 float32 inputs in both nibble positions against
   cuda_fp4.h's host conversion;
3. the same check with one tie rounded the wrong way, which must fail;
4. where cuobjdump is installed, the SASS of probe kernels: no E2M1 and no FP64
   instruction for plain sm_121 and sm_90, the hardware instruction for sm_121a and sm_120f;
5. with ``gpu``, on the local GPU: the software path against the hardware instruction where
   the GPU has it (a Spark, built for sm_121a), else against cuda_fp4.h's conversion,
   built plainly and with ``--use_fast_math``.

Any failure raises a :class:`SparkbuildError`; a mismatch is a :class:`VerifyError`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparkbuild.console import step
from sparkbuild.errors import CommandFailed, SparkbuildError, ToolchainError, VerifyError
from sparkbuild.proc import run
from sparkbuild.records import Record
from sparkbuild.resources import csrc_dir
from sparkbuild.settings import CSRC
from sparkbuild.toolchain import sass, tools

if TYPE_CHECKING:
    from collections.abc import Sequence

ALL_PAIRS = 1 << 32
SOFTWARE_ARCHS = ("sm_121", "sm_90")
"""Probe targets without the E2M1 instruction: the software path, no FP64."""
HARDWARE_ARCHS = ("sm_121a", "sm_120f")
"""Probe targets with it: the hardware instruction."""
PACK8_KERNEL = "e2m1_pack8"
PACK_KERNELS = (
    "e2m1_pack2",
    "e2m1_pack8",
    "e2m1_pack8_float2",
    "e2m1_pack16",
    "e2m1_pack16_float2",
)
MUTANT_STRIDE = 4096
"""The mutant's sweep checks every 4096th pair: +-2.5 (0x40200000, 0xC0200000) are among them."""
HARDWARE_FAMILIES = range(100, 130)
"""Compute capabilities (x10) whose family-specific targets have the instruction."""

_RESULT = re.compile(r"^RESULT (.*)$", re.MULTILINE)
_MISMATCH = re.compile(r"^MISMATCH .*$", re.MULTILINE)


@dataclass(frozen=True)
class CheckRun(Record):
    """One checker program's verdict, read from its ``RESULT key=value ...`` line."""

    name: str
    ok: bool
    values: dict[str, str]
    mismatches: tuple[str, ...]
    seconds: float
    must_fail: bool = False
    """A planted fault (the mutant): the checker must report it."""

    @property
    def as_expected(self) -> bool:
        return self.ok != self.must_fail

    def json_extra(self) -> dict[str, Any]:
        return {"as_expected": self.as_expected}


@dataclass(frozen=True)
class SassProbe(Record):
    arch: str
    expect_hardware: bool
    e2m1_instructions: int
    fp64_instructions: int
    pack8_instructions: int

    @property
    def ok(self) -> bool:
        if self.expect_hardware:
            return self.e2m1_instructions > 0
        return self.e2m1_instructions == 0 and self.fp64_instructions == 0

    def json_extra(self) -> dict[str, Any]:
        return {"ok": self.ok}


@dataclass
class SelftestResult(Record):
    json_order: ClassVar[tuple[str, ...]] = (
        "nvcc", "nvcc_version", "work_dir", "checks", "sass_probes",
        "added_instructions_per_value",
    )

    nvcc: str
    nvcc_version: str
    work_dir: Path
    checks: list[CheckRun] = field(default_factory=list)
    sass_probes: list[SassProbe] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def error(self) -> SparkbuildError | None:
        return None  # failures raise instead

    def added_instructions_per_value(self) -> float | None:
        """Software sm_121 over hardware sm_121a, in the 8-value pack kernel, per value."""
        counts = {probe.arch: probe.pack8_instructions for probe in self.sass_probes}
        if "sm_121" not in counts or "sm_121a" not in counts:
            return None
        return (counts["sm_121"] - counts["sm_121a"]) / 8

    def json_extra(self) -> dict[str, Any]:
        return {"added_instructions_per_value": self.added_instructions_per_value()}

    def summary(self) -> list[str]:
        lines = [f"e2m1 selftest with nvcc {self.nvcc_version} ({self.nvcc})"]
        for check in self.checks:
            detail = " ".join(f"{key}={value}" for key, value in check.values.items())
            caught = " (caught, as it must be)" if check.must_fail and check.as_expected else ""
            mark = "ok  " if check.as_expected else "FAIL"
            lines.append(f"  {mark} {check.name}: {detail}{caught}")
        for probe in self.sass_probes:
            kind = "hardware" if probe.expect_hardware else "software"
            lines.append(
                f"  {'ok  ' if probe.ok else 'FAIL'} SASS {probe.arch} ({kind}): "
                f"{probe.e2m1_instructions} E2M1, {probe.fp64_instructions} FP64, "
                f"{probe.pack8_instructions} instructions in {PACK8_KERNEL}"
            )
        added = self.added_instructions_per_value()
        if added is not None:
            lines.append(f"  software path adds {added:.2f} instructions per value over sm_121a")
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.append(f"  logs and binaries: {self.work_dir}")
        return lines


# ---- locating things -------------------------------------------------------------------


def find_csrc() -> Path:
    """csrc/ of this checkout or wheel (SPARKBUILD_CSRC overrides): the header and checkers."""
    override = CSRC.path()
    candidates = [override] if override is not None else []
    candidates.append(csrc_dir())
    for candidate in candidates:
        if (candidate / "e2m1.cuh").is_file() and (candidate / "CMakeLists.txt").is_file():
            return candidate
    raise ToolchainError(
        "csrc/ with e2m1.cuh not found",
        where=", ".join(str(candidate) for candidate in candidates),
        hint="reinstall sparkbuild (its wheel carries csrc/), or set SPARKBUILD_CSRC to a csrc/",
    )


def _require(tool: tools.Tool | None, name: str) -> Path:
    if tool is None:
        raise ToolchainError(f"{name} not found", hint=f"pip install {name}")
    return tool.path


def local_gpu_arch() -> str:
    """The target to build the GPU check for: ``sm_121a`` on a Spark, ``sm_90`` on a Hopper GPU.

    Family-specific (``a``) where the GPU's family has the E2M1 instruction, so that the
    software path is compared with the hardware; the plain target elsewhere.
    """
    if shutil.which("nvidia-smi") is None:
        raise ToolchainError("no NVIDIA GPU: nvidia-smi not found", hint="run without --gpu")
    query = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
    output = run(query, echo=False).output
    return gpu_arch_for(output)


def gpu_arch_for(compute_cap_output: str) -> str:
    """``12.1`` (nvidia-smi's compute_cap of the first GPU) -> ``sm_121a``."""
    match = re.search(r"^\s*(\d+)\.(\d+)\s*$", compute_cap_output, re.MULTILINE)
    if match is None:
        raise ToolchainError(
            "cannot read the GPU's compute capability",
            where=f"nvidia-smi printed: {compute_cap_output.strip()!r}",
            hint="check the NVIDIA driver with `nvidia-smi`",
        )
    number = int(match.group(1)) * 10 + int(match.group(2))
    return f"sm_{number}a" if number in HARDWARE_FAMILIES else f"sm_{number}"


# ---- building ----------------------------------------------------------------------------


def build_csrc(
    csrc: Path, build_dir: Path, nvcc: Path, *, probe_archs: Sequence[str], gpu_arch: str | None
) -> None:
    """Configure and build csrc/ with cmake and ninja; logs under ``build_dir``."""
    cmake = _require(tools.find_cmake(), "cmake")
    ninja = _require(tools.find_ninja(), "ninja")
    configure: list[str | os.PathLike[str]] = [
        cmake,
        "-S",
        csrc,
        "-B",
        build_dir,
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DSPARKBUILD_E2M1_PROBE_ARCHS={';'.join(probe_archs)}",
        f"-DSPARKBUILD_E2M1_GPU_ARCH={gpu_arch or ''}",
    ]
    step("configuring csrc/ (cmake)")
    run(configure, log=build_dir.parent / "configure.log")
    step("building csrc/ (ninja)")
    jobs = str(os.cpu_count() or 2)
    run([cmake, "--build", build_dir, "--parallel", jobs], log=build_dir.parent / "build.log")


def probe_object(build_dir: Path, arch: str) -> Path:
    found = sorted((build_dir / "CMakeFiles" / f"e2m1_probe_{arch}.dir").rglob("*.o"))
    if not found:
        raise CommandFailed(f"the SASS probe for {arch} was not built", where=str(build_dir))
    return found[0]


# ---- running the checkers ----------------------------------------------------------------


def parse_check_output(name: str, output: str, seconds: float, must_fail: bool = False) -> CheckRun:
    """A checker's output -> its verdict (``RESULT ok=1 checked=... mismatches=0 ...``)."""
    results = _RESULT.findall(output)
    if not results:
        raise CommandFailed(f"{name} printed no RESULT line", where=output.strip()[-500:])
    values = dict(item.split("=", 1) for item in results[-1].split() if "=" in item)
    return CheckRun(
        name=name,
        ok=values.get("ok") == "1",
        values=values,
        mismatches=tuple(_MISMATCH.findall(output)),
        seconds=round(seconds, 2),
        must_fail=must_fail,
    )


def run_check(
    name: str, argv: Sequence[str | os.PathLike[str]], log: Path, *, must_fail: bool = False
) -> CheckRun:
    """Run a checker; a non-zero exit with a RESULT line is a verdict, not a crash."""
    started = time.monotonic()
    result = run(argv, log=log, check=False)
    check = parse_check_output(name, result.full_output(), time.monotonic() - started,
                               must_fail)
    if check.ok != (result.returncode == 0):
        raise CommandFailed(
            f"{name} exited with status {result.returncode} but reported ok={check.ok}",
            where=str(log),
        )
    return check


def require_pass(check: CheckRun, what: str) -> CheckRun:
    if not check.ok:
        shown = "\n".join(check.mismatches[:8])
        raise VerifyError(
            f"{what}: {check.values.get('mismatches', '?')} mismatches\n{shown}".rstrip(),
            where=check.name,
            hint="csrc/e2m1.cuh disagrees with NVIDIA's conversion; do not build with it",
        )
    return check


def require_mutant_caught(check: CheckRun) -> CheckRun:
    if check.ok or not check.mismatches:
        raise VerifyError(
            "the exhaustive check did not notice a tie rounded the wrong way",
            where=check.name,
            hint="the checker is broken: its passing result proves nothing",
        )
    return check


def host_checks(build_dir: Path, logs: Path) -> list[CheckRun]:
    threads = str(os.cpu_count() or 2)
    step("checking the header without CUDA (C++17)")
    plain = run_check("plain C++17", [build_dir / "e2m1_plain_cxx"], logs / "plain_cxx.log")
    step("checking all 2^32 inputs in both nibble positions against cuda_fp4.h (host)")
    exhaustive = run_check(
        "host, all 2^32 inputs x 2 positions",
        [build_dir / "e2m1_check_host", "--threads", threads],
        logs / "check_host.log",
    )
    require_pass(plain, "the header compiled without CUDA")
    require_pass(exhaustive, "the exhaustive host check")
    if exhaustive.values.get("checked") != str(ALL_PAIRS):
        raise VerifyError(f"the host check covered {exhaustive.values.get('checked')} pairs")
    step("checking that the check catches one tie rounded the wrong way")
    mutant = run_check(
        "mutant (tie 2.5 rounded up)",
        [
            build_dir / "e2m1_check_host_mutant",
            "--threads",
            threads,
            "--stride",
            str(MUTANT_STRIDE),
        ],
        logs / "check_host_mutant.log",
        must_fail=True,
    )
    return [plain, exhaustive, require_mutant_caught(mutant)]


def gpu_checks(build_dir: Path, logs: Path) -> list[CheckRun]:
    checks = []
    for variant in ("e2m1_check_gpu", "e2m1_check_gpu_fastmath"):
        step(f"checking the software path on the GPU ({variant})")
        check = run_check(f"GPU {variant}", [build_dir / variant], logs / f"{variant}.log")
        checks.append(require_pass(check, f"the GPU check {variant}"))
    return checks


def sass_probes(build_dir: Path, logs: Path) -> list[SassProbe]:
    probes = []
    for arch in (*SOFTWARE_ARCHS, *HARDWARE_ARCHS):
        functions = sass.read_sass(probe_object(build_dir, arch), log=logs / f"sass_{arch}.log")
        packers = [f for f in functions if f.name in PACK_KERNELS]
        pack8 = sass.functions_named(functions, PACK8_KERNEL)
        probes.append(
            SassProbe(
                arch=arch,
                expect_hardware=arch in HARDWARE_ARCHS,
                e2m1_instructions=sum(len(f.e2m1_instructions()) for f in packers),
                fp64_instructions=sum(len(f.fp64_instructions()) for f in packers),
                pack8_instructions=pack8[0].count if pack8 else 0,
            )
        )
    failed = [probe for probe in probes if not probe.ok]
    if failed:
        raise VerifyError(
            "the E2M1 path chosen per target is wrong: "
            + ", ".join(
                f"{p.arch} ({p.e2m1_instructions} E2M1, {p.fp64_instructions} FP64)" for p in failed
            ),
            where=str(build_dir),
            hint="the hardware guard in csrc/e2m1.cuh picks the wrong path for these targets",
        )
    return probes


def _cuobjdump_available() -> bool:
    return sass.installed_cuobjdump() is not None and sass.find_nvdisasm() is not None


# ---- the selftest ------------------------------------------------------------------------


def run_e2m1_selftest(*, gpu: bool, work_dir: Path | None = None) -> SelftestResult:
    nvcc = tools.find_nvcc()
    tools.require_sm121(nvcc)
    csrc = find_csrc()
    work = work_dir or Path(tempfile.mkdtemp(prefix="sparkbuild-e2m1-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result = SelftestResult(str(nvcc.path), str(nvcc.version), work)
    with_sass = _cuobjdump_available()
    if not with_sass:
        result.notes.append(
            "SASS probes skipped: pip install nvidia-cuda-cuobjdump "
            "nvidia-cuda-nvdisasm to read the machine code"
        )
    probe_archs = (*SOFTWARE_ARCHS, *HARDWARE_ARCHS) if with_sass else ()
    gpu_arch = local_gpu_arch() if gpu else None
    if gpu_arch:
        result.notes.append(f"GPU check built for {gpu_arch}")
    build_dir = work / "build"
    build_csrc(csrc, build_dir, nvcc.path, probe_archs=probe_archs, gpu_arch=gpu_arch)
    result.checks.extend(host_checks(build_dir, logs))
    if with_sass:
        step("reading the SASS of the probes (cuobjdump)")
        result.sass_probes.extend(sass_probes(build_dir, logs))
    if gpu:
        result.checks.extend(gpu_checks(build_dir, logs))
    return result
