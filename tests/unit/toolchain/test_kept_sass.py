"""The machine-code facts cache: a library whose bytes did not change is not read again.

The reader is a fake that counts its calls (unit tests start no process): a hit gives the
very facts the read gave without reading; a changed byte, other tools, another scope or a
corrupt entry is a miss; ``wheel`` reports how many libraries came from the cache, and
``verify`` reads every library afresh whatever the cache holds.
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any

import pytest

from sparkbuild.store.cache import Cache
from sparkbuild.toolchain.kept_sass import FACTS_SCHEMA, NAMESPACE, CodeCache, LibraryCode
from sparkbuild.toolchain.sass import FunctionFacts, KernelCode
from sparkbuild.wheelhouse.verify import verify_wheelhouse
from sparkbuild.wheelhouse.write import WheelhouseInputs, WheelhouseReaders, write_wheelhouse
from support.wheels import NoNetwork, demo_recipe, demo_wheel

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

KERNEL = "_ZN4demo6gemm_kEPf"
CODE = LibraryCode(
    ("sm_120", "sm_121a"),
    (FunctionFacts(KERNEL, "sm_121a", 12, 1, False, False),
     FunctionFacts("trap_k", "sm_120f", 4, 0, True, True),
     FunctionFacts("helper", None, 3, 0, False, False)),
    (KernelCode(KERNEL, ("sm_121a",), ("compute_80",), "demo::gemm_k(float*)"),
     KernelCode("trap_k", ("sm_120f",))))


class CountingReader:
    def __init__(self, code: LibraryCode = CODE) -> None:
        self.code = code
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> LibraryCode:
        self.calls.append(path)
        return self.code


def library(tmp_path: Path, data: bytes = b"\x7fELF library bytes") -> Path:
    path = tmp_path / "lib" / "_C.so"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def code_cache(tmp_path: Path, tools: str = "cuobjdump 13.0") -> CodeCache:
    return CodeCache(Cache(tmp_path / "cache"), identify=lambda: tools)


def entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "index" / NAMESPACE).glob("*.json"))


def test_the_facts_survive_json() -> None:
    assert LibraryCode.from_dict(json.loads(json.dumps(CODE.to_dict()))) == CODE


def test_a_hit_gives_the_same_facts_without_reading(tmp_path: Path) -> None:
    path, reader = library(tmp_path), CountingReader()
    first = code_cache(tmp_path)
    assert first.library_code(path, reader, scope="all") == CODE
    assert (len(reader.calls), first.read, first.from_cache) == (1, 1, 0)
    second = code_cache(tmp_path)  # the next wheel run
    assert second.library_code(path, reader, scope="all") == CODE
    assert (len(reader.calls), second.read, second.from_cache) == (1, 0, 1)
    assert second.reads().to_dict() == {"libraries": 1, "read": 0, "from_cache": 1,
                                        "cubins_read": 0, "cubins_from_cache": 0}
    (entry,) = entries(tmp_path)
    stored = json.loads(entry.read_text())
    assert stored["schema"] == FACTS_SCHEMA and stored["code"] == CODE.to_dict()


def test_a_changed_byte_is_a_miss(tmp_path: Path) -> None:
    path, reader = library(tmp_path), CountingReader()
    code_cache(tmp_path).library_code(path, reader, scope="all")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    again = code_cache(tmp_path)
    assert again.library_code(path, reader, scope="all") == CODE
    assert (len(reader.calls), again.read, again.from_cache) == (2, 1, 0)
    assert len(entries(tmp_path)) == 2


@pytest.mark.parametrize(("tools", "scope"), [("cuobjdump 13.1", "all"),
                                              ("cuobjdump 13.0", "archs")])
def test_other_tools_or_another_scope_is_a_miss(tmp_path: Path, tools: str, scope: str
                                                ) -> None:
    path, reader = library(tmp_path), CountingReader()
    code_cache(tmp_path).library_code(path, reader, scope="all")
    code_cache(tmp_path, tools).library_code(path, reader, scope=scope)
    assert len(reader.calls) == 2


def _set_count(entry: dict[str, Any], value: object) -> dict[str, Any]:
    entry["code"]["functions"][0]["count"] = value
    return entry


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "truncated": lambda text: text[: len(text) // 2],
    "not an object": lambda text: "[1, 2]",
    "empty": lambda text: "",
    "binary": lambda text: "\udcff",
    "another schema": lambda text: json.dumps({**json.loads(text), "schema": FACTS_SCHEMA + 1}),
    "another library": lambda text: json.dumps({**json.loads(text), "library": "0" * 64}),
    "no code": lambda text: json.dumps({k: v for k, v in json.loads(text).items()
                                        if k != "code"}),
    "a count that is text": lambda text: json.dumps(_set_count(json.loads(text), "12")),
    "a count that is a bool": lambda text: json.dumps(_set_count(json.loads(text), True)),
    "a missing field": lambda text: json.dumps(_drop_arch(json.loads(text))),
}


def _drop_arch(entry: dict[str, Any]) -> dict[str, Any]:
    del entry["code"]["functions"][0]["arch"]
    return entry


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_entry_is_a_miss_and_is_written_again(tmp_path: Path, corruption: str
                                                        ) -> None:
    path, reader = library(tmp_path), CountingReader()
    code_cache(tmp_path).library_code(path, reader, scope="all")
    (entry,) = entries(tmp_path)
    good = entry.read_text()
    entry.write_text(CORRUPTIONS[corruption](good), errors="surrogateescape")
    again = code_cache(tmp_path)
    assert again.library_code(path, reader, scope="all") == CODE
    assert (len(reader.calls), again.read, again.from_cache) == (2, 1, 0)
    assert json.loads(entry.read_text()) == json.loads(good)


def test_a_cache_that_cannot_be_written_only_warns(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cache").write_text("a file, not a directory")
    cache = code_cache(tmp_path)
    assert cache.library_code(library(tmp_path), CountingReader(), scope="all") == CODE
    assert "_C.so were not kept in the cache" in capsys.readouterr().err


def test_the_tools_are_identified_once_and_only_when_a_library_is_read(tmp_path: Path
                                                                      ) -> None:
    asked: list[int] = []

    def identify() -> str:
        asked.append(1)
        return "tools"

    cache = CodeCache(Cache(tmp_path / "cache"), identify=identify)
    assert asked == []  # a wheelhouse without libraries needs no cuobjdump
    for name in ("a", "b"):
        cache.library_code(library(tmp_path, name.encode()), CountingReader(), scope="all")
    assert asked == [1]


# -- wheel uses it, verify never does ---------------------------------------------------


class Readers:
    """Fake cuobjdump readers that count the libraries they read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def archs(self, path: Path) -> list[str]:
        self.read.append(path.name)
        return ["sm_121a"]

    def functions(self, path: Path) -> list[FunctionFacts]:
        return [FunctionFacts(KERNEL, "sm_121a", 12, 1, False, False)]

    def kernels(self, path: Path) -> list[KernelCode]:
        return [KernelCode(KERNEL, ("sm_121a",))]


