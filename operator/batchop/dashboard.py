"""The Grafana dashboard and the alert rules for BatchedModels: the one place their PromQL lives.

The chart ships the JSON this module generates (charts/batchop/files/dashboard.json and
alerts.json, the latter turned into a PrometheusRule by a template); a unit test keeps the
committed files equal to what this module renders, and an e2e test runs every dashboard
query against the local stack's real Prometheus for a running model. So a renamed metric or
label breaks a test, not a dashboard in production.

Queries use Grafana's `$namespace`, `$batchedmodel` and `$__rate_interval`; `substitute`
fills them for running the query directly against Prometheus.

Run `python -m batchop.dashboard charts/batchop/files` (or `make dashboard`) after changing
a query.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from batchop.api.constants import PROM_LABEL_MODEL

NS = "namespace"
BM = PROM_LABEL_MODEL
BY = f"by ({NS}, {BM})"
SEL = f'{NS}="$namespace", {BM}="$batchedmodel"'
UID = "batchop-batchedmodel"


def _rate(metric: str, extra: str = "") -> str:
    return f"sum {BY} (rate({metric}{{{SEL}{extra}}}[$__rate_interval]))"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    # Source of the series: "triton" (scraped from Triton pods) or "operator" (batchop's own
    # /metrics). Tests need both scraped to expect data.
    source: str = "triton"


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str


PANELS: tuple[Panel, ...] = (
    Panel(
        "Request rate",
        "reqps",
        (Query(_rate("nv_inference_request_success"), "successful requests/s"),),
        "Successful inference requests per second, summed over the model's pods.",
    ),
    Panel(
        "Rejected requests (overload guard)",
        "reqps",
        (
            Query(
                _rate("nv_inference_request_failure", ', reason="REJECTED"'),
                "refused past the queue timeout /s",
            ),
            Query(
                f"max {BY} (batchop_rejected_requests_per_second{{{SEL}}})",
                "as the tuner saw it /s",
                "operator",
            ),
        ),
        "Requests Triton's queue policy (spec.overload, policy Reject) refused because they "
        "waited past the queue timeout: the price of keeping served requests within the SLO "
        "during a burst beyond capacity. Triton 2.51 does not count refusals on a full queue "
        "(maxQueueSize) in any metric.",
    ),
    Panel(
        "p99 latency vs SLO",
        "ms",
        (
            Query(
                f'max {BY} (nv_inference_request_summary_us{{{SEL}, quantile="0.99"}}) / 1000',
                "p99 (worst pod, server side)",
            ),
            Query(f"max {BY} (batchop_slo_p99_milliseconds{{{SEL}}})", "SLO", "operator"),
        ),
        "Server-side p99 (queue + compute) of the worst pod, from Triton's summary "
        "quantiles, against spec.slo.p99LatencyMilliseconds.",
    ),
    Panel(
        "Queue vs compute time per request",
        "ms",
        (
            Query(
                f"{_rate('nv_inference_queue_duration_us')} / "
                f"{_rate('nv_inference_request_success')} / 1000",
                "queue",
            ),
            Query(
                f"{_rate('nv_inference_compute_infer_duration_us')} / "
                f"{_rate('nv_inference_request_success')} / 1000",
                "compute",
            ),
        ),
        "Mean time a request waited in Triton's batcher queue and spent in the model. "
        "The delay knob trades the first for less of the second per inference.",
    ),
    Panel(
        "Average batch size",
        "short",
        (
            Query(
                f"{_rate('nv_inference_count')} / {_rate('nv_inference_exec_count')}",
                "inferences per execution",
            ),
        ),
        "Inferences per model execution: how well the dynamic batcher fills the GPU.",
    ),
    Panel(
        "Queue delay",
        "µs",
        (
            Query(
                f"max {BY} (batchop_applied_queue_delay_microseconds{{{SEL}}})",
                "applied",
                "operator",
            ),
            Query(
                f"max {BY} (batchop_desired_queue_delay_microseconds{{{SEL}}})",
                "desired",
                "operator",
            ),
        ),
        "max_queue_delay_microseconds the tuner wants, and the value running on every "
        "ready replica (they differ while pods are being reloaded).",
    ),
    Panel(
        "Replicas",
        "short",
        (
            Query(f"max {BY} (batchop_desired_replicas{{{SEL}}})", "desired", "operator"),
            Query(f"max {BY} (batchop_ready_replicas{{{SEL}}})", "ready", "operator"),
            Query(f"count {BY} (up{{{SEL}}} == 1)", "pods scraped"),
        ),
        "Replica count batchop set, ready replicas, and Triton pods Prometheus scrapes.",
    ),
    Panel(
        "Pending requests",
        "short",
        (
            Query(
                f"sum {BY} (nv_inference_pending_request_count{{{SEL}}})",
                "queued or executing",
            ),
        ),
        "Requests inside Triton that have not completed, summed over pods.",
    ),
    Panel(
        "Operator: tuning tick and Prometheus query duration (p95)",
        "s",
        (
            Query(
                "histogram_quantile(0.95, sum by (le) "
                "(rate(batchop_tick_duration_seconds_bucket[$__rate_interval])))",
                "tick",
                "operator",
            ),
            Query(
                "histogram_quantile(0.95, sum by (le, query) "
                "(rate(batchop_prometheus_query_duration_seconds_bucket[$__rate_interval])))",
                "query {{query}}",
                "operator",
            ),
        ),
        "How long one tuning tick for all BatchedModels takes (queries, decisions, status), "
        "and how long Prometheus takes to answer each of the tick's queries.",
    ),
)

# Decisions, drawn as annotations on every panel: one per decision that changed something.
# A (kind, reason) series is born at 1 on its first decision, which increase() cannot see
# (it has no earlier sample), so a series that did not exist one interval ago counts too.
_DECIDED = f"batchop_decisions_total{{{SEL}}}"
DECISIONS = Query(
    f"sum by (kind, reason) ((increase({_DECIDED}[$__interval]) > 0) "
    f"or ({_DECIDED} unless {_DECIDED} offset $__interval))",
    "{{kind}}: {{reason}}",
    "operator",
)

# Template variables: the models come from Triton's series, so a model shows up even before
# the operator made a decision for it.
VARIABLES = (
    ("namespace", f"label_values(nv_inference_request_success, {NS})"),
    ("batchedmodel", f'label_values(nv_inference_request_success{{{NS}="$namespace"}}, {BM})'),
)


def all_queries() -> list[tuple[str, Query]]:
    """Every (panel title, query) of the dashboard, decisions included."""
    out = [(p.title, q) for p in PANELS for q in p.queries]
    out.append(("Decisions (annotations)", DECISIONS))
    return out


def substitute(expr: str, namespace: str, name: str, interval: str = "1m") -> str:
    """The query as Grafana would send it, for running it against Prometheus directly."""
    return (
        expr.replace("$namespace", namespace)
        .replace("$batchedmodel", name)
        .replace("$__rate_interval", interval)
        .replace("$__interval", interval)
    )


def _panel(i: int, panel: Panel) -> dict:
    width, height = 12, 8
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": height, "w": width, "x": (i % 2) * width, "y": (i // 2) * height},
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "custom": {"lineWidth": 1, "fillOpacity": 0}},
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": q.expr,
                "legendFormat": q.legend,
                "refId": chr(ord("A") + j),
            }
            for j, q in enumerate(panel.queries)
        ],
    }


def build_dashboard() -> dict:
    """The dashboard as Grafana's JSON model (schemaVersion 39)."""
    ds = {"type": "prometheus", "uid": "${datasource}"}
    variables: list[dict] = [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        }
    ]
    for name, query in VARIABLES:
        variables.append(
            {
                "name": name,
                "label": name,
                "type": "query",
                "datasource": ds,
                "query": {"query": query, "refId": f"var-{name}"},
                "definition": query,
                "refresh": 2,
                "sort": 1,
                "current": {},
                "hide": 0,
            }
        )
    return {
        "uid": UID,
        "title": "batchop / BatchedModel",
        "description": "Load, latency against the SLO, batching and the decisions batchop "
        "took for one BatchedModel.",
        "tags": ["batchop", "triton"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                {
                    "name": "batchop decisions",
                    "datasource": ds,
                    "enable": True,
                    "iconColor": "orange",
                    "expr": DECISIONS.expr,
                    "step": "30s",
                    "titleFormat": "{{kind}}",
                    "textFormat": "{{reason}}",
                    "tagKeys": "kind",
                    "useValueForTime": False,
                },
            ]
        },
        "panels": [_panel(i, p) for i, p in enumerate(PANELS)],
    }


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    # Key of the chart value (under prometheusRule) that says how long `expr` must hold.
    for_value: str
    summary: str
    description: str


