"""Wait for a converging system: poll a probe until it answers, fail at a deadline saying why.

Integration and e2e tests check that the cluster converges, not how fast, so every wait is a
bounded poll. One definition serves them all: a timeout names what was awaited and the last
answer seen (an exception counts as one more try: a transient API error is not the verdict).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T],
    what: str,
    timeout: float = 120.0,
    *,
    interval: float = 1.0,
    context: Callable[[], str] | None = None,
) -> T:
    """Return `probe()`'s first truthy answer; raise AssertionError at `timeout` seconds.

    `context`, when given, is called on timeout and its text appended (e.g. a log tail).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as exc:  # noqa: BLE001 - kept as the last answer, shown on timeout
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            extra = f"\n{context()}" if context is not None else ""
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}{extra}"
            )
        time.sleep(interval)
