"""Read what Triton reports for every BatchedModel from Prometheus, one query per metric.

The cost of a tick must not grow with the number of BatchedModels, so each metric is one
`sum by (namespace, batchedmodel)` (or `max by`/`min by`) query covering them all. The pure
parts (query text, parsing, assembling per-model parts, building an `Observation`) are
separate from the thin HTTP shell (`PrometheusObserver`) so they are testable without a
server.

p99: Triton's `nv_inference_request_summary_us{quantile="0.99"}` is a per-pod summary, and
quantiles cannot be averaged across pods, so we take the worst pod (`max by`). That is an upper
bound on the fleet's p99 when load is spread evenly, which is what the SLO guards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from batchop.api.constants import LABEL_MODEL, PORT_NAME_METRICS, PROM_LABEL_MODEL, ModelKey
from batchop.tuning.types import Observation

# The pod label naming a pod's BatchedModel, and the Prometheus label it becomes. The local
# stack's scrape config and the chart's PodMonitor both relabel the former into the latter.
POD_LABEL = LABEL_MODEL
BM_LABEL = PROM_LABEL_MODEL
GROUP = f"namespace, {BM_LABEL}"


# What arrives: served requests and those the queue policy refused (success carries no
# `reason` label, the refusals carry reason="REJECTED").
ARRIVALS = (
    '{__name__=~"nv_inference_request_success|nv_inference_request_failure",reason=~"|REJECTED"}'
)


def duration_s(window: str) -> float:
    """Seconds in a PromQL duration such as "30s", "1m" or "1m30s". Pure."""
    total, number = 0.0, ""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    rest = window
    while rest:
        if rest[0].isdigit():
            number += rest[0]
            rest = rest[1:]
            continue
        unit = "ms" if rest.startswith("ms") else rest[0]
        if unit not in units or not number:
            raise ValueError(f"not a PromQL duration: {window!r}")
        total += int(number) * units[unit]
        number, rest = "", rest[len(unit) :]
    if number or total <= 0:
        raise ValueError(f"not a PromQL duration: {window!r}")
    return total


class PrometheusUnavailable(RuntimeError):
    """Prometheus did not answer (down, unreachable, or an error reply): hold, don't act."""


def build_queries(window: str = "1m") -> dict[str, str]:
    """PromQL per observation part, each covering ALL BatchedModels. Pure.

    `window` is the rate window (e.g. "30s"); it must span at least two scrapes.
    """

    def rate(metric: str) -> str:
        return f"sum by ({GROUP}) (rate({metric}[{window}]))"

    success = rate("nv_inference_request_success")
    return {
        "rps": success,
        "avg_batch": f"{rate('nv_inference_count')} / {rate('nv_inference_exec_count')}",
        "queue_ms": f"{rate('nv_inference_queue_duration_us')} / {success} / 1000",
        "compute_ms": f"{rate('nv_inference_compute_infer_duration_us')} / {success} / 1000",
        "p99_ms": (f'max by ({GROUP}) (nv_inference_request_summary_us{{quantile="0.99"}}) / 1000'),
        "pending": f"sum by ({GROUP}) (nv_inference_pending_request_count)",
        # Requests the queue policy refused (spec.overload): Triton 2.51 counts them in
        # its failure counter under reason="REJECTED".
        "rejected_rps": rate('nv_inference_request_failure{reason="REJECTED"}'),
        # The highest per-scrape arrival rate over the window (irate under max_over_time, at
        # a quarter of the window): the burst that the window's mean averages away.
        "peak_rps": (
            f"max_over_time((sum by ({GROUP}) (irate({ARRIVALS}[{window}])))"
            f"[{window}:{max(1, int(duration_s(window) / 4))}s])"
        ),
        # Age of the freshest sample per BatchedModel: stale data must not drive scaling.
        "age_s": f"min by ({GROUP}) (time() - timestamp(nv_inference_request_success))",
        "scraped_pods": f'count by ({GROUP}) (up{{{BM_LABEL}!=""}} == 1)',
        # Every target, up or down: none at all says the PodMonitor selects no pod's port.
        "targets": f'count by ({GROUP}) (up{{{BM_LABEL}!=""}})',
    }


