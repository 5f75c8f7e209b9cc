"""The tuning loop's fault paths against the real API server (no Triton, no Prometheus here):
Prometheus away → hold with MetricsAvailable=False, no scaling on missing data; a pod whose
Triton does not answer → its reload fails, is reported once, retried, and named in the
Degraded condition; nothing crashes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from operator_harness import (
    Operator,
    apply,
    bm_manifest,
    condition,
    delete_namespace,
    events,
    free_port,
    get,
    new_namespace,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_prometheus_down_holds_and_unreachable_pods_are_reported(
    cluster: Any, tmp_path: Path
) -> None:
    cluster.install_crd()
    ns = new_namespace(cluster, "bm-tune")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: Prometheus is down
    op = Operator(cluster, [ns], tmp_path / "operator.log", "--prometheus-url", dead).start()
    try:
        bm = bm_manifest("tuned", ns, replicas=2)
        bm["spec"]["autotune"] = {"queueDelay": True, "replicas": True, "intervalSeconds": 5}
        apply(cluster, bm)

        def metrics_unavailable() -> dict[str, Any] | None:
            got = get(cluster, ns, "bm", "tuned")
            return got if condition(got, "MetricsAvailable").get("status") == "False" else None

        got = wait_for(metrics_unavailable, "MetricsAvailable=False", operator=op)
        assert "Prometheus unavailable" in condition(got, "MetricsAvailable")["message"]
        assert condition(got, "SLOMet")["status"] == "Unknown"
        # The operator's own conditions are still there next to the tuner's.
        assert condition(got, "Ready") and condition(got, "Degraded")

        # KWOK pods run no Triton: each reload fails, is reported, and the loop goes on.
        def reload_failed() -> list[Any]:
            return [e for e in events(cluster, ns, "tuned") if e["reason"] == "ReloadFailed"]

        failed = wait_for(reload_failed, "a ReloadFailed event", operator=op)
        assert failed[0]["type"] == "Warning" and "127.10." in failed[0]["message"]

        def laggards_named() -> dict[str, Any]:
            cond = condition(get(cluster, ns, "bm", "tuned"), "Degraded")
            return cond if cond.get("reason") == "DelayNotApplied" else {}

        degraded = wait_for(laggards_named, "Degraded=DelayNotApplied", operator=op)
        assert degraded["status"] == "True" and "tuned-" in degraded["message"]
        wait_for(
            lambda: condition(get(cluster, ns, "bm", "tuned"), "Ready").get("status") == "True",
            "Ready with 2 replicas",
            operator=op,
        )
        # A few ticks (5 s each) later: no decision on missing data, nothing scaled.
        time.sleep(12)
        got = get(cluster, ns, "bm", "tuned")
        assert condition(got, "MetricsAvailable")["status"] == "False"
        assert "lastDecision" not in got["status"]
        assert get(cluster, ns, "deployment", "tuned")["spec"]["replicas"] == 2
        assert op.alive() and op.healthy()
        # A failure streak is reported once per pod, not once per tick.
        pods = [e["message"].split(":")[0] for e in reload_failed()]
        assert len(pods) == len(set(pods)) <= 2
    finally:
        op.stop()
        delete_namespace(cluster, ns)
