"""The root conftest's summary names every skip reason, also under -q."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]


def test_skips_are_counted_and_their_reasons_listed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(
        """
        import pytest

        def test_busy_1():
            pytest.skip("p99 not judged: send lag 120 ms")

        def test_busy_2():
            pytest.skip("p99 not judged: send lag 120 ms")

        @pytest.mark.skip(reason="needs a GPU")
        def test_gpu():
            pass

        def test_judged():
            assert 1 + 1 == 2
        """
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines([
        "*= 3 skipped, 2 reason(s) =*",
        "2 x p99 not judged: send lag 120 ms",
        "*test_busy_1",
        "*test_busy_2",
        "1 x needs a GPU",
    ])  # fmt: skip


def test_no_summary_without_skips(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile("def test_ok():\n    assert True\n")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "skipped" not in result.stdout.str()
