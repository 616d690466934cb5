"""Records of every ``--json`` command, built from representative values (optional fields
both set and left out, nested records, an error beside a full report), for the golden test
in :mod:`test_json_golden`.  Nothing here reads the machine: every path, platform and
version is given."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from sparkbuild.bundle.strip import StripReport
from sparkbuild.bundle.write import BundleResult
from sparkbuild.checks.check_plan import GencodeCoverage
from sparkbuild.checks.check_result import CheckResult, UnitOutcome
from sparkbuild.checks.code_forecast import CodeForecast
from sparkbuild.checks.selftest import CheckRun, SassProbe, SelftestResult
from sparkbuild.compile.doctor import Check, DoctorReport
from sparkbuild.compile.extension_set import ExtensionChoice, ExtensionSet, ModelRoots
from sparkbuild.compile.tree_build import BuildOutcome
from sparkbuild.compile.unit_code_watch import ObjectRefusal, UnitCodeWatch
from sparkbuild.flashinfer.build_env import Libcuda, LinkEnvironment
from sparkbuild.flashinfer.builder import AotResult
from sparkbuild.flashinfer.model_config import ModelFacts
from sparkbuild.flashinfer.module_set import DefaultSetListing, Excluded, ModuleSet, ModuleSpec
from sparkbuild.jobplan.machine import BuildPlan
from sparkbuild.jobplan.pools import PoolPlan
from sparkbuild.jobplan.timeline import BuildTimeline, Unit
from sparkbuild.node.fingerprint import Installation, InstalledDist
from sparkbuild.node.install import InstallResult
from sparkbuild.node.installed_check import InstalledCheckResult
from sparkbuild.node.pip_check import PipCheck
from sparkbuild.node.preflight import NodeCheck, PreflightResult
from sparkbuild.node.profile import NodeProfile, ProfileEntry
from sparkbuild.patches.edits.family_guards import Finding
from sparkbuild.patches.edits.preprocessor import Branch
from sparkbuild.patches.journal import Recovery
from sparkbuild.patches.prepare import PrepareResult
from sparkbuild.patches.report import PatchOutcome, SeriesReport
from sparkbuild.pipeline import WheelResult
from sparkbuild.recipe import StandIn, load_recipe
from sparkbuild.sources.fetch import SourceResult
from sparkbuild.team.compile_cache import CacheSpec, CompileCacheResult, SccacheStats
from sparkbuild.team.dist_checks import TeamCheck, TeamReport
from sparkbuild.team.dist_client import DistLink
from sparkbuild.team.dist_record import DistResult, DistStep
from sparkbuild.team.dist_services import TeamService
from sparkbuild.team.scheduler_status import SchedulerStatus
from sparkbuild.toolchain.kept_sass import CodeReads, LibraryCode
from sparkbuild.toolchain.kernel_policy import ClassTemplateKernel, UnreachableStubs
from sparkbuild.toolchain.sass import (
    Coverage,
    FunctionFacts,
    KernelCode,
    KernelCoverage,
    SassSummary,
)
from sparkbuild.toolchain.tools import Tool
from sparkbuild.vendoring.build_deps import CratePlan, WheelPlan
from sparkbuild.vendoring.materialize import Materialized
from sparkbuild.vendoring.placeholders import Placeholder
from sparkbuild.vendoring.plan import SourcePlan, VendorEntry, VendorPlan, VendorResult
from sparkbuild.wheelhouse.closure import WheelhouseFile
from sparkbuild.wheelhouse.lock import ClosureTarget, LockedRequirement, LockResult
from sparkbuild.wheelhouse.overrides import Demand, Override
from sparkbuild.wheelhouse.parts import JoinResult, Part, PartResult
from sparkbuild.wheelhouse.requirements_check import RequirementsReport, TorchCheck, Unmet
from sparkbuild.wheelhouse.standards import Agreement
from sparkbuild.wheelhouse.verify import JudgedJitCache, LibraryArchs, Mismatch, VerifyResult
from sparkbuild.wheelhouse.write import WheelhouseResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbuild.errors import StageResult

ROOT = Path(__file__).resolve().parents[3]
TARGET = ClosureTarget(platform="manylinux_2_39_aarch64", python="3.12")
GIB = 1024**3


def _outside(value: str) -> Any:
    """A value outside its field's Literal, as a record read back unchecked would hold it:
    the golden JSON was written with it, and a record's JSON does not judge its values."""
    return value


