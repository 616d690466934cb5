"""The built wheel's platform against the closure's: by tag, through packaging."""

from __future__ import annotations

import pytest

from sparkbuild.wheelhouse.lock import ClosureTarget
from sparkbuild.wheelhouse.write import fits_platform, host_note

SPARK = "manylinux_2_39_aarch64"
X86 = "manylinux_2_28_x86_64"


@pytest.mark.parametrize(
    ("wheel", "platform", "fits"),
    [
        # the review's defect: "x86_64".rsplit("_")[-1] is "64", and "aarch64" ends with it
        ("vllm-0.33.0-cp38-abi3-linux_aarch64.whl", X86, False),
        ("vllm-0.33.0-cp38-abi3-manylinux_2_39_aarch64.whl", X86, False),
        # and the other direction
        ("vllm-0.33.0-cp38-abi3-linux_x86_64.whl", SPARK, False),
        ("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", SPARK, False),
        # what does fit
        ("vllm-0.33.0-cp38-abi3-linux_aarch64.whl", SPARK, True),
        ("vllm-0.33.0-cp38-abi3-manylinux_2_39_aarch64.whl", SPARK, True),
        ("vllm-0.33.0-cp38-abi3-manylinux2014_aarch64.whl", SPARK, True),
        ("vllm-0.33.0-cp38-abi3-linux_x86_64.whl", X86, True),
        ("six-1.17.0-py2.py3-none-any.whl", SPARK, True),
        ("six-1.17.0-py2.py3-none-any.whl", X86, True),
        # a compressed tag set: one fitting tag is enough
        ("numpy-2.3.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", X86, True),
        ("numpy-2.3.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", SPARK,
         False),
        # a glibc newer than the target's is refused too
        ("vllm-0.33.0-cp38-abi3-manylinux_2_40_aarch64.whl", SPARK, False),
        ("torch-2.13.0-cp312-cp312-win_amd64.whl", X86, False),
        ("not-a-wheel.whl", X86, False),
    ],
)
def test_fits_platform(wheel: str, platform: str, fits: bool) -> None:
    assert fits_platform(wheel, platform) is fits


def test_host_note_names_target_and_foreign_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sparkbuild.wheelhouse.write.platform_tags",
                        lambda: iter(["manylinux_2_28_x86_64", "linux_x86_64"]))
    monkeypatch.setattr("sparkbuild.wheelhouse.write.py_platform.machine", lambda: "x86_64")
    built = "mini_vllm-0.1.0+sm121.abcd-cp311-cp311-linux_x86_64.whl"
    note = host_note(ClosureTarget(SPARK, "3.12"), [built])
    assert note is not None
    assert SPARK in note and "x86_64" in note and built in note and "will not install" in note
    general = host_note(ClosureTarget(SPARK, "3.12"), [])
    assert general is not None and SPARK in general and "not here" in general
    # no note when the target is this machine, or when no target platform was given
    assert host_note(ClosureTarget(X86, "3.12"), []) is None
    assert host_note(ClosureTarget(None, None), []) is None
