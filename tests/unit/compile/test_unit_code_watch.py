"""The compile's unit watch: ninja's finished CUDA objects read as they land, the first one
verify would refuse stopping the build (readers are fakes here: no process is started)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sparkbuild.compile.unit_code_watch import ObjectReaders, UnitCodeWatch, object_refusal
from sparkbuild.jobplan.ninja_shim import ANNOUNCE
from sparkbuild.toolchain.sass import FunctionFacts, KernelCode, SassFunction

Code = tuple[list[FunctionFacts], list[KernelCode]]
NATIVE: Code = ([FunctionFacts("good_k", "sm_90a", 40, 0, False, False)],
          [KernelCode("good_k", ("sm_90a",))])
TRAP: Code = ([FunctionFacts("trap_k", "sm_90a", 4, 0, True, True)],
        [KernelCode("trap_k", ("sm_90a",))])
PTX: Code = ([], [KernelCode("ptx_k", (), ("compute_80",))])


def readers(by_name: dict[str, Code]) -> ObjectReaders:
    def functions(path: Path) -> Sequence[SassFunction | FunctionFacts]:
        return by_name[path.name][0]

    def kernels(path: Path) -> Sequence[KernelCode]:
        return by_name[path.name][1]

    return ObjectReaders(functions, kernels)


def objects(build: Path, *names: str) -> None:
    (build / "CMakeFiles" / "_C.dir").mkdir(parents=True, exist_ok=True)
    for name in names:
        (build / "CMakeFiles" / "_C.dir" / name).write_bytes(b"\x7fELF")


def status(n: int, name: str) -> str:
    return f"[{n}/9] Building CUDA object CMakeFiles/_C.dir/{name}"


def test_the_first_refused_object_sets_stop_and_names_itself(tmp_path: Path) -> None:
    objects(tmp_path, "a.cu.o", "b.cu.o")
    watch = UnitCodeWatch(("9.0a",), readers=readers({"a.cu.o": NATIVE, "b.cu.o": TRAP}))
    with watch:
        watch(f"  {ANNOUNCE}{tmp_path}")  # pip -v indents the build's lines
        watch(f"  {status(1, 'a.cu.o')}")
        watch("[2/9] Building CXX object CMakeFiles/_C.dir/c.cpp.o")  # not CUDA: not read
        watch(status(3, "b.cu.o"))
        assert watch.stop.wait(5)
    assert watch.read == ["CMakeFiles/_C.dir/a.cu.o"]
    assert watch.refusal is not None
    assert watch.refusal.output == "CMakeFiles/_C.dir/b.cu.o"
    assert watch.refusal.path == tmp_path / "CMakeFiles/_C.dir/b.cu.o"
    assert "only trap or print and exit" in watch.refusal.reason
    assert "trap_k" in watch.refusal.reason
    assert watch.to_dict()["refused"]["object"] == "CMakeFiles/_C.dir/b.cu.o"


def test_ptx_only_is_refused_unless_allow_jit(tmp_path: Path) -> None:
    obj = tmp_path / "p.cu.o"
    obj.write_bytes(b"")
    reason = object_refusal(obj, ("9.0a",), False, readers({"p.cu.o": PTX}))
    assert reason is not None and "PTX only for 9.0a" in reason and "compute_80" in reason
    assert object_refusal(obj, ("9.0a",), True, readers({"p.cu.o": PTX})) is None


def test_code_for_another_arch_only_is_refused(tmp_path: Path) -> None:
    obj = tmp_path / "n.cu.o"
    obj.write_bytes(b"")
    reason = object_refusal(obj, ("12.1a",), True, readers({"n.cu.o": NATIVE}))
    assert reason is not None and "no code for 12.1a" in reason


def test_what_cannot_be_found_is_unread_never_passed(tmp_path: Path) -> None:
    """No announced build directory, or an object not on disk: left to verify."""
    objects(tmp_path, "a.cu.o")
    watch = UnitCodeWatch(("9.0a",), readers=readers({"a.cu.o": NATIVE}))
    watch.check("CMakeFiles/_C.dir/a.cu.o", None)
    watch.check("CMakeFiles/_C.dir/gone.cu.o", tmp_path / "CMakeFiles/_C.dir/gone.cu.o")
    assert watch.read == [] and watch.refusal is None and not watch.stop.is_set()
    assert watch.unread == ["CMakeFiles/_C.dir/a.cu.o", "CMakeFiles/_C.dir/gone.cu.o"]
    assert "0 CUDA object(s) read" in watch.line() and "2 left to verify" in watch.line()


def test_a_reader_failure_leaves_the_object_to_verify(tmp_path: Path) -> None:
    from sparkbuild.errors import ToolchainError

    def broken(path: Path) -> Sequence[FunctionFacts]:
        raise ToolchainError("cuobjdump not found")

    objects(tmp_path, "a.cu.o")
    watch = UnitCodeWatch(("9.0a",), readers=ObjectReaders(broken, lambda p: []))
    watch.check("a", tmp_path / "CMakeFiles/_C.dir/a.cu.o")
    assert watch.unread == ["a"] and watch.refusal is None


def test_no_targets_reads_nothing(tmp_path: Path) -> None:
    objects(tmp_path, "b.cu.o")
    watch = UnitCodeWatch((), readers=readers({"b.cu.o": TRAP}))
    with watch:
        watch(f"{ANNOUNCE}{tmp_path}")
        watch(status(1, "b.cu.o"))
    assert watch.read == [] and watch.unread == [] and watch.refusal is None


def test_after_a_refusal_the_rest_is_not_read(tmp_path: Path) -> None:
    objects(tmp_path, "a.cu.o", "b.cu.o")
    seen: list[str] = []
    base = readers({"a.cu.o": TRAP, "b.cu.o": NATIVE})

    def functions(path: Path) -> Sequence[SassFunction | FunctionFacts]:
        seen.append(path.name)
        return base.functions(path)

    watch = UnitCodeWatch(("9.0a",), readers=ObjectReaders(functions, base.kernels))
    watch.check("a", tmp_path / "CMakeFiles/_C.dir/a.cu.o")
    watch.check("b", tmp_path / "CMakeFiles/_C.dir/b.cu.o")
    assert seen == ["a.cu.o"] and watch.unread == ["b"]
