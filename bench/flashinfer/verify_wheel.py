"""Every kernel of a built flashinfer-jit-cache wheel judged for a target, as ``verify``
judges a wheelhouse's (the same reader and the same policy).

    python bench/flashinfer/verify_wheel.py WHEEL 12.1a
"""

from __future__ import annotations

import sys
from pathlib import Path

from sparkbuild.wheelhouse.verify import gpu_libraries


def main(argv: list[str]) -> int:
    wheel, targets = Path(argv[0]), argv[1:]
    libraries, notes = gpu_libraries([wheel], targets)
    refused = 0
    for lib in libraries:
        kernels = "; ".join(c.describe() for c in lib.coverage)
        print(f"{lib.library}: {', '.join(lib.archs) or 'no GPU code'}; {kernels}")
        for line in lib.unreachable_lines():
            print(f"  accepted: {line}")
        for found in lib.refusals(allow_jit=False):
            refused += 1
            print(f"  REFUSED: {found.describe(width=160, shown=8)}")
    for note in notes:
        print(f"note: {note}")
    print(f"{len(libraries)} libraries, {refused} refused")
    return 1 if refused or not libraries else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
