"""Peak memory of the deterministic wheel rewrite on a synthetic wheel the size of vLLM's.

    python bench/wheel_rewrite_memory.py [--gib 1.2] [--rev GIT_REV] [--out FILE]

A vLLM wheel unpacks to more than 1 GB (its ``_C.abi3.so`` and the FP4/MoE kernels).  This
writes a synthetic wheel of ``--gib`` GiB of entries (one big ``_C.so`` and 200 files of
1 MiB; 1/16 of each MiB random, the rest zeros) and
rewrites it with :func:`sparkbuild.wheelhouse.wheel_rewrite.normalize_wheel` in a fresh
process, reporting that process's peak RSS and wall time.  ``--rev`` also runs the
module as it was at a git revision (``b0a935e``: the reader that held every entry), for
comparison.  Writes a markdown section to ``--out``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULE = "src/sparkbuild/wheelhouse/wheel_rewrite.py"
MIB = 1 << 20

CHILD = r"""
import importlib.util, sys, time
from pathlib import Path
source = sys.argv[3]
if source == "current":
    from sparkbuild.wheelhouse import wheel_rewrite as module
else:
    spec = importlib.util.spec_from_file_location("rewrite_at_rev", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rewrite_at_rev"] = module
    spec.loader.exec_module(module)
started = time.monotonic()
out = module.normalize_wheel(Path(sys.argv[1]), Path(sys.argv[2]), label="sm121.bench000")
print(f"{time.monotonic() - started:.1f} {out.size}", flush=True)
"""


def block(n: int) -> bytes:
    """1 MiB: 64 KiB of pseudo-random bytes (block ``n``'s own), then zeros."""
    return hashlib.shake_256(n.to_bytes(8, "little")).digest(65536) + bytes(MIB - 65536)


def make_wheel(directory: Path, total: int) -> Path:
    path = directory / "vllm-0.33.0-cp38-abi3-linux_aarch64.whl"
    records = []
    small = min(200, total // MIB // 2)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        digest, size = hashlib.sha256(), 0
        big = zipfile.ZipInfo("vllm/_C.abi3.so")
        big.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(big, "w", force_zip64=True) as out:
            for n in range(total // MIB - small):
                data = block(n)
                digest.update(data)
                out.write(data)
                size += len(data)
        records.append(("vllm/_C.abi3.so", digest, size))
        for n in range(small):
            data = block(100_000 + n)
            name = f"vllm/kernels/k{n:03d}.so"
            archive.writestr(name, data)
            records.append((name, hashlib.sha256(data), len(data)))
        metadata = b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n"
        archive.writestr("vllm-0.33.0.dist-info/METADATA", metadata)
        records.append(("vllm-0.33.0.dist-info/METADATA", hashlib.sha256(metadata),
                        len(metadata)))
        lines = [f"{name},sha256={base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()},"
                 f"{n}\n" for name, h, n in records]
        archive.writestr("vllm-0.33.0.dist-info/RECORD",
                         "".join(lines) + "vllm-0.33.0.dist-info/RECORD,,\n")
    return path


def measure(wheel: Path, out: Path, source: str) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, output bytes) of one rewrite in a fresh process."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(wheel), str(out), source],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"the rewrite ({source}) failed: {child.returncode}")
    seconds, size = line.split()
    return float(seconds), usage.ru_maxrss / 1024, int(size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.2)
    parser.add_argument("--rev", help="also measure wheel_rewrite.py at this git revision")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "WHEEL_REWRITE_RESULTS.md")
    args = parser.parse_args()
    loads = [" ".join(f"{x:.2f}" for x in os.getloadavg())]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sparkbuild-wheelbench-") as scratch:
        root = Path(scratch)
        wheel = make_wheel(root, int(args.gib * (1 << 30)))
        sources = [("current", "current")]
        if args.rev:
            old = root / "wheel_rewrite_at_rev.py"
            old.write_bytes(subprocess.run(["git", "show", f"{args.rev}:{MODULE}"], cwd=REPO,
                                           capture_output=True, check=True).stdout)
            sources.append((f"at {args.rev} (held every entry)", str(old)))
        for label, source in sources:
            seconds, peak, size = measure(wheel, root / label.split()[0].replace("(", ""),
                                          source)
            rows.append((label, seconds, peak, size))
        entries = wheel.stat().st_size
    loads.append(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    lines = [
        "## Wheel rewrite memory (`bench/wheel_rewrite_memory.py`)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')}: a synthetic wheel of {args.gib:g} GiB of "
        f"entries (one big `_C.abi3.so`, 200 files of 1 MiB; the file {entries / MIB:.0f} MiB), "
        "rewritten by `normalize_wheel` in a fresh process. "
        f"Machine: {os.cpu_count()} cores; load average {loads[0]} before, {loads[1]} after.",
        "",
        "| implementation | wall s | peak RSS of the process | output MiB |",
        "| --- | ---: | ---: | ---: |",
        *[f"| {label} | {seconds:.1f} | {peak:.0f} MiB | {size / MIB:.0f} |"
          for label, seconds, peak, size in rows],
        "",
    ]
    text = "\n".join(lines)
    args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
