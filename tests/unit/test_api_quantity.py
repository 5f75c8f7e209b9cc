"""batchop.api.quantity values quantities as the API server does.

Checked against the `kubernetes` client's parse_quantity (an independent implementation)
on generated spellings of the grammar, and on what the client does not model: the API
server's refusal of fractional exponents and its rounding of sub-nano values up to 1n.
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity

from batchop.api.quantity import NON_NEGATIVE_QUANTITY, QUANTITY, amount, is_quantity

# The grammar, with exponents and fractions short enough that no value falls below 1n.
SPELLINGS = st.from_regex(
    r"^[+-]?([0-9]{1,12}(\.[0-9]{0,3})?|\.[0-9]{1,3})(([KMGTPE]i)|[kMGTPE]|([eE][+]?[0-9]{1,2}))?$",
    fullmatch=True,
)


@settings(max_examples=300)
@given(SPELLINGS)
def test_amount_agrees_with_the_kubernetes_client(text: str) -> None:
    assert is_quantity(text)
    with localcontext() as context:
        context.prec = 200
        expected = parse_quantity(text)
    assert amount(text) == expected


@given(st.integers(0, 2**63 - 1))
def test_ints_are_their_own_amount(value: int) -> None:
    assert amount(value) == value
    assert amount(value) == amount(str(value))


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [("100m", "1"), ("1000Mi", "1Gi"), ("999", "1k"), ("1k", "1Ki"), ("1n", "1u"), ("1E", "1Ei")],
)
def test_suffixes_order_amounts(smaller: str, larger: str) -> None:
    assert amount(smaller) < amount(larger)


@pytest.mark.parametrize(
    ("left", "right"),
    [("500m", "0.5"), ("1", "1000m"), ("1e3", "1k"), ("1E3", "1k"), ("1Ki", "1024"), (".5", "0.5")],
)
def test_spellings_of_one_amount_are_equal(left: str, right: str) -> None:
    assert amount(left) == amount(right)


def test_sub_nano_values_round_away_from_zero_to_the_nano() -> None:
    nano = Decimal("1e-9")
    assert amount("0.0000000011") == 2 * nano
    assert amount("0.0000000001") == nano
    assert amount("-0.0000000011") == -2 * nano
    assert amount("0.000000002") == 2 * nano  # exact nanos are kept
    assert amount("0") == 0


@pytest.mark.parametrize("text", ["1e1.5", "1e.5", "1K", "1ki", "lots", "", "1.5.5", "e3", "1e"])
def test_non_quantities_are_refused_naming_the_value(text: str) -> None:
    assert not is_quantity(text)
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        amount(text)


def test_huge_exponents_are_refused_not_computed() -> None:
    with pytest.raises(ValueError, match="exponent"):
        amount("1e99999999999")


def test_the_resource_pattern_is_the_grammar_without_a_minus() -> None:
    for text in ["1", "+1", "500m", "1.5Gi", "1e3"]:
        assert re.match(NON_NEGATIVE_QUANTITY, text) and re.match(QUANTITY, text)
    for text in ["-1", "-500m", "-1e3"]:
        assert re.match(QUANTITY, text) and not re.match(NON_NEGATIVE_QUANTITY, text)
