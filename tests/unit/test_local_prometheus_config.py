"""The local Prometheus's scrape config gives the labels the observer groups by."""

from __future__ import annotations

from pathlib import Path

from batchop.local.prometheus import JOB_NAME, render_config
from batchop.observe.prometheus import BM_LABEL, POD_LABEL


def _relabel_targets(job: dict) -> dict[str, str]:
    return {
        r["target_label"]: r["source_labels"][0]
        for r in job["relabel_configs"]
        if "target_label" in r and not r["target_label"].startswith("__")
    }


def test_pod_discovery_keeps_bm_pods_and_maps_labels(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    config = render_config(kubeconfig, scrape_interval_s=5)
    (job,) = config["scrape_configs"]
    assert job["job_name"] == JOB_NAME and job["scrape_interval"] == "5s"
    (sd,) = job["kubernetes_sd_configs"]
    assert sd == {"role": "pod", "kubeconfig_file": str(kubeconfig.resolve())}
    meta = "__meta_kubernetes_pod_label_" + POD_LABEL.replace(".", "_").replace("/", "_")
    keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert keep[0]["source_labels"] == [meta]
    assert _relabel_targets(job) == {
        "namespace": "__meta_kubernetes_namespace",
        "pod": "__meta_kubernetes_pod_name",
        "container": "__meta_kubernetes_pod_container_name",
        BM_LABEL: meta,
    }


def test_static_targets_only_without_kubeconfig() -> None:
    config = render_config(None, static_targets=[("127.0.0.1:8002", {"namespace": "n"})])
    (job,) = config["scrape_configs"]
    assert "kubernetes_sd_configs" not in job
    assert job["static_configs"] == [{"targets": ["127.0.0.1:8002"], "labels": {"namespace": "n"}}]
