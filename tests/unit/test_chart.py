"""The Helm chart: lint, render, validate against Kubernetes schemas, least privilege, values.

Runs the real helm binary (extracted into the venv by batchop_dev.local.tools); no cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from batchop import dashboard
from batchop.controller.settings import SettingsError, parse_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "batchop"
K8S_VERSION = "1.34"

# Every non-default switch on at once, so one render covers every template.
ALL_ON = [
    "metrics.serviceMonitor.enabled=true",
    "tritonPodMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "dashboard.namespace=monitoring",
    "defaultTritonImage=registry.local:5000/triton:24.10-py3",
    "replicaCount=2",  # the PodDisruptionBudget and spreading
]
VALUE_SETS = {
    "defaults": [],
    "all-on": ALL_ON,
    "namespaced": [*ALL_ON, "watchNamespaces={team-a,team-b}"],
    "no-rbac-no-sa": [
        "rbac.create=false",
        "serviceAccount.create=false",
        "serviceAccount.name=existing",
        "dashboard.enabled=false",
    ],
}


@pytest.fixture(scope="session")
def helm() -> str:
    from batchop_dev.local.tools import ensure_tools

    ensure_tools()
    path = Path(sys.prefix) / "bin" / "helm"
    assert path.is_file(), f"helm not installed at {path}"
    return str(path)


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def render(helm: str, sets: list[str], *extra: str) -> list[dict[str, Any]]:
    args = ["template", "rel", str(CHART), "--namespace", "batchop-system", *extra]
    for s in sets:
        args += ["--set", s]
    got = run_helm(helm, *args)
    assert got.returncode == 0, got.stderr
    return [d for d in yaml.safe_load_all(got.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


# Shapes of the Prometheus Operator objects the chart renders (monitoring.coreos.com/v1),
# restricted to the fields the chart uses; unknown fields are errors so typos are caught.
_SELECTOR = {"type": "object"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_DURATION = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"}
_NS_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "any": {"type": "boolean"},
        "matchNames": {"type": "array", "items": {"type": "string"}},
    },
}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        k: {"type": "string"}
        for k in ("targetLabel", "regex", "replacement", "action", "separator")
    }
    | {"sourceLabels": {"type": "array", "items": {"type": "string"}}},
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "honorLabels": {"type": "boolean"},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "relabelings": {"type": "array", "items": _RELABEL},
    },
}
_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _LABELS},
}


def _kind_schema(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _META,
            "spec": spec,
        },
    }


MONITORING_SCHEMAS = {
    "ServiceMonitor": _kind_schema(
        "ServiceMonitor",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": _NS_SELECTOR,
                "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        },
    ),
    "PodMonitor": _kind_schema(
        "PodMonitor",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": _NS_SELECTOR,
                "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        },
    ),
    "PrometheusRule": _kind_schema(
        "PrometheusRule",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["alert", "expr"],
                                    "properties": {
                                        "alert": {
                                            "type": "string",
                                            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                                        },
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "labels": _LABELS,
                                        "annotations": _LABELS,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    ),
}


def test_chart_crd_is_byte_equal_to_the_generated_crd() -> None:
    generated = ROOT / "crds" / "batchedmodel.yaml"
    copy = CHART / "crds" / "batchedmodel.yaml"
    assert copy.read_bytes() == generated.read_bytes(), "run `make crd` to refresh the chart copy"


def test_dashboard_and_alert_files_match_their_generator() -> None:
    for name, text in dashboard.rendered_files().items():
        committed = (CHART / "files" / name).read_text(encoding="utf-8")
        assert committed == text, f"charts/batchop/files/{name} is stale: run `make dashboard`"


def test_helm_lint_strict_is_clean(helm: str) -> None:
    for sets in VALUE_SETS.values():
        args = ["lint", "--strict", str(CHART)]
        for s in sets:
            args += ["--set", s]
        got = run_helm(helm, *args)
        assert got.returncode == 0, got.stdout + got.stderr
        assert "[WARNING]" not in got.stdout and "[ERROR]" not in got.stdout, got.stdout


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_are_valid_kubernetes(helm: str, name: str) -> None:
    docs = render(helm, VALUE_SETS[name], "--include-crds")
    assert docs
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']} ({name})"
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            try:
                jsonschema.validate(doc, MONITORING_SCHEMAS[doc["kind"]])
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {list(exc.absolute_path)}")
        else:
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


def _rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    roles = by_kind(docs, "Role") + by_kind(docs, "ClusterRole")
    return [rule for role in roles for rule in role["rules"]]


@pytest.mark.parametrize("name", ["defaults", "namespaced"])
def test_rbac_grants_only_what_batchop_uses(helm: str, name: str) -> None:
    rules = _rules(render(helm, VALUE_SETS[name]))
    assert rules
    allowed = {
        ("batchop.io", "batchedmodels"),
        ("batchop.io", "batchedmodels/status"),
        ("apps", "deployments"),
        ("", "services"),
        ("policy", "poddisruptionbudgets"),
        ("monitoring.coreos.com", "podmonitors"),
        ("", "pods"),
        ("", "events"),
        ("events.k8s.io", "events"),
    }
    if name == "defaults":  # cluster-wide: kopf's CRD scanning, read-only
        allowed.add(("apiextensions.k8s.io", "customresourcedefinitions"))
    write = {"create", "update", "patch", "delete", "deletecollection"}
    leases = [r for r in rules if r["resources"] == ["leases"]]
    # Leader election: create the Lease; read and renew only the chart's own one.
    assert sorted((r["verbs"], r.get("resourceNames")) for r in leases) == [
        (["create"], None),
        (["get", "update"], ["rel-batchop"]),
    ]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] for r in leases)
    for rule in rules:
        if rule in leases:
            continue
        words = [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
        assert "*" not in words, f"wildcard in {rule}"
        assert "nonResourceURLs" not in rule and "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) in allowed, f"{group}/{resource} is not used by batchop"
                assert resource not in ("secrets", "configmaps")
        if rule["resources"] == ["pods"]:
            assert set(rule["verbs"]) & write == {"patch"}, "pods: only the delay annotation"
        if rule["resources"] == ["batchedmodels"]:
            assert not set(rule["verbs"]) & {"create", "delete", "update"}
        if rule["resources"] == ["events"]:
            assert set(rule["verbs"]) <= {"create", "patch"}
        if rule["resources"] == ["customresourcedefinitions"]:
            assert not set(rule["verbs"]) & write
        if rule["resources"] == ["batchedmodels/status"]:
            assert rule["verbs"] == ["patch"]


def test_watch_namespaces_gives_roles_there_and_nothing_cluster_wide(helm: str) -> None:
    docs = render(helm, VALUE_SETS["namespaced"])
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    roles = {r["metadata"]["namespace"] for r in by_kind(docs, "Role")}
    bindings = by_kind(docs, "RoleBinding")
    assert roles == {"team-a", "team-b", "batchop-system"}  # the last: the Lease only
    (election,) = [
        r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] == "batchop-system"
    ]
    assert {res for rule in election["rules"] for res in rule["resources"]} == {"leases"}
    assert {b["metadata"]["namespace"] for b in bindings} == roles
    sa = by_kind(docs, "ServiceAccount")[0]["metadata"]
    for b in bindings:
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}
        ]


def test_watching_all_namespaces_uses_one_cluster_role(helm: str) -> None:
    docs = render(helm, [])
    assert len(by_kind(docs, "ClusterRole")) == 1
    assert [r["metadata"]["name"] for r in by_kind(docs, "Role")] == ["rel-batchop-leader-election"]
    binding = by_kind(docs, "ClusterRoleBinding")[0]
    assert binding["roleRef"]["name"] == by_kind(docs, "ClusterRole")[0]["metadata"]["name"]


def test_podmonitor_rights_follow_the_per_model_switch(helm: str) -> None:
    on = _rules(render(helm, []))
    off = _rules(render(helm, ["podMonitorPerModel=false"]))
    assert any("podmonitors" in r["resources"] for r in on)
    assert not any("podmonitors" in r["resources"] for r in off)


def test_operator_pod_is_hardened(helm: str) -> None:
    dep = by_kind(render(helm, []), "Deployment")[0]
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 1
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["path"] == "/healthz"
        assert c[probe]["httpGet"]["port"] == "health"


@pytest.mark.parametrize("name", ["defaults", "namespaced"])
def test_deployment_env_is_what_batchop_run_parses(helm: str, name: str) -> None:
    """The chart configures `batchop run` through its environment: the operator's own settings
    parser must accept it and agree with the ports the probes and the Service use."""
    docs = render(helm, [*VALUE_SETS[name], "metrics.port=9100", "health.port=9101"])
    (c,) = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    settings = parse_settings({}, env)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert settings.metrics_address == ("0.0.0.0", ports["metrics"]) == ("0.0.0.0", 9100)
    assert settings.liveness == f"http://0.0.0.0:{ports['health']}/healthz"
    assert ports["health"] == 9101
    if name == "namespaced":
        assert settings.namespaces == ("team-a", "team-b") and not settings.all_namespaces
    else:
        assert settings.all_namespaces and not settings.namespaces
    service = by_kind(docs, "Service")[0]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_prometheus_rule_comes_from_the_alert_source(helm: str) -> None:
    sets = [*ALL_ON, "prometheusRule.p99OverSloFor=3m", "prometheusRule.severity=page"]
    (rule,) = by_kind(render(helm, sets), "PrometheusRule")
    rendered = rule["spec"]["groups"][0]["rules"]
    assert [r["alert"] for r in rendered] == [a.name for a in dashboard.ALERTS]
    assert [r["expr"] for r in rendered] == [a.expr for a in dashboard.ALERTS]
    p99 = next(r for r in rendered if r["alert"] == "BatchedModelP99OverSLO")
    assert p99["for"] == "3m" and p99["labels"]["severity"] == "page"


def test_dashboard_configmap_carries_the_generated_dashboard(helm: str) -> None:
    (cm,) = by_kind(render(helm, ALL_ON), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert json.loads(cm["data"]["batchop.json"]) == dashboard.build_dashboard()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("replicaCount=11", "/replicaCount"),
        ("leaderElection.leaseDuration=1", "/leaderElection/leaseDuration"),
        ("leaderElection.renewDeadline=0", "/leaderElection/renewDeadline"),
        ("podDisruptionBudget.maxUnavailable=0", "/podDisruptionBudget/maxUnavailable"),
        ("watchNamespaces={Team_A}", "/watchNamespaces/0"),
        ("prometheus.url=prometheus:9090", "/prometheus/url"),
        ("logFormat=xml", "/logFormat"),
        ("metrics.port=70000", "/metrics/port"),
        ("prometheusRule.p99OverSloFor=ten", "/prometheusRule/p99OverSloFor"),
        ("resources.limits.memory=lots", "/resources/limits/memory"),
        ("imageTag=v1", "imageTag"),
        ("health.port=8000", "metrics.port and health.port must differ"),
    ],
)
def test_bad_values_fail_install_with_a_message_naming_the_key(
    helm: str, setting: str, message: str
) -> None:
    got = run_helm(helm, "template", "rel", str(CHART), "--set", setting)
    assert got.returncode != 0
    assert message in got.stderr, got.stderr


def test_replicas_without_leader_election_are_refused(helm: str) -> None:
    got = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "--set",
        "replicaCount=2",
        "--set",
        "leaderElection.enabled=false",
    )
    assert got.returncode != 0 and "/replicaCount" in got.stderr, got.stderr
    got = run_helm(helm, "template", "rel", str(CHART), "--set", "leaderElection.enabled=false")
    assert got.returncode == 0, got.stderr


def test_leader_election_settings_reach_the_operator(helm: str) -> None:
    docs = render(
        helm,
        [
            "leaderElection.leaseDuration=30",
            "leaderElection.renewDeadline=20",
            "leaderElection.retryPeriod=4",
        ],
    )
    dep = by_kind(docs, "Deployment")[0]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    s = parse_settings({}, {e["name"]: e["value"] for e in c["env"]})
    assert s.leader_elect and s.lease_namespace == "batchop-system"
    assert s.lease_name == "rel-batchop"  # the one name the Role lets it read and renew
    assert (s.lease_duration, s.lease_renew_deadline, s.lease_retry_period) == (30, 20, 4)
    # A rolling update: the new pod stands by until the old one releases the Lease.
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    off = by_kind(render(helm, ["leaderElection.enabled=false"]), "Deployment")[0]
    (c,) = off["spec"]["template"]["spec"]["containers"]
    assert not parse_settings({}, {e["name"]: e["value"] for e in c["env"]}).leader_elect
    assert off["spec"]["strategy"]["type"] == "Recreate"


def test_bad_lease_timing_is_refused_by_the_operator_naming_the_settings(helm: str) -> None:
    docs = render(helm, ["leaderElection.renewDeadline=20"])  # >= the 15 s lease duration
    (c,) = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    with pytest.raises(SettingsError) as info:
        parse_settings({}, {e["name"]: e["value"] for e in c["env"]})
    assert "BATCHOP_LEASE_RENEW_DEADLINE" in str(info.value)


def test_two_replicas_get_a_disruption_budget_and_spread(helm: str) -> None:
    assert not by_kind(render(helm, []), "PodDisruptionBudget")  # 1 replica: it would block drains
    docs = render(helm, ["replicaCount=2"])
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    dep = by_kind(docs, "Deployment")[0]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


# Labels the Prometheus Operator puts on every target of a ServiceMonitor / PodMonitor.
_TARGET_LABELS = {"namespace", "service", "pod", "container", "endpoint", "job", "instance"}


def _operator_series_labels() -> set[str]:
    """Label names on the operator's own /metrics (one model observed, all families)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from batchop.metrics import OperatorMetrics

    m = OperatorMetrics(process_collectors=False)
    m.record_decision("ml", "bm", "delay", "p99 over SLO")
    m.set_condition("ml", "bm", "CapacityLimited", True)
    text = generate_latest(m.registry).decode()
    return {k for f in text_string_to_metric_families(text) for s in f.samples for k in s.labels}


