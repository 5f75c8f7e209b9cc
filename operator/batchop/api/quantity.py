"""Kubernetes resource quantities ("500m", "1.5Gi", 4), valued exactly as the API server does.

Comparing requests with limits needs the quantity's amount, not its spelling: "500m" equals
"0.5", and "1Gi" exceeds "1000Mi". This follows apimachinery's `resource.ParseQuantity`:
exact decimal arithmetic, exponents are whole numbers, and a value with digits below 1n is
rounded away from zero to the nano (so a tiny request still asks for something). Kept
free of the `kubernetes` client so that parsing a BatchedModel stays cheap.
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext

# The quantity grammar as apimachinery's parser accepts it. (Its doc comment allows a
# fractional exponent, "1e1.5", but the parser refuses one.)
_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
_SUFFIX = r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?"
QUANTITY = rf"^(\+|-)?{_NUMBER}{_SUFFIX}$"
# A pod's requests and limits must not be negative.
NON_NEGATIVE_QUANTITY = rf"^\+?{_NUMBER}{_SUFFIX}$"
_QUANTITY_RE = re.compile(QUANTITY)

_SCALES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{prefix + "i": Decimal(1024**power) for power, prefix in enumerate("KMGTPE", start=1)},
}
_NANO = Decimal("1e-9")
MAX_EXPONENT = 1000  # beyond any resource; keeps the arithmetic bounded


def is_quantity(value: object) -> bool:
    """Whether `value` is an int or a string in the quantity grammar."""
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, str) and _QUANTITY_RE.match(value) is not None


def amount(value: int | str) -> Decimal:
    """The exact value of a quantity (in its base unit: cores, bytes, ...).

    Raises ValueError naming the value when it is not a quantity, or when its exponent is
    beyond +-MAX_EXPONENT.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    match = _QUANTITY_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (such as 500m, 4Gi or 1.5)")
    number, suffix = match.group(1, 2), match.group(6) or ""
    mantissa = Decimal((number[0] or "") + number[1])
    with localcontext() as context:
        context.prec = 4 * MAX_EXPONENT  # every digit a 64-character quantity can hold
        if suffix[:1] in ("e", "E") and suffix not in _SCALES:
            exponent = int(suffix[1:])
            if abs(exponent) > MAX_EXPONENT:
                raise ValueError(f"{value!r}: exponent beyond +-{MAX_EXPONENT}")
            result = mantissa.scaleb(exponent)
        else:
            result = mantissa * _SCALES[suffix]
        places = result.as_tuple().exponent
        if isinstance(places, int) and places < -9 and result != 0:
            result = result.quantize(_NANO, rounding=ROUND_UP)
        return result
