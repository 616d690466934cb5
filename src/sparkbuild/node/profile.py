"""The node profile: the environment a node needs to start vLLM with no network and no JIT.

Each entry has its value, its reason and its source.  The *declared* profile comes from
sparkbuild's defaults and the recipe's ``[node] env`` (add or replace) and ``drop``; it is
recorded in the wheelhouse's manifest (``build.node_profile``), so the
wheelhouse's fingerprint covers it.  ``install`` then *resolves* it on the node: a value
of :data:`ON_NODE` is found there (the workspace, a ptxas that accepts sm_121a), and writes

* ``VENV/sparkbuild/profile.sh``: ``export KEY='VALUE'`` lines (shell-quoted), sourced by
  ``VENV/bin/activate``;
* ``VENV/sparkbuild/node.env``: ``KEY=VALUE`` lines for systemd's ``EnvironmentFile=``, a
  value bare when it is plain (letters, digits, ``_./:,=+@%^-``), else in double quotes with
  ``\\``, ``"``, ``$`` and a backtick escaped, as systemd reads them back.

Every entry is checked before it is written (:func:`sparkbuild.recipe.env_entry_problem`,
the check the recipe and the manifest get): a key is a shell name, and no value, reason or
source holds a control character, so nothing in a profile runs in ``activate`` or adds a
line to ``node.env``.  An entry that cannot be resolved here (no ptxas that takes sm_121a)
is left out, with a note naming why; ``sparkbuild doctor --node`` reports it too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkbuild.errors import VerifyError
from sparkbuild.proc import run
from sparkbuild.records import Record
from sparkbuild.store.files import write_text_atomic
from sparkbuild.toolchain.archs import flashinfer_arch_list
from sparkbuild.wheelhouse.manifest import (
    MANIFEST_NAME,
    profile_entry_problem,
    recorded_profile,
)

if TYPE_CHECKING:
    from sparkbuild.recipe import Recipe

ON_NODE = "<found on the node>"
PROFILE_DIR = "sparkbuild"
PROFILE_SH = "profile.sh"
ENV_FILE = "node.env"
WORKSPACE_KEY = "FLASHINFER_WORKSPACE_BASE"
PTXAS_KEY = "TRITON_PTXAS_PATH"
ACTIVATE_LINE = ('[ -f "$VIRTUAL_ENV/sparkbuild/profile.sh" ] && '
                 '. "$VIRTUAL_ENV/sparkbuild/profile.sh"  # sparkbuild node profile')

_TINY_PTX = """.version 8.8
.target sm_121a
.address_size 64
.visible .entry sparkbuild_probe() { ret; }
"""


@dataclass(frozen=True)
class ProfileEntry(Record):
    key: str
    value: str
    reason: str
    source: str

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> ProfileEntry:
        return cls(str(entry["key"]), str(entry["value"]), str(entry.get("reason", "")),
                   str(entry.get("source", "")))

    def problem(self) -> str | None:
        """Why this entry may not be written into a profile; None when it may."""
        return profile_entry_problem(self.to_dict())


def default_entries(archs: Sequence[str]) -> list[ProfileEntry]:
    """sparkbuild's defaults for a wheelhouse built for ``archs``."""
    default = "sparkbuild default"
    return [
        ProfileEntry("FLASHINFER_NO_DOWNLOAD", "1", "flashinfer fails at once instead of "
                     "fetching cubins from NVIDIA's artifact server (jit/cubin_loader.py: "
                     "get_artifact)", default),
        ProfileEntry("FLASHINFER_WORKSPACE_BASE", ON_NODE, "a writable place for flashinfer's "
                     "cache (~/.cache/flashinfer under it); the service user's home may be "
                     "read-only", default),
        ProfileEntry("FLASHINFER_CUDA_ARCH_LIST", flashinfer_arch_list(list(archs)),
                     "the archs the prebuilt modules are built for: flashinfer names its "
                     "workspace and picks its kernels by them", "the wheelhouse's target"),
        ProfileEntry("TRITON_PTXAS_PATH", ON_NODE, "Triton's bundled ptxas rejects sm_121a "
                     "(triton#8539): a ptxas of CUDA 12.9 or later", default),
        ProfileEntry("VLLM_USE_DEEP_GEMM", "0", "on sm_121 vLLM's DeepGEMM gate opens and the "
                     "first blockwise-FP8 layer faults (vllm#54125)", default),
        ProfileEntry("VLLM_HAS_FLASHINFER_CUBIN", "1", "vLLM turns FlashInfer off when neither "
                     "flashinfer-cubin is installed nor nvcc is on PATH (vllm/utils/flashinfer.py:"
                     " has_flashinfer); the prebuilt modules need no nvcc.  It also makes vLLM "
                     "take trtllm-gen cubins as present, a path it takes on SM100 only: drop it "
                     "there unless flashinfer-cubin is installed", default),
    ]


