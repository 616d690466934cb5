"""The one-piece recipe: recipe.toml beside this file, with flashinfer's pin and set from another.

    python bench/full-build/one-piece/compose_recipe.py BASE FI_RECIPE --out RECIPE

BASE is ``recipe.toml`` (vllm 0.29.0 at 12.1a: source, series, target, vendor, node).
FI_RECIPE is the recipe that says which flashinfer and which modules: issue 42's
``recipes/vllm-0.29.0.toml`` (its model set) once merged, until then
``flashinfer-interim.toml``.  Its ``[[pins]]``, ``[flashinfer]`` and ``[model]`` tables
(with their sub-tables) are copied as written after BASE; relative paths (BASE's series,
``[model] config``) become absolute, so RECIPE can live anywhere (prep_here.sh writes it into
.devrun-prep/).  RECIPE is read back with sparkbuild's own reader, so a table this
sparkbuild does not know is refused here, not on the device.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

TAKEN = ("pins", "flashinfer", "model")
_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?\s*(#.*)?$")
_PATH_KEY = re.compile(r'^(\s*(?:path|config)\s*=\s*)"([^"]+)"(.*)$')


def tables(text: str) -> list[tuple[str, list[str]]]:
    """The text cut at each table header: (the header's name, its lines)."""
    cut: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            cut.append((header.group(1), []))
        cut[-1][1].append(line)
    return cut


def _absolute(lines: list[str], base: Path, keys: str) -> list[str]:
    out = []
    for line in lines:
        match = _PATH_KEY.match(line)
        if match and match.group(1).strip().startswith(keys):
            value = Path(match.group(2))
            if not value.is_absolute():
                value = (base / value).resolve()
            line = f'{match.group(1)}"{value}"{match.group(3)}'
        out.append(line)
    return out


def compose(base: Path, flashinfer: Path) -> str:
    parts = []
    for name, lines in tables(base.read_text(encoding="utf-8")):
        if name.split(".")[0] in TAKEN:
            raise SystemExit(f"{base}: [{name}] belongs to the flashinfer recipe, not the base")
        parts += _absolute(lines, base.parent, "path") if name == "series" else lines
    parts += ["", f"# from {flashinfer}"]
    for name, lines in tables(flashinfer.read_text(encoding="utf-8")):
        if name.split(".")[0] in TAKEN:
            parts += _absolute(lines, flashinfer.parent, "config") if name.startswith(
                "model") else lines
    text = "\n".join(parts) + "\n"
    tomllib.loads(text)  # a TOML error is this script's, said before sparkbuild reads it
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("flashinfer", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(compose(args.base, args.flashinfer), encoding="utf-8")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
    from sparkbuild.recipe import load_recipe

    recipe = load_recipe(args.out)
    pins = {pin.name: pin.version for pin in recipe.pins}
    print(json.dumps({"recipe": str(args.out), "flashinfer_from": str(args.flashinfer),
                      "pins": pins, "aot": recipe.flashinfer.aot,
                      "aot_args": list(recipe.flashinfer.aot_args)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
