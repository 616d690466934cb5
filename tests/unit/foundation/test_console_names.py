"""Names in output: a name cannot forge a line or turn round."""

from __future__ import annotations

from sparkbuild.console import escaped, shown, unsafe_characters


def test_a_plain_name_is_shown_as_it_is() -> None:
    assert shown("demo-1.0+sm121a.abc-py3-none-any.whl") == "demo-1.0+sm121a.abc-py3-none-any.whl"
    assert shown('with "quotes" and \\') == 'with "quotes" and \\'


def test_a_name_with_a_control_or_bidi_character_is_quoted_and_escaped() -> None:
    assert shown("x\n  MISMATCH y") == '"x\\n  MISMATCH y"'
    assert shown('a"b\\\u202ec') == '"a\\"b\\\\\\u202ec"'
    assert shown("\x1b[2J\r\t") == '"\\u001b[2J\\r\\t"'
    assert "\n" not in shown("a\u2028b\nc") and "\u2028" not in shown("a\u2028b")


def test_unsafe_characters_are_named_once_each() -> None:
    assert unsafe_characters("a\nb\nc\u202e\x00") == ["U+000A", "U+202E", "U+0000"]
    assert unsafe_characters("plain é ü 日本") == []
    assert escaped("line\nbreak") == "line\\nbreak"