def declared_profile(archs: Sequence[str], env: Mapping[str, str], drop: Sequence[str],
                     recipe_path: str) -> list[ProfileEntry]:
    """The defaults, then the recipe's ``[node] env`` (added or replacing), less ``drop``."""
    entries = {e.key: e for e in default_entries(archs)}
    for key, value in env.items():
        entries[key] = ProfileEntry(key, value, "set by the recipe", f"recipe {recipe_path}")
    return [entry for key, entry in entries.items() if key not in set(drop)]


def declared_env(recipe: Recipe) -> dict[str, str]:
    """The declared profile of ``recipe`` as the environment it gives a node."""
    return {entry.key: entry.value for entry in declared_profile(
        recipe.target.cuda_archs, recipe.node.env, recipe.node.drop, str(recipe.path))}


def profile_from_manifest(manifest: Mapping[str, Any]) -> list[ProfileEntry]:
    """The profile a wheelhouse records, each entry checked
    (:func:`sparkbuild.wheelhouse.manifest.recorded_profile`); sparkbuild's defaults for one
    that records none."""
    recorded = recorded_profile(manifest, MANIFEST_NAME)
    if recorded is not None:
        return [ProfileEntry.from_dict(entry) for entry in recorded]
    settings = manifest.get("build") or {}
    archs = settings.get("archs") if isinstance(settings, dict) else None
    return default_entries([str(a) for a in archs] if isinstance(archs, list) else ["12.1a"])


# -- resolving on the node -----------------------------------------------------------------

PtxasProbe = Callable[[Path], str | None]
"""Compiles a tiny sm_121a PTX with a ptxas: None when it accepts it, else why not."""


def probe_ptxas(ptxas: Path) -> str | None:
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "probe.ptx"
        source.write_text(_TINY_PTX, encoding="utf-8")
        result = run([ptxas, "-arch=sm_121a", source, "-o", Path(scratch) / "probe.cubin"],
                     check=False, echo=False, timeout=120)
    if result.returncode == 0:
        return None
    return (result.output.strip().splitlines() or ["exit status " + str(result.returncode)])[-1]


def ptxas_candidates(env: Mapping[str, str]) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    if env.get("TRITON_PTXAS_PATH"):
        found.append((Path(env["TRITON_PTXAS_PATH"]), "TRITON_PTXAS_PATH"))
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable):
            found.append((Path(env[variable]) / "bin" / "ptxas", variable))
    on_path = shutil.which("ptxas", path=env.get("PATH"))
    if on_path:
        found.append((Path(on_path), "PATH"))
    found.append((Path("/usr/local/cuda/bin/ptxas"), "/usr/local/cuda"))
    return found


def find_ptxas(env: Mapping[str, str], probe: PtxasProbe = probe_ptxas
               ) -> tuple[Path | None, str, list[str]]:
    """The first ptxas that accepts sm_121a: (path, where it came from, why others failed)."""
    refused: list[str] = []
    seen: set[Path] = set()
    for path, source in ptxas_candidates(env):
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        why = probe(path)
        if why is None:
            return path, source, refused
        refused.append(f"{path} ({source}): {why}")
    return None, "", refused


@dataclass
class NodeProfile(Record):
    entries: list[ProfileEntry]
    notes: list[str]
    profile_sh: Path | None = None
    env_file: Path | None = None

    def summary(self) -> list[str]:
        lines = [f"node profile ({self.env_file}):"]
        lines += [f"  {e.key}={e.value}  ({e.source})" for e in self.entries]
        return lines + [f"  note: {note}" for note in self.notes]

    @property
    def env(self) -> dict[str, str]:
        return {e.key: e.value for e in self.entries}


def workspace_of(venv: Path) -> Path:
    """flashinfer's workspace, inside the venv (writable by whoever installed it)."""
    return venv / "var" / "flashinfer"


