"""Load generator: arrival process, report arithmetic, loopback-only targets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchop.cli.main import main
from batchop.sim.trace import Trace, constant_trace
from batchop_dev.local.load import (
    SUSTAINED_RPS,
    LoadError,
    StaticTargets,
    arrival_times,
    capacity_warning,
    require_loopback_url,
    scale_trace,
    summarize,
)


def test_arrivals_follow_each_segment_rate() -> None:
    trace = Trace(seconds=(0.0, 10.0, 20.0, 25.0), rps=(100.0, 400.0, 0.0, 0.0))
    times = arrival_times(trace, seed=3)
    assert np.all(np.diff(times) >= 0)
    assert times.min() >= 0 and times.max() < 20.0  # nothing in the 0-rate tail
    for start, end, rps in trace.segments():
        n = int(((times >= start) & (times < end)).sum())
        expected = rps * (end - start)
        assert abs(n - expected) <= 5 * np.sqrt(max(expected, 1))  # 5 sigma of a Poisson


def test_arrivals_are_poisson_and_seeded() -> None:
    trace = constant_trace(500.0, 60.0)
    a, b, c = arrival_times(trace, 1), arrival_times(trace, 1), arrival_times(trace, 2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    gaps = np.diff(a)
    # exponential gaps: mean 1/rate and coefficient of variation 1
    assert gaps.mean() == pytest.approx(1 / 500.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_summary_counts_percentiles_and_timeline() -> None:
    rng = np.random.default_rng(0)
    send = np.sort(rng.uniform(0, 5, 1000))
    latency = rng.exponential(10.0, 1000)
    ok = rng.uniform(size=1000) > 0.1
    report = summarize(send, latency, ok, 5.0)
    assert report["requests"] == 1000
    assert report["ok"] + report["failed"] == 1000 and report["failed"] == int((~ok).sum())
    assert report["p99_ms"] == pytest.approx(np.percentile(latency[ok], 99), abs=1e-3)
    assert report["p50_ms"] == pytest.approx(np.percentile(latency[ok], 50), abs=1e-3)
    assert report["achieved_rps"] == pytest.approx(ok.sum() / 5.0, abs=0.01)
    timeline = report["timeline"]
    assert [row["t"] for row in timeline] == [0, 1, 2, 3, 4]
    assert sum(row["sent"] for row in timeline) == 1000
    assert sum(row["failed"] for row in timeline) == report["failed"]


def test_summary_of_nothing() -> None:
    report = summarize(np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool), 2.0)
    assert report["requests"] == 0 and report["p99_ms"] is None
    assert len(report["timeline"]) == 2


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "127.10.3.4:8000", "http://127.0.0.2:1/"])
def test_loopback_urls_accepted(url: str) -> None:
    host_port = require_loopback_url(url)
    assert host_port.startswith("127.") and "://" not in host_port


@pytest.mark.parametrize(
    "url", ["10.0.0.1:8000", "8.8.8.8:80", "localhost:8000", "[::1]:8000", "127.0.0.1"]
)
def test_other_targets_refused(url: str) -> None:
    with pytest.raises(LoadError, match="target"):
        require_loopback_url(url)


def test_static_targets_need_a_url() -> None:
    with pytest.raises(LoadError):
        StaticTargets([], "m")


def test_capacity_warning_only_above_what_is_sustained() -> None:
    assert capacity_warning(constant_trace(SUSTAINED_RPS * 0.9, 10)) is None
    warning = capacity_warning(constant_trace(SUSTAINED_RPS * 2, 10))
    assert warning is not None and "req/s" in warning


def test_cli_refuses_non_loopback_before_sending(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    code = main(
        [
            "load",
            "--rps",
            "10",
            "--duration",
            "1",
            "--url",
            "10.1.2.3:8000",
            "--model",
            "m",
            "--json",
            str(out),
        ]
    )
    assert code == 2
    assert "10.1.2.3:8000" in capsys.readouterr().err
    assert not out.exists()


def test_cli_direct_mode_needs_model(tmp_path: Path, capsys) -> None:
    code = main(
        ["load", "--rps", "10", "--url", "127.0.0.1:8000", "--json", str(tmp_path / "r.json")]
    )
    assert code == 2 and "--model" in capsys.readouterr().err


def test_scaled_trace_keeps_its_shape() -> None:
    trace = Trace(seconds=(0.0, 300.0, 900.0), rps=(300.0, 1800.0, 1800.0), name="step")
    fast = scale_trace(trace, time_scale=0.1, rate_scale=0.25)
    assert fast.end == pytest.approx(trace.end * 0.1)
    for t in (0.0, 150.0, 299.0, 301.0, 899.0):
        assert fast.rate_at(t * 0.1) == pytest.approx(trace.rate_at(t) * 0.25)
    with pytest.raises(LoadError, match="scale"):
        scale_trace(trace, time_scale=0)


def test_a_payload_checks_each_answer_against_its_own_input() -> None:
    from batchop_dev.local.load import sleep_payload
    from batchop_dev.local.triton.mlp import make_weights, mlp_payload

    sleep = sleep_payload()
    assert sleep.matches(sleep.inputs[3] * 2, 3)
    assert not sleep.matches(sleep.inputs[4] * 2, 3)  # another request's answer
    assert not sleep.matches(None, 3) and not sleep.matches(sleep.inputs[3][:, :2] * 2, 3)
    mlp = mlp_payload(seed=5, pool=4)
    x = mlp.inputs[1]
    assert mlp.matches(make_weights(5).forward(x) * (1 + 1e-4), 1)  # float32 rounding passes
    assert not mlp.matches(make_weights(6).forward(x), 1)  # other weights do not
    assert not mlp.matches(mlp.expected[2], 1)
