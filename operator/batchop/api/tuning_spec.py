"""The policy's view of a BatchedModel: the bounds and targets `decide()` must respect.

One mapping from the API to `batchop.tuning.types.TuningSpec`, so the operator's tuning
loop and any tool reading a BatchedModel (plan, demo) hand the policy the same numbers.
"""

from __future__ import annotations

from batchop.api.models import BatchedModel
from batchop.tuning.types import TuningSpec


def tuning_spec(
    bm: BatchedModel, prior_batch_latency_ms: tuple[tuple[int, float], ...] = ()
) -> TuningSpec:
    """TuningSpec from the spec. A CPU model (gpus 0) counts as one unit per replica.

    The prior is `prior_batch_latency_ms` if given, else spec.model.latencyProfile.
    """
    spec = bm.spec
    return TuningSpec(
        slo_ms=float(spec.slo.p99_latency_milliseconds),
        max_batch_size=spec.model.max_batch_size,
        min_replicas=spec.scaling.min_replicas,
        max_replicas=spec.scaling.max_replicas,
        min_delay_us=spec.batching.min_queue_delay_microseconds,
        max_delay_us=spec.batching.max_queue_delay_limit_microseconds,
        start_delay_us=spec.batching.max_queue_delay_microseconds,
        start_replicas=spec.scaling.replicas,
        preferred_batch_sizes=tuple(sorted(spec.model.preferred_batch_sizes or ())),
        tune_delay=spec.autotune.queue_delay,
        tune_replicas=spec.autotune.replicas,
        interval_s=float(spec.autotune.interval_seconds),
        scale_down_window_s=float(spec.autotune.scale_down_stabilization_seconds),
        gpus_per_replica=max(1, spec.server.gpus),
        prior_batch_latency_ms=prior_batch_latency_ms or spec.model.profile_points(),
        overload_reject=spec.overload.policy == "Reject",
        queue_timeout_us=spec.overload.queue_timeout_microseconds or None,
        max_queue_size=spec.overload.max_queue_size,
    )