def _kernels() -> tuple[KernelCoverage, ...]:
    return (KernelCoverage("_Z3fooPf", "native"),
            KernelCoverage("_Z3barPf", "ptx", code="sm_120", demangled="bar(float*)"),
            KernelCoverage("_Z3bazPf", "none"))


def _coverage() -> tuple[Coverage, ...]:
    return (Coverage("12.1a", _kernels()),)


def _rule() -> UnreachableStubs:
    kernel = ClassTemplateKernel(function=("cutlass", "Kernel"),
                                 template=("cutlass", "gemm", "kernel", "MoeFCGemm"),
                                 arity=5, position=3, argument=("cutlass", "arch", "Sm75"))
    return UnreachableStubs(project="vllm", library="_moe_C.abi3.so", kernel=kernel,
                            selected_for=(7, 5), what="MoE GEMM for Turing",
                            why="the dispatcher picks Sm80 on sm_12x")


def _library(wheel: str = "vllm-0.33.0-cp38-abi3-linux_aarch64.whl") -> LibraryArchs:
    return LibraryArchs(wheel=wheel, library="vllm/_C.abi3.so", archs=("sm_121a",),
                        missing=(), block_scaled_mma=12, trap_only_kernels=("_Z4trapv",),
                        sass_archs=("sm_121a",), guard_stub_kernels=("_Z4stubv",),
                        coverage=_coverage(), unreachable=((_rule(), ("_Z4stubv",)),))


def _pool() -> PoolPlan:
    return PoolPlan(jobs=6, depth=2, basis="measured", threshold_bytes=6 * GIB,
                    heavy_budget_bytes=40 * GIB, light_budget_bytes=60 * GIB,
                    measured={"csrc/moe.cu|sm_121a": 9 * GIB, "csrc/a.cu|sm_121a": GIB},
                    killed=("csrc/moe.cu",), reasons=("two heavy units at once",),
                    single_plan_jobs=4, predicted_seconds=187.04, single_plan_seconds=None,
                    seconds={"csrc/moe.cu": 80.0})


def _plan(pool: bool = True) -> BuildPlan:
    return BuildPlan(max_jobs=6, nvcc_threads=2, launcher=None if pool else "sccache",
                     reasons=("20 cores", "119 GiB"), pool=_pool() if pool else None,
                     requested_jobs=None)


def _timeline() -> BuildTimeline:
    units = [Unit("csrc/moe.cu", "moe.o", "_moe_C", 81.234, 1.5, flags="-O3",
                  peak_rss_bytes=9 * GIB, pool="heavy"),
             Unit("csrc/a.cu", "a.o", "_C", 3.333, 0.25)]
    return BuildTimeline(phases={"configure": 10.123, "compile": 90.555}, units=units,
                         compile_wall=90.555, busy=0.87654, cores=20,
                         critical_path=[("moe.o", 81.234), ("_moe_C.so", 2.0)],
                         retried=["csrc/moe.cu"], edges=412, origin=5.0)


def _stats(hits: int) -> SccacheStats:
    return SccacheStats(hits={"CUDA": hits, "C/C++": 1}, misses={"CUDA": 3},
                        errors={"CUDA": 0}, read_errors=1, write_errors=0, timeouts=0,
                        compile_requests=10 + hits, compilations=3, not_cacheable=1,
                        dist_compiles={"10.0.0.2:10501": 5, "10.0.0.1:10501": 2},
                        dist_errors=1, compile_fails=0)


def _link(connected: bool = True) -> DistLink:
    status = SchedulerStatus(servers=2, cpus=40, in_progress=0) if connected else None
    return DistLink(scheduler="http://10.0.0.1:10600", token="secret", token_source="file",
                    status=status, reason=None if connected else "refused")


