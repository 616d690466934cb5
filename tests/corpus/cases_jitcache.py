"""Hostile cases of a prebuilt flashinfer jit-cache, the unreachable-stub rule and
``flashinfer-aot``'s ``--out``.

Each case writes a jit-cache wheel member by member (tests/support/jit_caches.py), a recipe
that pins it (``[flashinfer] jit_cache = { path | url, sha256 }``), and runs ``sparkbuild
flashinfer-aot`` -- or ``verify`` on a wheelhouse holding one -- with a stand-in cuobjdump
that reads the wheel's libraries (nothing is compiled).  The root cause each group answers
is named above it; every group holds cases that failed against the code before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from corpus.cases import ESCAPE_MARK, Case, Invocation
from sparkbuild.errors import (
    DestinationError,
    HashMismatchError,
    InterruptedRun,
    RecipeError,
    VerifyError,
)
from support.jit_caches import (
    DIST_INFO,
    PACKAGE,
    RECORD,
    VERSION,
    WHEEL_NAME,
    JitCache,
    compressed_by_method,
    cuobjdump_env,
    encrypted,
    library,
    module_member,
    symbolic_link,
)
from support.kernel_names import (
    PREFIX,
    SM75,
    SM75_AS_SUBSTITUTION,
    moe_fc_gemm,
)

if TYPE_CHECKING:
    from collections.abc import Callable

AOT = ("sparkbuild.flashinfer.jit_cache", "sparkbuild.wheelhouse.verify")
STUB_REFUSED = "only trap or print and exit"
RULE_WHY = "MoeGemmRunner::dispatchToArch"
"""Said (plain and in the JSON) beside each stub the rule accepts."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recipe(work: Path, table: str) -> Path:
    (work / "series").write_text("# empty\n", encoding="utf-8")
    path = work / "jc.toml"
    path.write_text(f"""
[recipe]
name = "jc"
package = "flashinfer-jit-cache"
[source]
spec = "."
[series]
path = "series"
[target]
cuda_archs = ["12.1a"]
[[pins]]
name = "flashinfer-python"
version = "0.6.18"
sha256 = "{"d" * 64}"
[flashinfer]
aot = true
jit_cache = {table}
""", encoding="utf-8")
    return path


# -- postconditions -------------------------------------------------------------------------


def _out_holds(out: Path, *names: str, source: Path | None = None) -> Callable[[], None]:
    """``out`` holds exactly ``names`` (none: absent or empty), the first one ``source``'s
    bytes; nothing staged is left beside it, nothing marked escaped anywhere."""

    def check() -> None:
        found = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        assert found == sorted(names), f"--out holds {found}, not {sorted(names)}"
        if source is not None:
            assert (out / names[0]).read_bytes() == source.read_bytes(), "not the wheel taken"
        staged = sorted(p.name for p in out.parent.glob(f".{out.name}.partial-*"))
        assert not staged, f"left beside --out: {staged}"
        escaped = [p for p in out.parent.parent.rglob(f"*{ESCAPE_MARK}*")
                   if p.parent.name != "dist"]
        assert not escaped, f"written outside --out: {escaped}"

    return check


def _aot(wheel: JitCache | Callable[[Path], Path], *, succeeds: bool = False,
         out_exists: bool = False, env: dict[str, str] | None = None,
         before: Callable[[Path], None] | None = None) -> Callable[[Path], Invocation]:
    """``flashinfer-aot`` on the recipe pinning ``wheel`` (a :class:`JitCache`, or what makes
    the file): a success leaves exactly the wheel in ``--out``, a refusal nothing."""

    def build(work: Path) -> Invocation:
        path = wheel.write(work / "dist") if isinstance(wheel, JitCache) else wheel(work)
        recipe = _recipe(work, f'{{ path = "{path}", sha256 = "{_sha256(path)}" }}')
        out = work / "out"
        if out_exists:
            out.mkdir()
        if before is not None:
            before(work)
        after = (_out_holds(out, WHEEL_NAME, source=path) if succeeds else _out_holds(out))
        return Invocation(["flashinfer-aot", "--recipe", str(recipe), "--cache",
                           str(work / "cache"), "--out", str(out), "--offline"],
                          env={**cuobjdump_env(work / "tools"), **(env or {})}, after=after)

    return build


