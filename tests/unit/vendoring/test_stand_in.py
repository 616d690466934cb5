"""``[[vendor.stand_in]]``: a source built from another commit than the tree's pin, named by
the recipe (sparkbuild.recipe) and applied to the vendor plan (sparkbuild.vendoring.plan);
a copy at another commit is refused unless an entry names it (sparkbuild.vendoring.materialize)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkbuild.errors import RecipeError, SourceError
from sparkbuild.recipe import StandIn, load_recipe
from sparkbuild.store.cache import Cache
from sparkbuild.vendoring.index import record_source
from sparkbuild.vendoring.materialize import refuse_other_commits, require_complete
from sparkbuild.vendoring.placeholders import Placeholder
from sparkbuild.vendoring.plan import (
    ExternalKind,
    SourcePlan,
    VendorPlan,
    VendorResult,
    adjust_plan,
    source_plan_from,
)

URL = "https://github.com/vllm-project/flash-attention.git"
PIN = "06bdd47c0d0383daf6a2ff0c418faff9c6da16e5"
USED = "617264c1c7955c9e84817654ebeedff069f3c5f1"
HEAD = """\
[source]
spec = "pypi:vllm==0.29.0"
[series]
path = "series"
"""
ENTRY = f"""
[[vendor.stand_in]]
url = "{URL}"
pinned = "{PIN}"
used = "{USED}"
reason = "the pin is in no mirror here"
"""


def _load(tmp_path: Path, text: str) -> tuple[StandIn, ...]:
    path = tmp_path / "r.toml"
    path.write_text(HEAD + text, encoding="utf-8")
    return load_recipe(path).vendor.stand_ins


# -- the recipe ------------------------------------------------------------------------------


def test_an_entry_is_read_with_each_key(tmp_path: Path) -> None:
    (stand_in,) = _load(tmp_path, ENTRY.replace(PIN, PIN.upper()))
    assert stand_in == StandIn(URL, PIN, USED, "the pin is in no mirror here")
    assert stand_in.to_dict() == {"url": URL, "pinned": PIN, "used": USED,
                                  "reason": "the pin is in no mirror here"}


def test_no_entry_is_no_stand_in(tmp_path: Path) -> None:
    assert _load(tmp_path, "") == ()


def _refused(tmp_path: Path, text: str) -> RecipeError:
    with pytest.raises(RecipeError) as raised:
        _load(tmp_path, text)
    return raised.value


@pytest.mark.parametrize("key", ["url", "pinned", "used", "reason"])
def test_a_missing_or_blank_key_is_named(tmp_path: Path, key: str) -> None:
    lines = [line for line in ENTRY.splitlines() if not line.startswith(f"{key} =")]
    error = _refused(tmp_path, "\n".join(lines) + "\n")
    assert error.what == f"a [[vendor.stand_in]] entry lacks {key}"
    assert error.where is not None and error.where.startswith(str(tmp_path / "r.toml"))
    blanked = [f'{key} = "  "' if line.startswith(f"{key} =") else line
               for line in ENTRY.splitlines()]
    blank = _refused(tmp_path, "\n".join(blanked) + "\n")
    assert blank.what == f"a [[vendor.stand_in]] entry lacks {key}"


@pytest.mark.parametrize("key", ["pinned", "used"])
@pytest.mark.parametrize("value", ["v2.7.4", "06bdd4", "g06bdd47c", "06bdd47c" * 6, "HEAD"])
def test_a_commit_that_is_not_7_to_40_hex_digits_is_named(tmp_path: Path, key: str,
                                                          value: str) -> None:
    old = PIN if key == "pinned" else USED
    error = _refused(tmp_path, ENTRY.replace(old, value))
    assert error.what == f"vendor.stand_in.{key}: {value.lower()!r} is not a commit"
    assert error.where is not None and error.where.endswith(":8" if key == "pinned" else ":9")
    assert "hex" in (error.hint or "")


@pytest.mark.parametrize("used", [PIN, PIN[:12], PIN.upper()])
def test_an_entry_that_uses_its_own_pin_is_named(tmp_path: Path, used: str) -> None:
    error = _refused(tmp_path, ENTRY.replace(USED, used))
    assert error.what == "a [[vendor.stand_in]] entry uses the commit it stands in for"


def test_two_entries_for_one_pin_are_named(tmp_path: Path) -> None:
    twice = ENTRY + ENTRY.replace(USED, "1" * 40).replace(".git", "")
    error = _refused(tmp_path, twice)
    assert error.what == f"two [[vendor.stand_in]] entries for {URL.removesuffix('.git')} at {PIN}"


@pytest.mark.parametrize(("text", "fragment"), [
    (ENTRY.replace('reason = "', 'color = "x"\nreason = "'), "unknown key vendor.stand_in.color"),
    (ENTRY.replace(f'"{PIN}"', "6"), "vendor.stand_in.pinned must be str, not int"),
    ('[vendor]\nstand_in = "x"\n', "vendor.stand_in must be list, not str"),
    ('[vendor]\nstand_in = ["x"]\n', "[vendor.stand_in] must be a table"),
    (ENTRY.replace("no mirror here", "no\\u001b[31m mirror"), "vendor.stand_in holds"),
])
def test_malformed_entries_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    assert fragment in _refused(tmp_path, text).what


def test_an_entry_matches_its_url_and_pin_only() -> None:
    stand_in = StandIn(URL, PIN, USED, "why")
    assert stand_in.matches(URL, PIN)
    assert stand_in.matches(URL.removesuffix(".git").upper() + "/", PIN[:8])
    assert stand_in.matches(URL, PIN.upper())
    assert not stand_in.matches(URL, USED)
    assert not stand_in.matches("https://github.com/other/flash-attention.git", PIN)
    assert not stand_in.matches(URL, None)
    # a tag, a branch or an empty ref is never a commit's prefix
    for ref in ("", "0", "06bd", "06bdd47", "main", " "):
        assert stand_in.matches(URL, ref) is (ref == "06bdd47"), ref


# -- the plan --------------------------------------------------------------------------------


def _source(name: str = "vllm-flash-attn", url: str = URL, ref: str | None = PIN,
            kind: ExternalKind = "git") -> SourcePlan:
    return SourcePlan(name, kind, url, ref, where="/t/cmake/fa.cmake:39")


def _plan(*sources: SourcePlan, unreached: tuple[SourcePlan, ...] = ()) -> VendorPlan:
    return VendorPlan(Path("/t"), sources, unreached, (), (), None)


STAND_IN = StandIn(URL, PIN, USED, "the pin is in no mirror here")


def test_a_stand_in_gives_its_source_the_commit_it_is_built_from() -> None:
    plan = adjust_plan(_plan(_source(), _source("cutlass", "https://github.com/n/c.git", "v4")),
                       stand_ins=(STAND_IN,))
    fa, cutlass = plan.sources
    assert fa.stand_in == STAND_IN and cutlass.stand_in is None
    assert (fa.ref, fa.fetch_ref, cutlass.fetch_ref) == (PIN, USED, "v4")
    assert fa.upstream_key == f"git:{URL}@{PIN}#stand-in:{USED}"
    assert fa.key != _source().key  # never served a copy at the pin, nor the pin its copy
    assert fa.to_dict()["stand_in"] == STAND_IN.to_dict()
    # read back, the stand-in is the recipe's to give again (the plan's JSON drops it)
    assert source_plan_from(fa.to_dict()) == _source()


def test_a_stand_in_for_an_unreached_source_is_accepted() -> None:
    plan = adjust_plan(_plan(unreached=(_source(),)), stand_ins=(STAND_IN,))
    assert plan.sources == ()


def test_a_stand_in_for_a_url_the_tree_does_not_fetch_is_named() -> None:
    other = StandIn("https://github.com/vllm-project/flash-attn.git", PIN, USED, "typo")
    with pytest.raises(RecipeError) as raised:
        adjust_plan(_plan(_source()), stand_ins=(other,))
    assert raised.value.what == (f"[[vendor.stand_in]] names {other.url}, which the tree "
                                 "does not fetch")
    assert URL in (raised.value.hint or "")


def test_a_stand_in_for_another_pin_than_the_trees_is_named() -> None:
    moved = _source(ref="1234567890abcdef1234567890abcdef12345678")
    with pytest.raises(RecipeError) as raised:
        adjust_plan(_plan(moved), stand_ins=(STAND_IN,))
    assert raised.value.what == (f"[[vendor.stand_in]] for {URL} names the pin {PIN}, but "
                                 f"the tree pins vllm-flash-attn @ {moved.ref}")


def test_a_stand_in_never_applies_to_a_url_source() -> None:
    url_source = _source(kind="url", ref=None)
    with pytest.raises(RecipeError):
        adjust_plan(_plan(url_source), stand_ins=(STAND_IN,))


def test_a_placeholder_moves_its_source_out_of_the_fetched_ones() -> None:
    placeholder = Placeholder("flashmla", "only _flashmla_C use it", ("a.py",), ("_flashmla_C",))
    ghost = Placeholder("not-in-plan", "another branch's")
    plan = adjust_plan(_plan(_source(), _source("flashmla", "https://x/f.git", "v1")),
                       placeholders=(placeholder, ghost))
    assert [s.name for s in plan.sources] == ["vllm-flash-attn"]
    (left,) = plan.excluded
    assert left.placeholder == placeholder
    assert left.to_dict()["placeholder"] == placeholder.to_dict()
    lines = VendorResult(plan, Path("/c"), True).summary()
    assert "not fetched: flashmla (only _flashmla_C use it); a placeholder of 1 file(s)" in lines
    assert not any(line.startswith("left out by the recipe") for line in lines)


def test_an_excluded_source_takes_no_placeholder() -> None:
    placeholder = Placeholder("flashmla", "only _flashmla_C use it")
    plan = adjust_plan(_plan(_source("flashmla", "https://x/f.git", "v1")),
                       exclude=("flashmla",), placeholders=(placeholder,))
    (left,) = plan.excluded
    assert left.placeholder is None
    assert any(line == "left out by the recipe (built against an empty directory): flashmla"
               for line in VendorResult(plan, Path("/c"), True).summary())


def test_the_report_names_the_stand_in() -> None:
    plan = adjust_plan(_plan(_source()), stand_ins=(STAND_IN,))
    lines = VendorResult(plan, Path("/c"), True).summary()
    assert f"    stand-in: built from {USED}, not the pin (the pin is in no mirror here)" in lines


# -- the copy's commit -----------------------------------------------------------------------


def test_a_copy_at_another_commit_than_its_pin_is_a_problem() -> None:
    source = _source()
    assert source.commit_problem(PIN) is None
    assert source.commit_problem(PIN.upper()) is None
    assert source.commit_problem(USED) == (
        f"vllm-flash-attn: the copy is at {USED}, not its pin {PIN}")
    assert source.commit_problem(None) == (
        f"vllm-flash-attn: the copy is at an unrecorded commit, not its pin {PIN}")
    standing = dataclasses.replace(source, stand_in=STAND_IN)
    assert standing.commit_problem(USED) is None
    assert standing.commit_problem(PIN) == (
        f"vllm-flash-attn: the copy is at {PIN}, not the stand-in commit {USED} (for the "
        f"pin {PIN})")
    assert _source(ref="v2.7.4").commit_problem(USED) is None  # a tag: any commit it names
    assert _source(kind="url", ref=None).commit_problem(None) is None


def _cached(tmp_path: Path, source: SourcePlan, commit: str) -> Cache:
    cache = Cache(tmp_path / "cache")
    digest = cache.put_bytes(b"a tarball")
    record_source(cache, source.key, {"kind": "git", "name": source.name, "url": source.url,
                                      "ref": source.ref, "commit": commit, "sha256": digest,
                                      "strip_top": False})
    return cache


def test_a_cached_copy_at_another_commit_is_refused_before_anything_builds(
        tmp_path: Path) -> None:
    source = _source()
    cache = _cached(tmp_path, source, USED)
    with pytest.raises(SourceError) as raised:
        require_complete(_plan(source), cache)
    assert raised.value.what == f"vllm-flash-attn: the copy is at {USED}, not its pin {PIN}"
    assert raised.value.where == "/t/cmake/fa.cmake:39"
    assert "[[vendor.stand_in]]" in (raised.value.hint or "")
    refuse_other_commits(_plan(source), _cached(tmp_path / "pinned", source, PIN))
