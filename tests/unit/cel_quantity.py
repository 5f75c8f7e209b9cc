"""The Kubernetes CEL quantity library, as cel-python custom functions.

The API server's CEL has `isQuantity(string)`, `quantity(string)` and Quantity methods
(`compareTo`, `isLessThan`, `isGreaterThan`, `sign`, `isInteger`); cel-python has none of
them, so rules that compare quantities could not be checked against their Python twins.
These stand-ins are built on the `kubernetes` client's `parse_quantity`, not on
batchop.api.quantity, so the CEL-versus-Python check also pits two quantity parsers against
each other. Like apimachinery's ParseQuantity they refuse what its regular expression
refuses and round a value with digits below 1n away from zero to the nano. (cel-python
calls `x.f(y)` as `f(x, y)`, which is how the methods are registered.)
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext
from typing import Any

# apimachinery's quantity expression (resource.ParseQuantity's first check), then its parser.
_APIMACHINERY_FORM = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_NANO = Decimal("1e-9")


class Quantity:
    """A parsed quantity: the CEL `Quantity` type."""

    def __init__(self, amount: Decimal) -> None:
        self.amount = amount

    def __repr__(self) -> str:
        return f"Quantity({self.amount})"


def _parse(text: Any) -> Decimal:
    from kubernetes.utils.quantity import parse_quantity

    if not isinstance(text, str) or not _APIMACHINERY_FORM.match(text):
        raise ValueError(f"not a quantity: {text!r}")
    with localcontext() as context:
        context.prec = 200
        value = parse_quantity(text)
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -9 and value != 0:
            value = value.quantize(_NANO, rounding=ROUND_UP)
        return value


def is_quantity(text: Any) -> Any:
    import celpy

    try:
        _parse(text)
    except (ValueError, ArithmeticError):
        return celpy.celtypes.BoolType(False)
    return celpy.celtypes.BoolType(True)


def quantity(text: Any) -> Quantity:
    return Quantity(_parse(text))


def compare_to(left: Quantity, right: Quantity) -> Any:
    import celpy

    if not isinstance(left, Quantity) or not isinstance(right, Quantity):
        raise TypeError(f"compareTo needs two quantities, got {left!r} and {right!r}")
    return celpy.celtypes.IntType((left.amount > right.amount) - (left.amount < right.amount))


def is_less_than(left: Quantity, right: Quantity) -> Any:
    import celpy

    return celpy.celtypes.BoolType(compare_to(left, right) < 0)


def is_greater_than(left: Quantity, right: Quantity) -> Any:
    import celpy

    return celpy.celtypes.BoolType(compare_to(left, right) > 0)


def sign(value: Quantity) -> Any:
    import celpy

    return celpy.celtypes.IntType((value.amount > 0) - (value.amount < 0))


def is_integer(value: Quantity) -> Any:
    import celpy

    return celpy.celtypes.BoolType(value.amount == value.amount.to_integral_value())


FUNCTIONS = {
    "isQuantity": is_quantity,
    "quantity": quantity,
    "compareTo": compare_to,
    "isLessThan": is_less_than,
    "isGreaterThan": is_greater_than,
    "sign": sign,
    "isInteger": is_integer,
}