def _source() -> SourceResult:
    return SourceResult(kind="git", spec="git+https://github.com/vllm-project/vllm@v0.33.0",
                        url="https://github.com/vllm-project/vllm", ref="v0.33.0",
                        commit="a" * 40, sha256=None, tree=Path("/work/tree"),
                        kept_changes=("setup.py",))


def _series() -> SeriesReport:
    patches = [PatchOutcome("arch-lists", "applied", "3 files", "b" * 64,
                            details={"files": 3}),
               PatchOutcome("guard", "already-applied", "", "c" * 64, where="csrc/x.cu",
                            origin="recipes/extra.patch")]
    recovery = Recovery(action="apply", pid=123, in_flight=("guard",), finished=("a",),
                        restored=2, removed=1)
    return SeriesReport(tree=Path("/work/tree"), patches=patches,
                        raw_instruction_uses=[(Path("csrc/fp4.cu"), 12)],
                        interrupted_run=recovery, dependencies=[{"name": "cutlass"}])


def _placeholder() -> Placeholder:
    return Placeholder(name="flashmla", reason="no built extension uses it",
                       files=("CMakeLists.txt",), extensions=("_flashmla_C",), where="x")


def _vendor_plan() -> VendorPlan:
    stand_in = StandIn(url="https://x/a.tar.gz", pinned="1.0", used="1.1", reason="gone")
    sources = (SourcePlan("cutlass", "git", "https://github.com/NVIDIA/cutlass", "v4.0",
                          method="fetchcontent", where="CMakeLists.txt:10",
                          submodules=("tools",), mirrors=("https://m/cutlass",),
                          patched="d" * 64, override="/src/cutlass"),
               SourcePlan("triton", "url", "https://x/a.tar.gz", None, url_hash="e" * 64,
                          certain=False, stand_in=stand_in, placeholder=_placeholder()))
    return VendorPlan(tree=Path("/work/tree"), sources=sources, unreached=(sources[1],),
                      wheels=(WheelPlan("setuptools>=77", "pyproject.toml"),),
                      crates=(CratePlan("rust/Cargo.lock", "f" * 64, 120, "1.80"),),
                      torch="2.9.0", excluded=(), notes=("one note",),
                      crates_left_out=(CratePlan("x/Cargo.lock", "0" * 64, 3),),
                      reused="2026-01-01T00:00:00Z")


def _vendor(plan_only: bool = False) -> VendorResult:
    entries = [VendorEntry(_outside("git"), "cutlass", "cached", sha256="1" * 64),
               VendorEntry(_outside("wheel"), "setuptools", "fetched", detail="77.0")]
    return VendorResult(plan=_vendor_plan(), cache=Path("/cache"), plan_only=plan_only,
                        entries=entries)


def _overrides() -> list[Override]:
    demand = Demand(required_by="vllm 0.33.0", requirement="torch==2.9.0", project="torch")
    return [Override(pin="torch==2.9.1", reason="the CUDA 13 build", replaced=(demand,))]


def _wheelhouse() -> WheelhouseResult:
    files = [WheelhouseFile("vllm-0.33.0-cp38-abi3-linux_aarch64.whl", "vllm", "0.33.0",
                            "2" * 64, 4096, "built"),
             WheelhouseFile("torch-2.9.1-cp312-cp312-linux_aarch64.whl", "torch", "2.9.1",
                            "3" * 64, 8192, _outside("runtime"))]
    return WheelhouseResult(out=Path("/out"), files=files, target=TARGET, label="+sm121",
                            manifest={"schema": 1}, overrides=_overrides(),
                            libraries=[_library()], note="a note",
                            machine_code=CodeReads(libraries=2, read=1, from_cache=1,
                                                   cubins_read=3))


def _extensions() -> ExtensionSet:
    choices = [ExtensionChoice("vllm._C", True, "every model", "native", units=40,
                               native_units=38),
               ExtensionChoice("vllm._flashmla_C", False, "not the model's", "no_code")]
    model = ModelRoots("Qwen3NextForCausalLM", "FLASHINFER", ("vllm.model_executor",),
                       notes=("hybrid",))
    return ExtensionSet(archs=("12.1a",), model=model, choices=choices,
                        left_out_sources=[_placeholder()], notes=["n"])


