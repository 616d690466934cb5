"""Every environment variable sparkbuild reads, declared once: name, type, default, meaning.

A :class:`Setting` is read only through its typed reader (:meth:`Setting.text`,
:meth:`~Setting.path`, :meth:`~Setting.flag`, :meth:`~Setting.seconds`,
:meth:`~Setting.count`, :meth:`~Setting.choice`, :meth:`~Setting.names`): an empty value
is an unset one, and a value of the wrong type is a :class:`~sparkbuild.errors.UsageError`
naming the variable, never a traceback and never silently ignored.  :data:`SETTINGS` lists
them all; docs/environment.md is written from it (``python -m sparkbuild.settings
docs/environment.md``) and a unit test keeps the page and the declarations equal.

Two audiences: ``you`` (settings a user may give) and ``sparkbuild`` (what sparkbuild sets
for its own children -- the build's cmake and ninja, the provider CMake reads -- declared
here so that the names are written once).

Standard library only: sparkbuild's cmake and ninja read their variables in the build's
own Python.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkbuild.doc_tables import CLOSE, rewrite_main, rewritten, tables
from sparkbuild.errors import UsageError

SettingKind = Literal["path", "text", "flag", "seconds", "count", "choice", "names"]
KINDS: tuple[SettingKind, ...] = ("path", "text", "flag", "seconds", "count", "choice", "names")
"""What a setting's value is: a path, any text, on/off (set and not ``0``), a number of
seconds (at least 0), a positive whole number, one of ``choices``, a comma-separated
list."""
Audience = Literal["you", "sparkbuild"]
AUDIENCES: tuple[Audience, ...] = ("you", "sparkbuild")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: SettingKind
    """One of :data:`KINDS`."""
    default: str
    """What applies while it is unset, as the docs say it (the reader's caller may pass
    its own default where the meaning depends on the caller: ``seconds``)."""
    doc: str
    """What it does, one sentence."""
    set_by: Audience = "you"
    """One of :data:`AUDIENCES`."""
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.set_by not in AUDIENCES:
            raise ValueError(f"{self.name}: unknown kind or audience")

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The value, stripped; None when unset or empty."""
        value = (os.environ if environ is None else environ).get(self.name, "").strip()
        return value or None

    def _refused(self, value: str, wanted: str) -> UsageError:
        return UsageError(f"{self.name} must be {wanted}, not {value!r}",
                          where=f"the environment variable {self.name}",
                          hint=f"unset {self.name}, or see docs/environment.md")

    def _expect(self, kind: SettingKind) -> None:
        if self.kind != kind:
            raise TypeError(f"{self.name} is a {self.kind} setting, not {kind}")

    def text(self, environ: Mapping[str, str] | None = None) -> str | None:
        self._expect("text")
        return self.raw(environ)

    def path(self, environ: Mapping[str, str] | None = None) -> Path | None:
        """The path given (``~`` expanded), or None."""
        self._expect("path")
        value = self.raw(environ)
        return Path(value).expanduser() if value else None

    def flag(self, environ: Mapping[str, str] | None = None) -> bool:
        """On when set to anything but ``0``."""
        self._expect("flag")
        return self.raw(environ) not in (None, "0")

    def seconds(self, default: float | None = None,
                environ: Mapping[str, str] | None = None) -> float:
        """A number of seconds, at least 0; ``default`` (else the declared one) when unset."""
        self._expect("seconds")
        value = self.raw(environ)
        if value is None:
            return float(self.default) if default is None else default
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not seconds >= 0:  # also refuses nan
            raise self._refused(value, "a number of seconds")
        return seconds

    def count(self, environ: Mapping[str, str] | None = None) -> int | None:
        """A positive whole number, or None when unset."""
        self._expect("count")
        value = self.raw(environ)
        if value is None:
            return None
        if not value.isdigit() or int(value) < 1:
            raise self._refused(value, "a positive whole number")
        return int(value)

    def choice(self, environ: Mapping[str, str] | None = None) -> str | None:
        """One of ``choices`` (case ignored), or None when unset."""
        self._expect("choice")
        value = self.raw(environ)
        if value is None:
            return None
        if value.lower() not in self.choices:
            raise self._refused(value, "one of " + ", ".join(self.choices))
        return value.lower()

    def names(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The comma-separated names given, empty ones dropped."""
        self._expect("names")
        return tuple(n.strip() for n in (self.raw(environ) or "").split(",") if n.strip())


# -- what you may set -----------------------------------------------------------------------

CACHE = Setting("SPARKBUILD_CACHE", "path", "~/.cache/sparkbuild",
                "The cache directory when a command is given no `--cache`.")
LOCK_TIMEOUT = Setting("SPARKBUILD_LOCK_TIMEOUT", "seconds", "21600",
                       "How long a run waits for another run's lock on the cache before "
                       "it gives up (exit 16).")
NET_TIMEOUT = Setting("SPARKBUILD_NET_TIMEOUT", "seconds", "60",
                      "How long a connection may stay silent before the download fails.")
NET_DEADLINE = Setting("SPARKBUILD_NET_DEADLINE", "seconds",
                       "3600 for a download, 30 for the sccache-dist scheduler's probe",
                       "How long one HTTP exchange may take in all, redirects and every "
                       "byte of the body included (above 0).")
QUIET = Setting("SPARKBUILD_QUIET", "flag", "off",
                "Leaves out the progress and step lines on stderr (warnings and errors "
                "stay).")
CUOBJDUMP = Setting("SPARKBUILD_CUOBJDUMP", "path",
                    "the nvidia-cuda-cuobjdump wheel, PATH, then `$CUDA_HOME/bin`",
                    "The cuobjdump that reads machine code (`check`, `verify`, `wheel`).")
NVDISASM = Setting("SPARKBUILD_NVDISASM", "path",
                   "the nvidia-cuda-nvdisasm wheel, PATH, then `$CUDA_HOME/bin`",
                   "The nvdisasm cuobjdump runs to disassemble.")
CSRC = Setting("SPARKBUILD_CSRC", "path", "the checkout's or the wheel's `csrc/`",
               "The `csrc/` (`e2m1.cuh` and its checkers) `selftest e2m1` builds.")
JOB_PLAN = Setting("SPARKBUILD_JOB_PLAN", "choice", "pools",
                   "`single`: one MAX_JOBS for every unit (the single plan); `pools`: "
                   "every core, the heavy units in a ninja pool memory holds.",
                   choices=("pools", "single"))
FLASHINFER_LAUNCHER = Setting("SPARKBUILD_FLASHINFER_LAUNCHER", "choice",
                              "sccache if installed, else ccache",
                              "The compiler launcher of flashinfer's own builder when the "
                              "build has no shared compile cache.",
                              choices=("sccache", "ccache", "none"))
BUILD_ROOT = Setting("SPARKBUILD_BUILD_ROOT", "path", "/var/tmp/sparkbuild-build",
                     "The absolute path shared builds run under, the same on every machine "
                     "of a team, so that compile cache keys agree.")
DIST_TOKEN = Setting("SPARKBUILD_DIST_TOKEN", "text", "none",
                     "The sccache-dist scheduler's client token, when no "
                     "`--dist-token-file` or `--client-token-file` is given.")
MAX_JOBS = Setting("MAX_JOBS", "count", "doctor's plan from memory and cores",
                   "vLLM's parallel compile jobs: `doctor` and `wheel` take it over the "
                   "recipe's `[build] jobs`, and `wheel --jobs` over it.")
NVCC_THREADS = Setting("NVCC_THREADS", "count", "1",
                       "vLLM's `nvcc --threads`: `doctor` and `wheel` take it over the "
                       "recipe's `[build] nvcc_threads`.")

# -- what sparkbuild sets for its own children ---------------------------------------------

EXT_TARGETS = Setting("SPARKBUILD_EXT_TARGETS", "names", "every extension",
                      "`wheel --targets`: the extensions the build's setup() keeps.",
                      set_by="sparkbuild")
REAL_CMAKE = Setting("SPARKBUILD_REAL_CMAKE", "path", "cmake",
                     "The cmake sparkbuild's cmake hands every call it does not skip.",
                     set_by="sparkbuild")
FETCH_LOG = Setting("SPARKBUILD_FETCH_LOG", "path", "none",
                    "Where the dependency provider records what CMake fetches.",
                    set_by="sparkbuild")
OFFLINE = Setting("SPARKBUILD_OFFLINE", "flag", "off",
                  "An offline build: the provider stops a configure that would fetch.",
                  set_by="sparkbuild")
REAL_NINJA = Setting("SPARKBUILD_REAL_NINJA", "path", "ninja",
                     "The ninja sparkbuild's ninja runs.", set_by="sparkbuild")
POOL_PLAN = Setting("SPARKBUILD_POOL_PLAN", "path", "none",
                    "The job plan's file sparkbuild's ninja applies to `build.ninja`.",
                    set_by="sparkbuild")
NINJA_RECORD = Setting("SPARKBUILD_NINJA_RECORD", "path", "none",
                       "Where sparkbuild's ninja records each of its runs (one JSON line).",
                       set_by="sparkbuild")
HEAVY_POOL_DEPTH = Setting("SPARKBUILD_HEAVY_POOL_DEPTH", "count", "no pool",
                           "The depth of the heavy units' ninja pool the top-level CMake "
                           "include declares.", set_by="sparkbuild")
HEAVY_GATE = Setting("SPARKBUILD_HEAVY_GATE", "path", "none",
                     "With dist: the file the compiler launcher reads to send a heavy unit to "
                     "the sccache server of the build host's heavy slots.",
                     set_by="sparkbuild")
HEAVY_OUTPUTS = Setting("SPARKBUILD_HEAVY_OUTPUTS", "path", "none",
                        "With dist: where sparkbuild's ninja lists the outputs it put into "
                        "the heavy pool, for the compiler launcher.", set_by="sparkbuild")

SETTINGS: tuple[Setting, ...] = (
    CACHE, LOCK_TIMEOUT, NET_TIMEOUT, NET_DEADLINE, QUIET, CUOBJDUMP, NVDISASM, CSRC,
    JOB_PLAN, FLASHINFER_LAUNCHER, BUILD_ROOT, DIST_TOKEN, MAX_JOBS, NVCC_THREADS,
    EXT_TARGETS, REAL_CMAKE, FETCH_LOG, OFFLINE, REAL_NINJA, POOL_PLAN, NINJA_RECORD,
    HEAVY_POOL_DEPTH, HEAVY_GATE, HEAVY_OUTPUTS,
)
BY_NAME = {setting.name: setting for setting in SETTINGS}


def seconds_from_env(variable: str, default: float) -> float:
    """The declared ``variable``'s seconds, ``default`` while unset (a bad value is a
    UsageError)."""
    return BY_NAME[variable].seconds(default)


# -- the page -------------------------------------------------------------------------------

TABLE_START = "<!-- the settings table: written by `python -m sparkbuild.settings "
TABLE_END = "<!-- end of the settings table -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(set_by: str) -> str:
    """The table of the settings ``set_by`` sets, as docs/environment.md shows it."""
    rows = ["| variable | value | unset | what it does |", "| --- | --- | --- | --- |"]
    for setting in SETTINGS:
        if setting.set_by != set_by:
            continue
        kind = (" or ".join(f"`{c}`" for c in setting.choices) if setting.kind == "choice"
                else setting.kind)
        rows.append(f"| `{setting.name}` | {_cell(kind)} | {_cell(setting.default)} | "
                    f"{_cell(setting.doc)} |")
    return "\n".join(rows)


def page_tables(page: str) -> list[str]:
    """The generated tables of ``page``, in order (the text between each start and end
    marker)."""
    return [table for _, table in tables(page, TABLE_START, TABLE_END)]


def _table_for(marker: str) -> str:
    """The marker line as it stands (it names its audience: ``... docs/environment.md` for
    you -->``) and that audience's table."""
    return marker + CLOSE + markdown_table(marker.rsplit(" for ", 1)[-1].strip()) + "\n"


def written_page(page: str) -> str:
    """``page`` with each generated table replaced by the declarations' own, for the
    audience its marker line names."""
    return rewritten(page, TABLE_START, TABLE_END, _table_for)


def main(argv: list[str]) -> int:
    """``python -m sparkbuild.settings PAGE``: write the page's tables anew."""
    return rewrite_main(argv, "python -m sparkbuild.settings docs/environment.md", written_page)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
