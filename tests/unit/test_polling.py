"""The tests' one bounded poll: answers, retries errors, and fails naming what it waited for."""

from __future__ import annotations

import pytest

from batchop_dev.polling import wait_for


def test_returns_the_first_truthy_answer_after_retrying_errors() -> None:
    answers = iter([None, ConnectionError("api down"), 0, "ready", "later"])

    def probe() -> object:
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    assert wait_for(probe, "readiness", timeout=5, interval=0) == "ready"
    assert next(answers) == "later"  # stopped polling at the first answer


def test_timeout_names_what_and_the_last_answer_and_the_context() -> None:
    def probe() -> object:
        raise ConnectionError("api down")

    with pytest.raises(AssertionError) as failed:
        wait_for(probe, "2 Ready pods", timeout=0, interval=0, context=lambda: "log tail")
    message = str(failed.value)
    assert "waiting for 2 Ready pods" in message
    assert "ConnectionError('api down')" in message
    assert message.endswith("\nlog tail")
