"""The BatchedModel → TuningSpec mapping hands the policy the spec's own bounds."""

from __future__ import annotations

from bm_samples import minimal

from batchop.api.models import parse_batched_model
from batchop.api.tuning_spec import tuning_spec


def test_bounds_and_targets_come_from_the_spec() -> None:
    manifest = minimal(
        model={"name": "m", "repository": "/m", "maxBatchSize": 32, "preferredBatchSizes": [16, 8]},
        server={"gpus": 2},
        scaling={"replicas": 3, "minReplicas": 2, "maxReplicas": 6},
        batching={
            "maxQueueDelayMicroseconds": 700,
            "minQueueDelayMicroseconds": 100,
            "maxQueueDelayLimitMicroseconds": 9000,
        },
        slo={"p99LatencyMilliseconds": 25},
        autotune={"queueDelay": False, "intervalSeconds": 15, "scaleDownStabilizationSeconds": 90},
    )
    spec = tuning_spec(parse_batched_model(manifest), prior_batch_latency_ms=((1, 2.0),))
    assert (spec.slo_ms, spec.max_batch_size) == (25.0, 32)
    assert (spec.min_replicas, spec.start_replicas, spec.max_replicas) == (2, 3, 6)
    assert (spec.min_delay_us, spec.start_delay_us, spec.max_delay_us) == (100, 700, 9000)
    assert spec.preferred_batch_sizes == (8, 16)
    assert (spec.tune_delay, spec.tune_replicas, spec.interval_s) == (False, True, 15.0)
    assert spec.gpus_per_replica == 2
    assert spec.scale_down_window_s == 90.0
    assert spec.prior_batch_latency_ms == ((1, 2.0),)


def test_cpu_model_counts_one_unit_per_replica() -> None:
    spec = tuning_spec(parse_batched_model(minimal(server={"gpus": 0})))
    assert spec.gpus_per_replica == 1


def test_latency_profile_and_overload_reach_the_policy_as_the_operator_maps_them() -> None:
    from batchop.controller.autotune import tuning_spec as operator_tuning_spec
    from batchop.tuning.overload import queue_policy

    manifest = minimal(
        model={"name": "m", "repository": "/m", "maxBatchSize": 32, "latencyProfile": [
            {"batchSize": 32, "milliseconds": 12}, {"batchSize": 1, "milliseconds": 4}]},
        batching={"maxQueueDelayLimitMicroseconds": 5000},
        slo={"p99LatencyMilliseconds": 40},
    )
    spec = tuning_spec(parse_batched_model(manifest))
    assert spec.prior_batch_latency_ms == ((1, 4.0), (32, 12.0))
    assert spec.overload_reject and spec.queue_timeout_us is None and spec.max_queue_size == 0
    assert queue_policy(spec).timeout_us == 28_000  # SLO 40 ms - a full batch's 12 ms
    # the operator's mapping (from the raw object) gives the policy the same view
    assert operator_tuning_spec(manifest).prior_batch_latency_ms == spec.prior_batch_latency_ms
    assert queue_policy(operator_tuning_spec(manifest)) == queue_policy(spec)
    given = minimal(overload={"policy": "Reject", "queueTimeoutMicroseconds": 30_000,
                              "maxQueueSize": 4}, slo={"p99LatencyMilliseconds": 40})
    spec = tuning_spec(parse_batched_model(given))
    assert (spec.queue_timeout_us, spec.max_queue_size) == (30_000, 4)
    assert queue_policy(operator_tuning_spec(given)) == queue_policy(spec)
    queued = tuning_spec(parse_batched_model(minimal(overload={"policy": "Queue"})))
    assert not queued.overload_reject and not queue_policy(queued).guards