def resolve_profile(declared: Sequence[ProfileEntry], venv: Path, *,
                    env: Mapping[str, str] | None = None,
                    probe: PtxasProbe = probe_ptxas) -> NodeProfile:
    """The declared profile with its :data:`ON_NODE` values found here."""
    env = os.environ if env is None else env
    entries: list[ProfileEntry] = []
    notes: list[str] = []
    for entry in declared:
        if entry.value != ON_NODE:
            entries.append(entry)
        elif entry.key == WORKSPACE_KEY:
            workspace = workspace_of(venv)
            workspace.mkdir(parents=True, exist_ok=True)
            entries.append(ProfileEntry(entry.key, str(workspace), entry.reason,
                                        f"{entry.source}: inside the venv, writable"))
        elif entry.key == PTXAS_KEY:
            ptxas, source, refused = find_ptxas(env, probe)
            if ptxas is None:
                notes.append("TRITON_PTXAS_PATH left out: no ptxas here accepts sm_121a"
                             + (f" ({'; '.join(refused)})" if refused else "")
                             + "; install CUDA 12.9 or later, or set it in [node] env")
            else:
                entries.append(ProfileEntry(entry.key, str(ptxas), entry.reason,
                                            f"{entry.source}: found through {source}, "
                                            "compiles sm_121a"))
        else:
            notes.append(f"{entry.key} left out: sparkbuild cannot find its value on a node")
    return NodeProfile(entries, notes)


_BARE = re.compile(r"[A-Za-z0-9_./:,=+@%^-]*")
"""A value systemd's ``EnvironmentFile=`` reads back unchanged without quotes."""
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def env_file_value(value: str) -> str:
    """``value`` as ``node.env`` writes it: bare when plain, else in double quotes with
    ``\\``, ``"``, ``$`` and a backtick escaped (systemd.exec: EnvironmentFile=)."""
    if _BARE.fullmatch(value):
        return value
    return '"' + re.sub(r'([\\"$`])', r"\\\1", value) + '"'


def parse_env_file(text: str) -> dict[str, str]:
    """``node.env``'s entries, read back as :func:`render_env_file` wrote them (comments and
    lines that are no ``KEY=VALUE`` left out)."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or line.startswith("#"):
            continue
        quoted = _QUOTED.fullmatch(value)
        found[key.strip()] = re.sub(r"\\(.)", r"\1", quoted.group(1)) if quoted else value
    return found


def _checked(profile: NodeProfile) -> list[ProfileEntry]:
    for entry in profile.entries:
        problem = entry.problem()
        if problem is not None:
            raise VerifyError(f"the node profile cannot be written: {problem}",
                              hint="nothing was written; the profile comes from the "
                              "wheelhouse's manifest (build.node_profile) and the node")
    return profile.entries


def render_env_file(profile: NodeProfile) -> str:
    lines = ["# sparkbuild node profile: systemd EnvironmentFile= (KEY=VALUE, a value that is "
             'not plain in "double quotes")']
    for entry in _checked(profile):
        lines += [f"# {entry.reason} [{entry.source}]",
                  f"{entry.key}={env_file_value(entry.value)}"]
    return "\n".join(lines) + "\n"


def render_profile_sh(profile: NodeProfile) -> str:
    lines = ["# sparkbuild node profile, sourced by this venv's bin/activate"]
    for entry in _checked(profile):
        lines += [f"# {entry.reason} [{entry.source}]",
                  f"export {entry.key}={shlex.quote(entry.value)}"]
    return "\n".join(lines) + "\n"


def write_profile(profile: NodeProfile, venv: Path) -> NodeProfile:
    """Write ``profile.sh`` and ``node.env`` into the venv; hook ``profile.sh`` into
    ``bin/activate`` once."""
    directory = venv / PROFILE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    profile.profile_sh = directory / PROFILE_SH
    profile.env_file = directory / ENV_FILE
    write_text_atomic(profile.profile_sh, render_profile_sh(profile))
    write_text_atomic(profile.env_file, render_env_file(profile))
    activate = venv / "bin" / "activate"
    if activate.is_file():
        text = activate.read_text(encoding="utf-8")
        if ACTIVATE_LINE not in text:
            write_text_atomic(activate, text.rstrip("\n") + "\n\n" + ACTIVATE_LINE + "\n")
    return profile
