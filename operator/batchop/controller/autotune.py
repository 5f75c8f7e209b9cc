"""The tuning loop's pure parts: desired delay, which pods need a reload, and the status the
tuner writes. No I/O; `tuning_loop.py` is the shell. The BatchedModel -> TuningSpec mapping
is `batchop.api.tuning_spec.manifest_tuning_spec`, shared with the simulator and plan.

Durable intent: a decision is recorded in `status.lastDecision` (replicas and delay) before
anything acts on it. The Deployment is rendered from it (reconcile.tuned_replicas) and each
ready pod is reloaded until its annotation `batchop.io/max-queue-delay-us` matches it (and
`batchop.io/queue-policy` matches spec.overload), so an operator killed between deciding and
acting finishes the same action after a restart, and never acts twice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from batchop.api.constants import ANNOTATION_DELAY, ANNOTATION_QUEUE_POLICY, PORT_HTTP
from batchop.api.models import AutotuneSpec, BatchingSpec
from batchop.api.tuning_spec import manifest_tuning_spec
from batchop.controller.status import Condition, format_time, merge_conditions
from batchop.tuning.overload import QueuePolicy, queue_policy
from batchop.tuning.persist import learned
from batchop.tuning.policy import stale_after_s
from batchop.tuning.types import Decision, Observation, TuningSpec


def _default(section: type[Any], field: str) -> Any:
    return section.model_fields[field].default


# The API's defaults, for the reads below that run for every model on every poll and so
# skip the full parse `tuning_spec` does (the API server fills these in anyway).
TUNE_DELAY = _default(AutotuneSpec, "queue_delay")
TUNE_REPLICAS = _default(AutotuneSpec, "replicas")
INTERVAL_S = _default(AutotuneSpec, "interval_seconds")
DELAY_US = _default(BatchingSpec, "max_queue_delay_microseconds")
MIN_DELAY_US = _default(BatchingSpec, "min_queue_delay_microseconds")
MAX_DELAY_US = _default(BatchingSpec, "max_queue_delay_limit_microseconds")


def _spec(bm: Mapping[str, Any], *path: str, default: Any = None) -> Any:
    node: Any = bm.get("spec") or {}
    for key in path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return default
        node = node[key]
    return node


def tunes(bm: Mapping[str, Any]) -> bool:
    """Whether the tuner has anything to do for this BatchedModel."""
    return bool(_spec(bm, "autotune", "queueDelay", default=TUNE_DELAY)) or bool(
        _spec(bm, "autotune", "replicas", default=TUNE_REPLICAS)
    )


def interval_s(bm: Mapping[str, Any]) -> float:
    """Seconds between this model's tuning decisions."""
    return float(_spec(bm, "autotune", "intervalSeconds", default=INTERVAL_S))


def desired_delay(bm: Mapping[str, Any]) -> int:
    """The delay every ready pod should run: the tuner's decision, else the spec's value."""
    spec_delay = int(_spec(bm, "batching", "maxQueueDelayMicroseconds", default=DELAY_US))
    if not _spec(bm, "autotune", "queueDelay", default=TUNE_DELAY):
        return spec_delay
    decided = ((bm.get("status") or {}).get("lastDecision") or {}).get("maxQueueDelayMicroseconds")
    if not isinstance(decided, int) or isinstance(decided, bool):
        return spec_delay
    low = int(_spec(bm, "batching", "minQueueDelayMicroseconds", default=MIN_DELAY_US))
    high = int(_spec(bm, "batching", "maxQueueDelayLimitMicroseconds", default=MAX_DELAY_US))
    return max(low, min(high, decided))


def desired_queue_policy(bm: Mapping[str, Any]) -> QueuePolicy:
    """The queue policy every ready pod should run (spec.overload, defaults derived)."""
    return queue_policy(manifest_tuning_spec(bm))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pod_delay(pod: Mapping[str, Any]) -> int | None:
    """The delay the pod's Triton was last set to (its annotation), None if never set."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DELAY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def pod_queue_policy(pod: Mapping[str, Any]) -> str | None:
    """The queue policy the pod's Triton was last set to (its annotation), None if never."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_QUEUE_POLICY)


def triton_url(pod: Mapping[str, Any]) -> str:
    return f"{pod['status']['podIP']}:{PORT_HTTP}"


def pods_to_reload(
    pods: Sequence[Mapping[str, Any]], delay_us: int, policy: QueuePolicy | None = None
) -> list[Mapping[str, Any]]:
    """Ready pods whose recorded delay differs from `delay_us`, or whose recorded queue
    policy differs from `policy` when one is given (new pods included)."""
    want = None if policy is None else policy.annotation()
    return [
        p
        for p in pods
        if pod_ready(p)
        and (pod_delay(p) != delay_us or (want is not None and pod_queue_policy(p) != want))
    ]


