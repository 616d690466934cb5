"""A search path as a kept result's key sees it (sparkbuild.store.env_key)."""

from __future__ import annotations

from sparkbuild.store.env_key import is_search_path, key_items, key_value


def test_a_search_path_keeps_each_entry_once_in_its_first_place() -> None:
    assert key_value("PATH", "/a:/b:/a:/c:/b") == "/a:/b:/c"
    assert key_value("LD_LIBRARY_PATH", "/x:/x") == "/x"
    assert key_value("PYTHONPATH", "") == ""
    # order is lookup order: a moved entry is another value
    assert key_value("PATH", "/b:/a") != key_value("PATH", "/a:/b")


def test_any_other_variable_is_as_it_is() -> None:
    assert not is_search_path("CMAKE_ARGS")
    assert key_value("CMAKE_ARGS", "-DA=1:-DA=1") == "-DA=1:-DA=1"


def test_key_items_are_sorted_and_normalized() -> None:
    assert key_items({"PATH": "/a:/a", "CC": "gcc"}) == [("CC", "gcc"), ("PATH", "/a")]
