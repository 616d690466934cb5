"""The one test of a heavy unit: killed, then measured, then the rule."""

from __future__ import annotations

import pytest

from sparkbuild.jobplan.heavy_units import is_heavy, rule_match


@pytest.mark.parametrize(("peak", "killed", "by_rule", "heavy"), [
    (1.0, True, False, True),     # killed for memory: heavy whatever was measured
    (None, True, False, True),
    (3.0, False, True, False),    # measured light beats the rule
    (5.0, False, False, True),    # measured heavy without the rule
    (4.0, False, True, False),    # at the threshold itself: light
    (0.0, False, True, False),    # measured as nothing is measured, not unknown
    (None, False, True, True),    # never measured: the rule decides
    (None, False, False, False),
])
def test_killed_then_measured_then_the_rule(peak: float | None, killed: bool, by_rule: bool,
                                            heavy: bool) -> None:
    assert is_heavy(peak, 4.0, killed=killed, by_rule=by_rule) is heavy


def test_the_rule_reads_the_path_case_insensitively() -> None:
    assert rule_match("csrc/quantization/CUTLASS_w8a8/x.cu", ("cutlass",))
    assert not rule_match("csrc/activation_kernels.cu", ("cutlass", "gemm"))
    assert not rule_match("csrc/gemm.cu", ())
