"""`batchop explain` against a real API server: a BatchedModel given a status through the
status subresource and an Event about it, read back through the kubeconfig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import bm_manifest, delete_namespace, new_namespace

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
REASON = "p99 31.5 ms over the 21.2 ms margin at 950 req/s; 3 replicas predict 17.9 ms"


@pytest.fixture(scope="module")
def live(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    try:
        cluster = request.getfixturevalue("cluster")
    except Exception as exc:  # no kwok/etcd binaries, no ports: say so, do not pass
        pytest.skip(
            f"local cluster could not start: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        )
    cluster.install_crd()
    ns = new_namespace(cluster, "explain")
    yield cluster, ns
    delete_namespace(cluster, ns)


def _explain(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "batchop",
            "explain",
            *args,
            "--kubeconfig",
            str(cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_explain_reads_status_and_events(live: tuple[Any, str]) -> None:
    cluster, ns = live
    cluster.kubectl("apply", "-f", "-", input=json.dumps(bm_manifest("resnet", ns)))
    status = {
        "status": {
            "observedGeneration": 1,
            "replicas": 3,
            "readyReplicas": 2,
            "maxQueueDelayMicroseconds": 1200,
            "metrics": {
                "requestsPerSecond": 950,
                "p99LatencyMilliseconds": 31.5,
                "averageBatchSize": 7.9,
                "queueMilliseconds": 0.8,
                "rejectedPerSecond": 0,
            },
            "lastDecision": {
                "time": "2026-12-02T00:55:00Z",
                "kind": "scale-up",
                "replicas": 3,
                "maxQueueDelayMicroseconds": 1200,
                "predictedP99Milliseconds": 17.9,
                "reason": REASON,
            },
            "conditions": [
                {
                    "type": "SLOMet",
                    "status": "False",
                    "reason": "P99AboveSLO",
                    "message": "p99 31.5 ms > SLO 50 ms margin",
                    "lastTransitionTime": "2026-12-02T00:55:00Z",
                }
            ],
        }
    }
    cluster.kubectl(
        "patch",
        "batchedmodel",
        "resnet",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    uid = cluster.kubectl_json("get", "batchedmodel", "resnet", "-n", ns)["metadata"]["uid"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "resnet.scaled", "namespace": ns},
        "involvedObject": {
            "apiVersion": "batchop.io/v1alpha1",
            "kind": "BatchedModel",
            "name": "resnet",
            "namespace": ns,
            "uid": uid,
        },
        "type": "Normal",
        "reason": "Scaled",
        "message": "replicas 2 -> 3 (p99 over margin)",
        "firstTimestamp": "2026-12-02T00:55:00Z",
        "lastTimestamp": "2026-12-02T00:55:00Z",
        "count": 1,
        "source": {"component": "batchop"},
    }
    other = {
        **event,
        "metadata": {"name": "other.scaled", "namespace": ns},
        "involvedObject": {**event["involvedObject"], "name": "other"},
        "message": "not about resnet",
    }
    for obj in (event, other):
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))

    text = _explain(cluster, f"{ns}/resnet")
    assert text.returncode == 0, text.stderr
    assert f"BatchedModel {ns}/resnet" in text.stdout
    assert "2 ready of 1 desired" in text.stdout  # spec.scaling.replicas is 1 in the manifest
    assert f"why           {REASON}" in text.stdout
    assert "kind          scale-up" in text.stdout
    assert "predicted p99 17.9 ms" in text.stdout
    assert "rate 950 req/s, p99 31.5 ms (SLO 50 ms)" in text.stdout
    assert "SLOMet            False    P99AboveSLO" in text.stdout
    assert "Scaled: replicas 2 -> 3 (p99 over margin)" in text.stdout
    assert "not about resnet" not in text.stdout

    as_yaml = _explain(cluster, f"{ns}/resnet", "-o", "yaml")
    as_json = _explain(cluster, f"{ns}/resnet", "-o", "json")
    assert as_yaml.returncode == as_json.returncode == 0, as_yaml.stderr + as_json.stderr
    data = json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout) == data
    assert data["lastDecision"]["reason"] == REASON
    assert data["metrics"]["p99LatencyMilliseconds"] == 31.5
    assert [e["reason"] for e in data["events"]] == ["Scaled"]


def test_explain_of_a_missing_object_is_one_line(live: tuple[Any, str]) -> None:
    cluster, ns = live
    run = _explain(cluster, f"{ns}/absent")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.strip() == f"batchop explain: BatchedModel {ns}/absent not found"
