"""Argument types for the CLI's numeric flags, and the parser that reports in one line.

argparse's `float` accepts `nan` and `inf`, which then flow into JSON results as invalid
tokens or into the policy as comparisons that are always false; these types refuse them
where the flag is parsed, and argparse names the flag in the message.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from typing import NoReturn

# A namespace is a DNS-1123 label, a BatchedModel's name a DNS-1035 label (api/models.py).
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit 2), not the usage
    block followed by the error: scripts and people both read the last line first."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def finite_float(text: str) -> float:
    """A float that is a real number: no nan, no inf."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite float > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite float >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An integer type within [low, high]; the bounds are the API's where it has them."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low}..{high:,}, got {text}")
        return value

    parse.__name__ = f"integer in {low}..{high}"
    return parse


def namespaced_name(text: str) -> tuple[str, str]:
    """NAMESPACE/NAME of a BatchedModel, each checked against the rule Kubernetes applies,
    so that a typo is named here rather than answered by a 404 (or a 422) later."""
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    if len(namespace) > 63 or not DNS1123_LABEL.fullmatch(namespace):
        raise argparse.ArgumentTypeError(
            f"namespace {namespace!r} must be a DNS-1123 label of at most 63 characters: "
            "lowercase letters, digits and '-'"
        )
    if len(name) > 63 or not DNS1035_LABEL.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"name {name!r} must be a DNS-1035 label of at most 63 characters: lowercase "
            "letters, digits and '-', starting with a letter"
        )
    return namespace, name
