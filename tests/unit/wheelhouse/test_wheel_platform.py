"""The built wheel's platform against the closure's: by tag, through packaging."""

from __future__ import annotations

import pytest

from sparkbuild.wheelhouse.lock import ClosureTarget
from sparkbuild.wheelhouse.target_tags import fits_platform, target_tag_problem
from sparkbuild.wheelhouse.write import host_note

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


def test_host_note_names_the_recipes_platform_and_the_foreign_wheel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sparkbuild.wheelhouse.write.platform_tags",
                        lambda: iter(["manylinux_2_28_x86_64", "linux_x86_64"]))
    monkeypatch.setattr("sparkbuild.wheelhouse.write.py_platform.machine", lambda: "x86_64")
    built = "mini_vllm-0.1.0+sm121.abcd-cp311-cp311-linux_x86_64.whl"
    pure = "demo-1.0-py3-none-any.whl"
    here = ClosureTarget(None, None)  # the closure for this machine: wheel without --platform
    note = host_note(SPARK, [built, pure], here)
    assert note is not None
    assert note.startswith(f"note: the recipe targets {SPARK}, this machine is x86_64: ")
    assert f"{built} installs only on x86_64" in note and pure not in note
    assert f"--platform {SPARK}" in note  # the dependencies here are this machine's
    for_spark = host_note(SPARK, [built], ClosureTarget(SPARK, "3.12"))
    assert for_spark is not None and "--platform" not in for_spark
    only_pure = host_note(SPARK, [pure], ClosureTarget(SPARK, "3.12"))
    assert only_pure is not None and "platform-independent" in only_pure
    # no note when the recipe's platform is this machine's
    assert host_note(X86, [built], here) is None


@pytest.mark.parametrize(
    ("wheel", "platform", "python", "installs"),
    [
        # a new user's wheelhouse: built on x86_64 with Python 3.11, declared for the Spark
        ("demo-1.0-cp311-cp311-linux_x86_64.whl", SPARK, "3.12", False),
        ("demo-1.0-cp311-cp311-linux_x86_64.whl", "linux-x86_64", "3.12", False),
        ("demo-1.0-cp311-cp311-linux_aarch64.whl", SPARK, "3.12", False),
        ("demo-1.0-cp312-cp312-linux_x86_64.whl", SPARK, "3.12", False),
        ("demo-1.0-cp312-cp312-linux_aarch64.whl", SPARK, "3.12", True),
        ("demo-1.0-cp311-cp311-linux_x86_64.whl", "linux-x86_64", "3.11", True),
        ("demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "linux-x86_64", "3.11", True),
        ("vllm-0.33.0-cp38-abi3-manylinux_2_39_aarch64.whl", SPARK, "3.12", True),
        ("demo-1.0-py3-none-any.whl", SPARK, "3.12", True),
        ("demo-1.0-cp311-cp311-linux_x86_64.whl", None, None, True),
        ("demo-1.0-cp311-cp311-linux_x86_64.whl", None, "3.12", False),
    ],
)
def test_target_tag_problem(wheel: str, platform: str | None, python: str | None,
                            installs: bool) -> None:
    problem = target_tag_problem(wheel, platform, python)
    assert (problem is None) is installs, problem
    if problem is not None:
        assert problem.startswith(f"built for {wheel.split('-', 2)[2].removesuffix('.whl')}")


def test_a_python_that_is_no_version_is_named() -> None:
    assert target_tag_problem("demo-1.0-py3-none-any.whl", SPARK, "three") == (
        "the manifest's target.python three is not a Python version X.Y")