def _forecast() -> CodeForecast:
    gap = GencodeCoverage("csrc/a.cu", "_C", ("arch=compute_120,code=sm_120",), "ptx",
                          "sm_120")
    return CodeForecast(status=_outside("native"), units=40, lacking={"_C": [gap]}, reason="",
                        seconds=1.234, reused="2026-01-01", generators=["x"])


def _compile_cache() -> CompileCacheResult:
    spec = CacheSpec(backend="redis", location="redis://cache:6379",
                     settings={"SCCACHE_REDIS": "redis://cache:6379"}, prefix="p")
    return CompileCacheResult(spec=spec, namespace="ns", status=_outside("on"),
                              sccache="/bin/sccache",
                              build_root="/work/tree", basedirs=["/work"],
                              before=_stats(1), after=_stats(5), warnings=["w"],
                              units={"hits": 4})


def _dist() -> DistResult:
    steps = [DistStep("moe.o", "10.0.0.2:10501", 1.23456, 9.87654),
             DistStep("a.o", "local", 2.0, 3.0, why="capacity")]
    return DistResult(link=_link(), at_start=SchedulerStatus(2, 40, 1), start_note="",
                      stats=_stats(2), steps=steps, warnings=["slow server"])


def _build() -> BuildOutcome:
    return BuildOutcome(wheels=[Path("/work/tree/dist/vllm.whl")], log=Path("/log/build.log"),
                        seconds=301.26, compiled_units=["a", "b"], env={"MAX_JOBS": "6"},
                        fetch_log=Path("/log/fetch.log"), python=Path("/usr/bin/python3"),
                        timeline=_timeline(), unit_code={"read": 2, "unread": 0,
                                                         "refused": None})


def wheel() -> WheelResult:
    recipe = load_recipe(ROOT / "recipes" / "vllm-0.33.0.toml")
    prepared = PrepareResult(tree=Path("/work/tree"), source=_source(), series=_series(),
                             seconds=2.0)
    return WheelResult(recipe=recipe, offline=True, prepared=prepared, vendor=_vendor(),
                       plan=_plan(), build=_build(), wheelhouse=_wheelhouse(),
                       missed_by_reader=["cutlass"], seconds={"prepare": 2.04, "build": 301.26},
                       compile_cache=_compile_cache(), timeline={"phases": {}},
                       code_forecast=_forecast(), dist=_dist(),
                       build_trace=Path("/out/build-trace.json"), extensions=_extensions())


def wheel_bare() -> WheelResult:
    """``wheel`` with every optional record left out."""
    recipe = load_recipe(ROOT / "recipes" / "vllm-0.33.0.toml")
    series = SeriesReport(tree=Path("/work/tree"), patches=[], raw_instruction_uses=[])
    prepared = PrepareResult(tree=Path("/work/tree"), source=_source(), series=series,
                             seconds=1.0)
    build = BuildOutcome(wheels=[], log=Path("/log"), seconds=1.0, compiled_units=[], env={},
                         fetch_log=Path("/f"), python=Path("/p"))
    house = WheelhouseResult(out=Path("/out"), files=[], target=TARGET, label="")
    return WheelResult(recipe=recipe, offline=False, prepared=prepared,
                       vendor=_vendor(plan_only=True), plan=_plan(pool=False), build=build,
                       wheelhouse=house)


def _requirements() -> dict[str, Any]:
    demand = Demand(required_by="vllm 0.33.0", requirement="numpy<2", project="numpy")
    unmet = Unmet(file="vllm.whl", demand=demand, found="2.1.0")
    report = RequirementsReport(wheels_checked=3, unreadable=[("x.whl", "bad zip")],
                                problems=[unmet], overridden=[(unmet, _overrides()[0])],
                                torch=TorchCheck("2.9.1", "2.9.1", note="same build"),
                                not_shipped=[unmet])
    return report.to_dict()


