"""csrc/e2m1.cuh, proved with nvcc on this machine (no GPU): ``sparkbuild selftest e2m1``.

One build of csrc/ serves every test here: the header through the plain C++17 compiler,
all 2^32 float32 inputs in both nibble positions against cuda_fp4.h's host conversion, the
mutant with one tie rounded the wrong way, and the SASS of the probes for sm_121, sm_90
(software path: no E2M1, no FP64 instruction) and sm_121a, sm_120f (the hardware).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sparkbuild.checks.selftest import ALL_PAIRS, SelftestResult, run_e2m1_selftest
from sparkbuild.errors import ToolchainError
from sparkbuild.toolchain import tools

if TYPE_CHECKING:
    from sparkbuild.checks.selftest import CheckRun, SassProbe

pytestmark = [pytest.mark.nvcc, pytest.mark.slow]

SOFTWARE_BUDGET_PER_VALUE = 12
"""The software E2M1 path's budget: at most 12 instructions per converted value over the
sm_121a build."""


@pytest.fixture(scope="module")
def selftest(tmp_path_factory: pytest.TempPathFactory) -> SelftestResult:
    try:
        tools.find_nvcc()
    except ToolchainError as error:
        pytest.skip(f"no nvcc: {error}")
    return run_e2m1_selftest(gpu=False, work_dir=tmp_path_factory.mktemp("e2m1"))


def _check(result: SelftestResult, prefix: str) -> CheckRun:
    (found,) = [check for check in result.checks if check.name.startswith(prefix)]
    return found


def _probe(result: SelftestResult, arch: str) -> SassProbe:
    if not result.sass_probes:  # cuobjdump or nvdisasm missing: the notes say which
        pytest.skip("; ".join(result.notes) or "no SASS probes")
    (found,) = [probe for probe in result.sass_probes if probe.arch == arch]
    return found


def test_header_compiles_without_cuda(selftest: SelftestResult) -> None:
    plain = _check(selftest, "plain C++17")
    assert plain.ok
    assert plain.values["failures"] == "0"


def test_all_inputs_in_both_positions_match_cuda_fp4(selftest: SelftestResult) -> None:
    exhaustive = _check(selftest, "host, all 2^32")
    assert exhaustive.ok
    assert exhaustive.values["checked"] == str(ALL_PAIRS)
    assert exhaustive.values["mismatches"] == "0"


def test_one_tie_rounded_the_wrong_way_is_caught(selftest: SelftestResult) -> None:
    mutant = _check(selftest, "mutant")
    assert not mutant.ok
    assert mutant.as_expected
    assert mutant.values["mismatches"] == "2"  # +-2.5, once as lo and once as hi
    assert all("2.5" in line for line in mutant.mismatches)


@pytest.mark.parametrize("arch", ["sm_121", "sm_90"])
def test_software_targets_have_no_e2m1_and_no_fp64(selftest: SelftestResult, arch: str) -> None:
    probe = _probe(selftest, arch)
    assert probe.e2m1_instructions == 0
    assert probe.fp64_instructions == 0


@pytest.mark.parametrize("arch", ["sm_121a", "sm_120f"])
def test_hardware_targets_use_the_instruction(selftest: SelftestResult, arch: str) -> None:
    probe = _probe(selftest, arch)
    assert probe.e2m1_instructions >= 4  # one per pair in the 8-value kernel at least
    assert probe.fp64_instructions == 0


def test_software_path_instruction_budget(selftest: SelftestResult) -> None:
    _probe(selftest, "sm_121")
    added = selftest.added_instructions_per_value()
    assert added is not None
    assert added <= SOFTWARE_BUDGET_PER_VALUE


def test_summary_and_json_speak_of_every_check(selftest: SelftestResult) -> None:
    summary = "\n".join(selftest.summary())
    assert "caught, as it must be" in summary
    assert "FAIL" not in summary
    payload = selftest.to_dict()
    assert len(payload["checks"]) == 3
    _probe(selftest, "sm_121")
    assert {probe["arch"] for probe in payload["sass_probes"]} == {
        "sm_121",
        "sm_90",
        "sm_121a",
        "sm_120f",
    }
