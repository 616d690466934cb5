"""sm12x-family-guards: preprocessor conditions judged for sm_120a and sm_121a, on generated
trees (no process is started; the real sdists and the SASS proof are integration tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbuild.errors import PatchError
from sparkbuild.patches.edits import EditContext
from sparkbuild.patches.edits.family_guards import (
    MARKER,
    FamilyGuardsEdit,
    admits_family,
    from_params,
    shuts_out_sm121,
    widen,
)
from sparkbuild.patches.edits.preprocessor import SM120A, SM121A, branches, evaluate, is_tuning

SM121 = {"__CUDA_ARCH__": 1210}
SM120F = {"__CUDA_ARCH__": 1200, "__CUDA_ARCH_FAMILY_SPECIFIC__": 1200}


@pytest.mark.parametrize(
    ("condition", "macros", "value"),
    [("defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200", SM120A, 1),
     ("defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200", SM121A, 0),
     ("defined(__CUDA_ARCH_FEAT_SM121_ALL)", SM121A, 1),
     ("defined(__CUDA_ARCH_FEAT_SM121_ALL)", SM121, 0),
     ("__CUDA_ARCH_FAMILY_SPECIFIC__ >= 1200", SM120F, 1),
     ("ENABLE_X && __CUDA_ARCH__ == 1200", SM120A, None),
     ("ENABLE_X && __CUDA_ARCH__ == 1200", SM121A, 0),
     ("ENABLE_X || __CUDA_ARCH__ >= 900", SM121A, 1),
     ("(__CUDA_ARCH__ / 10) % 10 == 1", SM121A, 1),
     ("__CUDA_ARCH__ >= 1200 ? 1 : 0", SM121, 1),
     ('"a string"', SM121A, None)],
)
def test_conditions_are_evaluated_in_three_valued_logic(
    condition: str, macros: dict[str, int], value: int | None
) -> None:
    assert evaluate(condition, macros) == value


def test_guards_that_let_sm120_in_and_keep_sm121_out() -> None:
    assert shuts_out_sm121("defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200")
    assert shuts_out_sm121("defined(__CUDA_ARCH_FEAT_SM120_ALL)")
    assert shuts_out_sm121("ENABLE_FP8 && __CUDA_ARCH_SPECIFIC__ == 1200")
    assert not shuts_out_sm121("__CUDA_ARCH__ >= 1200 && __CUDA_ARCH__ < 1300")
    assert not shuts_out_sm121("__CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200")
    assert not shuts_out_sm121("__CUDA_ARCH__ == 900")
    assert admits_family("(__CUDA_ARCH__ >= 1200 && __CUDA_ARCH__ < 1300)")
    assert not admits_family("__CUDA_ARCH__ >= 900")  # holds for both, but no SM120 test


@pytest.mark.parametrize(
    "condition",
    ["defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200", "__CUDA_ARCH_SPECIFIC__ == 1200",
     "__CUDA_ARCH_FAMILY_SPECIFIC__==1200", "defined __CUDA_ARCH_FEAT_SM120_ALL",
     "defined(__CUDA_ARCH_FEAT_SM120_ALL) && X"],
)
def test_widening_admits_sm121_and_keeps_sm120(condition: str) -> None:
    widened = widen(condition)
    assert not shuts_out_sm121(widened)
    assert evaluate(widened, SM120A) != 0
    assert evaluate(widened, {"__CUDA_ARCH__": 1000, "__CUDA_ARCH_SPECIFIC__": 1000}) in (0, None)


BRANCHY = """\
#if defined __CUDA_ARCH__ && \\
    __CUDA_ARCH__ == 1200  // SM120 only
  Kernel::run();
#elif __CUDA_ARCH__ == 900
  other();
#else
  #if X
  #endif
#endif
#ifdef __CUDA_ARCH_FEAT_SM120_ALL
  #define TILE 128
