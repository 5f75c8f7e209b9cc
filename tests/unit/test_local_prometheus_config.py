"""The local Prometheus's scrape config gives the labels the observer groups by."""

from __future__ import annotations

from pathlib import Path

from batchop.observe.prometheus import BM_LABEL, POD_LABEL
from batchop_dev.local.prometheus import JOB_NAME, render_config


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


def test_file_sd_targets_carry_kubernetes_sd_meta_labels() -> None:
    from batchop_dev.local.prometheus import pod_targets

    pod = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u", "labels": {POD_LABEL: "bm"}},
        "spec": {
            "nodeName": "n",
            "containers": [
                {
                    "name": "tritonserver",
                    "ports": [
                        {"name": "http", "containerPort": 8000},
                        {"name": "metrics", "containerPort": 8002},
                    ],
                },
                {"name": "sidecar"},
            ],
        },
        "status": {
            "podIP": "127.10.1.2",
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    groups = pod_targets(pod)
    assert [g["targets"] for g in groups] == [
        ["127.10.1.2:8000"],
        ["127.10.1.2:8002"],
        ["127.10.1.2"],
    ]
    metrics = groups[1]["labels"]
    meta = "__meta_kubernetes_pod_label_" + POD_LABEL.replace(".", "_").replace("/", "_")
    assert metrics[meta] == "bm"
    assert metrics["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert metrics["__meta_kubernetes_pod_ready"] == "true"
    assert "__meta_kubernetes_pod_container_port_number" not in groups[2]["labels"]
    assert pod_targets({**pod, "status": {"phase": "Pending"}}) == []


def test_file_sd_job_uses_the_same_relabeling(tmp_path: Path) -> None:
    sd = tmp_path / "pods.json"
    via_k8s = render_config(tmp_path / "kc")["scrape_configs"][0]
    via_file = render_config(tmp_path / "kc", sd_file=sd)["scrape_configs"][0]
    assert via_file["file_sd_configs"] == [{"files": [str(sd)], "refresh_interval": "5s"}]
    assert "kubernetes_sd_configs" not in via_file
    assert via_file["relabel_configs"] == via_k8s["relabel_configs"]
