"""Faults under traffic, short: bench/chaos.py's run cut to a few minutes (issue 27, item 1).

The same code as the 15-minute bench (batchop_dev.chaos.Run), on a cluster of its own: the
faults delete a node and restart kube-apiserver, which the session's cluster must outlive.
Two `batchop run --leader-elect`, the cpu-demo model kept at two replicas or more, azure-code
replayed; one after the other, a Triton pod SIGKILLed, the leader operator SIGKILLed,
Prometheus restarted, kube-apiserver restarted, a KWOK node deleted with its pods, the
Prometheus Operator restarted.

Asserted, from what the run recorded (batchop_dev.chaos.judge):
- no request failed beyond those in flight at a killed pod, or at the deleted node's pods,
  when their server went down (the guard's refusals apart);
- no decision applied twice (no more `Tuned` Events than decisions);
- after each fault, status and children are consistent again before the next fault: here
  within the fault spacing (about 27 s), stricter than the bench's 60 s.
Not judged here: the operator's RSS growth from minute 5 on (the run is shorter than five
minutes; bench/results/chaos.md reports it), nor the seconds until p99 is back within the SLO
(reported, no target).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from batchop_dev.chaos import FAULTS, Run, beyond_in_flight, judge

pytestmark = pytest.mark.e2e

MINUTES = 3.5
CLUSTER = "batchop-chaos-e2e"


def test_faults_under_traffic_lose_no_request_and_reconcile(pytestconfig: pytest.Config) -> None:
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def say(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[chaos] {message}")

    run = Run(MINUTES, say, cluster_name=CLUSTER)
    got = run.go()
    result = judge(
        run.faults,
        run.samples,
        got["report"]["records"],
        got["slo_ms"],
        got["end_s"],
        len(run.decision_times),
        got["tuned_events"],
    )
    rows = result["faults"]
    for row in rows:
        say(json.dumps({k: v for k, v in row.items() if not isinstance(v, dict | list)}))
    assert [r["name"] for r in rows] == [name for _, name in FAULTS], "every fault was injected"
    assert got["report"]["requests"] > 1000, "the load ran"
    # Requests in flight at a killed server (the pod's, the node's pods') may fail; no other.
    beyond: list[dict[str, Any]] = [r for r in rows if beyond_in_flight(r) > 0]
    assert not beyond, f"requests failed beyond those in flight at a killed server: {beyond}"
    assert result["targets"]["applied_twice"] == 0, (
        f"{result['tuned_events']} Tuned Events for {result['decisions']} decisions"
    )
    late = [(r["name"], r["reconciled_s"]) for r in rows if r["reconciled_s"] is None]
    tail = [s for s in run.samples if s["t"] >= rows[-1]["t"]][-6:]
    assert not late, (
        f"status and children not consistent again before the next fault: {late}; "
        f"the last samples: {tail}"
    )