#endif
"""


def test_branches_read_conditions_bodies_and_continuations() -> None:
    found = branches(BRANCHY)
    assert [(b.directive, b.condition, b.line) for b in found] == [
        ("if", "defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200", 1),
        ("elif", "__CUDA_ARCH__ == 900", 4),
        ("if", "X", 7),
        ("ifdef", "defined(__CUDA_ARCH_FEAT_SM120_ALL)", 10),
    ]
    assert "Kernel::run();" in found[0].body and "other" not in found[0].body
    assert not is_tuning(found[0].body) and is_tuning(found[3].body)
    assert is_tuning("  __launch_bounds__(256, 2)\n") and is_tuning("static constexpr int k = 4;")


COMMON = """\
template <typename Kernel>
struct enable_sm120_only : Kernel {
  template <typename... Args>
  __device__ void operator()(Args&&... args) {
#if defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200
    Kernel::operator()(std::forward<Args>(args)...);
#endif
  }
};
"""
FAMILY = COMMON.replace("enable_sm120_only", "enable_sm120_family").replace(
    "defined __CUDA_ARCH__ && __CUDA_ARCH__ == 1200",
    "defined __CUDA_ARCH__ && (__CUDA_ARCH__ >= 1200 && __CUDA_ARCH__ < 1300)")
TUNING = """\
#if __CUDA_ARCH__ == 1200
  #define BLOCKS_PER_SM 3
#elif __CUDA_ARCH__ == 900
  #define BLOCKS_PER_SM 2
#endif
#if ENABLE_NVFP4_SM120
  #define FP4 1
#endif
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "csrc" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _edit() -> FamilyGuardsEdit:
    return from_params({"search": "csrc"}, base=Path(), origin="t",
                       context=EditContext())


def test_an_sm120_only_guard_is_widened_and_tuning_left_alone(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"common.hpp": COMMON, "launch.h": TUNING, "other.cu": "int x;\n"})
    plan = _edit().plan(tree)
    (change,) = plan.changes
    assert change.path == "csrc/common.hpp"
    assert ("#if defined __CUDA_ARCH__ && (__CUDA_ARCH__ >= 1200 && __CUDA_ARCH__ < 1300) "
            + MARKER) in change.new
    assert change.new.replace(change.new.splitlines()[4], COMMON.splitlines()[4]) == COMMON
    assert plan.details["widened"][0]["line"] == 5
    assert [(t["file"], t["line"], t["covers_sm121"]) for t in
            plan.details["tuning_left_alone"]] == [("csrc/launch.h", 1, False)]
    assert "tuning keyed on SM120, left alone: csrc/launch.h:1" in plan.notes
    (tree / "csrc" / "common.hpp").write_text(change.new)
    again = _edit().plan(tree)
    assert again.changes == () and "already guards its SM12x kernels by family" in again.notes[0]


def test_a_family_guard_is_already_applied(tmp_path: Path) -> None:
    plan = _edit().plan(_tree(tmp_path, {"common.hpp": FAMILY}))
    assert plan.changes == ()
    assert plan.notes[0] == ("the tree already guards its SM12x kernels by family "
                             "(csrc/common.hpp:5)")
    assert plan.details["family_guards"][0]["file"] == "csrc/common.hpp"


def test_no_sm120_guard_at_all(tmp_path: Path) -> None:
    plan = _edit().plan(_tree(tmp_path, {"k.cu": "#if __CUDA_ARCH__ >= 900\n f();\n#endif\n"}))
    assert plan.changes == () and "no kernel guard under csrc/" in plan.notes[0]


def test_ifdef_on_the_sm120_feature_macro_becomes_an_if(tmp_path: Path) -> None:
    text = "#ifdef __CUDA_ARCH_FEAT_SM120_ALL\n  mma();\n#endif\n"
    (change,) = _edit().plan(_tree(tmp_path, {"k.cu": text})).changes
    first = change.new.splitlines()[0]
    assert first.startswith("#if (defined(__CUDA_ARCH_FEAT_SM120_ALL) || "
                            "defined(__CUDA_ARCH_FEAT_SM121_ALL))")
    assert not shuts_out_sm121(first.removeprefix("#if ").removesuffix(MARKER))


def test_a_guard_it_cannot_widen_is_a_failure(tmp_path: Path) -> None:
    text = "#if __CUDA_ARCH__ < 1210 && __CUDA_ARCH__ >= 1200\n  k();\n#endif\n"
    with pytest.raises(PatchError, match="cannot widen") as caught:
        _edit().plan(_tree(tmp_path, {"k.cu": text}))
    assert caught.value.where is not None and caught.value.where.endswith("csrc/k.cu:1")


def test_search_must_stay_in_the_tree() -> None:
    with pytest.raises(PatchError):
        from_params({"search": "../x"}, base=Path(), origin="t",
                    context=EditContext())