_P99 = f'max {BY} (nv_inference_request_summary_us{{quantile="0.99"}}) / 1000'
_SLO = f"max {BY} (batchop_slo_p99_milliseconds)"

ALERTS: tuple[Alert, ...] = (
    Alert(
        "BatchedModelP99OverSLO",
        f"{_P99} > on ({NS}, {BM}) {_SLO}",
        "p99OverSloFor",
        "BatchedModel {{ $labels.namespace }}/{{ $labels.batchedmodel }} is over its p99 SLO",
        "Server-side p99 is {{ $value | humanize }} ms, above the SLO, and batchop has not "
        "brought it back: check the CapacityLimited condition and `kubectl describe bm`.",
    ),
    Alert(
        "BatchedModelMetricsUnavailable",
        f'max {BY} (batchop_condition{{type="MetricsAvailable"}}) == 0',
        "metricsUnavailableFor",
        "batchop cannot read Triton metrics for {{ $labels.namespace }}/{{ $labels.batchedmodel }}",
        "Without metrics batchop holds the delay and replicas where they are. Check that "
        "Prometheus scrapes the model's pods and that the operator can reach Prometheus.",
    ),
    Alert(
        "BatchedModelCapacityLimited",
        f'max {BY} (batchop_condition{{type="CapacityLimited"}}) == 1',
        "capacityLimitedFor",
        "BatchedModel {{ $labels.namespace }}/{{ $labels.batchedmodel }} cannot scale up",
        "Replicas it wants stay Pending for lack of GPUs (or maxReplicas is reached). Add "
        "GPU nodes or raise spec.scaling.maxReplicas.",
    ),
    Alert(
        "BatchopReconcileErrors",
        f"sum {BY} (increase(batchop_reconcile_errors_total[10m])) > 0",
        "reconcileErrorsFor",
        "batchop keeps failing to reconcile {{ $labels.namespace }}/{{ $labels.batchedmodel }}",
        "See the operator's log and the BatchedModel's events.",
    ),
    Alert(
        "BatchopOperatorMetricsAbsent",
        "absent(batchop_tick_duration_seconds_count)",
        "metricsUnavailableFor",
        "No metrics from the batchop operator",
        "Prometheus scrapes no batchop operator: it is down, or its ServiceMonitor "
        "(metrics.serviceMonitor.enabled) is missing.",
    ),
)


def build_alerts() -> dict:
    """The alert rules as data; the chart's PrometheusRule template adds `for` and labels."""
    return {
        "alerts": [
            {
                "name": a.name,
                "expr": a.expr,
                "forValue": a.for_value,
                "summary": a.summary,
                "description": a.description,
            }
            for a in ALERTS
        ]
    }


def _dump(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# File name in the chart's files/ folder -> its content.
def rendered_files() -> dict[str, str]:
    return {"dashboard.json": _dump(build_dashboard()), "alerts.json": _dump(build_alerts())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m batchop.dashboard OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered_files().items():
        (out / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
