"""`batchop demo` end to end, short: its report must hold real samples from real Triton.

Runs the demo on the session's cluster and stack (the same code path as `batchop demo`, minus
creating its own cluster) with a 60 s load, then checks report.json, report.png, and the
batch curve measured after the load against the one the operator learned. 60 s, not 40: the
demo's model has no latency profile, so the tuner acts only once a settled tick with traffic
gave it a first curve point, and the 40 s run often ended before its first decision
(a visible skip in about half the runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchop_dev.local.demo import curve_gaps, run_demo
from batchop_dev.local.triton.calibrate import MAX_SEND_LAG_MS

pytestmark = pytest.mark.e2e

DURATION_S = 60.0


@pytest.mark.parametrize("model", ["sleep", "mlp"])
def test_demo_report_has_real_samples(cluster: Any, stack: Any, tmp_path: Path, model: str) -> None:
    lines: list[str] = []
    result = run_demo(
        duration_s=DURATION_S,
        report_dir=tmp_path,
        sample_s=4.0,
        cluster=cluster,
        stack=stack,
        say=lines.append,
        model=model,
    )
    assert "interrupted" not in result.notes, "\n".join(lines)
    report = json.loads((tmp_path / "report.json").read_text())
    timeline = report["timeline"]
    assert len(timeline) >= 5, "\n".join(lines)
    served = [s for s in timeline if (s["rps"] or 0) > 0 and (s["p99_ms"] or 0) > 0]
    assert served, f"no sample with requests served and a p99: {timeline}"
    assert all(s["slo_ms"] == 40 for s in timeline)  # examples/cpu-demo.yaml's
    assert max(s["ready"] for s in timeline) >= 1
    assert report["load"]["ok"] > 0
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert len(report["summary"]["steps"]) == 4
    # The batch curve, measured on a pod after the load.
    curves = report["summary"]["curves"]
    measured = curves["measured"]
    assert measured is not None, curves
    if model == "sleep":
        # At the demo's batch limit of 2 it cannot run faster than the profile it sleeps.
        assert [b for b, _ in measured] == [1.0, 2.0]
        assert measured[0][1] >= 4.0 and measured[1][1] >= 4.125, measured
    else:
        # Real compute batches: a batch of 32 costs far less per inference than 32 of one
        # (about 0.14x here; half is the bound a noisy machine cannot break).
        (b1, ms1), (top, ms_top) = measured[0], measured[-1]
        assert b1 == 1.0 and top == 32.0, measured
        assert ms_top / top <= 0.5 * ms1, measured
    assert (tmp_path / "curves.png").stat().st_size > 5_000
    # What the operator learned under the load is within issue 26's 15% of it, where it
    # learned (a curve learned on a starved machine measures the machine: not judged then).
    # Not for the MLP: its compute shares the two cores with the load generator during the
    # load and not after it, so the gap varies from run to run (6% to 24% seen); printed,
    # not judged.
    gaps = curve_gaps(curves)
    if model == "sleep" and gaps and report["load"]["send_lag_p99_ms"] <= MAX_SEND_LAG_MS:
        assert all(abs(gap) <= 0.15 for _, gap in gaps), (gaps, curves)
    # The operator tunes; even 60 s is too short to require a decision. Without one, the report
    # must say so, and the decision counting is not judged (a visible skip, not a pass).
    changes = report["summary"]["changes"]
    if not report["decisions"]:
        assert any("no tuning decisions" in n for n in report["notes"]), report["notes"]
        assert changes == {"delay": 0, "replicas": 0}
        pytest.skip(
            f"demo: no tuning decision in the {DURATION_S:g} s run, decision counts not judged"
        )
    assert changes["delay"] + changes["replicas"] >= 1
    assert changes["delay"] + changes["replicas"] <= 2 * len(report["decisions"])
