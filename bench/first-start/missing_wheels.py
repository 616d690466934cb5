"""The node set of the first-start proof: vLLM 0.20.0's runtime closure, split into what
the device image already holds at the same version and what must be carried.

Resolves vLLM 0.20.0's own runtime requirements (``requirements/cuda.txt`` with
``common.txt``, read from its sdist) for the device's interpreter (CPython 3.12,
manylinux x86_64) with ``uv pip compile``.  The image's own versions (``pip list
--format=freeze`` taken on the device, ``device-pip-list.txt``) are the resolver's
preferences, and the projects named by ``--keep`` are held at the image's version
(constraints).  Then each resolved project is either

* ``from_image``: the image holds that very version (the node's venv links it from the
  image: ``image_view.py``),
* ``carried``: downloaded here (no dependencies, the device's platform), or
* ``left_out``: named by ``--leave-out`` (neither linked nor carried; vLLM's pip check
  then reports it as left to the node).

So the venv the proof installs into is one consistent resolution, whatever else the image
holds (the 2026-12-03 node-set-rehearsal run found the image's numpy 2.5.2 and numba
0.68.0 outside vLLM 0.20.0's closure; an earlier version of this script carried by name
only and missed both).

    python bench/first-start/missing_wheels.py --sdist vllm-0.20.0.tar.gz \\
        --freeze bench/first-start/device-pip-list.txt --dest carried/ --out node_set.json

For a release whose torch pin is not the image's (vLLM 0.29.0 pins torch 2.13.0, the image
has 2.11.0+cu130), ``--existing-torch`` removes the torch pins from the requirements before
resolving, with the very edit ``wheel --use-existing-torch`` makes to the tree it builds
(sparkbuild.compile.existing_torch.strip_torch_pins): the node set then holds the image's
torch, the one the wheel was compiled against.  ``--drop NAME`` removes a requirement the
index cannot give (vLLM 0.29.0's flashinfer-cubin==0.6.18, which is not on PyPI; its
requirements name flashinfer's own index, unreachable here, and that line goes too).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from sparkbuild.compile.existing_torch import strip_torch_pins

PLATFORM = "x86_64-manylinux_2_28"
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                 "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")
KEEP = ("torch", "torchaudio", "torchvision", "triton", "transformers")
"""Held at the image's version: torch is the build's and never carried; transformers 5.17.0
serves vLLM 0.20.0 (its model config and import checked on CPU for the 2026-12-03
node-set-rehearsal run) and keeps huggingface-hub and tokenizers at the image's versions too."""
LEAVE_OUT = {
    "flashinfer-python": "the wheelhouse holds it (the recipe's pin)",
    "flashinfer-cubin": "281 MiB of cubins: with FLASHINFER_NO_DOWNLOAD=1 its absence shows "
                        "that no cubin is needed",
    "nvidia-cutlass-dsl": "CuTe DSL kernels, not on a dense bf16 model's path; without its "
                          "libs its .pth fails at every interpreter start",
    "nvidia-cutlass-dsl-libs-base": "as nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-cu12": "as nvidia-cutlass-dsl",
    "tilelang": "43 MiB; only layers/mhc.py imports it, for models/deepseek_v4.py",
    "z3-solver": "27 MiB; tilelang's",
    "numba": "vLLM pins 0.65.0 (the image has 0.68.0); only the n-gram speculative "
             "decoder imports it",
    "llvmlite": "numba's (42 MiB)",
    # vLLM 0.29.0's closure (issue 44), the tiny MoE model on the H200 with JIT disabled:
    "nvidia-cutlass-dsl-libs-cu13": "as nvidia-cutlass-dsl (84 MiB)",
    "quack-kernels": "CuTe DSL kernels (MSA's, the GDN and DSA CuteDSL ops), not on this path",
    "humming-kernels": "quantized GEMMs, imported only behind has_humming(); its [cu13] extra "
                       "brings a compiler",
    "nvidia-cuda-nvcc": "humming-kernels' JIT compiler (45 MiB): the node has no compiler",
    "nvidia-nvvm": "as nvidia-cuda-nvcc (72 MiB)",
    "nvidia-cuda-cccl": "as nvidia-cuda-nvcc",
    "tokenspeed-mla": "the MLA prefill backend's kernels (tokenspeed_mla.py imports it lazily); "
                      "the tiny model has no MLA",
    "tokenspeed-triton": "tokenspeed-mla's own Triton (90 MiB)",
    "pynvvideocodec": "video decoding for multimodal inputs (41 MiB), imported lazily",
    "torchcodec": "video and audio decoding for multimodal inputs, imported lazily",
    "llguidance": "structured output's guidance backend, a LazyLoader until a request asks for "
                  "it; 1.7.6's only x86_64 wheel is manylinux_2_31, beyond the tags carried",
}
LEFT_OUT_SINCE = {"llguidance": Version("0.29.0")}
"""Left out only for a vLLM at or after this version: vLLM 0.20.0 reads
``llguidance.LLMatcher`` in a class body as it imports the engine
(vllm/v1/structured_output/backend_guidance.py:139), found on the 2026-12-05 tiny-MoE run."""