def _moe(*stubs: str, member: str = module_member("fused_moe_120")) -> JitCache:
    """A jit-cache whose fused_moe_120 library (or ``member``) holds these guard stubs."""
    if member == module_member("fused_moe_120"):
        return JitCache(modules={"sampling": library(), "fused_moe_120": library(stubs=stubs)})
    return JitCache(extra={member: library(stubs=stubs)})


# -- 1. the prebuilt wheel is written under its own, plain file name ----------------------
# read_jit_cache's loop over the zip's members reused the wheel name's variable, so the
# wheel was copied to wherever its last member pointed: every uncut prebuilt crashed, and a
# crafted one wrote itself to an absolute or climbing path; a URL's last part, unquoted,
# could hold "/" as well.


def _named_by_url(work: Path) -> Path:
    """A URL whose last part, unquoted, climbs: ``...-py3-none-x/../../jc.whl``."""
    wheel = JitCache().write(work, "jc.whl")
    bent = f"{PACKAGE}-{VERSION}-py3-none-x"
    (work / "srv" / bent).mkdir(parents=True)
    url = f"file://{work}/srv/{bent}%2F..%2F..%2Fjc.whl"
    return _recipe(work, f'{{ url = "{url}", sha256 = "{_sha256(wheel)}" }}')


def _by_url(work: Path) -> Invocation:
    recipe, out = _named_by_url(work), work / "out"
    return Invocation(["flashinfer-aot", "--recipe", str(recipe), "--cache",
                       str(work / "cache"), "--out", str(out)],
                      env=cuobjdump_env(work / "tools"), after=_out_holds(out))


def _escape_target(work: Path) -> str:
    (work / "elsewhere").mkdir(exist_ok=True)
    return str(work / "elsewhere" / f"{ESCAPE_MARK}.whl")


def _last_member_absolute(work: Path) -> Path:
    return JitCache(last={_escape_target(work): b"x"}).write(work / "dist")


LAST_MEMBER = [
    Case("jitcache-uncut-prebuilt-taken-whole", "jitcache", None, WHEEL_NAME,
         _aot(JitCache(), succeeds=True), AOT),
    Case("jitcache-uncut-prebuilt-into-existing-out", "jitcache", None, WHEEL_NAME,
         _aot(JitCache(), succeeds=True, out_exists=True), AOT),
    Case("jitcache-last-member-a-module-library", "jitcache", None, WHEEL_NAME,
         _aot(JitCache(modules={}, last={module_member("sampling"): library()}),
              succeeds=True), AOT),
    Case("jitcache-last-member-absolute-path", "jitcache", VerifyError, "an absolute name",
         _aot(_last_member_absolute), AOT),
    Case("jitcache-last-member-climbs-out", "jitcache", VerifyError,
         "climbs out with ..", _aot(JitCache(last={f"../../{ESCAPE_MARK}.whl": b"x"})), AOT),
    Case("jitcache-url-name-climbs-out", "jitcache", RecipeError,
         "is not a plain file name", _by_url, AOT),
]


# -- 2. the unreachable-stub rule reads the kernel's arch tag as its template argument ---
# The rule was a regular expression whose ".*" and "\w*" let an Sm80 or Sm120 kernel
# through when "_4Sm75E" stood anywhere before the schedule mode, or text followed it; and
# it missed a true Sm75 stub whose arch tag is a substitution (S.._) of an earlier Sm75.

def _stub_case(name: str, kernel: str, *, accepted: bool) -> Case:
    if accepted:
        return Case(name, "jitcache", None, RULE_WHY, _aot(_moe(kernel), succeeds=True), AOT)
    return Case(name, "jitcache", VerifyError, STUB_REFUSED, _aot(_moe(SM75, kernel)), AOT)