def parse_vector(result: list[dict[str, Any]]) -> dict[ModelKey, float | None]:
    """Map an instant-vector reply to {(namespace, name): value}; NaN/Inf become None. Pure.

    Series without both labels are ignored (they are not a BatchedModel's).
    """
    out: dict[ModelKey, float | None] = {}
    for series in result:
        metric = series.get("metric", {})
        ns, name = metric.get("namespace"), metric.get(BM_LABEL)
        if not ns or not name:
            continue
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            value = math.nan
        out[(ns, name)] = value if math.isfinite(value) else None
    return out


@dataclass(frozen=True)
class ObservationParts:
    """What Prometheus showed for one BatchedModel; `None` = series missing or undefined."""

    rps: float | None = None
    avg_batch: float | None = None
    queue_ms: float | None = None
    compute_ms: float | None = None
    p99_ms: float | None = None
    pending: float | None = None
    rejected_rps: float | None = None
    peak_rps: float | None = None
    rate_history: tuple[tuple[float, float], ...] = ()
    age_s: float | None = None
    scraped_pods: int = 0
    targets: int = 0  # Prometheus's targets for the model, up or down
    missing: tuple[str, ...] = field(default_factory=tuple)

    def stale(self, max_age_s: float) -> bool:
        return self.age_s is None or self.age_s > max_age_s


PART_NAMES = ("rps", "avg_batch", "queue_ms", "compute_ms", "p99_ms", "pending")


def assemble(
    per_metric: dict[str, dict[ModelKey, float | None]],
) -> dict[ModelKey, ObservationParts]:
    """Combine per-metric results into parts per BatchedModel. Pure.

    A BatchedModel appears if any metric names it; parts it lacks are listed in `missing`.
    """
    keys: set[ModelKey] = set()
    for values in per_metric.values():
        keys.update(values)
    out: dict[ModelKey, ObservationParts] = {}
    for key in sorted(keys):
        values = {name: per_metric.get(name, {}).get(key) for name in PART_NAMES}
        missing = tuple(name for name in PART_NAMES if values[name] is None)
        pods = per_metric.get("scraped_pods", {}).get(key)
        targets = per_metric.get("targets", {}).get(key)
        out[key] = ObservationParts(
            **values,
            rejected_rps=per_metric.get("rejected_rps", {}).get(key),
            peak_rps=per_metric.get("peak_rps", {}).get(key),
            age_s=per_metric.get("age_s", {}).get(key),
            scraped_pods=int(pods or 0),
            targets=int(targets or 0),
            missing=missing,
        )
    return out


def why_no_metrics(parts: ObservationParts | None) -> str | None:
    """What to check when Prometheus shows nothing Triton reported for a model; None when
    it shows something. Pure.

    No target at all and targets that are all down are different faults: the first is the
    monitoring's (no Prometheus selects the PodMonitor, or the PodMonitor keeps a port the
    pods lack), the second the pods' (Triton does not answer on that port)."""
    if parts is not None and (parts.scraped_pods > 0 or len(parts.missing) < len(PART_NAMES)):
        return None
    if parts is None or parts.targets == 0:
        return (
            "Prometheus scrapes no pod of this model (none while no pod runs): check that "
            "a Prometheus selects its PodMonitor (podMonitorSelector and "
            "podMonitorNamespaceSelector) and that the pods have the container port named "
            f"'{PORT_NAME_METRICS}' the PodMonitor keeps"
        )
    return (
        f"Prometheus's {parts.targets} target(s) for this model are down: check that Triton "
        f"answers /metrics on the pods' '{PORT_NAME_METRICS}' port (--allow-metrics)"
    )


def build_observation(
    parts: ObservationParts | None,
    *,
    time_s: float,
    replicas: int,
    ready_replicas: int,
    delay_us: int,
    max_age_s: float = 60.0,
    schedulable_headroom: int | None = None,
) -> Observation:
    """The policy's `Observation` from Prometheus parts plus what the API server says. Pure.

    Missing parts stay None. Stale data (no sample newer than `max_age_s`) is dropped entirely
    so that the policy holds instead of scaling on old numbers.

    With traffic at zero Triton's averages are undefined (0/0); rps is then reported as 0 and
    the ratios stay None.
    """
    base = Observation(
        time_s=time_s,
        replicas=replicas,
        ready_replicas=ready_replicas,
        delay_us=delay_us,
        schedulable_headroom=schedulable_headroom,
    )
    if parts is None:
        return replace(base, age_s=math.inf)
    age = parts.age_s if parts.age_s is not None else math.inf
    if parts.stale(max_age_s):
        return replace(base, age_s=age)
    return replace(
        base,
        rps=parts.rps,
        avg_batch=parts.avg_batch,
        queue_ms=parts.queue_ms,
        compute_ms=parts.compute_ms,
        p99_ms=parts.p99_ms,
        pending=parts.pending,
        rejected_rps=parts.rejected_rps,
        peak_rps=parts.peak_rps,
        rate_history=parts.rate_history,
        age_s=age,
    )


