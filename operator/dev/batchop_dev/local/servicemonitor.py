"""A Prometheus scrape job generated from a ServiceMonitor, as the Prometheus Operator would.

The local stack's real Prometheus Operator turns a ServiceMonitor into a job with endpoints
discovery, which finds nothing here: the local cluster's Endpoints reject the pods' loopback
addresses. So, to scrape the operator's /metrics the way a cluster does, the chart's own
rendered ServiceMonitor (and the Service it selects) become a job by hand: same path,
interval, timeout, honorLabels, relabelings, and the labels the Prometheus Operator gives
every target (namespace, pod, container, service, endpoint, job), with pod discovery
restricted to the pods the Service selects, on the container port the Service port targets.
e2e/test_prometheus_operator.py compares this job with the one the real operator writes.
Pure.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
# ServiceMonitor relabeling keys -> Prometheus config keys.
_RELABEL_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label"}


class ServiceMonitorError(ValueError):
    """The ServiceMonitor cannot be turned into a job; the message names the field."""


def _meta(kind: str, label: str) -> str:
    return f"__meta_kubernetes_{kind}_" + "".join(c if c.isalnum() else "_" for c in label)


def _relabel(rule: dict[str, Any]) -> dict[str, Any]:
    return {_RELABEL_KEYS.get(k, _CAMEL.sub("_", k).lower()): v for k, v in rule.items()}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op)
        if ok is None:
            raise ServiceMonitorError(f"selector operator {op!r} is not a label selector one")
        if not ok:
            return False
    return True


def service_monitor_jobs(
    monitor: dict[str, Any], service: dict[str, Any], sd_config: dict[str, Any]
) -> list[dict[str, Any]]:
    """One scrape job per endpoint of `monitor`, for the pods behind `service`.

    `sd_config` is the job's discovery (e.g. {"kubernetes_sd_configs": [...role pod...]} or
    {"file_sd_configs": [...]}), which must yield pod-role meta labels.
    """
    meta, spec = monitor["metadata"], monitor["spec"]
    where = f"ServiceMonitor {meta.get('namespace')}/{meta['name']}"
    svc_meta = service["metadata"]
    if not selects(spec.get("selector") or {}, svc_meta.get("labels") or {}):
        raise ServiceMonitorError(
            f"{where}: spec.selector does not select Service "
            f"{svc_meta.get('namespace')}/{svc_meta['name']}"
        )
    namespaces = spec.get("namespaceSelector") or {}
    names = (
        [] if namespaces.get("any") else (namespaces.get("matchNames") or [meta.get("namespace")])
    )
    if svc_meta.get("namespace") not in names and not namespaces.get("any"):
        raise ServiceMonitorError(
            f"{where}: spec.namespaceSelector leaves out the Service's "
            f"namespace {svc_meta.get('namespace')}"
        )
    pod_selector = (service.get("spec") or {}).get("selector") or {}
    if not pod_selector:
        raise ServiceMonitorError(f"Service {svc_meta['name']}: has no pod selector")
    ports = {p.get("name"): p for p in (service.get("spec") or {}).get("ports") or []}
    jobs = []
    for index, endpoint in enumerate(spec.get("endpoints") or []):
        at = f"{where}: spec.endpoints[{index}]"
        port = ports.get(endpoint.get("port"))
        if port is None:
            raise ServiceMonitorError(
                f"{at}.port {endpoint.get('port')!r} names no port of Service {svc_meta['name']}"
            )
        target = port.get("targetPort", port.get("port"))
        by = "name" if isinstance(target, str) and not target.isdigit() else "number"
        relabel: list[dict[str, Any]] = []
        if names:
            relabel.append(
                {
                    "source_labels": ["__meta_kubernetes_namespace"],
                    "regex": "|".join(re.escape(n) for n in names),
                    "action": "keep",
                }
            )
        for key, value in sorted(pod_selector.items()):
            relabel.append(
                {
                    "source_labels": [_meta("pod_label", key)],
                    "regex": re.escape(value),
                    "action": "keep",
                }
            )
        relabel += [
            {
                "source_labels": [f"__meta_kubernetes_pod_container_port_{by}"],
                "regex": re.escape(str(target)),
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Succeeded|Failed",
                "action": "drop",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "target_label": "container",
            },
            {"replacement": svc_meta["name"], "target_label": "service"},
            {"replacement": svc_meta["name"], "target_label": "job"},
            {"replacement": str(endpoint["port"]), "target_label": "endpoint"},
            *[_relabel(r) for r in endpoint.get("relabelings") or []],
        ]
        job: dict[str, Any] = {
            "job_name": f"serviceMonitor/{meta.get('namespace')}/{meta['name']}/{index}",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "metrics_path": endpoint.get("path", "/metrics"),
            "scheme": endpoint.get("scheme", "http"),
            **sd_config,
            "relabel_configs": relabel,
        }
        if endpoint.get("interval"):
            job["scrape_interval"] = endpoint["interval"]
        if endpoint.get("scrapeTimeout"):
            job["scrape_timeout"] = endpoint["scrapeTimeout"]
        if endpoint.get("metricRelabelings"):
            job["metric_relabel_configs"] = [_relabel(r) for r in endpoint["metricRelabelings"]]
        jobs.append(job)
    return jobs


def pod_discovery(kubeconfig: Path, service: dict[str, Any]) -> dict[str, Any]:
    """Kubernetes pod discovery of the pods `service` selects, through `kubeconfig`."""
    selector = ",".join(
        f"{k}={v}" for k, v in sorted(((service.get("spec") or {}).get("selector") or {}).items())
    )
    return {
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "kubeconfig_file": str(Path(kubeconfig).resolve()),
                "selectors": [{"role": "pod", "label": selector}],
            }
        ]
    }
