"""batchop's PodMonitor read by the real Prometheus Operator, and the configuration it
generates run by a real Prometheus 3 with Kubernetes discovery (issue 25): the parts of the
local stack's monitoring (batchop_dev.local.monitoring), checked one by one.

Both are built from Go modules (`make monitoring-binaries`, part of `make test`). On a
cluster of its own, with the operator scoped to the test's namespaces, the test:
1. installs the CRDs from the operator's own module version;
2. applies the Deployment and the PodMonitor that batchop renders for a BatchedModel;
3. runs cmd/operator against the local API server, and a `Prometheus` selecting the
   PodMonitor by the labels batchop gives it (as a kube-prometheus-stack's does);
4. checks the job the operator writes into Secret prometheus-<name> (prometheus.yaml.gz):
   pod discovery in the model's namespace, the `metrics` port kept, batchop's relabeling
   to `batchedmodel`, the interval and path the PodMonitor asks for;
5. expands it with the real prometheus-config-reloader run once, as the operator's init
   container does (its sharding keep rule is `regex: $(SHARD)` until then);
6. runs Prometheus 3 on that configuration and checks it discovers every pod at its
   loopback address with the labels that the policy's queries and the dashboard group by
   (namespace, batchedmodel), and the pod's own (pod, container, instance).
A second test does the same for the chart's ServiceMonitor (helm template), comparing the
operator's job with batchop_dev.local.servicemonitor's: the job only, since the local
cluster's Endpoints refuse loopback addresses, so endpoints-role targets cannot appear (the
local stack scrapes the operator through the hand-made job for that reason).
Skips, saying why, where the binaries have not been built (`make test` builds them first).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop.api import constants as c
from batchop.api.models import parse_batched_model
from batchop.observe.prometheus import BM_LABEL
from batchop.render.children import render_children
from batchop.render.options import RenderOptions
from batchop_dev.local import build, prometheus, versions
from batchop_dev.local.promoperator import (
    CONFIG_KEY,
    PrometheusOperator,
    config_bytes,
    decode_config,
    expand_config,
    prometheus_resource,
    reloader_env,
)
from batchop_dev.polling import wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "monitored"
PROMETHEUS = "k8s"
# What a kube-prometheus-stack's Prometheus typically selects monitors by.
SELECTOR_LABELS = {"release": "kube-prometheus-stack"}


@pytest.fixture(scope="module")
def monitoring() -> build.MonitoringBinaries:
    pins = versions.load_monitoring_pins()
    found = build.monitoring_binaries_in(build.cache_root(), pins)
    missing = [
        p
        for p in (found.prometheus_operator, found.config_reloader, found.prometheus)
        if not os.access(p, os.X_OK)
    ]
    if missing or not found.crds.is_dir():
        pytest.skip(
            "the Prometheus Operator / Prometheus 3 binaries are not built "
            f"({', '.join(map(str, missing)) or found.crds}): run `make monitoring-binaries` "
            "(`make test` runs it first; a cold build from the Go module proxy, ~6 min)"
        )
    return found


@pytest.fixture(scope="module")
def crd_cluster(monitoring: build.MonitoringBinaries, own_cluster: Any) -> Any:
    """The module's cluster with the Prometheus Operator's CRDs (from its module) served."""
    own_cluster.kubectl("apply", "--server-side", "-f", str(monitoring.crds))
    own_cluster.wait_established(
        *(
            f"{crd}.monitoring.coreos.com"
            for crd in ("podmonitors", "servicemonitors", "prometheuses")
        )
    )
    return own_cluster


def _generated(cluster: Any, namespace: str, job_name: str) -> Any:
    """A probe: (config, secret) once the operator's Secret holds a config with `job_name`."""

    def probe() -> tuple[dict[str, Any], dict[str, Any]] | None:
        secrets = cluster.kubectl_json(
            "get",
            "secrets",
            "-n",
            namespace,
            f"--field-selector=metadata.name=prometheus-{PROMETHEUS}",
        )["items"]
        if not secrets or not (secrets[0].get("data") or {}).get(CONFIG_KEY):
            return None
        config = decode_config(secrets[0])
        return (config, secrets[0]) if _job(config, job_name) else None

    return probe