def verify() -> VerifyResult:
    agreement = [Agreement("pylock.toml", True),
                 Agreement("sbom.cdx.json", False, problems=[("x.whl", "not listed")])]
    return VerifyResult(directory=Path("/out"), checked=5, target_archs=("12.1a",),
                        mismatches=[Mismatch("x.whl", "sha256 differs")],
                        libraries=[_library()], notes=["a note"],
                        requirements=_requirements(), agreement=agreement, allow_jit=False,
                        stand_ins=[{"url": "u", "used": "1.1"}], fingerprint="sha256:" + "8" * 64)


def verify_clean() -> VerifyResult:
    return VerifyResult(directory=Path("/out"), checked=0, target_archs=("12.1a",))


def verify_installed() -> InstalledCheckResult:
    return InstalledCheckResult(venv=Path("/venv"), fingerprint="9" * 64, origin="/out",
                                distributions=40, files_checked=1200, compared_with="/out",
                                mismatches=[Mismatch("bin/python", "missing")],
                                notes=["n"], stand_ins=[])


def _tools() -> dict[str, Tool]:
    return {"nvcc": Tool("nvcc", Path("/usr/local/cuda/bin/nvcc"), Version("13.0"), "PATH"),
            "ninja": Tool("ninja", Path("/usr/bin/ninja"), None, "PATH")}


def doctor() -> DoctorReport:
    checks = [Check("nvcc", True, "13.0", "new enough", hard=True),
              Check("memory", False, "16 GiB", "below 32 GiB")]
    team = TeamReport(checks=[TeamCheck("scheduler", True, "2 servers", "")], link=_link(),
                      role="client")
    return DoctorReport(checks=checks, plan=_plan(), tools=_tools(), dist=team.to_dict())


def doctor_node() -> PreflightResult:
    checks = [NodeCheck("nccl", "ok", "2.27"), NodeCheck("rdma", "fail", "none", detail="d")]
    return PreflightResult(venv=Path("/venv"), checks=checks, nccl_ib_hca="mlx5_0",
                           rdma=[{"device": "mlx5_0", "state": "ACTIVE"}])


def _profile() -> NodeProfile:
    entries = [ProfileEntry("NCCL_IB_HCA", "mlx5_0", "the RDMA card", "detected")]
    return NodeProfile(entries=entries, notes=["n"], profile_sh=Path("/venv/bin/profile.sh"),
                       env_file=None)


def install() -> InstallResult:
    check = PipCheck(overrides=["torch"], problems=["x 1 requires y"],
                     left_to_node=["nvidia-driver"])
    return InstallResult(venv=Path("/venv"), created=True, installed=["vllm", "torch"],
                         imported=["vllm"], pip_check=check, notes=["n"],
                         fingerprint="8" * 64, origin="/out", profile=_profile(),
                         stand_ins=[{"url": "u"}])


def install_plain() -> InstallResult:
    return InstallResult(venv=Path("/venv"), created=False, installed=[], imported=[])


def _facts() -> ModelFacts:
    return ModelFacts(architecture="Qwen3NextForCausalLM", dtype="bfloat16",
                      kv_cache_dtype="auto", head_dim=256, head_dim_vo=256,
                      num_attention_heads=16, num_key_value_heads=2, quantization="nvfp4",
                      quantization_ignore=("lm_head",), experts=512, experts_per_token=10,
                      kv_page_sizes=(16, 32), hybrid=True, config="config.json",
                      sources={"head_dim": "config.json"})


def aot_list() -> ModuleSet:
    modules = [ModuleSpec("batch_prefill_with_kv_cache", "gen_batch_prefill_module",
                          "attention", args=("fa2", 256), kwargs={"use_sliding_window": False}),
               ModuleSpec("fused_moe_120", "gen_cutlass_fused_moe_sm120_module", "MoE",
                          route="nvfp4")]
    return ModuleSet(model=_facts(), arch="12.1a", modules=modules,
                     excluded=[Excluded("mla", "no MLA layers")], notes=["n"])


