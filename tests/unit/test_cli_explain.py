"""`batchop explain`: the pure shaping of a BatchedModel and its Events, and the errors of
the thin shell (bad target, no kubeconfig, unreachable API server). The run against a real
API server is tests/integration/test_explain_apiserver.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from batchop.cli.explain import ExplainError, explanation, parse_target, render_text
from batchop.cli.main import main

NOW = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
BM = {
    "metadata": {"name": "resnet", "namespace": "ml", "generation": 3},
    "spec": {
        "slo": {"p99LatencyMilliseconds": 25},
        "scaling": {"replicas": 3, "minReplicas": 1, "maxReplicas": 8},
        "batching": {
            "maxQueueDelayMicroseconds": 500,
            "minQueueDelayMicroseconds": 0,
            "maxQueueDelayLimitMicroseconds": 10000,
        },
        "autotune": {"queueDelay": True, "replicas": True},
    },
    "status": {
        "observedGeneration": 3,
        "replicas": 3,
        "readyReplicas": 2,
        "maxQueueDelayMicroseconds": 1200,
        "metrics": {
            "requestsPerSecond": 950.0,
            "peakRequestsPerSecond": 2400.0,
            "p99LatencyMilliseconds": 31.5,
            "averageBatchSize": 7.9,
            "queueMilliseconds": 0.8,
            "rejectedPerSecond": 0.0,
        },
        "lastDecision": {
            "time": "2026-12-02T00:55:00Z",
            "replicas": 3,
            "maxQueueDelayMicroseconds": 1200,
            "reason": "p99 31.5 ms over the 21 ms margin at 950 req/s: scale up",
        },
        "conditions": [
            {
                "type": "SLOMet",
                "status": "False",
                "reason": "P99AboveSLO",
                "message": "p99 31.5 ms > SLO 25 ms",
                "lastTransitionTime": "2026-12-02T00:55:00Z",
            }
        ],
    },
}


def _event(reason: str, stamp: str, message: str, count: int = 1) -> dict:
    return {
        "type": "Normal",
        "reason": reason,
        "message": message,
        "count": count,
        "lastTimestamp": stamp,
        "metadata": {"creationTimestamp": stamp},
    }


EVENTS = [
    _event("Scaled", "2026-12-02T00:55:00Z", "replicas 2 -> 3"),
    _event("DelayChanged", "2026-12-02T00:40:00Z", "delay 500 -> 1200 us", count=2),
]


def test_explanation_orders_events_and_keeps_the_decision() -> None:
    ex = explanation(BM, EVENTS)
    assert [e["reason"] for e in ex["events"]] == ["DelayChanged", "Scaled"]  # oldest first
    assert ex["events"][0]["count"] == 2
    assert ex["lastDecision"]["reason"].endswith("scale up")
    assert ex["replicas"] == {"desired": 3, "ready": 2, "pods": 3, "min": 1, "max": 8}
    assert ex["queueDelayMicroseconds"]["applied"] == 1200
    assert ex["metrics"]["p99LatencyMilliseconds"] == 31.5
    assert explanation(BM, EVENTS, max_events=1)["events"][0]["reason"] == "Scaled"
    assert explanation(BM, EVENTS, max_events=0)["events"] == []


def test_text_says_what_was_decided_and_why() -> None:
    text = render_text(explanation(BM, EVENTS), NOW)
    assert "BatchedModel ml/resnet (generation 3, observed 3)" in text
    assert "p99 <= 25 ms" in text
    assert "2 ready of 3 desired (bounds 1..8)" in text
    assert "1,200 us applied (bounds 0..10,000 us)" in text
    assert "Last decision: 2026-12-02T00:55:00Z (5m ago)" in text
    assert "why           p99 31.5 ms over the 21 ms margin at 950 req/s: scale up" in text
    assert (
        "rate 950 req/s (busiest scrape interval 2,400 req/s), p99 31.5 ms (SLO 25 ms), "
        "average batch 7.9"
    ) in text
    assert "SLOMet            False    P99AboveSLO: p99 31.5 ms > SLO 25 ms" in text
    assert "DelayChanged: delay 500 -> 1200 us (x2)" in text
    assert text.index("DelayChanged") < text.index("Scaled")


def test_decision_kind_and_prediction_are_shown_when_status_has_them() -> None:
    bm = json.loads(json.dumps(BM))
    bm["status"]["lastDecision"] |= {"kind": "scale-up", "predictedP99Milliseconds": 18.2}
    text = render_text(explanation(bm, []), NOW)
    assert "kind          scale-up" in text and "predicted p99 18.2 ms" in text


def test_a_new_object_without_status_reads_as_such() -> None:
    bare = {
        "metadata": {"name": "new", "namespace": "ml", "generation": 1},
        "spec": {"slo": {"p99LatencyMilliseconds": 50}},
    }
    text = render_text(explanation(bare, []), NOW)
    assert "Last decision: none recorded" in text
    assert "Metrics: none recorded yet" in text
    assert "Conditions: none" in text and "Recent events: none" in text
    assert "autotune      off" in text


@pytest.mark.parametrize(
    ("target", "rule"),
    [
        ("resnet", "expected NAMESPACE/NAME"),
        ("/resnet", "expected NAMESPACE/NAME"),
        ("ml/", "expected NAMESPACE/NAME"),
        ("ML/resnet", "must be a DNS-1123 label"),
        ("ml/Res_net", "must be a DNS-1035 label"),
        ("m" * 64 + "/x", "must be a DNS-1123 label"),
    ],
)
def test_bad_target_is_a_usage_error(
    target: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ExplainError) as err:
        parse_target(target)
    assert err.value.code == 2 and rule in str(err.value)
    assert main(["explain", target]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("batchop explain: ") and rule in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_missing_kubeconfig_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["explain", "ml/resnet", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchop explain: kubeconfig {missing}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_unreachable_api_server_is_a_runtime_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    assert main(["explain", "ml/resnet", "--kubeconfig", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("batchop explain: cannot reach the API server")
    assert len(err.strip().splitlines()) == 1
