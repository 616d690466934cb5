from __future__ import annotations

from sparkbuild.errors import ALL_ERRORS, PatchError


def test_every_error_class_has_its_own_exit_code() -> None:
    codes = [cls.exit_code for cls in ALL_ERRORS]
    assert len(codes) == len(set(codes))
    assert all(code != 0 for code in codes)


def test_render_says_what_where_and_hint() -> None:
    error = PatchError("hunk 2 did not match", where="CMakeLists.txt:120", hint="rebase the patch")
    text = error.render()
    assert text.splitlines() == [
        "error: hunk 2 did not match",
        "  where: CMakeLists.txt:120",
        "  hint: rebase the patch",
    ]
    assert error.to_dict()["error"] == "PatchError"