def write(tmp_path: Path, out: Path, readers: Readers, cache: CodeCache | None) -> Any:
    built = demo_wheel(tmp_path, {"demo/_C.so": b"\x7fELF demo", "demo/_moe_C.so": b"\x7fELF moe"})
    return write_wheelhouse(
        out,
        WheelhouseInputs(recipe=demo_recipe(tmp_path, allow_jit=False),
                         source={"kind": "directory"}, patches=[], built_wheels=[built],
                         build_settings={}, cache_root=tmp_path / "cache", offline=False,
                         platform=None, toolchain={"python": "3.11"}, kept_code=cache),
        WheelhouseReaders(outside=NoNetwork(), list_archs=readers.archs,
                          read_functions=readers.functions, read_kernels=readers.kernels))


def test_wheel_reads_each_unchanged_library_once_and_says_so(tmp_path: Path) -> None:
    readers = Readers()
    cold = write(tmp_path, tmp_path / "one", readers, code_cache(tmp_path))
    warm = write(tmp_path, tmp_path / "two", readers, code_cache(tmp_path))
    assert readers.read == ["_C.so", "_moe_C.so"]  # the warm run read nothing
    assert warm.libraries == cold.libraries
    assert cold.to_dict()["machine_code"] == {"libraries": 2, "read": 2, "from_cache": 0,
                                                  "cubins_read": 0, "cubins_from_cache": 0}
    assert warm.to_dict()["machine_code"] == {"libraries": 2, "read": 0, "from_cache": 2,
                                                  "cubins_read": 0, "cubins_from_cache": 0}
    assert "  machine code: 2 libraries, 0 read with cuobjdump, 2 from the cache" in (
        warm.summary())
    assert json.loads((tmp_path / "one" / "manifest.json").read_text())["libraries"] == (
        json.loads((tmp_path / "two" / "manifest.json").read_text())["libraries"])


