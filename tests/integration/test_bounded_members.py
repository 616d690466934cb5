"""verify reads wheel members with bounded memory: a big, highly compressible member in a
small wheel (2 GiB of zeros in a 2.3 MB wheel must not take verify to 2 GB of RAM).

The peak RSS of the `sparkbuild verify` process is read with resource.getrusage in the
child itself, so the test measures the command and nothing else.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from corpus.builders import PACKAGE, VERSION, big_member_wheelhouse

SIZE = 256 << 20
MEASURE = """
import resource, runpy, sys
sys.argv = ["sparkbuild", *sys.argv[1:]]
try:
    runpy.run_module("sparkbuild", run_name="__main__")
except SystemExit as exit_:
    code = exit_.code
print("PEAK_MIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, code)
"""


def _peak(*args: str) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True,
                          text=True, timeout=600, check=False)
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("PEAK_MIB")]
    _, peak, code = line.split()
    return int(peak), int(code)


# Both are refused (exit 12): METADATA for its size; the .so after it is read and hashed
# whole, because a library of zeros holds no GPU code for the manifest's 12.1a target.
@pytest.mark.parametrize("member", [f"{PACKAGE}-{VERSION}.dist-info/METADATA",
                                    f"{PACKAGE}/zeros.so"])
def test_a_big_member_is_read_in_bounded_memory(tmp_path: Path, member: str) -> None:
    wheelhouse = big_member_wheelhouse(tmp_path / "wheelhouse", member, SIZE)
    (wheel,) = wheelhouse.glob("*.whl")
    assert wheel.stat().st_size < 4 << 20  # a small wheel ...
    peak, code = _peak("verify", str(wheelhouse))
    assert code == 12
    assert peak < 200, f"verify peaked at {peak} MiB for a {SIZE >> 20} MiB member"
