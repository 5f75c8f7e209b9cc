"""The pure half of the Prometheus observer: queries, parsing, assembling, Observation."""

from __future__ import annotations

import math

import pytest

from batchop.observe.prometheus import (
    BM_LABEL,
    PART_NAMES,
    ObservationParts,
    assemble,
    build_observation,
    build_queries,
    parse_vector,
    why_no_metrics,
)


def _series(ns: str | None, bm: str | None, value: str, **extra: str) -> dict:
    metric = dict(extra)
    if ns is not None:
        metric["namespace"] = ns
    if bm is not None:
        metric[BM_LABEL] = bm
    return {"metric": metric, "value": [1700000000.0, value]}


def test_one_query_per_metric_covering_all_models() -> None:
    queries = build_queries("30s")
    # Every part of an Observation has a query, plus freshness and target count.
    assert set(PART_NAMES) <= set(queries)
    for name, promql in queries.items():
        # Grouped by namespace and BatchedModel: one query answers for every model.
        assert f"by (namespace, {BM_LABEL})" in promql, name
        # No query filters to a single model.
        assert f'{BM_LABEL}="' not in promql, name
    assert "[30s]" in queries["rps"]
    assert "max by" in queries["p99_ms"] and 'quantile="0.99"' in queries["p99_ms"]
    assert "nv_inference_exec_count" in queries["avg_batch"]
    # refusals by the queue policy: Triton 2.51's failure counter, reason REJECTED
    assert 'nv_inference_request_failure{reason="REJECTED"}[30s]' in queries["rejected_rps"]


def test_query_count_does_not_depend_on_models() -> None:
    assert len(build_queries("1m")) == len(build_queries("5m"))


def test_parse_vector_keys_by_namespace_and_model_and_drops_nan() -> None:
    result = [
        _series("prod", "resnet", "12.5"),
        _series("prod", "bert", "NaN"),
        _series("dev", "resnet", "+Inf"),
        _series(None, "orphan", "1"),  # no namespace: not a BatchedModel's series
        _series("prod", None, "1"),
    ]
    parsed = parse_vector(result)
    assert parsed == {("prod", "resnet"): 12.5, ("prod", "bert"): None, ("dev", "resnet"): None}


def test_assemble_lists_missing_parts_per_model() -> None:
    per_metric = {
        "rps": {("ns", "a"): 100.0, ("ns", "b"): 3.0},
        "avg_batch": {("ns", "a"): 4.0},
        "queue_ms": {("ns", "a"): 1.5},
        "compute_ms": {("ns", "a"): 6.0},
        "p99_ms": {("ns", "a"): 20.0, ("ns", "b"): None},
        "pending": {("ns", "a"): 0.0},
        "rejected_rps": {("ns", "a"): 7.5},
        "age_s": {("ns", "a"): 2.0, ("ns", "b"): 3.0},
        "scraped_pods": {("ns", "a"): 2.0},
    }
    parts = assemble(per_metric)
    assert parts[("ns", "a")].missing == ()
    assert parts[("ns", "a")].scraped_pods == 2
    assert parts[("ns", "a")].avg_batch == 4.0
    assert parts[("ns", "a")].rejected_rps == 7.5
    b = parts[("ns", "b")]
    assert b.rps == 3.0
    assert set(b.missing) == {"avg_batch", "queue_ms", "compute_ms", "p99_ms", "pending"}
    assert b.scraped_pods == 0


def test_no_target_and_targets_down_say_different_things_to_check() -> None:
    """A PodMonitor no Prometheus uses (or one keeping a port the pods lack) leaves no
    target at all; pods whose Triton does not answer leave targets that are down."""
    per_metric = {
        "targets": {("ns", "down"): 2.0, ("ns", "up"): 1.0},
        "scraped_pods": {("ns", "up"): 1.0},
        "rps": {("ns", "up"): 5.0},
    }
    parts = assemble(per_metric)
    nothing = why_no_metrics(None)
    assert nothing is not None and "PodMonitor" in nothing and "'metrics'" in nothing
    down = why_no_metrics(parts[("ns", "down")])
    assert down is not None and "2 target(s)" in down and "down" in down
    assert parts[("ns", "down")].targets == 2
    assert why_no_metrics(parts[("ns", "up")]) is None
    # Series without a target count (as a test double builds them) are metrics all the same.
    assert why_no_metrics(ObservationParts(rps=1.0, p99_ms=3.0)) is None


def test_build_observation_from_fresh_parts() -> None:
    parts = ObservationParts(
        rps=250.0,
        avg_batch=3.0,
        queue_ms=1.0,
        compute_ms=5.0,
        p99_ms=18.0,
        pending=2.0,
        rejected_rps=1.5,
        age_s=4.0,
        scraped_pods=2,
    )
    obs = build_observation(
        parts,
        time_s=100.0,
        replicas=3,
        ready_replicas=2,
        delay_us=800,
        max_age_s=30.0,
        schedulable_headroom=1,
    )
    assert (obs.rps, obs.avg_batch, obs.p99_ms, obs.pending) == (250.0, 3.0, 18.0, 2.0)
    assert obs.rejected_rps == 1.5
    assert (obs.replicas, obs.ready_replicas, obs.delay_us) == (3, 2, 800)
    assert obs.starting_replicas == 1 and obs.schedulable_headroom == 1
    assert obs.age_s == 4.0 and obs.complete


@pytest.mark.parametrize("age", [31.0, None])
def test_stale_or_undated_data_is_dropped(age: float | None) -> None:
    parts = ObservationParts(rps=250.0, avg_batch=3.0, compute_ms=5.0, p99_ms=18.0, age_s=age)
    obs = build_observation(
        parts, time_s=1.0, replicas=1, ready_replicas=1, delay_us=0, max_age_s=30.0
    )
    assert obs.rps is None and obs.p99_ms is None and not obs.complete
    assert obs.age_s == (age if age is not None else math.inf)


def test_absent_model_gives_empty_observation() -> None:
    obs = build_observation(None, time_s=1.0, replicas=2, ready_replicas=0, delay_us=500)
    assert not obs.complete and obs.age_s == math.inf and obs.replicas == 2


def test_observer_times_each_query_and_counts_the_failed_one() -> None:
    """Against a port nothing listens on: the first query fails, is timed and counted."""
    import socket

    from batchop.metrics import METRICS
    from batchop.observe.prometheus import PrometheusObserver, PrometheusUnavailable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    observer = PrometheusObserver(f"http://127.0.0.1:{port}", timeout_s=1)
    first = next(iter(observer.queries))

    def sample(name: str) -> float:
        return METRICS.registry.get_sample_value(name, {"query": first}) or 0.0

    errors, timed = (
        sample("batchop_prometheus_query_errors_total"),
        sample("batchop_prometheus_query_duration_seconds_count"),
    )
    with pytest.raises(PrometheusUnavailable):
        observer.observe()
    assert sample("batchop_prometheus_query_errors_total") == errors + 1
    assert sample("batchop_prometheus_query_duration_seconds_count") == timed + 1
