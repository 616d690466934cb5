"""A kernel's mangled name read whole, substitutions resolved: the reading is c++filt's on the
names g++ made (tests/support/kernel_names.py), and a name outside the grammar, with text
after its end, nested past the limit or pointing at a substitution not yet defined is none."""

from __future__ import annotations

import pytest

from sparkbuild.toolchain.mangled import MAX_DEPTH, MAX_NAME, Qualified, parse_kernel
from support.kernel_names import SM75, SM75_AS_SUBSTITUTION, SM75_DEMANGLED, moe_fc_gemm

CXXFILT = {
    "_ZN2ns1KINS_1QIPKNS_1XELin3ELj5ELl7ELm9ELb1ELNS_1EE1ELc97EEEEEvNT_6ParamsE":
        "void ns::K<ns::Q<ns::X const*, -3, 5u, 7l, 9ul, true, (ns::E)1, (char)97> >"
        "(ns::Q<ns::X const*, -3, 5u, 7l, 9ul, true, (ns::E)1, (char)97>::Params)",
    "_Z1KIN1UIiE2InIN1a1b1CEEEEvNT_6ParamsE":
        "void K<U<int>::In<a::b::C> >(U<int>::In<a::b::C>::Params)",
    "_Z1KIN1a1b1DI1UINS1_1CEEPS5_EEEvNT_6ParamsE":
        "void K<a::b::D<U<a::b::C>, U<a::b::C>*> >(a::b::D<U<a::b::C>, U<a::b::C>*>::Params)",
    "_Z1KIN1a1b1DI1UIS3_IS3_IiEEES5_EEEvNT_6ParamsE":
        "void K<a::b::D<U<U<U<int> > >, U<U<int> > > >(a::b::D<U<U<U<int> > >, "
        "U<U<int> > >::Params)",
    "_ZN1z1LIN1a1b1DIPKPKNS2_1CEOS4_EEEEvNT_6ParamsEiPKSB_":
        "void z::L<a::b::D<a::b::C const* const*, a::b::C&&> >(a::b::D<a::b::C const* const*, "
        "a::b::C&&>::Params, int, a::b::D<a::b::C const* const*, a::b::C&&> const*)",
    SM75: SM75_DEMANGLED,
}
"""Names g++ made, and what c++filt reads each as."""


@pytest.mark.parametrize(("mangled", "demangled"), CXXFILT.items())
def test_a_name_reads_as_cxxfilt_reads_it(mangled: str, demangled: str) -> None:
    kernel = parse_kernel(mangled)
    assert kernel is not None
    assert str(kernel) == demangled


def test_the_arch_tag_is_the_same_argument_however_it_is_spelt() -> None:
    spelt, substituted = parse_kernel(SM75), parse_kernel(SM75_AS_SUBSTITUTION)
    assert spelt is not None and substituted is not None
    for kernel in (spelt, substituted):
        (instance,) = kernel.name.args or ()
        assert isinstance(instance, Qualified) and instance.args is not None
        assert str(instance.args[3]) == "cutlass::arch::Sm75"
    assert "4Sm75E" not in SM75_AS_SUBSTITUTION.split("Swizzle")[-1]


@pytest.mark.parametrize("mangled", [
    SM75 + "Q",                     # text after the end
    SM75 + ".cold",                 # a clone's suffix
    "x" + SM75,                     # not a mangled name
    SM75_DEMANGLED,                 # the demangled text
    SM75.replace("NSP_4Sm75E", "NS9Z_4Sm75E"),  # a substitution not defined yet
    SM75.replace("NSP_4Sm75E", "NSP_5Sm75E"),   # a length past the identifier
    SM75[:-3],                      # cut short
    "_Z1KIPFivEEvv",                # a function type: outside the grammar read
    "_Z",
    "",
])
def test_a_name_outside_the_grammar_is_none(mangled: str) -> None:
    assert parse_kernel(mangled) is None


def test_a_builtin_after_the_end_is_one_more_parameter() -> None:
    kernel = parse_kernel(SM75 + "x")
    assert kernel is not None and str(kernel.params[-1]) == "long long"


def test_a_hostile_nesting_or_length_is_none_not_a_crash() -> None:
    deep = "_Z1KI" + "1UI" * (MAX_DEPTH + 5) + "i" + "E" * (MAX_DEPTH + 5) + "Evv"
    assert parse_kernel(deep) is None
    assert parse_kernel("_Z1KI" + "1UI" * 20 + "i" + "E" * 20 + "Evv") is not None
    assert parse_kernel(moe_fc_gemm("S" + "m" * MAX_NAME)) is None
