"""Every kernel of a flashinfer-jit-cache wheel judged for a target, as ``verify`` judges a
wheelhouse's (its reader and policy: sparkbuild.wheelhouse.verify.gpu_libraries), as JSON.

    python3 aot16_verify.py WHEEL 12.1a --out VERIFY.json

One entry per shared library: its machine-code archs, the per-kernel coverage per target
(native, PTX only, none), the guard stubs the policy refuses and those a rule names as never
launched at the target (accepted, with the rule), and its verdict.  Prints one line per
library, as bench/flashinfer/verify_wheel.py does.  Exit 1 when a kernel is refused or the
wheel holds no library.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from sparkbuild.wheelhouse.verify import gpu_libraries


def judged(wheel: Path, targets: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    libraries, notes = gpu_libraries([wheel], targets)
    rows = []
    for lib in libraries:
        refusals = lib.refusals(allow_jit=False)
        rows.append({**lib.to_dict(),
                     "refused": [{"kind": r.kind, "at": r.at, "kernels": list(r.kernels),
                                  "describe": r.describe(width=160, shown=8)}
                                 for r in refusals],
                     "accepted": lib.unreachable_lines(),
                     "kernels": {c.target: c.counts() | {"all": len(c.kernels)}
                                 for c in lib.coverage},
                     # verify's rule too: a module with no machine code for the target
                     "no_code": not lib.archs,
                     "ok": not refusals and bool(lib.archs)})
    refused = sum(len(r["refused"]) + r["no_code"] for r in rows)
    return {"wheel": str(wheel), "targets": targets, "libraries": rows,
            "library_count": len(rows), "refused_libraries": sum(not r["ok"] for r in rows),
            "refusals": refused, "ok": bool(rows) and refused == 0, "notes": notes,
            "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("targets", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = judged(args.wheel, list(args.targets))
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for row in result["libraries"]:
        counts = "; ".join(f"{t}: {c['native']} native, {c['ptx']} ptx, {c['none']} none"
                           for t, c in row["kernels"].items())
        print(f"{row['library']}: {', '.join(row['archs']) or 'no GPU code'}; {counts}"
              f"{'' if row['ok'] else '  REFUSED'}")
        for line in row["accepted"]:
            print(f"  accepted: {line[:200]}")
    print(f"{result['library_count']} libraries, {result['refused_libraries']} refused "
          f"({result['seconds']} s)")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