def test_wheel_without_a_cache_reads_every_library(tmp_path: Path) -> None:
    readers = Readers()
    result = write(tmp_path, tmp_path / "one", readers, None)
    assert readers.read == ["_C.so", "_moe_C.so"]
    assert result.to_dict()["machine_code"] == {"libraries": 2, "read": 2, "from_cache": 0,
                                                  "cubins_read": 0, "cubins_from_cache": 0}
    assert entries(tmp_path) == []


def test_verify_never_consults_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    out = tmp_path / "wheelhouse"
    write(tmp_path, out, Readers(), code_cache(tmp_path))
    assert len(entries(tmp_path)) == 2  # the cache holds both libraries' facts

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("verify consulted the machine code cache")

    monkeypatch.setattr(CodeCache, "library_code", refuse)
    monkeypatch.setattr(Cache, "lookup", refuse)
    readers = Readers()
    result = verify_wheelhouse(out, list_archs=readers.archs, read_functions=readers.functions,
                               read_kernels=readers.kernels)
    assert result.error is None, result.summary()
    assert readers.read == ["_C.so", "_moe_C.so"]  # read afresh
    assert "kept_code" not in inspect.signature(verify_wheelhouse).parameters


def test_a_cubin_s_facts_are_kept_by_its_bytes_arch_and_tools(tmp_path: Path) -> None:
    facts = [FunctionFacts(KERNEL, "sm_121a", 12, 1, False, False),
             FunctionFacts("trap_k", "sm_121a", 4, 0, True, True)]
    cold = code_cache(tmp_path)
    assert cold.cubin_facts("ab" * 32, "sm_121a") is None
    cold.keep_cubin("ab" * 32, "sm_121a", facts)
    warm = code_cache(tmp_path)
    assert warm.cubin_facts("ab" * 32, "sm_121a") == facts
    assert warm.cubin_facts("ab" * 32, "sm_120f") is None  # the header's arch is in the key
    assert warm.cubin_facts("cd" * 32, "sm_121a") is None
    assert code_cache(tmp_path, tools="cuobjdump 13.1").cubin_facts("ab" * 32, "sm_121a") is None
    assert (cold.cubins_read, cold.cubins_from_cache) == (1, 0)
    assert (warm.cubins_read, warm.cubins_from_cache) == (2, 1)
    assert "their cubins: 2 disassembled, 1 from the cache" in warm.reads().line()


def test_a_damaged_cubin_entry_is_a_miss(tmp_path: Path) -> None:
    cache = code_cache(tmp_path)
    cache.keep_cubin("ab" * 32, "sm_121a", [FunctionFacts(KERNEL, "sm_121a", 1, 0, False, False)])
    (entry,) = (tmp_path / "cache" / "index" / "machine-code-cubins").glob("*")
    data = json.loads(entry.read_text())
    data["facts"] = [{"name": 3}]
    entry.write_text(json.dumps(data))
    assert code_cache(tmp_path).cubin_facts("ab" * 32, "sm_121a") is None