class PrometheusObserver:
    """Thin shell: runs `build_queries` against a Prometheus, one query per metric.

    `observe()` raises `PrometheusUnavailable` when Prometheus cannot answer; a BatchedModel
    with no data is simply absent from the result (or has its parts in `missing`). Speaks
    Prometheus's HTTP API (/api/v1/query, /api/v1/query_range) with `requests` directly:
    a client library would bring pandas and matplotlib into the operator's image.
    """

    def __init__(self, url: str, *, window: str = "1m", timeout_s: float = 5.0) -> None:
        import requests

        self.url = url
        self.queries = build_queries(window)
        self.history_query = history_query(window)
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self.queries_sent = 0

    def _get(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        """One API call; its `data.result`, or PrometheusUnavailable saying why not."""
        import requests

        self.queries_sent += 1
        try:
            reply = self._session.get(
                f"{self.url.rstrip('/')}{path}", params=params, timeout=self.timeout_s
            )
            body = reply.json()
        except (requests.RequestException, ValueError) as exc:
            raise PrometheusUnavailable(f"prometheus at {self.url}: {exc}") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusUnavailable(
                f"prometheus at {self.url}: HTTP {reply.status_code}: {error or body!r:.200}"
            )
        result = (body.get("data") or {}).get("result")
        return list(result) if isinstance(result, list) else []

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self._get("/api/v1/query", {"query": promql})

    def observe(self, history_s: float = 0.0) -> dict[ModelKey, ObservationParts]:
        """One query per metric, each timed (and counted when it fails) in the operator's
        metrics under its part name, so the dashboard shows how slow Prometheus is. With
        `history_s`, one range query more brings every model's recent arrival rate (for the
        forecast): the tick's cost stays bounded whatever the number of models."""
        from batchop.metrics import time_query

        per_metric: dict[str, dict[ModelKey, float | None]] = {}
        for name, promql in self.queries.items():
            with time_query(name):
                per_metric[name] = parse_vector(self.query(promql))
        parts = assemble(per_metric)
        if history_s > 0:
            with time_query("rate_history"):
                history = parse_matrix(self.query_range(self.history_query, history_s))
            parts = {key: replace(p, rate_history=history.get(key, ())) for key, p in parts.items()}
        return parts

    def query_range(self, promql: str, history_s: float) -> list[dict[str, Any]]:
        import time

        end = time.time()
        step = max(1, int(history_s / HISTORY_POINTS))
        return self._get(
            "/api/v1/query_range",
            {
                "query": promql,
                "start": f"{end - history_s:.3f}",
                "end": f"{end:.3f}",
                "step": f"{step}s",
            },
        )


HISTORY_POINTS = 20  # points per model in the forecast's range query


def history_query(window: str) -> str:
    """Every model's arrival rate (served + refused), for a range query. Pure."""
    return f"sum by ({GROUP}) (rate({ARRIVALS}[{window}]))"


def parse_matrix(result: list[dict[str, Any]]) -> dict[ModelKey, tuple[tuple[float, float], ...]]:
    """Map a range-query reply to {(namespace, name): ((t, value), ...)}, finite values
    only, oldest first. Pure."""
    out: dict[ModelKey, tuple[tuple[float, float], ...]] = {}
    for series in result:
        metric = series.get("metric", {})
        ns, name = metric.get("namespace"), metric.get(BM_LABEL)
        if not ns or not name:
            continue
        points = []
        for pair in series.get("values") or []:
            try:
                t, v = float(pair[0]), float(pair[1])
            except (IndexError, TypeError, ValueError):
                continue
            if math.isfinite(t) and math.isfinite(v):
                points.append((t, v))
        out[(ns, name)] = tuple(sorted(points))
    return out
