"""The bursty-trace judge (batchop_dev.local.bursts): slicing, windows, gaps, verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchop.cli.main import main
from batchop.sim.trace import Trace, TraceError
from batchop_dev.local.bursts import (
    burst_gaps,
    find_trace,
    judge,
    scale_downs_in_gaps,
    trace_slice,
    verdict_lines,
    window_table,
    windows,
)
from batchop_dev.local.load import is_rejection, summarize

SLO = 40.0


def _trace() -> Trace:
    # 0-10 burst, 10-30 gap (20 s), 30-40 burst, 40-120 gap (80 s), 120-150 burst
    return Trace(seconds=(0, 10, 30, 40, 120, 150, 180), rps=(100, 0, 200, 0, 50, 0, 0))


def _records(n: int, duration: float, latency: float, **over: Any) -> dict[str, list[Any]]:
    send = [duration * i / n for i in range(n)]
    rec: dict[str, list[Any]] = {
        "send_s": send,
        "latency_ms": [latency] * n,
        "ok": [True] * n,
        "rejected": [False] * n,
        "lag_ms": [1.0] * n,
    }
    rec.update(over)
    return rec


def _timeline(replicas: list[tuple[float, int]]) -> list[dict[str, Any]]:
    return [{"t": t, "replicas": r, "ready": r} for t, r in replicas]


def test_slice_rebases_scales_and_keeps_the_shape() -> None:
    full = Trace(seconds=(0, 100, 200, 300), rps=(1000, 5000, 0, 0), name="x")
    s = trace_slice(full, 50, 200, 0.02)
    assert s.start == 0 and s.end == 200
    assert s.rate_at(0) == 20 and s.rate_at(49.9) == 20 and s.rate_at(50) == 100
    assert s.rate_at(150) == 0
    assert trace_slice(full, 250, 500, 1).end == 50  # clipped at the trace's end
    for args, field in (
        ((400, 10, 1), "--trace-start"),
        ((0, 0, 1), "--trace-seconds"),
        ((0, 10, 0), "--trace-scale"),
    ):
        with pytest.raises(TraceError, match=field):
            trace_slice(full, *args)


def test_find_trace_by_path_or_name_in_a_shared_folder_above(tmp_path: Path) -> None:
    (tmp_path / "shared" / "traces").mkdir(parents=True)
    csv = tmp_path / "shared" / "traces" / "t.csv"
    csv.write_text("second,rps\n0,1\n5,0\n")
    repo = tmp_path / "wt" / "repo"
    repo.mkdir(parents=True)
    assert find_trace("t", repo) == csv and find_trace("t.csv", repo) == csv
    assert find_trace(str(csv), Path("/nonexistent")) == csv
    with pytest.raises(TraceError, match="nope"):
        find_trace("nope", repo)


def test_gaps_are_quiet_stretches_between_bursts() -> None:
    assert burst_gaps(_trace()) == [(10, 30), (40, 120)]
    assert burst_gaps(Trace(seconds=(0, 10), rps=(0, 0))) == []


def test_windows_count_outcomes_and_judge_only_settled_ones() -> None:
    n = 1800
    rec = _records(n, 180, 30.0)
    for i in range(0, n, 10):  # one in ten refused by the guard, one other failure
        rec["ok"][i], rec["rejected"][i], rec["latency_ms"][i] = False, True, 2.0
    rec["ok"][5] = False
    # a scale-up seen at t=50 (happened after 45): windows starting before 105 unsettled
    tl = _timeline([(t, 1 if t < 50 else 2) for t in range(0, 181, 5)])
    ws = windows(rec, tl, 180, SLO)
    assert [w.start_s for w in ws] == [0, 30, 60, 90, 120, 150]
    assert [w.settled for w in ws] == [False, False, False, False, True, True]
    assert all(w.within is None for w in ws[:4]) and all(w.within for w in ws[4:])
    assert sum(w.sent for w in ws) == n
    assert sum(w.rejected for w in ws) == n // 10 and sum(w.failed_other for w in ws) == 1
    assert ws[4].served_p99_ms == 30.0 and ws[4].replicas_min == ws[4].replicas_max == 2
    # a change inside a window leaves it settled (its start was); the next one is not
    tl = _timeline([(t, 1 if t < 140 else 2) for t in range(0, 181, 5)])
    assert [w.settled for w in windows(rec, tl, 180, SLO)] == [
        False,
        False,
        True,
        True,
        True,
        False,
    ]


def test_a_window_over_2x_slo_fails_unless_the_generator_lagged() -> None:
    tl = _timeline([(t, 1) for t in range(0, 121, 5)])
    slow = _records(1200, 120, 3 * SLO)
    assert [w.within for w in windows(slow, tl, 120, SLO)] == [None, None, False, False]
    lagged = _records(1200, 120, 3 * SLO, lag_ms=[2 * SLO] * 1200)
    ws = windows(lagged, tl, 120, SLO)
    assert [w.within for w in ws] == [None, None, None, None]
    assert "lagged" in ws[3].note
    # a pass with lag is still a pass: lag only inflates client latencies
    fine = _records(1200, 120, SLO, lag_ms=[2 * SLO] * 1200)
    assert [w.within for w in windows(fine, tl, 120, SLO)] == [None, None, True, True]


def test_scale_down_inside_a_short_gap_is_caught_and_a_long_gap_may_release() -> None:
    gaps = burst_gaps(_trace())  # 20 s and 80 s
    held = _timeline([(0, 1), (5, 2), (20, 2), (35, 2), (60, 2), (90, 1), (150, 1)])
    bad, above = scale_downs_in_gaps(held, gaps, 60)
    assert bad == [] and above == 1  # only the 20 s gap is short; the 80 s may release
    dropped = _timeline([(0, 1), (5, 2), (15, 2), (20, 1), (35, 2), (150, 2)])
    bad, _ = scale_downs_in_gaps(dropped, gaps, 60)
    assert bad == [{"gap": [10, 30], "t": 20.0, "from": 2, "to": 1}]


def test_judge_verdicts_and_the_lines_that_print_them() -> None:
    trace = _trace()
    rec = _records(1800, 180, 20.0)
    rec["ok"][7], rec["rejected"][7] = False, True
    rec["latency_ms"][9] = 1.5 * SLO  # served, but not within the SLO
    tl = _timeline([(t, 2 if 5 <= t < 45 else 1) for t in range(0, 181, 5)])
    out = judge(rec, tl, trace, slo_ms=SLO, stabilization_s=60)
    v = out["verdicts"]
    assert v == {
        "no_multi_second_waits": True,
        "rejected_counted": True,
        "replicas_held_between_bursts": True,
    }
    assert out["totals"] == {
        "sent": 1800,
        "served": 1799,
        "served_within_slo": 1798,
        "rejected": 1,
        "failed_other": 0,
    }
    text = "\n".join(verdict_lines(out))
    assert "no multi-second waits: PASS" in text and "rejected 1" in text
    assert len(window_table(out)) == 1 + len(out["windows"])

    dropped = _timeline([(0, 1), (5, 2), (15, 2), (20, 1), (180, 1)])
    assert (
        judge(rec, dropped, trace, slo_ms=SLO, stabilization_s=60)["verdicts"][
            "replicas_held_between_bursts"
        ]
        is False
    )
    flat = _timeline([(t, 1) for t in range(0, 181, 5)])
    nothing = judge(rec, flat, trace, slo_ms=SLO, stabilization_s=60)["verdicts"]
    assert nothing["replicas_held_between_bursts"] is None  # nothing above the floor to hold
    slow = judge(_records(1800, 180, 5 * SLO), flat, trace, slo_ms=SLO, stabilization_s=60)
    assert slow["verdicts"]["no_multi_second_waits"] is False
    assert "FAIL" in verdict_lines(slow)[0]


def test_rejections_are_triton_queue_policy_refusals() -> None:
    assert is_rejection("[503] Request timeout expired")
    assert is_rejection("[503] Exceeds maximum queue size")
    assert not is_rejection("ConnectionRefusedError: [Errno 111]")
    import numpy as np

    ok = np.array([True, False, False, True])
    rej = np.array([False, True, False, True])  # a served request is never a rejection
    report = summarize(np.array([0.1, 0.2, 1.1, 1.2]), np.ones(4), ok, 2.0, rej)
    assert (report["failed"], report["rejected"], report["failed_other"]) == (2, 1, 1)
    assert [row["rejected"] for row in report["timeline"]] == [1, 0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--trace", "nope-no-such"], "nope-no-such"),
        (["--trace", "x.csv", "--duration", "30"], "--duration"),
        (["--trace", "T", "--trace-start", "9999"], "--trace-start"),
        (["--trace", "T", "--trace-start", "0", "--trace-scale", "-1"], "--trace-scale"),
        (["--trace", "T", "--trace-start", "0", "--trace-seconds", "30"], "--trace-seconds"),
    ],
)
def test_demo_trace_input_errors_exit_2_before_anything_starts(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("second,rps\n0,10\n100,0\n200,0\n")
    argv = [str(csv) if a == "T" else a for a in argv]
    assert main(["demo", *argv, "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
