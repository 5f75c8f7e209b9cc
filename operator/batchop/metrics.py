"""The operator's own Prometheus metrics, served on `/metrics` by `batchop run`.

Triton's metrics say what the models did; these say what batchop did about it: which
decisions it took and why, what it applied, how long a tuning tick took, how often a
reconcile failed and how slow Prometheus was to answer. The Grafana dashboard draws its
decision annotations, applied delay, desired replicas and SLO line from them.

All metrics live in one `OperatorMetrics` object with its own registry, so tests can make a
fresh one; the operator uses the module-level `METRICS` through the plain functions below.
Label values per BatchedModel are `namespace` and `batchedmodel` (the object's name), the
same label names the Triton series carry in Prometheus, so the two join without relabelling.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from threading import Thread
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from batchop.api.errors import SpecError
from batchop.api.tuning_spec import manifest_tuning_spec
from batchop.tuning.overload import queue_policy

BM_LABELS = ("namespace", "batchedmodel")
DEFAULT_PORT = 8000

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_SPACES = re.compile(r"\s+")
_REASON_MAX = 80


def reason_label(reason: str) -> str:
    """The decision reason as a bounded-cardinality label: numbers become `#`.

    Reasons are sentences with measured figures in them ("p99 61.2ms over SLO 50ms"); as a
    label each new figure would be a new series. Replacing the figures (not digits inside
    words, so "p99" stays) keeps one series per
    kind of reason while staying readable in a dashboard annotation. The full text stays in
    the BatchedModel's status and events.
    """
    text = _SPACES.sub(" ", _NUMBER.sub("#", reason)).strip()
    if len(text) > _REASON_MAX:
        text = text[: _REASON_MAX - 1].rstrip() + "…"
    return text or "unspecified"


@dataclass
class OperatorMetrics:
    """Every metric the operator exports, registered in `registry`."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    process_collectors: bool = True

    def __post_init__(self) -> None:
        r = self.registry
        if self.process_collectors:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        self.decisions = Counter(
            "batchop_decisions",
            "Tuning decisions that changed the delay or replicas, by kind and reason.",
            [*BM_LABELS, "kind", "reason"],
            registry=r,
        )
        self.reversals = Counter(
            "batchop_reversals",
            "Scale-ups within two pod starts of the model's last scale-down: GPUs given back "
            "and asked for again before pods asked for then could have been ready.",
            BM_LABELS,
            registry=r,
        )
        self.last_decision_time = Gauge(
            "batchop_last_decision_timestamp_seconds",
            "Unix time of the last decision that changed something.",
            BM_LABELS,
            registry=r,
        )
        self.applied_delay = Gauge(
            "batchop_applied_queue_delay_microseconds",
            "max_queue_delay_microseconds applied on every ready replica.",
            BM_LABELS,
            registry=r,
        )
        self.desired_delay = Gauge(
            "batchop_desired_queue_delay_microseconds",
            "max_queue_delay_microseconds the tuner wants.",
            BM_LABELS,
            registry=r,
        )
        self.desired_replicas = Gauge(
            "batchop_desired_replicas",
            "Replica count batchop set on the Deployment.",
            BM_LABELS,
            registry=r,
        )
        self.ready_replicas = Gauge(
            "batchop_ready_replicas",
            "Ready replicas of the BatchedModel's Deployment.",
            BM_LABELS,
            registry=r,
        )
        self.slo = Gauge(
            "batchop_slo_p99_milliseconds",
            "The BatchedModel's p99 latency SLO (spec.slo.p99LatencyMilliseconds).",
            BM_LABELS,
            registry=r,
        )
        self.rejected = Gauge(
            "batchop_rejected_requests_per_second",
            "Requests Triton's queue policy refused per second (timeouts; spec.overload), all "
            "replicas, as the last tuning tick saw them (status.metrics.rejectedPerSecond).",
            BM_LABELS,
            registry=r,
        )
        self.queue_timeout = Gauge(
            "batchop_queue_timeout_microseconds",
            "Queue timeout of Triton's queue policy the pods are brought to (spec.overload, "
            "derived from the SLO when not set); 0: policy Queue, nothing is refused.",
            BM_LABELS,
            registry=r,
        )
        self.condition = Gauge(
            "batchop_condition",
            "1 when the BatchedModel's status condition of this type is True, else 0.",
            [*BM_LABELS, "type"],
            registry=r,
        )
        self.tick_duration = Histogram(
            "batchop_tick_duration_seconds",
            "Wall time of one tuning tick for all BatchedModels (query, decide, act).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.reconcile_errors = Counter(
            "batchop_reconcile_errors",
            "Reconcile or tuning steps that raised, by stage.",
            [*BM_LABELS, "stage"],
            registry=r,
        )
        self.reloads = Counter(
            "batchop_delay_reloads",
            "Pods brought to the desired queue delay and policy, by the protocol the control "
            "calls went over: grpc, or http (the fallback when gRPC is unreachable, which "
            "stalls the requests on one Triton HTTP worker for the reload).",
            [*BM_LABELS, "protocol"],
            registry=r,
        )
        self.query_duration = Histogram(
            "batchop_prometheus_query_duration_seconds",
            "Latency of Prometheus queries, by query name (one query per metric per tick).",
            ["query"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.query_errors = Counter(
            "batchop_prometheus_query_errors",
            "Prometheus queries that failed, by query name.",
            ["query"],
            registry=r,
        )
        # Label sets of the counters with extra labels, per BatchedModel, for `forget`.
        self._counter_labels: dict[
            tuple[str, str], set[tuple[Counter | Gauge, tuple[str, ...]]]
        ] = {}

    def _remember(self, counter: Counter | Gauge, labels: tuple[str, ...]) -> None:
        self._counter_labels.setdefault(labels[:2], set()).add((counter, labels))

    def record_decision(
        self, namespace: str, name: str, kind: str, reason: str, when: float | None = None
    ) -> None:
        """Count a decision that changed the delay or the replica count (not a hold)."""
        labels = (namespace, name, kind, reason_label(reason))
        self.decisions.labels(*labels).inc()
        self._remember(self.decisions, labels)
        self.last_decision_time.labels(namespace, name).set(time.time() if when is None else when)

    def record_reversal(self, namespace: str, name: str) -> None:
        labels = (namespace, name)
        self.reversals.labels(*labels).inc()
        self._remember(self.reversals, labels)

    def set_state(
        self,
        namespace: str,
        name: str,
        *,
        applied_delay_us: float | None = None,
        desired_delay_us: float | None = None,
        desired_replicas: float | None = None,
        ready_replicas: float | None = None,
        slo_ms: float | None = None,
    ) -> None:
        """Set the per-BatchedModel gauges that are given; `None` leaves one as it was."""
        values = (
            (self.applied_delay, applied_delay_us),
            (self.desired_delay, desired_delay_us),
            (self.desired_replicas, desired_replicas),
            (self.ready_replicas, ready_replicas),
            (self.slo, slo_ms),
        )
        for gauge, value in values:
            if value is not None:
                gauge.labels(namespace, name).set(value)

    def observe_model(self, bm: Mapping[str, Any]) -> None:
        """Set every per-model gauge from a BatchedModel object (spec and status).

        The one call the controller makes after it writes a BatchedModel's status: desired
        replicas and delay are the last decision's for a knob the tuner tunes, else the
        spec's (spec.scaling.replicas is the scale subresource's path); ready replicas and
        the applied delay come from status; each condition becomes `batchop_condition`.
        """
        meta = bm.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        spec = bm.get("spec") or {}
        status = bm.get("status") or {}
        decision = status.get("lastDecision") or {}

        def number(*path: str, where: Mapping[str, Any] = spec) -> float | None:
            cur: Any = where
            for key in path:
                cur = cur.get(key) if isinstance(cur, Mapping) else None
            if isinstance(cur, bool) or not isinstance(cur, int | float):
                return None
            return float(cur)

        # What the tuner decided rules each knob it tunes (the Deployment is rendered from
        # status.lastDecision then); a knob it does not tune follows the spec.
        autotune = spec.get("autotune") or {}
        desired_delay = (
            number("maxQueueDelayMicroseconds", where=decision)
            if autotune.get("queueDelay", True)
            else None
        )
        if desired_delay is None:
            desired_delay = number("batching", "maxQueueDelayMicroseconds")
        desired_replicas = (
            number("replicas", where=decision) if autotune.get("replicas", True) else None
        )
        if desired_replicas is None:
            desired_replicas = number("scaling", "replicas")
        self.set_state(
            namespace,
            name,
            applied_delay_us=number("maxQueueDelayMicroseconds", where=status),
            desired_delay_us=desired_delay,
            desired_replicas=desired_replicas,
            ready_replicas=number("readyReplicas", where=status),
            slo_ms=number("slo", "p99LatencyMilliseconds"),
        )
        rejected = number("rejectedPerSecond", where=status.get("metrics") or {})
        if rejected is not None:
            self.rejected.labels(namespace, name).set(rejected)
        try:
            self.queue_timeout.labels(namespace, name).set(_queue_timeout_us(bm))
        except SpecError:  # a spec the API would refuse runs no known timeout: no sample
            with suppress(KeyError):
                self.queue_timeout.remove(namespace, name)
        for cond in status.get("conditions") or []:
            if cond.get("type") and cond.get("status") in ("True", "False"):
                self.set_condition(namespace, name, str(cond["type"]), cond["status"] == "True")

    def set_condition(self, namespace: str, name: str, type_: str, status: bool) -> None:
        """Mirror a status condition (Ready, SLOMet, CapacityLimited, ...) for alerting."""
        self.condition.labels(namespace, name, type_).set(1 if status else 0)
        self._remember(self.condition, (namespace, name, type_))

    def record_reconcile_error(self, namespace: str, name: str, stage: str) -> None:
        self.reconcile_errors.labels(namespace, name, stage).inc()
        self._remember(self.reconcile_errors, (namespace, name, stage))

    def record_reload(self, namespace: str, name: str, protocol: str) -> None:
        self.reloads.labels(namespace, name, protocol).inc()
        self._remember(self.reloads, (namespace, name, protocol))

    @contextmanager
    def time_tick(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.tick_duration.observe(time.perf_counter() - start)

    @contextmanager
    def time_query(self, query: str) -> Iterator[None]:
        """Time one Prometheus query; an exception also counts as a query error."""
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self.query_errors.labels(query).inc()
            raise
        finally:
            self.query_duration.labels(query).observe(time.perf_counter() - start)

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted BatchedModel, so it leaves the dashboard."""
        per_bm = (
            self.last_decision_time,
            self.applied_delay,
            self.desired_delay,
            self.desired_replicas,
            self.ready_replicas,
            self.slo,
            self.rejected,
            self.queue_timeout,
        )
        for gauge in per_bm:
            with suppress(KeyError):
                gauge.remove(namespace, name)
        for counter, labels in self._counter_labels.pop((namespace, name), set()):
            counter.remove(*labels)


def _queue_timeout_us(bm: Mapping[str, Any]) -> float:
    """The queue timeout the pods run by spec.overload (0 when nothing is refused on time)."""
    policy = queue_policy(manifest_tuning_spec(bm))
    return float(policy.timeout_us if policy.reject else 0)


METRICS = OperatorMetrics()


def start_metrics_server(
    addr: str = "0.0.0.0", port: int = DEFAULT_PORT, metrics: OperatorMetrics | None = None
) -> tuple[WSGIServer, Thread]:
    """Serve `/metrics` on addr:port in a daemon thread; port 0 picks a free port.

    Returns the server (its `server_port` is the bound port; `shutdown()` stops it) and
    the thread.
    """
    registry = (metrics or METRICS).registry
    return start_http_server(port, addr=addr, registry=registry)


def record_decision(
    namespace: str, name: str, kind: str, reason: str, when: float | None = None
) -> None:
    METRICS.record_decision(namespace, name, kind, reason, when)


def record_reversal(namespace: str, name: str) -> None:
    METRICS.record_reversal(namespace, name)


def set_state(
    namespace: str,
    name: str,
    *,
    applied_delay_us: float | None = None,
    desired_delay_us: float | None = None,
    desired_replicas: float | None = None,
    ready_replicas: float | None = None,
    slo_ms: float | None = None,
) -> None:
    METRICS.set_state(
        namespace,
        name,
        applied_delay_us=applied_delay_us,
        desired_delay_us=desired_delay_us,
        desired_replicas=desired_replicas,
        ready_replicas=ready_replicas,
        slo_ms=slo_ms,
    )


def observe_model(bm: Mapping[str, Any]) -> None:
    METRICS.observe_model(bm)


def set_condition(namespace: str, name: str, type_: str, status: bool) -> None:
    METRICS.set_condition(namespace, name, type_, status)


def record_reconcile_error(namespace: str, name: str, stage: str) -> None:
    METRICS.record_reconcile_error(namespace, name, stage)


def record_reload(namespace: str, name: str, protocol: str) -> None:
    METRICS.record_reload(namespace, name, protocol)


def time_tick() -> AbstractContextManager[None]:
    return METRICS.time_tick()


def time_query(query: str) -> AbstractContextManager[None]:
    return METRICS.time_query(query)


def forget(namespace: str, name: str) -> None:
    METRICS.forget(namespace, name)