@contextmanager
def _operator_config(
    cluster: Any,
    monitoring: build.MonitoringBinaries,
    namespace: str,
    workdir: Path,
    job_name: str,
    *,
    service_monitors: bool = False,
) -> Iterator[tuple[PrometheusOperator, dict[str, Any], dict[str, Any]]]:
    """The real operator watching `namespace`, a `Prometheus` resource selecting our monitors
    applied; yields (operator, config, secret) once its generated config holds `job_name`."""
    operator = PrometheusOperator(
        monitoring.prometheus_operator, cluster.kubeconfig, [namespace], workdir
    )
    with operator:
        resource = prometheus_resource(
            PROMETHEUS,
            namespace,
            operator.access,
            pod_monitor_labels=SELECTOR_LABELS,
            version=versions.load_monitoring_pins().prometheus_release,
        )
        if service_monitors:
            resource["spec"]["serviceMonitorSelector"] = {"matchLabels": dict(SELECTOR_LABELS)}
        cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(resource))
        config, secret = wait_for(
            _generated(cluster, namespace, job_name),
            f"the operator's config with job {job_name}",
            timeout=120,
            context=lambda: f"operator log:\n{operator.log_tail()}",
        )
        yield operator, config, secret


def _batched_model(namespace: str = NAMESPACE, name: str | None = None) -> Any:
    manifest = yaml.safe_load((ROOT / "examples" / "cpu-demo.yaml").read_text())
    manifest["metadata"]["namespace"] = namespace
    if name is not None:
        manifest["metadata"]["name"] = name
    manifest["spec"]["scaling"]["replicas"] = 2
    return parse_batched_model(manifest)


def _apply_children(cluster: Any, bm: Any, port: str | None = None) -> dict[str, Any]:
    """Apply the Deployment and the PodMonitor batchop renders for `bm` (the PodMonitor's
    port replaced by `port` when given); returns the PodMonitor."""
    options = RenderOptions(pod_monitor_labels=SELECTOR_LABELS, scrape_interval="5s")
    kinds = {child["kind"]: child for child in render_children(bm, options)}
    monitor = kinds["PodMonitor"]
    if port is not None:
        monitor["spec"]["podMetricsEndpoints"][0]["port"] = port
    for child in (kinds["Deployment"], monitor):
        cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(child))
    return monitor


def _pods_with_ips(cluster: Any, namespace: str, count: int) -> list[dict[str, Any]]:
    def probe() -> list[dict[str, Any]] | None:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", c.LABEL_MODEL)["items"]
        up = [p for p in pods if (p.get("status") or {}).get("podIP")]
        return up if len(up) == count else None

    return wait_for(probe, f"{count} pods with pod IPs in {namespace}", timeout=120)


def _statefulset(cluster: Any, namespace: str) -> dict[str, Any]:
    return wait_for(
        lambda: cluster.kubectl_json(
            "get", "statefulsets", "-n", namespace, "-l", f"prometheus={PROMETHEUS}"
        )["items"],
        "the operator's StatefulSet",
        timeout=60,
    )[0]


