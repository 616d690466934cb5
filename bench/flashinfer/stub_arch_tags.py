"""The kernels of a jit-cache library by CUTLASS arch tag, and which of them are guard stubs
at a target: the evidence behind a rule of ``sparkbuild.flashinfer.unreachable_stubs``.

    python bench/flashinfer/stub_arch_tags.py WHEEL 12.1a fused_moe_120 > OUT.json
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

from sparkbuild.wheelhouse.verify import gpu_libraries

ARCH_TAG = re.compile(r"4(Sm\d+)E")
"""``cutlass::arch::SmNN`` as the mangled names spell it (``...NS12_4Sm75E...``)."""


def main(argv: list[str]) -> int:
    wheel, target, module = Path(argv[0]), argv[1], argv[2]
    libraries, _notes = gpu_libraries([wheel], [target])
    (library,) = [lib for lib in libraries if lib.library.endswith(f"/{module}.so")]
    stubs = set(library.guard_stub_kernels)
    counts: collections.Counter[tuple[str, str, bool]] = collections.Counter()
    for cover in library.coverage:
        for kernel in cover.kernels:
            family = "MoeFCGemm" if "9MoeFCGemm" in kernel.name else "other"
            tags = ",".join(sorted(set(ARCH_TAG.findall(kernel.name)))) or "-"
            counts[(family, tags, kernel.name in stubs)] += 1
    print(json.dumps({
        "library": library.library, "target": target,
        "kernels": sum(counts.values()), "guard_stubs": len(stubs),
        "accepted_as_unreachable": len(library.unreachable_kernels),
        "by_family_tag_stub": [{"family": f, "arch_tags": t, "stub": s, "kernels": n}
                               for (f, t, s), n in sorted(counts.items())]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