def freeze_versions(text: str) -> dict[str, str]:
    """``pip list --format=freeze``: canonical name -> version."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not name.startswith("#"):
            found[canonicalize_name(name)] = version
    return found


def requirements(sdist: Path, into: Path, *, existing_torch: bool = False,
                 drop: tuple[str, ...] = ()) -> Path:
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if "/requirements/" in member.name and member.name.endswith((".txt",)):
                archive.extract(member, into, filter="data")
    (cuda,) = into.glob("*/requirements/cuda.txt")
    if existing_torch:
        strip_torch_pins(cuda.parents[1])
    if drop:
        for path in cuda.parent.rglob("*.txt"):
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            path.write_text("".join(line for line in lines if not dropped(line, drop)),
                            encoding="utf-8")
    return cuda


def dropped(line: str, names: tuple[str, ...]) -> bool:
    """A requirement line for one of ``names``, or an extra index (unreachable here)."""
    text = line.split("#", 1)[0].strip()
    if text.startswith(("--extra-index-url", "--index-url")):
        return True
    if not text or text.startswith("-"):
        return False
    try:
        name = Requirement(text).name
    except InvalidRequirement:
        return False
    return canonicalize_name(name) in {canonicalize_name(n) for n in names}


def resolve(cuda: Path, image: dict[str, str], keep: list[str]) -> list[tuple[str, str]]:
    """``uv pip compile``: the image's versions preferred (an output file it starts from),
    the ``keep`` projects held at them (constraints)."""
    with tempfile.TemporaryDirectory() as scratch:
        preferred = Path(scratch, "resolved.txt")
        preferred.write_text("".join(f"{n}=={v}\n" for n, v in sorted(image.items())))
        held = Path(scratch, "keep.txt")
        held.write_text("".join(f"{n}=={image[n]}\n" for n in keep if n in image))
        subprocess.run(
            ["uv", "pip", "compile", str(cuda), "--python-version", "3.12",
             "--python-platform", PLATFORM, "--no-header", "--no-annotate", "--quiet",
             "--index-url", "https://pypi.org/simple", "--no-config", "--constraint",
             str(held), "--output-file", str(preferred)],
            capture_output=True, text=True, check=True)
        lines = preferred.read_text().splitlines()
    pins: list[tuple[str, str]] = []
    for line in lines:
        name, sep, version = line.strip().partition("==")
        if sep:
            pins.append((canonicalize_name(name.split("[")[0]), version.split(";")[0].strip()))
    return pins


def download(name: str, version: str, dest: Path) -> Path | None:
    before = set(dest.glob("*"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--python-version", "3.12", "--implementation", "cp", "--dest", str(dest),
               f"{name}=={version}"]
    for tag in PIP_PLATFORMS:
        command += ["--platform", tag]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    new = set(dest.glob("*")) - before
    found = new or {p for p in dest.glob("*") if canonicalize_name(p.name.split("-")[0]) == name}
    return sorted(found)[0] if found else None


def sdist_version(sdist: Path) -> Version | None:
    """``vllm-0.20.0.tar.gz`` -> 0.20.0; None for a name that does not say."""
    try:
        return Version(sdist.name.removesuffix(".tar.gz").rpartition("-")[2])
    except InvalidVersion:
        return None


def leaves_out(name: str, vllm: Version | None) -> bool:
    since = LEFT_OUT_SINCE.get(name)
    return name in LEAVE_OUT and (since is None or vllm is None or vllm >= since)


def split(pins: list[tuple[str, str]], image: dict[str, str], vllm: Version | None = None
          ) -> tuple[list[dict[str, str]], list[tuple[str, str]], list[dict[str, str]]]:
    """The resolution split three ways: the image's own (same version), to carry, left out
    (for ``vllm``, the sdist's version)."""
    from_image: list[dict[str, str]] = []
    to_carry: list[tuple[str, str]] = []
    left_out: list[dict[str, str]] = []
    for name, version in pins:
        if leaves_out(name, vllm):
            left_out.append({"name": name, "version": version, "why": LEAVE_OUT[name],
                             "image_has": image.get(name, "")})
        elif image.get(name) == version:
            from_image.append({"name": name, "version": version})
        else:
            to_carry.append((name, version))
    return from_image, to_carry, left_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, required=True)
    parser.add_argument("--freeze", type=Path, required=True,
                        help="the image's `pip list --format=freeze`")
    parser.add_argument("--keep", default=",".join(KEEP),
                        help="projects held at the image's version (comma-separated)")
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--view-list", type=Path,
                        help="write the from_image projects here, name==version a line")
    parser.add_argument("--existing-torch", action="store_true",
                        help="remove the torch pins first, as `wheel --use-existing-torch` does")
    parser.add_argument("--drop", action="append", default=[],
                        help="a requirement the index cannot give (repeatable)")
    args = parser.parse_args()
    image = freeze_versions(args.freeze.read_text(encoding="utf-8"))
    keep = [str(canonicalize_name(n)) for n in args.keep.split(",") if n.strip()]
    with tempfile.TemporaryDirectory() as scratch:
        pins = resolve(requirements(args.sdist, Path(scratch), existing_torch=args.existing_torch,
                                    drop=tuple(args.drop)), image, keep)
    args.dest.mkdir(parents=True, exist_ok=True)
    from_image, to_carry, left_out = split(pins, image, sdist_version(args.sdist))
    carried: list[dict[str, Any]] = []
    failed: list[str] = []
    for name, version in to_carry:
        wheel = download(name, version, args.dest)
        if wheel is None:
            failed.append(f"{name}=={version}")
            continue
        carried.append({"name": name, "version": version, "file": wheel.name,
                        "size": wheel.stat().st_size, "image_has": image.get(name, "")})
    total = sum(item["size"] for item in carried)
    report = {"resolved": len(pins), "kept_at_image_version": keep,
              "existing_torch": args.existing_torch, "dropped": args.drop,
              "from_image": from_image, "carried": carried, "left_out": left_out,
              "carried_count": len(carried), "total_bytes": total,
              "total_mib": round(total / 2**20, 1), "no_wheel_found": failed}
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.view_list:
        args.view_list.write_text("".join(f"{p['name']}=={p['version']}\n" for p in from_image),
                                  encoding="utf-8")
    replaced = [f"{c['name']} {c['image_has']} -> {c['version']}" for c in carried
                if c["image_has"]]
    print(f"{len(pins)} resolved: {len(from_image)} from the image, {len(carried)} carried "
          f"({total / 2**20:.1f} MiB; replacing {replaced}), {len(left_out)} left out; "
          f"no wheel: {failed}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