def applied_delay(pods: Sequence[Mapping[str, Any]]) -> int | None:
    """The delay every ready pod runs, when they all agree; None otherwise (or no pod)."""
    delays = {pod_delay(p) for p in pods if pod_ready(p)}
    if len(delays) != 1:
        return None
    (only,) = delays
    return only


def _round(x: float | None, digits: int = 2) -> float | None:
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return round(float(x), digits)


def tuner_conditions(
    obs: Observation,
    spec: TuningSpec,
    missing_reason: str | None,
    shown_p99_ms: float | None = None,
) -> list[Condition]:
    """SLOMet and MetricsAvailable from one tick's observation.

    The messages carry no figure that moves every tick (a moved message is a status patch):
    the sample age is stated as its bound, the p99 as `shown_p99_ms` (status.metrics' figure,
    see `steady_metrics`) when given. SLOMet's status itself follows the exact p99.
    """
    if missing_reason is not None or obs.p99_ms is None:
        why = missing_reason or "no p99 series for this model"
        return [
            Condition("MetricsAvailable", "False", "NoMetrics", why),
            Condition("SLOMet", "Unknown", "NoMetrics", "p99 unknown: " + why),
        ]
    met = obs.p99_ms <= spec.slo_ms
    shown = obs.p99_ms if shown_p99_ms is None else shown_p99_ms
    return [
        Condition(
            "MetricsAvailable",
            "True",
            "MetricsFresh",
            f"Prometheus data at most {stale_after_s(spec):g} s old",
        ),
        Condition(
            "SLOMet",
            "True" if met else "False",
            "WithinSLO" if met else "OverSLO",
            f"p99 {shown:.1f} ms {'<=' if met else '>'} SLO {spec.slo_ms:g} ms",
        ),
    ]


# How far a figure in status.metrics must move before the tuner rewrites it (relative, with an
# absolute floor for figures near zero). See `steady_metrics`.
METRICS_DEADBAND = 0.05
METRICS_FLOOR = 0.01


def steady_metrics(
    stored: Mapping[str, Any] | None, fresh: Mapping[str, float | None]
) -> dict[str, float | None]:
    """`fresh`, except that a figure within METRICS_DEADBAND of the stored one keeps the stored
    value. Pure.

    Why: rates from a real Prometheus move in their last digits every tick, and a status whose
    figures moved is a status patch. At 1,000 models that was 1,000 patches (and as many watch
    events back) per 5 s tick: 10 s of operator CPU per tick, ticks 29 s long. The figures in
    status are for people (`kubectl get bm`); the operator's /metrics carry every tick's exact
    figures, and the policy decides from the observation, never from status.
    """
    stored = stored or {}
    out: dict[str, float | None] = {}
    for name, value in fresh.items():
        old = stored.get(name)
        if (
            value is not None
            and isinstance(old, int | float)
            and not isinstance(old, bool)
            and abs(value - old) <= max(METRICS_DEADBAND * abs(old), METRICS_FLOOR)
        ):
            out[name] = old
        else:
            out[name] = value
    return out


def tuner_status(
    bm: Mapping[str, Any],
    obs: Observation,
    spec: TuningSpec,
    decision: Decision | None,
    now: datetime,
    missing_reason: str | None = None,
    applied: int | None = None,
) -> dict[str, Any]:
    """The status fields the tuner owns, for a merge patch: metrics, conditions, and
    lastDecision when the decision changes something."""
    metrics = steady_metrics(
        (bm.get("status") or {}).get("metrics"),
        {
            "requestsPerSecond": _round(obs.rps),
            "p99LatencyMilliseconds": _round(obs.p99_ms),
            "averageBatchSize": _round(obs.avg_batch),
            "queueMilliseconds": _round(obs.queue_ms, 3),
            "rejectedPerSecond": _round(obs.rejected_rps),
            "peakRequestsPerSecond": _round(obs.peak_rps),
        },
    )
    status: dict[str, Any] = {
        "metrics": metrics,
        "conditions": merge_conditions(
            ((bm.get("status") or {}).get("conditions") or []),
            tuner_conditions(obs, spec, missing_reason, metrics["p99LatencyMilliseconds"]),
            now,
            (bm.get("metadata") or {}).get("generation"),
        ),
    }
    if applied is not None:
        status["maxQueueDelayMicroseconds"] = applied
    if decision is not None:
        # Rides on a write that happens anyway: a restart resumes from the last one.
        status["learned"] = learned(decision.state, now.timestamp())
    if decision is not None and decision.changes(obs):
        status["lastDecision"] = {
            "time": format_time(now),
            "kind": decision.kind[:32],
            "replicas": decision.replicas,
            "maxQueueDelayMicroseconds": decision.delay_us,
            "reason": decision.reason[:1024],
        }
        predicted = decision.predicted_p99_ms
        if predicted is not None and math.isfinite(predicted) and predicted >= 0:
            status["lastDecision"]["predictedP99Milliseconds"] = _round(predicted)
    return status