def aot_default() -> DefaultSetListing:
    return DefaultSetListing(args=("--add-moe", "true"))


def _aot(reused: str | None = "2026-01-01") -> AotResult:
    return AotResult(wheel=Path("/out/flashinfer_jit_cache-0.5.wheel"), version="0.5+sm121",
                     flashinfer_version="0.5.3", archs=("12.1a",), args=("--add-moe",),
                     modules=["fused_moe_120"], seconds=612.345, size=10**8,
                     log=Path("/log/aot.log"), reused=reused, sources=30,
                     units=[{"path": "a.cu", "seconds": 1.0}], environment=["CUDA_HOME"],
                     prebuilt=None)


def aot_build() -> AotResult:
    return _aot()


def aot_prebuilt() -> JudgedJitCache:
    return JudgedJitCache(aot=_aot(None), targets=("12.1a",),
                          libraries=[_library("flashinfer_jit_cache.whl")],
                          codeless=["norm"], notes=["n"], source="pypi", placed=False)


def check() -> CheckResult:
    sass = SassSummary("sm_121a", 4, 400, 2, ("_Z4trapv",))
    units = [UnitOutcome("csrc/a.cu", "ok", "compiled", seconds=1.234, target="_C",
                         gencode=("arch=compute_121a,code=sm_121a",), log=Path("/log/a"),
                         command=("nvcc", "-c", "a b.cu"), sass=sass, why="touched",
                         guard_stubs=("_Z4stubv",), coverage=_coverage()),
             UnitOutcome("csrc/b.cu", "skipped-missing-headers", "no cutlass",
                         missing_headers=("cutlass.h",))]
    gap = GencodeCoverage("csrc/a.cu", "_C", ("x",), "none", None)
    return CheckResult(tree=Path("/work/tree"), archs=("12.1a",), nvcc="13.0",
                       touched=["csrc/a.cu"], units=units, plan=_plan(),
                       configure_stops=["s"], notes=["n"], seconds=5.678,
                       gencode_changed=["csrc/a.cu"], no_target_sass=[gap], allow_jit=True)


def selftest() -> SelftestResult:
    runs = [CheckRun("round", True, {"1.5": "0x3"}, (), 0.5),
            CheckRun("bad", False, {}, ("x",), 0.1, must_fail=True)]
    probes = [SassProbe("sm_121a", True, 8, 0, 10), SassProbe("sm_121", False, 0, 0, 50)]
    return SelftestResult(nvcc="/usr/local/cuda/bin/nvcc", nvcc_version="13.0",
                          work_dir=Path("/tmp/w"), checks=runs, sass_probes=probes,
                          notes=["n"])


def bundle() -> BundleResult:
    return BundleResult(out=Path("/out/b.tar"), size=10, sha256="4" * 64, raw_bytes=20,
                        members=3, deduplicated=1, sources=[{"name": "vllm"}],
                        stripped=[StripReport("tests", ["a/tests"], 2, 100)], wheels=["w"],
                        excluded=["x"], seconds=12.345, runtime={"torch": "2.9.1"},
                        recipe_files={"recipe": {"sha256": "5" * 64}})


def lock() -> LockResult:
    locked = [LockedRequirement("torch", "2.9.1", ("6" * 64,)),
              LockedRequirement("numpy", "2.1.0", ("7" * 64, "8" * 64))]
    return LockResult(path=Path("/r/vllm.lock"), target=TARGET, index="https://pypi.org/simple",
                      package="vllm==0.33.0", locked=locked, overrides=_overrides())


def team_service() -> TeamService:
    return TeamService(role="scheduler", listen="0.0.0.0:10600", config=Path("/etc/s.toml"),
                       command=["sccache-dist", "scheduler"], generated=["s.toml"])


def prepare() -> PrepareResult:
    return PrepareResult(tree=Path("/work/tree"), source=_source(), series=_series(),
                         seconds=3.0)


def patch_status() -> SeriesReport:
    return _series()