STUB_NAMES = [
    _stub_case("jitcache-stub-sm75-accepted", SM75, accepted=True),
    _stub_case("jitcache-stub-sm75-host-precompute-accepted", moe_fc_gemm("Sm75", mode=1),
               accepted=True),
    _stub_case("jitcache-stub-sm75-spelt-as-substitution-accepted", SM75_AS_SUBSTITUTION,
               accepted=True),
    *(_stub_case(f"jitcache-stub-{tag.lower()}-refused", moe_fc_gemm(tag), accepted=False)
      for tag in ("Sm80", "Sm89", "Sm90", "Sm100", "Sm120")),
    _stub_case("jitcache-stub-sm80-with-sm75-after-it-refused",
               moe_fc_gemm("Sm80", arch="NSP_4Sm80ENSP_4Sm75E"), accepted=False),
    _stub_case("jitcache-stub-sm120-with-sm75-after-it-refused",
               moe_fc_gemm("Sm120", arch="NSP_5Sm120ENSP_4Sm75E"), accepted=False),
    _stub_case("jitcache-stub-sm75-with-text-after-the-mode-refused",
               SM75.replace("ModeE0EEEEEv", "ModeE0Sm80EEEEEv"), accepted=False),
    _stub_case("jitcache-stub-sm75-of-another-scope-refused",
               moe_fc_gemm("Sm75", arch="NS0_4Sm75E"), accepted=False),
    _stub_case("jitcache-stub-sm75-fifth-argument-refused",
               PREFIX + "NSP_4Sm80ENSP_4Sm75EEEEEvNT_6ParamsE", accepted=False),
    _stub_case("jitcache-stub-sm75-with-a-suffix-refused", SM75 + "_clone", accepted=False),
]


# -- 3. the rule names its library by its path inside the wheel ---------------------------
# It matched any fused_moe_120.so, wherever it sat in the wheel.

RULE_LIBRARY = [
    Case(f"jitcache-stub-rule-library-{where}-refused", "jitcache", VerifyError,
         STUB_REFUSED, _aot(_moe(SM75, member=member)), AOT)
    for where, member in (
        ("in-another-module", f"{PACKAGE}/jit_cache/sampling/fused_moe_120.so"),
        ("at-the-package-root", f"{PACKAGE}/fused_moe_120.so"),
        ("outside-the-package", "other/fused_moe_120/fused_moe_120.so"),
        ("one-level-deeper", f"{PACKAGE}/jit_cache/fused_moe_120/x/fused_moe_120.so"))
]


# -- 4. a prebuilt jit-cache's structure is checked as a built wheel's, first --------------
# Its zip structure was never checked: a symbolic link, a climbing name, a RECORD that
# leaves a member out and a .pth all passed.

def _not_a_zip(work: Path) -> Path:
    path = work / "dist" / WHEEL_NAME
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK\x03\x04 this is not a zip archive\n" * 40)
    return path


def _truncated(work: Path) -> Path:
    path = JitCache().write(work / "dist")
    path.write_bytes(path.read_bytes()[:-30])
    return path


STRUCTURE = [
    Case("jitcache-member-symlink-refused", "jitcache", VerifyError, "a symbolic link member",
         _aot(JitCache(extra={f"{PACKAGE}/link.so": b"/etc/passwd"},
                       tweak={f"{PACKAGE}/link.so": symbolic_link})), AOT),
    Case("jitcache-module-library-symlink-refused", "jitcache", VerifyError,
         "a symbolic link member",
         _aot(JitCache(tweak={module_member("sampling"): symbolic_link})), AOT),
    Case("jitcache-member-climbs-refused", "jitcache", VerifyError, "climbs out with ..",
         _aot(JitCache(extra={f"{PACKAGE}/../../{ESCAPE_MARK}.py": b"x"})), AOT),
    Case("jitcache-member-absolute-refused", "jitcache", VerifyError, "an absolute name",
         _aot(JitCache(extra={f"/tmp/{ESCAPE_MARK}.py": b"x"})), AOT),
    Case("jitcache-record-omits-a-library-refused", "jitcache", VerifyError,
         "is not listed in RECORD",
         _aot(JitCache(unlisted=(module_member("sampling"),))), AOT),
    Case("jitcache-record-omits-a-late-member-refused", "jitcache", VerifyError,
         "is not listed in RECORD",
         _aot(JitCache(last={f"{PACKAGE}/late.py": b"x"}, unlisted=(f"{PACKAGE}/late.py",))),
         AOT),
    Case("jitcache-two-entries-of-one-name-refused", "jitcache", VerifyError,
         "zip entries are named",
         _aot(JitCache(last={module_member("sampling"): library(stubs=(SM75,))})), AOT),
    Case("jitcache-pth-member-refused", "jitcache", VerifyError, "a .pth file",
         _aot(JitCache(extra={"jit_cache_hook.pth": b"import os\n"})), AOT),
    Case("jitcache-sitecustomize-refused", "jitcache", VerifyError,
         "a module the interpreter imports at every start",
         _aot(JitCache(extra={"sitecustomize.py": b"import os\n"})), AOT),
    Case("jitcache-metadata-of-another-version-refused", "jitcache", VerifyError,
         "is not the file name's",
         _aot(lambda work: JitCache(version="0.6.17+cu130").write(work / "dist", WHEEL_NAME)),
         AOT),
]