def test_service_monitor_keeps_the_operators_namespace_label(helm: str) -> None:
    """The operator's series carry the BatchedModel's `namespace`; Prometheus keeps a
    scraped label that clashes with a target label only with honorLabels (otherwise it
    becomes exported_namespace and the alert joins and dashboard panels miss)."""
    clash = _operator_series_labels() & _TARGET_LABELS
    assert "namespace" in clash, clash
    (monitor,) = by_kind(render(helm, ALL_ON), "ServiceMonitor")
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint.get("honorLabels") is True, endpoint


def test_triton_pod_monitor_takes_namespace_and_pod_from_the_target(helm: str) -> None:
    """Triton's series carry no namespace or pod of their own, so the target's must win:
    honorLabels stays off, and the BatchedModel label comes from the pod by relabeling."""
    (monitor,) = by_kind(render(helm, ALL_ON), "PodMonitor")
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert not endpoint.get("honorLabels", False), endpoint
        assert any(r["targetLabel"] == "batchedmodel" for r in endpoint["relabelings"])


def test_notes_say_where_things_are(helm: str) -> None:
    got = run_helm(
        helm,
        "install",
        "rel",
        str(CHART),
        "--dry-run=client",
        "-n",
        "ops",
        "--set",
        "watchNamespaces={team-a}",
    )
    assert got.returncode == 0, got.stderr
    notes = got.stdout.split("NOTES:", 1)[1]
    assert "team-a" in notes and "rel-batchop-metrics" in notes and "kubectl get bm" in notes


