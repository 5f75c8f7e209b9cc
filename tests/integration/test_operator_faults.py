"""The tuning loop under two faults, against the real API server (no Triton, no Prometheus):

- the operator killed between deciding and acting: the decision is durable in
  status.lastDecision before anything acts on it, so the next operator applies it, once;
- BatchedModels deleted while the loop ticks over them: a few lines at most, no error storm.

Prometheus is down in both (nothing listens on its URL), so the tuner holds: every decision
and every scale seen here comes from the recorded state, not from a new observation.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
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

PROBLEM = re.compile(r"\[(WARNING|ERROR|CRITICAL)|Traceback")


def tuned_manifest(name: str, ns: str, **kwargs: Any) -> dict[str, Any]:
    bm = bm_manifest(name, ns, **kwargs)
    bm["spec"]["autotune"] = {"queueDelay": True, "replicas": True, "intervalSeconds": 5}
    return bm


def test_decision_recorded_before_a_crash_is_applied_once_after_restart(
    cluster: Any, tmp_path: Path
) -> None:
    cluster.install_crd()
    ns = new_namespace(cluster, "bm-crash")
    dead = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "operator.log"
    first = Operator(cluster, [ns], log, "--prometheus-url", dead).start()
    second: Operator | None = None
    try:
        apply(cluster, tuned_manifest("crashy", ns, gpus=0, replicas=1, max_replicas=4))
        wait_for(
            lambda: condition(get(cluster, ns, "bm", "crashy"), "MetricsAvailable"),
            "the tuner's first tick",
            operator=first,
        )
        first.kill()  # SIGKILL: as if it died right after recording the decision below
        # What the tuner writes first (step 1 of a tick), before scaling or reloading:
        decided = {
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "replicas": 3,
            "maxQueueDelayMicroseconds": 500,
            "reason": "recorded by the operator that was killed before acting",
        }
        cluster.kubectl(
            "patch", "bm", "crashy", "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"lastDecision": decided}}),
        )  # fmt: skip
        before = get(cluster, ns, "deployment", "crashy")
        assert before["spec"]["replicas"] == 1
        tuned_before = [e for e in events(cluster, ns, "crashy") if e["reason"] == "Tuned"]

        second = Operator(cluster, [ns], log, "--prometheus-url", dead).start()
        wait_for(
            lambda: get(cluster, ns, "deployment", "crashy")["spec"]["replicas"] == 3,
            "the restarted operator to apply the recorded decision",
            operator=second,
        )
        time.sleep(12)  # two more ticks at 5 s: nothing may act again
        after = get(cluster, ns, "deployment", "crashy")
        assert after["spec"]["replicas"] == 3
        # One spec change (1 -> 3): no second scale, no undo by a reconcile.
        assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
        bm = get(cluster, ns, "bm", "crashy")
        assert bm["status"]["lastDecision"] == decided  # not decided again
        tuned_after = [e for e in events(cluster, ns, "crashy") if e["reason"] == "Tuned"]
        assert len(tuned_after) == len(tuned_before)
        assert second.alive() and second.healthy()
    finally:
        first.stop()
        if second is not None:
            second.stop()
        delete_namespace(cluster, ns)


def test_models_deleted_while_ticking_cause_no_error_storm(cluster: Any, tmp_path: Path) -> None:
    cluster.install_crd()
    ns = new_namespace(cluster, "bm-gone")
    n = 6
    dead = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "operator.log"
    op = Operator(cluster, [ns], log, "--prometheus-url", dead, "--log-format", "plain").start()
    try:
        names = [f"gone{i}" for i in range(n)]
        for name in names:
            apply(cluster, tuned_manifest(name, ns, gpus=0, replicas=1))

        def all_ticked() -> bool:
            listed = cluster.kubectl_json("get", "bm", "-n", ns)["items"]
            return sum(bool(condition(bm, "MetricsAvailable")) for bm in listed) == n

        wait_for(all_ticked, f"the tuner to tick over all {n} models", operator=op)
        time.sleep(3)  # land the deletes somewhere inside the 5 s tick cycle
        mark = len(log.read_text(errors="replace").splitlines())
        cluster.kubectl("delete", "bm", "-n", ns, *names, "--wait=false")
        wait_for(
            lambda: not cluster.kubectl_json("get", "bm", "-n", ns)["items"],
            "the models to be gone",
            operator=op,
        )
        time.sleep(15)  # three more ticks after they are gone
        lines = log.read_text(errors="replace").splitlines()[mark:]
        problems = [line for line in lines if PROBLEM.search(line)]
        # At most one line per deleted model (a write racing its deletion), none per tick.
        assert len(problems) <= n, "\n".join(problems)
        assert not any("Traceback" in line or "tick failed" in line for line in problems)
        assert op.alive() and op.healthy()
    finally:
        op.stop()
        delete_namespace(cluster, ns)