# -- 19. a wheel nothing can read is a named refusal, not a traceback ----------------------
# An encrypted member, one compressed by a method zipfile lacks, a file that is no zip and
# an empty library each raised from deep inside zipfile or cuobjdump.

def _wheelhouse_with(wheel: JitCache) -> Callable[[Path], Invocation]:
    """``verify`` of a wheelhouse whose one built wheel is ``wheel``, target 12.1a."""

    def build(work: Path) -> Invocation:
        out = work / "wh"
        path = wheel.write(out)
        digest = _sha256(path)
        lock = out / "requirements.lock"
        lock.write_text(f"flashinfer-jit-cache=={VERSION} --hash=sha256:{digest}\n",
                        encoding="utf-8")
        manifest = {"schema": 1, "target": {"cuda_archs": ["12.1a"]},
                    "wheels": [{"file": path.name, "name": "flashinfer-jit-cache",
                                "version": VERSION, "sha256": digest,
                                "size": path.stat().st_size, "role": "built"}],
                    "files": {lock.name: _sha256(lock)}}
        (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        return Invocation(["verify", str(out)], env=cuobjdump_env(work / "tools"))

    return build


UNREADABLE = [
    Case("jitcache-encrypted-library-refused", "jitcache", VerifyError,
         "an encrypted member",
         _aot(JitCache(tweak={module_member("sampling"): encrypted})), AOT),
    Case("jitcache-encrypted-metadata-refused", "jitcache", VerifyError,
         "an encrypted member", _aot(JitCache(tweak={f"{DIST_INFO}/METADATA": encrypted})),
         AOT),
    Case("jitcache-encrypted-record-refused", "jitcache", VerifyError,
         "an encrypted member", _aot(JitCache(tweak={RECORD: encrypted})), AOT),
    Case("jitcache-unknown-compression-refused", "jitcache", VerifyError,
         "compressed by method 99",
         _aot(JitCache(tweak={module_member("sampling"): compressed_by_method(99)})), AOT),
    Case("jitcache-unsupported-compression-refused", "jitcache", VerifyError,
         "compressed by method 9",
         _aot(JitCache(tweak={f"{PACKAGE}/__init__.py": compressed_by_method(9)})), AOT),
    Case("jitcache-not-a-zip-refused", "jitcache", VerifyError, "not a readable wheel",
         _aot(_not_a_zip), AOT),
    Case("jitcache-truncated-zip-refused", "jitcache", VerifyError, "not a readable wheel",
         _aot(_truncated), AOT),
    Case("jitcache-empty-library-refused", "jitcache", VerifyError,
         "sampling: no GPU machine code", _aot(JitCache(modules={"sampling": b""})), AOT),
    Case("jitcache-text-library-refused", "jitcache", VerifyError,
         "sampling: no GPU machine code",
         _aot(JitCache(modules={"sampling": b"not a library\n"})), AOT),
    Case("verify-built-wheel-encrypted-library", "jitcache", VerifyError,
         "an encrypted member",
         _wheelhouse_with(JitCache(tweak={module_member("sampling"): encrypted})), AOT),
    Case("verify-built-wheel-unknown-compression", "jitcache", VerifyError,
         "compressed by method 99",
         _wheelhouse_with(JitCache(tweak={module_member("sampling"):
                                          compressed_by_method(99)})), AOT),
    Case("verify-jit-cache-empty-library", "jitcache", VerifyError,
         "flashinfer module norm holds no GPU machine code",
         _wheelhouse_with(JitCache(modules={"sampling": library(), "norm": b""})), AOT),
    Case("verify-jit-cache-stub-sm80-with-sm75-after-it", "jitcache", VerifyError,
         STUB_REFUSED,
         _wheelhouse_with(_moe(moe_fc_gemm("Sm80", arch="NSP_4Sm80ENSP_4Sm75E"))), AOT),
    Case("verify-jit-cache-stub-sm75-spelt-as-substitution", "jitcache", None, RULE_WHY,
         _wheelhouse_with(_moe(SM75_AS_SUBSTITUTION)), AOT),
    Case("verify-jit-cache-stub-sm75-with-text-after-the-mode", "jitcache", VerifyError,
         STUB_REFUSED,
         _wheelhouse_with(_moe(SM75.replace("ModeE0EEEEEv", "ModeE0Sm80EEEEEv"))), AOT),
    Case("verify-jit-cache-stub-sm75-of-another-scope", "jitcache", VerifyError, STUB_REFUSED,
         _wheelhouse_with(_moe(moe_fc_gemm("Sm75", arch="NS0_4Sm75E"))), AOT),
    Case("verify-jit-cache-stub-rule-library-in-another-module", "jitcache", VerifyError,
         STUB_REFUSED, _wheelhouse_with(_moe(
             SM75, member=f"{PACKAGE}/jit_cache/sampling/fused_moe_120.so")), AOT),
]


# -- 5. flashinfer-aot stages, judges, then places the wheel --------------------------------
# The wheel was written into --out before it was judged, and left there when refused or
# interrupted.

def _out_is_a_file(work: Path) -> Invocation:
    inv = _aot(JitCache())(work)
    (work / "out").write_text("a file\n", encoding="utf-8")
    inv.after = None
    return inv


def _stale_staging(work: Path) -> None:
    stale = work / ".out.partial-999999999"
    stale.mkdir()
    (stale / WHEEL_NAME).write_bytes(b"left by a killed run")


def _interrupt_env() -> dict[str, str]:
    return {"FAKE_CUOBJDUMP_INTERRUPT": "1"}


OUT_DIRECTORY = [
    Case("jitcache-refused-out-left-empty", "jitcache", VerifyError, STUB_REFUSED,
         _aot(_moe(moe_fc_gemm("Sm80")), out_exists=True), AOT),
    Case("jitcache-refused-out-never-made", "jitcache", VerifyError, STUB_REFUSED,
         _aot(_moe(moe_fc_gemm("Sm120"))), AOT),
    Case("jitcache-refused-codeless-out-left-empty", "jitcache", VerifyError,
         "no GPU machine code", _aot(JitCache(modules={"sampling": b""}), out_exists=True),
         AOT),
    Case("jitcache-interrupted-judging-out-left-empty", "jitcache", InterruptedRun,
         "interrupted", _aot(JitCache(), out_exists=True, env=_interrupt_env()), AOT),
    Case("jitcache-killed-run-staging-swept", "jitcache", None, WHEEL_NAME,
         _aot(JitCache(), succeeds=True, before=_stale_staging), AOT),
    Case("jitcache-out-is-a-file", "jitcache", DestinationError,
         "--out exists and is not a directory", _out_is_a_file, AOT),
]


# -- 23. a jit_cache path that is a symbolic link is named as the recipe gives it ---------
# The recipe resolved it, so the wheel was read (and refused) under its target's name.

def _linked(work: Path, *, pin: str | None = None, dangling: bool = False) -> Path:
    blob = JitCache().write(work / "blobs", "3f2a9c")
    link = work / "given-link" / WHEEL_NAME
    link.parent.mkdir()
    link.symlink_to(work / "blobs" / ("gone" if dangling else blob.name))
    return _recipe(work, f'{{ path = "given-link/{WHEEL_NAME}", '
                         f'sha256 = "{pin or _sha256(blob)}" }}')


def _link_case(*, succeeds: bool = False, **how: object) -> Callable[[Path], Invocation]:
    def build(work: Path) -> Invocation:
        recipe, out = _linked(work, **how), work / "out"  # type: ignore[arg-type]
        after = _out_holds(out, WHEEL_NAME) if succeeds else _out_holds(out)
        return Invocation(["flashinfer-aot", "--recipe", str(recipe), "--cache",
                           str(work / "cache"), "--out", str(out), "--offline"],
                          env=cuobjdump_env(work / "tools"), after=after)

    return build


LINKED_PATH = [
    Case("jitcache-path-symlink-taken-under-its-name", "jitcache", None, WHEEL_NAME,
         _link_case(succeeds=True), AOT),
    Case("jitcache-path-symlink-pin-mismatch-names-the-link", "jitcache", HashMismatchError,
         f"given-link/{WHEEL_NAME}", _link_case(pin="0" * 64), AOT),
    Case("jitcache-path-symlink-dangling-names-the-link", "jitcache", RecipeError,
         f"given-link/{WHEEL_NAME}", _link_case(dangling=True), AOT),
]


CASES: list[Case] = [*LAST_MEMBER, *STUB_NAMES, *RULE_LIBRARY, *STRUCTURE, *UNREADABLE,
                     *OUT_DIRECTORY, *LINKED_PATH]

