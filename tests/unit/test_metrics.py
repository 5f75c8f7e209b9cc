"""The operator's /metrics: what batchop run exports, read back over real HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from batchop.metrics import OperatorMetrics, reason_label, start_metrics_server


def scrape(metrics: OperatorMetrics) -> dict[tuple[str, frozenset], float]:
    server, thread = start_metrics_server("127.0.0.1", 0, metrics)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def bm(**extra: str) -> frozenset:
    return frozenset({"namespace": "ml", "batchedmodel": "resnet", **extra}.items())


def test_decisions_gauges_and_errors_are_served() -> None:
    m = OperatorMetrics(process_collectors=False)
    m.record_decision("ml", "resnet", "scale-up", "p99 61.2ms over SLO 50ms", when=1000.0)
    m.record_decision("ml", "resnet", "scale-up", "p99 75.0ms over SLO 50ms", when=1030.0)
    m.record_decision("ml", "resnet", "delay-down", "queue 3.1ms of 50ms budget")
    m.set_state("ml", "resnet", applied_delay_us=800, desired_replicas=3, ready_replicas=2)
    m.set_state("ml", "resnet", slo_ms=50)
    m.record_reconcile_error("ml", "resnet", "apply")
    m.set_condition("ml", "resnet", "SLOMet", False)
    m.set_condition("ml", "resnet", "CapacityLimited", True)
    with m.time_tick():
        pass
    with pytest.raises(RuntimeError), m.time_query("p99"):
        raise RuntimeError("prometheus down")
    samples = scrape(m)

    reason = reason_label("p99 61.2ms over SLO 50ms")
    assert samples[("batchop_decisions_total", bm(kind="scale-up", reason=reason))] == 2
    assert (
        samples[
            (
                "batchop_decisions_total",
                bm(kind="delay-down", reason=reason_label("queue 3.1ms of 50ms budget")),
            )
        ]
        == 1
    )
    assert samples[("batchop_last_decision_timestamp_seconds", bm())] > 1030.0
    assert samples[("batchop_applied_queue_delay_microseconds", bm())] == 800
    assert samples[("batchop_desired_replicas", bm())] == 3
    assert samples[("batchop_ready_replicas", bm())] == 2
    assert samples[("batchop_slo_p99_milliseconds", bm())] == 50
    assert samples[("batchop_reconcile_errors_total", bm(stage="apply"))] == 1
    assert samples[("batchop_condition", bm(type="SLOMet"))] == 0
    assert samples[("batchop_condition", bm(type="CapacityLimited"))] == 1
    assert samples[("batchop_tick_duration_seconds_count", frozenset())] == 1
    q = frozenset({"query": "p99"}.items())
    assert samples[("batchop_prometheus_query_duration_seconds_count", q)] == 1
    assert samples[("batchop_prometheus_query_errors_total", q)] == 1


def test_forget_drops_only_that_models_series() -> None:
    m = OperatorMetrics(process_collectors=False)
    for name in ("resnet", "bert"):
        m.record_decision("ml", name, "scale-up", "load")
        m.set_state("ml", name, applied_delay_us=100, desired_replicas=1)
        m.record_reconcile_error("ml", name, "tick")
        m.set_condition("ml", name, "Ready", True)
    m.forget("ml", "resnet")
    names = {dict(labels).get("batchedmodel") for _, labels in scrape(m)}
    assert "resnet" not in names
    assert "bert" in names


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("p99 61.2ms over SLO 50ms", "p99 80ms over SLO 45.5ms"),
        ("rate 1,200 req/s needs 3 replicas", "rate 80 req/s needs 1 replicas"),
        ("delay -1e3us", "delay 5us"),
    ],
)
def test_reason_label_folds_figures_into_one_series(a: str, b: str) -> None:
    assert reason_label(a) == reason_label(b)


def test_reason_label_keeps_words_with_digits() -> None:
    assert reason_label("p99 61.2ms over SLO 50ms") == "p99 #ms over SLO #ms"


def test_reason_label_is_bounded_and_never_empty() -> None:
    assert len(reason_label("word " * 100)) <= 80
    assert reason_label("   ") == "unspecified"
    assert reason_label("slo met") != reason_label("capacity limited")


def test_observe_model_sets_gauges_from_spec_and_status() -> None:
    m = OperatorMetrics(process_collectors=False)
    bm_obj = {
        "metadata": {"namespace": "ml", "name": "resnet"},
        "spec": {
            "model": {"name": "resnet", "repository": "/models", "maxBatchSize": 8},
            "scaling": {"replicas": 3},
            "batching": {"maxQueueDelayMicroseconds": 500},
            "slo": {"p99LatencyMilliseconds": 40},
        },
        "status": {
            "readyReplicas": 2,
            "maxQueueDelayMicroseconds": 700,
            "metrics": {"rejectedPerSecond": 12.5},
            "lastDecision": {"maxQueueDelayMicroseconds": 900, "replicas": 3},
            "conditions": [
                {"type": "SLOMet", "status": "True"},
                {"type": "CapacityLimited", "status": "False"},
                {"type": "MetricsAvailable", "status": "Unknown"},
            ],
        },
    }
    m.observe_model(bm_obj)
    samples = scrape(m)
    assert samples[("batchop_desired_replicas", bm())] == 3
    assert samples[("batchop_ready_replicas", bm())] == 2
    assert samples[("batchop_applied_queue_delay_microseconds", bm())] == 700
    assert samples[("batchop_desired_queue_delay_microseconds", bm())] == 900
    assert samples[("batchop_slo_p99_milliseconds", bm())] == 40
    assert samples[("batchop_condition", bm(type="SLOMet"))] == 1
    assert samples[("batchop_condition", bm(type="CapacityLimited"))] == 0
    assert ("batchop_condition", bm(type="MetricsAvailable")) not in samples
    assert samples[("batchop_rejected_requests_per_second", bm())] == 12.5
    # the default guard: Reject past half the 40 ms SLO (no profile), at least 21 ms
    assert samples[("batchop_queue_timeout_microseconds", bm())] == 21_000
    bm_obj["spec"]["overload"] = {"policy": "Queue"}
    m.observe_model(bm_obj)
    assert scrape(m)[("batchop_queue_timeout_microseconds", bm())] == 0


def test_observe_model_without_status_uses_the_spec_and_skips_the_rest() -> None:
    m = OperatorMetrics(process_collectors=False)
    m.observe_model(
        {
            "metadata": {"namespace": "ml", "name": "resnet"},
            "spec": {"batching": {"maxQueueDelayMicroseconds": 250}},
        }
    )
    samples = scrape(m)
    assert samples[("batchop_desired_queue_delay_microseconds", bm())] == 250
    assert ("batchop_ready_replicas", bm()) not in samples


@pytest.mark.parametrize("tuned", [True, False])
def test_observe_model_desired_knobs_follow_the_decision_only_when_tuned(tuned: bool) -> None:
    m = OperatorMetrics(process_collectors=False)
    m.observe_model(
        {
            "metadata": {"namespace": "ml", "name": "resnet"},
            "spec": {
                "scaling": {"replicas": 1},
                "batching": {"maxQueueDelayMicroseconds": 250},
                "autotune": {"queueDelay": tuned, "replicas": tuned},
            },
            "status": {"lastDecision": {"maxQueueDelayMicroseconds": 900, "replicas": 4}},
        }
    )
    samples = scrape(m)
    assert samples[("batchop_desired_replicas", bm())] == (4 if tuned else 1)
    assert samples[("batchop_desired_queue_delay_microseconds", bm())] == (900 if tuned else 250)