def _job(config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((j for j in config.get("scrape_configs") or [] if j["job_name"] == name), None)


def _targets_by_pod(server: prometheus.PrometheusServer, pool: str) -> dict[str, dict[str, str]]:
    return {
        t["labels"].get("pod", ""): t["labels"]
        for t in server.active_targets()
        if t["scrapePool"] == pool
    }


def test_real_operator_reads_batchops_pod_monitor(
    monitoring: build.MonitoringBinaries, crd_cluster: Any, tmp_path: Path
) -> None:
    cluster = crd_cluster
    cluster.kubectl("create", "namespace", NAMESPACE)

    bm = _batched_model()
    monitor = _apply_children(cluster, bm)
    pods = _pods_with_ips(cluster, NAMESPACE, 2)
    pod_ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    assert all(ip.startswith("127.") for ip in pod_ips.values()), pod_ips

    job_name = f"podMonitor/{NAMESPACE}/{monitor['metadata']['name']}/0"
    with _operator_config(cluster, monitoring, NAMESPACE, tmp_path / "operator", job_name) as (
        operator,
        config,
        secret,
    ):
        statefulset = _statefulset(cluster, NAMESPACE)

    job = _job(config, job_name)
    assert job is not None
    # Discovery: pods of the PodMonitor's namespace, through the API server we named.
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    assert sd["namespaces"]["names"] == [NAMESPACE]
    assert sd["api_server"] == operator.access.server
    assert sd["tls_config"]["cert_file"] == operator.access.cert_file
    # What the PodMonitor's endpoint asks for.
    assert job["scrape_interval"] == "5s"
    assert job["metrics_path"] == "/metrics"
    relabels = job["relabel_configs"]
    assert {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": c.PORT_NAME_METRICS,
    } in relabels, relabels
    model_rule = [r for r in relabels if r.get("target_label") == BM_LABEL]
    assert model_rule and model_rule[0]["source_labels"] == [c.PROM_META_LABEL_MODEL], relabels
    assert model_rule[0].get("action", "replace") == "replace"
    targets = {r.get("target_label") for r in relabels}
    assert {"namespace", "pod", "container", BM_LABEL} <= targets, targets

    # The operator's config holds $(SHARD) (its sharding keep rule) and $(POD_NAME), which
    # only the config reloader expands: run it once as the StatefulSet's init container does,
    # with that container's environment (POD_NAME as the downward API gives pod 0).
    assert any("$(SHARD)" in str(r.get("regex")) for r in relabels), relabels
    env = reloader_env(statefulset, f"{statefulset['metadata']['name']}-0")
    assert "SHARD" in env, env
    expanded = expand_config(
        monitoring.config_reloader, config_bytes(secret), tmp_path / "reloader", env
    )
    assert "$(SHARD)" not in yaml.safe_dump(expanded)
    # Prometheus 3 runs that config as it is, as the local stack does.
    with prometheus.PrometheusServer(
        binary=monitoring.prometheus, config=expanded, workdir=tmp_path / "prometheus3"
    ) as server:

        def every_pod() -> dict[str, Any] | None:
            real = _targets_by_pod(server, job_name)
            return real if set(real) == set(pod_ips) else None

        real = wait_for(
            every_pod,
            "a target for every pod",
            timeout=90,
            context=lambda: (
                f"targets: {server.active_targets()}\n"
                f"dropped: {server.dropped_targets()}\n"
                f"log: {server.log_path.read_text(errors='replace')[-2000:]}"
            ),
        )

    for pod, ip in pod_ips.items():
        r = real[pod]
        # The labels batchop's queries and dashboard group by, and the pod's own.
        assert r["instance"] == f"{ip}:{c.PORT_METRICS}", r
        assert r["namespace"] == NAMESPACE and r[BM_LABEL] == bm.metadata.name, r
        assert r["pod"] == pod and r["container"] == c.CONTAINER_NAME, r
    print(f"\nlabels of a target of the real operator's job: {sorted(real[next(iter(real))])}")


def test_a_pod_monitor_keeping_a_port_the_pods_lack_says_what_to_check(
    monitoring: build.MonitoringBinaries, crd_cluster: Any, tmp_path: Path
) -> None:
    """Two models in one namespace: one PodMonitor as batchop renders it, one keeping a port
    named `metricz` that the pods lack. The real operator's config (expanded by the real
    reloader) runs in Prometheus 3, which drops the second model's pods by the port rule;
    batchop's own observer reads that Prometheus, and the conditions the tuning loop writes
    (the same functions: why_no_metrics, build_observation, tuner_conditions; kopf's
    operator is not run, as it would put the port back) are MetricsAvailable=False for
    both, with different things to check: the first's targets are down (KWOK's pods run no
    Triton here), the second has no target at all."""
    from batchop.api.tuning_spec import tuning_spec
    from batchop.controller.autotune import tuner_conditions
    from batchop.observe.prometheus import PrometheusObserver, build_observation, why_no_metrics

    cluster, namespace = crd_cluster, "wrong-port"
    cluster.kubectl("create", "namespace", namespace)
    good, bad = _batched_model(namespace), _batched_model(namespace, "cpu-demo-port")
    _apply_children(cluster, good)
    bad_monitor = _apply_children(cluster, bad, port="metricz")
    pods = _pods_with_ips(cluster, namespace, 4)
    bad_pods = {
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["labels"][c.LABEL_MODEL] == bad.metadata.name
    }

    job_name = f"podMonitor/{namespace}/{bad_monitor['metadata']['name']}/0"
    with _operator_config(cluster, monitoring, namespace, tmp_path / "operator", job_name) as (
        _,
        _,
        secret,
    ):
        statefulset = _statefulset(cluster, namespace)
    env = reloader_env(statefulset, f"{statefulset['metadata']['name']}-0")
    expanded = expand_config(
        monitoring.config_reloader, config_bytes(secret), tmp_path / "reloader", env
    )
    with prometheus.PrometheusServer(
        binary=monitoring.prometheus, config=expanded, workdir=tmp_path / "prometheus3"
    ) as server:

        def settled() -> dict[str, Any] | None:
            dropped = {
                t["discoveredLabels"].get("__meta_kubernetes_pod_name")
                for t in server.dropped_targets()
                if t["discoveredLabels"].get("job") == job_name
            }
            parts = PrometheusObserver(server.url, window="20s").observe()
            seen = parts.get((namespace, good.metadata.name))
            if dropped >= bad_pods and seen is not None and seen.targets == 2:
                return parts
            return None

        parts = wait_for(
            settled,
            "the good model's 2 targets and the other's pods dropped",
            timeout=90,
            context=lambda: (
                f"active: {server.active_targets()}\ndropped: {server.dropped_targets()}"
            ),
        )

    assert (namespace, bad.metadata.name) not in parts
    for bm, says in ((good, "2 target(s) for this model are down"), (bad, "no pod")):
        part = parts.get((namespace, bm.metadata.name))
        why = why_no_metrics(part)
        obs = build_observation(part, time_s=0.0, replicas=2, ready_replicas=2, delay_us=500)
        available = next(
            x for x in tuner_conditions(obs, tuning_spec(bm), why) if x.type == "MetricsAvailable"
        )
        assert available.status == "False" and why is not None and says in why, (bm, why)
        assert available.message == why
    assert "PodMonitor" in (why_no_metrics(None) or "")


def test_real_operator_reads_the_charts_service_monitor(
    monitoring: build.MonitoringBinaries, crd_cluster: Any, tmp_path: Path
) -> None:
    """The chart's ServiceMonitor: the job the real operator generates against the one
    batchop_dev.local.servicemonitor writes by hand. Only the job is compared: its targets
    cannot appear here, since the local cluster's Endpoints refuse the pods' loopback
    addresses (the hand translation uses pod discovery for that reason)."""
    from batchop_dev.local import helmchart
    from batchop_dev.local.servicemonitor import service_monitor_jobs

    cluster = crd_cluster
    namespace = "batchop-system"
    cluster.kubectl("create", "namespace", namespace)
    values = {**{f"metrics.serviceMonitor.labels.{k}": v for k, v in SELECTOR_LABELS.items()}}
    monitor = helmchart.service_monitor(cluster.kubeconfig, values, namespace=namespace)
    text = helmchart.helm(
        cluster.kubeconfig,
        "template",
        helmchart.RELEASE,
        str(helmchart.CHART),
        "-n",
        namespace,
        "--show-only",
        "templates/service.yaml",
    )
    (service,) = [d for d in yaml.safe_load_all(text) if d]
    for obj in (service, monitor):
        cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(obj))

    job_name = f"serviceMonitor/{namespace}/{monitor['metadata']['name']}/0"
    with _operator_config(
        cluster, monitoring, namespace, tmp_path / "operator", job_name, service_monitors=True
    ) as (_, config, _):
        pass
    real = _job(config, job_name)
    assert real is not None
    (hand,) = service_monitor_jobs(monitor, service, {"kubernetes_sd_configs": [{}]})
    assert real["job_name"] == hand["job_name"]
    for key in ("honor_labels", "metrics_path", "scrape_interval", "scrape_timeout"):
        assert real.get(key) == hand.get(key), (key, real.get(key), hand.get(key))
    assert real["honor_labels"] is True  # the operator's series keep their `namespace`
    (sd,) = real["kubernetes_sd_configs"]
    assert sd["role"] in ("endpoints", "endpointslice") and sd["namespaces"]["names"] == [namespace]

    def constant_labels(job: dict[str, Any]) -> dict[str, str]:
        """Labels a job sets to a fixed value (service, job, endpoint), or copies from a
        meta label: target label -> the replacement or the source labels."""
        out: dict[str, str] = {}
        for rule in job["relabel_configs"]:
            label = rule.get("target_label")
            if label and not label.startswith("__") and rule.get("action", "replace") == "replace":
                sources = rule.get("source_labels")
                out[label] = ";".join(sources) if sources else str(rule.get("replacement"))
        return out

    real_labels, hand_labels = constant_labels(real), constant_labels(hand)
    for label in ("namespace", "pod", "container", "endpoint"):
        assert real_labels.get(label) == hand_labels.get(label), (label, real_labels, hand_labels)
    # job and service: the Service's name, a meta label to the operator, a constant to us.
    for label in ("job", "service"):
        assert real_labels[label] == "__meta_kubernetes_service_name", real_labels
        assert hand_labels[label] == service["metadata"]["name"], hand_labels
    print(
        f"\nchart ServiceMonitor, real operator vs hand translation: discovery role "
        f"{sd['role']!r} vs 'pod'; labels real {real_labels}; hand {hand_labels}"
    )
