"""Requirements against the target: markers, extras, overrides, torch, pip check, uv's no."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import CommandFailed, PinRefusedError, UsageError, VerifyError
from sparkbuild.node.pip_check import judge_pip_check, parse_pip_check
from sparkbuild.recipe import Pin
from sparkbuild.wheelhouse.lock import _uv_failure
from sparkbuild.wheelhouse.overrides import (
    Demand,
    Override,
    Unsatisfiable,
    merge_overrides,
    pin_conflicts,
    resolve_pinned,
    settle,
    target_environment,
)
from sparkbuild.wheelhouse.requirements_check import (
    Dist,
    Unmet,
    check_torch,
    covered,
    settle_wheelhouse,
    unmet_requirements,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparkbuild.wheelhouse.lock import LockedRequirement

SPARK = target_environment("manylinux_2_39_aarch64", "3.12")


def test_the_target_environment_is_the_sparks_not_this_machines() -> None:
    assert (SPARK["platform_machine"], SPARK["sys_platform"], SPARK["platform_system"],
            SPARK["python_version"]) == ("aarch64", "linux", "Linux", "3.12")
    legacy = target_environment("manylinux2014_x86_64", "3.11")
    assert legacy["platform_machine"] == "x86_64" and legacy["python_version"] == "3.11"
    with pytest.raises(UsageError, match="win_amd64"):
        target_environment("win_amd64", "3.12")


def dist(name: str, version: str, *requires: str) -> Dist:
    return Dist(f"{name}-{version}-py3-none-any.whl", name, version, requires)


def test_unmet_requirements_follow_markers_for_the_target_and_requested_extras() -> None:
    dists = [
        dist("vllm", "0.33.0", "flashinfer-python==0.7.2.post1",
             "setuptools<81; python_version > '3.11'",  # applies on 3.12, not on 3.11
             "x86-only; platform_machine == 'x86_64'",  # never on the Spark
             "cutlass-dsl[cu13]==4.8.0", "docs-only; extra == 'docs'"),
        dist("flashinfer-python", "0.6.18", "numpy"),
        dist("cutlass-dsl", "4.8.0", "cu13-libs>=13; extra == 'cu13'"),
        dist("setuptools", "82.0.0"), dist("numpy", "2.3.0"),
    ]
    versions = {d.key: d.version for d in dists}
    unmet = unmet_requirements(dists, versions, SPARK)
    assert sorted(u.describe() for u in unmet) == [
        "cutlass-dsl 4.8.0 requires cu13-libs>=13; extra == \"cu13\", but the wheelhouse "
        "has no cu13-libs",
        "vllm 0.33.0 requires flashinfer-python==0.7.2.post1, but the wheelhouse has "
        "flashinfer-python 0.6.18",
        "vllm 0.33.0 requires setuptools<81; python_version > \"3.11\", but the wheelhouse "
        "has setuptools 82.0.0",
    ]
    on_311 = target_environment("manylinux_2_39_aarch64", "3.11")
    assert len(unmet_requirements(dists, versions, on_311)) == 2  # the setuptools cap is gone
    flashinfer = next(u for u in unmet if u.project == "flashinfer-python")
    override = Override("flashinfer-python==0.6.18", "GB10", (flashinfer.demand,))
    assert covered(flashinfer, [override]) is override
    assert covered(flashinfer, [Override("flashinfer-python==0.6.17", "x", (flashinfer.demand,)
                                         )]) is None
    other_asker = Demand("sglang 1.0", "flashinfer-python>=0.7", "sglang")
    assert covered(flashinfer, [Override(override.pin, "GB10", (other_asker,))]) is None


def test_a_local_label_still_meets_an_exact_requirement() -> None:
    dists = [dist("app", "1.0", "torch==2.14.0"), dist("torch", "2.14.0+cu130")]
    assert unmet_requirements(dists, {d.key: d.version for d in dists}, SPARK) == []


def test_settle_names_both_sides_or_records_the_override() -> None:
    demand = Demand("vllm (requirements/cuda.txt:13)", "flashinfer-python==0.7.2.post1", "vllm")
    pin = Pin("flashinfer-python", "0.6.18")
    conflicts = pin_conflicts([pin], [demand, Demand("x 1", "flashinfer-python>=0.6", "x")],
                              SPARK)
    assert conflicts == {"flashinfer-python": [demand]}
    with pytest.raises(PinRefusedError) as refused:
        settle([pin], conflicts, where="recipe.toml")
    assert refused.value.what == ("the recipe pins flashinfer-python==0.6.18, but vllm "
                                  "(requirements/cuda.txt:13) requires "
                                  "flashinfer-python==0.7.2.post1")
    assert refused.value.where == "recipe.toml"
    forced = Pin("flashinfer-python", "0.6.18", override="the version GB10 runs")
    (override,) = settle([forced], conflicts, where=None)
    assert override.to_dict() == {
        "pin": "flashinfer-python==0.6.18", "reason": "the version GB10 runs",
        "replaced": [demand.to_dict()]}
    assert Override.from_dict(override.to_dict()) == override
    more = Override(override.pin, override.reason, (Demand("y 2", "flashinfer-python>1", "y"),))
    (merged,) = merge_overrides([override], [more, override])
    assert [d.required_by for d in merged.replaced] == ["vllm (requirements/cuda.txt:13)", "y 2"]


def test_uv_finding_no_solution_names_the_contradicted_pin() -> None:
    output = ("  \u00d7 No solution found when resolving dependencies:\n"
              "  \u2570\u2500\u25b6 Because dep-one==1.2 depends on tiny-pin>=3 and you require "
              "tiny-pin==2.0, we can conclude that your requirements are unsatisfiable.\n")
    failure = _uv_failure(output, ["uv", "pip", "compile"], 1)
    assert isinstance(failure, Unsatisfiable)
    assert failure.explanation.startswith("Because dep-one==1.2 depends on tiny-pin>=3")
    plain = _uv_failure("error: No solution found when resolving dependencies\n  cause: "
                        "Because all versions of alpha depend on beta>=2 and you require "
                        "alpha, we can conclude that you require beta>=2.\n", ["uv"], 1)
    assert isinstance(plain, Unsatisfiable)
    assert plain.explanation.startswith("Because all versions of alpha depend on beta>=2")
    assert not isinstance(_uv_failure("network down\n", ["uv"], 2), Unsatisfiable)
    assert isinstance(_uv_failure("network down\n", ["uv"], 2), CommandFailed)
    seen: list[list[str]] = []

    def resolve(requirements: Sequence[str], overrides: Sequence[str]
                ) -> list[LockedRequirement]:
        seen.append(list(overrides))
        raise failure

    with pytest.raises(PinRefusedError, match=r"pins tiny-pin==2\.0, but the closure "
                       r"contradicts it:\nBecause dep-one==1\.2 depends on tiny-pin>=3"):
        resolve_pinned(resolve, ["dep-one"], [Pin("tiny-pin", "2.0"), Pin("other", "1",
                                                                          override="r")])
    assert seen == [["other==1"]]
    with pytest.raises(Unsatisfiable):  # an override pin: uv's own error stands
        resolve_pinned(resolve, ["dep-one"], [Pin("tiny-pin", "2.0", override="r")])


def test_torch_must_be_the_one_the_build_used() -> None:
    assert check_torch("2.14.0", "2.14.0").problem is None
    assert check_torch("2.14.0+cu130", "2.14.0").note is not None
    assert "ships torch 2.13.0" in str(check_torch("2.14.0", "2.13.0").problem)
    assert check_torch(None, None).to_dict() == {"built_against": None, "shipped": None,
                                                 "ok": True, "note": None}
    assert check_torch("2.13.0", None).problem is None


PIP_CHECK = """\
vllm 0.33.0+sm121a.0a1b2c3d has requirement flashinfer-python==0.7.2.post1, but you have flashinfer-python 0.6.18.
other 1.0 requires missing-thing, which is not installed.
thing 2.0 is not supported on this platform
"""  # noqa: E501


def test_pip_check_lines_an_override_explains_are_reported_not_fatal() -> None:
    lines = parse_pip_check(PIP_CHECK)
    assert [(line.dist, line.have, line.have_version) for line in lines] == [
        ("vllm", "flashinfer-python", "0.6.18"), ("other", None, None), (None, None, None)]
    replaced = Demand("vllm 0.33.0+sm121a.0a1b2c3d", "flashinfer-python==0.7.2.post1", "vllm")
    manifest = {"overrides": [Override("flashinfer-python==0.6.18", "GB10", (replaced,))
                              .to_dict()]}
    judged = judge_pip_check(PIP_CHECK, manifest)
    assert judged.overrides == [PIP_CHECK.splitlines()[0]
                                + " (override flashinfer-python==0.6.18: GB10)"]
    assert judged.problems == PIP_CHECK.splitlines()[1:]
    assert judged.to_dict()["ok"] is False and judged.error is not None
    assert "other 1.0 requires missing-thing" in judged.error.what
    # without the record, the same conflict is a problem
    assert judge_pip_check(PIP_CHECK.splitlines()[0], {}).problems == [
        PIP_CHECK.splitlines()[0]]
    clean = judge_pip_check("No broken requirements found.\n", manifest)
    assert clean.to_dict() == {"ok": True, "overrides": [], "problems": []}


def test_wheel_refuses_a_pin_contradicted_only_through_an_extra() -> None:
    dists = [dist("app", "1.0", "lib[fast]>=1"),
             dist("lib", "1.0", "tiny-pin>=3; extra == 'fast'"), dist("tiny-pin", "2.0")]
    with pytest.raises(PinRefusedError, match=r"pins tiny-pin==2\.0, but lib 1\.0 requires "
                       r"tiny-pin>=3; extra == \"fast\""):
        settle_wheelhouse(dists, [Pin("tiny-pin", "2.0")], SPARK, where=None)
    (override,) = settle_wheelhouse(dists, [Pin("tiny-pin", "2.0", override="why")], SPARK,
                                    where=None)
    assert [d.project for d in override.replaced] == ["lib"]
    with pytest.raises(VerifyError, match="has no missing"):
        settle_wheelhouse([dist("app", "1.0", "missing")], [], SPARK, where=None)


def test_without_the_closure_a_missing_project_is_the_nodes_but_a_wrong_version_is_not(
) -> None:
    # --no-closure: the node (NVIDIA's container) provides the runtime dependencies, so
    # a project the wheelhouse does not ship is no error; one it ships must still fit.
    missing = [dist("app", "1.0", "regex"), dist("tiny-pin", "2.0")]
    assert settle_wheelhouse(missing, [], SPARK, where=None, closure_left_out=True) == []
    with pytest.raises(VerifyError, match="has no regex"):
        settle_wheelhouse(missing, [], SPARK, where=None)
    wrong = [dist("app", "1.0", "lib>=2"), dist("lib", "1.0")]
    with pytest.raises(VerifyError, match="lib>=2"):
        settle_wheelhouse(wrong, [], SPARK, where=None, closure_left_out=True)


def test_verify_and_install_explain_an_override_the_same_way() -> None:
    # A manifest written before Demand carried the asking project: both checks read the
    # asker from required_by ("vllm 0.33.0"), so verify and install agree on it.
    override = Override("flashinfer-python==0.6.18", "the branch's pin", (
        Demand("vllm 0.33.0", "flashinfer-python==0.7.2.post1"),))
    unmet = Unmet("vllm.whl", Demand("vllm 0.33.0", "flashinfer-python==0.7.2.post1", "vllm"),
                  "0.6.18")
    assert covered(unmet, [override]) is override
    pip_line = ("vllm 0.33.0 has requirement flashinfer-python==0.7.2.post1, "
                "but you have flashinfer-python 0.6.18.")
    assert len(parse_pip_check(pip_line)) == 1
    judged = judge_pip_check(pip_line, {"overrides": [override.to_dict()]})
    assert judged.problems == [] and len(judged.overrides) == 1
    assert covered(Unmet("x.whl", unmet.demand, "0.6.17"), [override]) is None


def test_pip_check_leaves_missing_projects_to_the_node_when_the_closure_was_left_out() -> None:
    from sparkbuild.wheelhouse.requirements_check import CLOSURE_LEFT_OUT

    judged = judge_pip_check(PIP_CHECK, {"closure": CLOSURE_LEFT_OUT})
    # a project not installed at all is the node's; a wrong version, or a line pip check
    # words otherwise, stays a problem
    assert judged.left_to_node == [PIP_CHECK.splitlines()[1]]
    assert judged.problems == [PIP_CHECK.splitlines()[0], PIP_CHECK.splitlines()[2]]
    assert judged.to_dict()["left_to_node"] == judged.left_to_node
    assert any("left to the node" in line for line in judged.summary())
    missing = PIP_CHECK.splitlines()[1]
    assert judge_pip_check(missing, {"closure": CLOSURE_LEFT_OUT}).ok
    assert judge_pip_check(missing, {"closure": "included"}).problems == [missing]
