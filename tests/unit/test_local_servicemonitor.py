"""The chart's ServiceMonitor as a scrape job (batchop_dev.local.servicemonitor): rendered by
the real helm binary, checked by Prometheus's own promtool where it is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop_dev.local.prometheus import find_promtool
from batchop_dev.local.servicemonitor import (
    ServiceMonitorError,
    pod_discovery,
    selects,
    service_monitor_jobs,
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "batchop"
SD = {"file_sd_configs": [{"files": ["/tmp/pods.json"]}]}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    from batchop_dev.local.tools import ensure_tools

    ensure_tools()
    got = subprocess.run(
        [
            str(Path(sys.prefix) / "bin" / "helm"),
            "template",
            "rel",
            str(CHART),
            "-n",
            "ops",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.serviceMonitor.interval=5s",
            "--set",
            "metrics.serviceMonitor.scrapeTimeout=4s",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    docs = [d for d in yaml.safe_load_all(got.stdout) if d]
    return {d["kind"]: d for d in docs if d["kind"] in ("ServiceMonitor", "Service")}


def test_the_charts_servicemonitor_becomes_a_job_with_its_honor_labels(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    (job,) = service_monitor_jobs(rendered["ServiceMonitor"], rendered["Service"], SD)
    assert job["job_name"] == "serviceMonitor/ops/rel-batchop/0"
    assert job["honor_labels"] is True  # else `namespace` becomes exported_namespace
    assert (job["metrics_path"], job["scrape_interval"], job["scrape_timeout"]) == (
        "/metrics",
        "5s",
        "4s",
    )
    rules = job["relabel_configs"]
    keeps = {r["source_labels"][0]: r["regex"] for r in rules if r.get("action") == "keep"}
    assert keeps["__meta_kubernetes_namespace"] == "ops"
    assert keeps["__meta_kubernetes_pod_label_app_kubernetes_io_component"] == "operator"
    assert keeps["__meta_kubernetes_pod_label_app_kubernetes_io_instance"] == "rel"
    assert keeps["__meta_kubernetes_pod_container_port_name"] == "metrics"
    targets = {r["target_label"]: r.get("replacement") for r in rules if "target_label" in r}
    assert targets["job"] == targets["service"] == "rel-batchop-metrics"
    promtool = find_promtool()
    if promtool is None:
        pytest.skip("promtool not installed (make install unpacks Debian's prometheus)")
    config = tmp_path / "prometheus.yml"
    (tmp_path / "pods.json").write_text("[]")
    job["file_sd_configs"] = [{"files": [str(tmp_path / "pods.json")]}]
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    checked = subprocess.run(
        [str(promtool), "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_monitor_that_misses_the_service_or_port_is_refused_by_field(
    rendered: dict[str, dict[str, Any]],
) -> None:
    monitor, service = rendered["ServiceMonitor"], rendered["Service"]
    other = {**monitor, "spec": {**monitor["spec"], "selector": {"matchLabels": {"x": "y"}}}}
    with pytest.raises(ServiceMonitorError, match="spec.selector does not select Service"):
        service_monitor_jobs(other, service, SD)
    bad_port = {**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": "web"}]}}
    with pytest.raises(ServiceMonitorError, match=r"spec.endpoints\[0\].port 'web' names no"):
        service_monitor_jobs(bad_port, service, SD)
    elsewhere = {
        **monitor,
        "spec": {**monitor["spec"], "namespaceSelector": {"matchNames": ["prod"]}},
    }
    with pytest.raises(ServiceMonitorError, match="leaves out the Service's namespace ops"):
        service_monitor_jobs(elsewhere, service, SD)


def test_label_selectors() -> None:
    labels = {"a": "1", "b": "2"}
    assert selects({"matchLabels": {"a": "1"}}, labels)
    assert not selects({"matchLabels": {"a": "2"}}, labels)
    assert selects(
        {
            "matchExpressions": [
                {"key": "b", "operator": "In", "values": ["2"]},
                {"key": "c", "operator": "DoesNotExist"},
            ]
        },
        labels,
    )
    assert not selects(
        {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, labels
    )


def test_pod_discovery_selects_the_services_pods_through_the_kubeconfig(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    service = rendered["Service"]
    (sd,) = pod_discovery(tmp_path / "kubeconfig", service)["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["kubeconfig_file"] == str(tmp_path / "kubeconfig")
    (selector,) = sd["selectors"]
    wanted = sorted(service["spec"]["selector"].items())
    assert selector == {"role": "pod", "label": ",".join(f"{k}={v}" for k, v in wanted)}
