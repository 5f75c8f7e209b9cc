"""The demo's pure parts: the stepped trace, the live table, decisions, the report files."""

from __future__ import annotations

import json
from pathlib import Path

from batchop_dev.local.demo import (
    STEPS,
    TABLE_HEADER,
    DemoResult,
    Sample,
    _write_report,
    demo_trace,
    main_exit_code,
    new_decisions,
    table_row,
)


def test_trace_steps_up_then_down_within_duration() -> None:
    trace = demo_trace(100.0)
    assert trace.end == 100.0
    rates = [trace.rate_at(f * 100.0 + 0.1) for f, _ in STEPS]
    peak = rates.index(max(rates))
    assert 0 < peak < len(rates) - 1  # up from the first step, down after the peak
    assert rates[-1] < max(rates) and rates[0] < max(rates)


def test_table_row_aligns_with_header_and_shows_missing() -> None:
    s = Sample(
        t=12.0,
        rps=None,
        p99_ms=18.25,
        slo_ms=40,
        delay_us=500,
        replicas=2,
        ready=1,
        avg_batch=None,
        offered_rps=320,
    )
    row = table_row(s)
    assert len(row.split()) == len(TABLE_HEADER.split())
    assert "18.2" in row and row.split()[2] == "-"


def test_new_decisions_records_each_last_decision_once() -> None:
    seen: set[str] = set()
    status = {"lastDecision": {"time": "t1", "replicas": 2, "reason": "p99 over SLO"}}
    assert new_decisions(status, seen) == [status["lastDecision"]]
    assert new_decisions(status, seen) == []
    assert new_decisions({}, seen) == []
    status2 = {"lastDecision": {"time": "t2", "replicas": 1, "reason": "load fell"}}
    assert len(new_decisions(status2, seen)) == 1


def test_report_files_and_exit_code(tmp_path: Path) -> None:
    result = DemoResult()
    assert main_exit_code(result) == 1  # no samples: not a real run
    for i, (rps, p99) in enumerate([(None, None), (55.0, 12.0), (300.0, 31.5)]):
        result.timeline.append(
            Sample(
                t=5.0 * i,
                rps=rps,
                p99_ms=p99,
                slo_ms=40,
                delay_us=500,
                replicas=1,
                ready=1,
                avg_batch=1.5,
                offered_rps=40,
            )
        )
    result.decisions.append({"time": "x", "reason": "r", "t": 5.0})
    _write_report(result, tmp_path, lambda _: None)
    report = json.loads((tmp_path / "report.json").read_text())
    keys = {"t", "rps", "p99_ms", "slo_ms", "delay_us", "replicas", "ready", "avg_batch"}
    assert keys <= set(report["timeline"][0])
    assert report["timeline"][2]["rps"] == 300.0 and report["decisions"][0]["reason"] == "r"
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert main_exit_code(result) == 0