# --- PromQL checked by Prometheus's own tool ----------------------------------------------


@pytest.fixture(scope="session")
def promtool() -> str:
    from batchop_dev.local.prometheus import ensure_promtool

    return str(ensure_promtool())


def _rule_group(helm: str) -> dict[str, Any]:
    (rule,) = by_kind(render(helm, ["prometheusRule.enabled=true"]), "PrometheusRule")
    return {"groups": rule["spec"]["groups"]}


def test_alert_rules_and_dashboard_queries_parse(helm: str, promtool: str, tmp_path: Path) -> None:
    """promtool parses every alert and, as recording rules, every dashboard query."""
    rules = _rule_group(helm)
    rules["groups"].append(
        {
            "name": "dashboard",
            "rules": [
                {
                    "record": f"dashboard:query_{i}",
                    "expr": dashboard.substitute(q.expr, "ns", "bm", interval="1m"),
                }
                for i, (_, q) in enumerate(dashboard.all_queries())
            ],
        }
    )
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    got = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert got.returncode == 0, got.stdout + got.stderr


def test_alerts_fire_when_and_only_when_they_should(
    helm: str, promtool: str, tmp_path: Path
) -> None:
    """Synthetic series through promtool's rule tester: model `hot` is over its SLO and
    capacity-limited, model `cool` is within it; only `hot` alerts, and only after `for`."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_group(helm)))
    alerts = {a.name: a for a in dashboard.ALERTS}

    def series(name: str, bm: str, value: str, **labels: str) -> dict[str, str]:
        extra = "".join(f', {k}="{v}"' for k, v in labels.items())
        return {"series": f'{name}{{namespace="ml", batchedmodel="{bm}"{extra}}}', "values": value}

    def expected(name: str, bm: str, value: str, **labels: str) -> dict[str, Any]:
        def fill(text: str) -> str:
            return (
                text.replace("{{ $labels.namespace }}", "ml")
                .replace("{{ $labels.batchedmodel }}", bm)
                .replace("{{ $value | humanize }}", value)
            )

        return {
            "exp_labels": {"severity": "warning", "namespace": "ml", "batchedmodel": bm, **labels},
            "exp_annotations": {
                "summary": fill(alerts[name].summary),
                "description": fill(alerts[name].description),
            },
        }

    p99 = "nv_inference_request_summary_us"
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series(p99, "hot", "60000x30", pod="hot-0", quantile="0.99"),
                    series(p99, "hot", "20000x30", pod="hot-1", quantile="0.99"),
                    series(p99, "cool", "30000x30", pod="cool-0", quantile="0.99"),
                    series("batchop_slo_p99_milliseconds", "hot", "50x30"),
                    series("batchop_slo_p99_milliseconds", "cool", "50x30"),
                    series("batchop_condition", "hot", "1x30", type="CapacityLimited"),
                    series("batchop_condition", "cool", "0x30", type="CapacityLimited"),
                    series("batchop_condition", "hot", "1x30", type="MetricsAvailable"),
                    series("batchop_condition", "cool", "0x30", type="MetricsAvailable"),
                    {"series": "batchop_tick_duration_seconds_count", "values": "0+1x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "BatchedModelP99OverSLO", "exp_alerts": []},
                    {
                        "eval_time": "12m",
                        "alertname": "BatchedModelP99OverSLO",
                        "exp_alerts": [expected("BatchedModelP99OverSLO", "hot", "60")],
                    },
                    {
                        "eval_time": "12m",
                        "alertname": "BatchedModelCapacityLimited",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "20m",
                        "alertname": "BatchedModelCapacityLimited",
                        "exp_alerts": [expected("BatchedModelCapacityLimited", "hot", "1")],
                    },
                    {
                        "eval_time": "10m",
                        "alertname": "BatchedModelMetricsUnavailable",
                        "exp_alerts": [expected("BatchedModelMetricsUnavailable", "cool", "0")],
                    },
                    {
                        "eval_time": "20m",
                        "alertname": "BatchopOperatorMetricsAbsent",
                        "exp_alerts": [],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test))
    got = subprocess.run(
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stdout + got.stderr


def test_decision_annotation_marks_first_and_later_decisions_only(
    promtool: str, tmp_path: Path
) -> None:
    """A counter series is born at 1 (first decision of its kind and reason): the annotation
    query must mark that moment and each later increment, and nothing in between."""
    labels = 'namespace="ns", batchedmodel="bm", kind="scale-up", reason="p99 #ms over SLO"'
    expr = dashboard.substitute(dashboard.DECISIONS.expr, "ns", "bm", interval="30s")
    out = {"kind": "scale-up", "reason": "p99 #ms over SLO"}
    (tmp_path / "none.yaml").write_text("groups: []\n")

    def at(seconds: int, marked: bool) -> dict[str, Any]:
        samples = (
            [{"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in out.items()) + "}", "value": 1}]
            if marked
            else []
        )
        return {"expr": expr, "eval_time": f"{seconds}s", "exp_samples": samples}

    test = {
        "rule_files": ["none.yaml"],
        "tests": [
            {
                "interval": "30s",
                # absent at 0, 30, 60 s; first decision at 90 s; second at 180 s
                "input_series": [
                    {
                        "series": f"batchop_decisions_total{{{labels}}}",
                        "values": "_ _ _ 1 1 1 2 2 2",
                    }
                ],
                "promql_expr_test": [
                    at(60, False),
                    at(90, True),
                    at(120, False),
                    at(150, False),
                    at(180, True),
                    at(210, False),
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    got = subprocess.run(
        [promtool, "test", "rules", "test.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stdout + got.stderr
