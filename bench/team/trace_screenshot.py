"""docs/team-build-trace.png: a build's ``build-trace.json`` as speedscope draws it, offline.

    python bench/team/trace_screenshot.py TRACE.json SPEEDSCOPE_DIR OUT.png [--tracks N]

SPEEDSCOPE_DIR is the ``package`` folder of the speedscope npm package (``npm pack
speedscope@1.25.0``, unpacked): a real trace viewer that reads Chrome's trace-event JSON
from a local file, with no network.  chrome://tracing is gone from Chromium 156 (Debian's
``chromium``: the page no longer exists, even with the internal pages enabled), and the
Perfetto UI is not published on the npm registry.

speedscope shows one track (a trace's thread) at a time, so each track is cut into a
trace of its own -- with a zero-length mark at the build's start and end, so that every
strip has the same time axis -- and drawn by headless Chromium (``--headless --no-sandbox
--disable-gpu --disable-background-networking --disable-component-update --no-first-run``
and an empty ``--user-data-dir``); the strips are then stacked under their track's names on
one page, which Chromium draws again into OUT.png.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=8000"]
WIDTH = 1400
STRIP = 200


def tracks(document: dict[str, Any]) -> list[tuple[int, int, str]]:
    """Every (pid, tid) with work, named ``process: thread``, in the trace's order."""
    names = {(e["pid"], 0): e["args"]["name"] for e in document["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    names.update({(e["pid"], e["tid"]): e["args"]["name"] for e in document["traceEvents"]
                  if e["ph"] == "M" and e["name"] == "thread_name"})
    used = sorted({(e["pid"], e["tid"]) for e in document["traceEvents"] if e["ph"] == "X"})
    return [(pid, tid, f"{names.get((pid, 0), pid)}: {names.get((pid, tid), tid)}")
            for pid, tid in used]


def strip(document: dict[str, Any], pid: int, tid: int, end: int) -> dict[str, Any]:
    """One track as a trace of its own, from 0 to ``end`` microseconds."""
    events = [e for e in document["traceEvents"]
              if e.get("pid") == pid and e.get("tid") in (tid, 0)]
    marks = [{"name": "build start", "ph": "X", "pid": pid, "tid": tid, "ts": 0, "dur": 1},
             {"name": "build end", "ph": "X", "pid": pid, "tid": tid, "ts": end - 1,
              "dur": 1}]
    return {"traceEvents": events + marks, "displayTimeUnit": "ms"}


def chromium(url: str, out: Path, height: int, profile: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    shutil.rmtree(profile, ignore_errors=True)
    subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                    f"--window-size={WIDTH},{height}", f"--screenshot={out}", url],
                   check=True, capture_output=True, timeout=120)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("speedscope", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tracks", type=int, default=6)
    args = parser.parse_args(argv)
    document = json.loads(args.trace.read_text(encoding="utf-8"))
    end = max(e["ts"] + e["dur"] for e in document["traceEvents"] if e["ph"] == "X")
    index = (args.speedscope / "dist" / "release" / "index.html").resolve()
    with tempfile.TemporaryDirectory(prefix="trace-shot-") as scratch:
        work = Path(scratch)
        rows = []
        for number, (pid, tid, name) in enumerate(tracks(document)[:args.tracks]):
            data = json.dumps(strip(document, pid, tid, end)).encode()
            script = work / f"track{number}.js"
            encoded = json.dumps(base64.b64encode(data).decode())
            script.write_text(f"speedscope.loadFileFromBase64({json.dumps(name + '.json')}, "
                              f"{encoded})")
            shot = work / f"track{number}.png"
            chromium(f"file://{index}#localProfilePath={script}", shot, STRIP,
                     work / "profile")
            rows.append(f"<div>{html.escape(name)}</div><img src='{shot.name}'>")
        page = work / "page.html"
        page.write_text("<html><body style='margin:0;font:13px monospace;background:#fff'>"
                        f"<div style='padding:4px'>{html.escape(args.trace.name)}: "
                        f"{len(rows)} tracks, speedscope 1.25.0 (Time Order)</div>"
                        + "".join(rows) + "</body></html>", encoding="utf-8")
        chromium(f"file://{page}", args.out, 24 + len(rows) * (STRIP + 18), work / "profile")
    print(f"{args.out}: {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