def records() -> dict[str, Any]:
    """Records that no command prints whole, each as its own JSON."""
    env = LinkEnvironment(include_dirs=[Path("/inc")], headers={"cublas": "/inc/cublas.h"},
                          libcuda=Libcuda(Path("/lib/libcuda.so"), "driver"),
                          link_dir=Path("/link"), libraries={"nvrtc": "/lib/libnvrtc.so"})
    watch = UnitCodeWatch(targets=("12.1a",), read=["a.o"], unread=["b.o"],
                          refusal=ObjectRefusal("c.o", Path("/b/c.o"), "PTX only", 12.345))
    code = LibraryCode(archs=("sm_121a",),
                       functions=(FunctionFacts("f", "sm_121a", 10, 1, False, False),),
                       kernels=(KernelCode("k", sass=("sm_121a",), ptx=("sm_120",)),))
    installation = Installation(
        fingerprint="9" * 64, origin="/out", manifest_text="{}",
        dists={"vllm": InstalledDist("vllm", "0.33.0", "RECORD", "a" * 64)},
        own_files={"bin/x": "b" * 64}, bytecode=None, profile=[{"key": "K"}])
    branch = Branch(directive="#if", condition="__CUDA_ARCH__ >= 1000", line=12, start=0,
                    condition_start=4, condition_end=20, body="")
    materialized = Materialized(sources={"cutlass": Path("/c")}, env={"A": "1"},
                                cmake_defines={"X": "ON"}, wheel_dir=Path("/w"),
                                requirements=["r"], cargo_home=Path("/cargo"))
    return {
        "link_environment": env.to_dict(), "unit_code_watch": watch.to_dict(),
        "library_code": code.to_dict(), "installation": installation.to_dict(),
        "finding": Finding("csrc/x.cu", branch).to_dict(),
        "finding_extra": {**Finding("csrc/x.cu", branch).to_dict(), "arch": "sm_121a"},
        "materialized": materialized.to_dict(), "materialized_bare": Materialized().to_dict(),
        "dist_unconnected": DistResult(link=_link(connected=False)).to_dict(),
        "team_bare": TeamReport().to_dict(),
        "compile_cache_off": CompileCacheResult(CacheSpec(_outside("none"), ""), "ns").to_dict(),
        "forecast_bare": CodeForecast(status=_outside("skipped")).to_dict(),
        "stand_in": StandIn("u", "1", "2", "r").to_dict(),
    }


class _Plain:
    """A dict for the table of :data:`COMMANDS` that holds no stage result."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    def summary(self) -> list[str]:
        return []

    @property
    def error(self) -> None:
        return None


def _part(name: str = "flashinfer") -> Part:
    return Part(Path(f"/part-{name}"), name, "7" * 64, None,
                [{"file": "flashinfer_jit_cache-0.6.18-cp39-abi3-linux_aarch64.whl",
                  "sha256": "6" * 64, "size": 1024}], {"nvcc": "13.0.88"}, {})


def wheel_part() -> PartResult:
    return PartResult(_part(), built=_aot().to_dict(), lines=["flashinfer 0.6.18"])


def join() -> JoinResult:
    return JoinResult([_part("vllm"), _part()], _wheelhouse(), verify_clean(),
                      fingerprint="sha256:" + "5" * 64)


def _records() -> StageResult:
    return _Plain(records())


COMMANDS: dict[str, Callable[[], StageResult]] = {
    "wheel": wheel, "wheel-bare": wheel_bare, "verify": verify, "verify-clean": verify_clean,
    "verify-installed": verify_installed, "doctor": doctor, "doctor-node": doctor_node,
    "install": install, "install-plain": install_plain, "flashinfer-aot-list": aot_list,
    "flashinfer-aot-default": aot_default, "flashinfer-aot": aot_build,
    "flashinfer-aot-prebuilt": aot_prebuilt, "check": check, "selftest": selftest,
    "bundle": bundle, "lock": lock, "team-service": team_service, "prepare": prepare,
    "patch-status": patch_status, "records": _records, "wheel-part": wheel_part,
    "join": join,
}
"""Each golden file's name and the record whose ``--json`` it holds."""
