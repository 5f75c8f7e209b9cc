"""The chart's RBAC, proven on the real API server: least privilege that is also enough.

`helm install` the chart with `watchNamespaces` set (pods are KWOK's, so the image does not
matter); mint a token for the chart's ServiceAccount (`kubectl create token`) and build a
kubeconfig that carries only that token; then:

- `kubectl auth can-i` as the ServiceAccount: allowed what batchop uses, denied secrets,
  everything in namespaces it does not watch, and anything cluster-wide;
- `batchop run` locally under that kubeconfig, with the environment the chart gives the
  operator's container, passes the operator's own reconcile scenarios
  (tests/integration/test_operator_reconcile.py, imported below) — children, status,
  scale, drift, capacity, garbage collection — and never hits a 403.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_operator_reconcile as scenarios
import yaml
from operator_harness import (
    Operator,
    apply,
    bm_manifest,
    condition,
    delete_namespace,
    get,
    items,
    new_namespace,
    wait_for,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "batchop"
RELEASE = "batchop"
LABEL = "batchop.io/batchedmodel"


@dataclass
class Installed:
    helm: str
    system_ns: str
    watched: str
    other: str
    service_account: str
    sa_kubeconfig: Path
    env: dict[str, str]  # the operator container's environment, from the installed manifest


@dataclass
class AsServiceAccount:
    """The `cluster` fixture seen by the operator harness, but authenticated as the chart's SA.

    Only the operator uses it: the tests themselves keep using `cluster` (admin) to act and
    to check.
    """

    cluster: Any
    kubeconfig: Path
    env: dict[str, str]

    def environ(self) -> dict[str, str]:
        return {**self.cluster.environ(), **self.env, "KUBECONFIG": str(self.kubeconfig)}


def _helm_binary() -> str:
    from batchop_dev.local.tools import ensure_tools

    ensure_tools()
    return str(Path(sys.prefix) / "bin" / "helm")


def _sa_kubeconfig(cluster: Any, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig with the cluster's server and CA, and the SA's token as its only user."""
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=2h").stdout
    admin = cluster.kubectl_json("config", "view", "--raw", "--minify", "--flatten")
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": sa, "user": {"token": token.strip()}}],
        "contexts": [{"name": sa, "context": {"cluster": "local", "user": sa}}],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def chart(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    helm = _helm_binary()
    suffix = uuid.uuid4().hex[:6]
    system_ns = f"batchop-system-{suffix}"
    watched = new_namespace(cluster, "rbac-watched")
    other = new_namespace(cluster, "rbac-other")
    kube = ["--kubeconfig", str(cluster.kubeconfig)]
    got = cluster_helm(
        helm,
        *kube,
        "install",
        RELEASE,
        str(CHART),
        "-n",
        system_ns,
        "--create-namespace",
        "--set",
        f"watchNamespaces={{{watched}}}",
    )
    assert got.returncode == 0, got.stdout + got.stderr
    try:
        manifest = cluster_helm(helm, *kube, "get", "manifest", RELEASE, "-n", system_ns)
        docs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
        (sa,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        path = _sa_kubeconfig(cluster, system_ns, sa, tmp_path_factory.mktemp("sa") / "kubeconfig")
        yield Installed(helm, system_ns, watched, other, sa, path, env)
    finally:
        cluster_helm(helm, *kube, "uninstall", RELEASE, "-n", system_ns, "--wait")
        for name in (watched, other, system_ns):
            delete_namespace(cluster, name)


def cluster_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=300)


def can_i(
    cluster: Any,
    kubeconfig: Path,
    verb: str,
    resource: str,
    namespace: str | None,
    name: str | None = None,
) -> bool:
    """What `kubectl auth can-i` asks, as whoever `kubeconfig` authenticates.

    `resource` is `plural[.group][/subresource]`; `namespace` None asks cluster-wide; `name`
    asks about one object (rules with resourceNames). Sent as
    a SelfSubjectAccessReview with the group spelled out, so kinds the cluster does not
    serve (PodMonitor without the Prometheus Operator) are checked too.
    """
    from batchop_dev.local.cluster import find_kubectl

    resource, _, sub = resource.partition("/")
    plural, _, group = resource.partition(".")
    attrs = {"verb": verb, "resource": plural, "group": group}
    if sub:
        attrs["subresource"] = sub
    if namespace:
        attrs["namespace"] = namespace
    if name:
        attrs["name"] = name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }
    got = subprocess.run(
        [
            str(find_kubectl()),
            "--kubeconfig",
            str(kubeconfig),
            "create",
            "--validate=false",
            "-f",
            "-",
            "-o",
            "json",
        ],
        input=json.dumps(review),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    return bool(json.loads(got.stdout)["status"].get("allowed"))


# What batchop does in a namespace it watches; each must be allowed.
NEEDED = [
    ("list", "batchedmodels.batchop.io"),
    ("watch", "batchedmodels.batchop.io"),
    ("patch", "batchedmodels.batchop.io"),
    ("patch", "batchedmodels.batchop.io/status"),
    ("patch", "deployments.apps"),
    ("create", "deployments.apps"),  # server-side apply of a new object is also a create
    ("list", "deployments.apps"),
    ("delete", "deployments.apps"),
    ("patch", "services"),
    ("patch", "poddisruptionbudgets.policy"),
    ("patch", "podmonitors.monitoring.coreos.com"),
    ("watch", "pods"),
    ("patch", "pods"),
    ("create", "events"),
    ("create", "events.events.k8s.io"),
]
# What it must not do even where it watches.
DENIED_IN_WATCHED = [
    ("get", "secrets"),
    ("list", "secrets"),
    ("watch", "secrets"),
    ("get", "configmaps"),
    ("create", "batchedmodels.batchop.io"),
    ("delete", "batchedmodels.batchop.io"),
    ("update", "batchedmodels.batchop.io/scale"),
    ("delete", "pods"),
    ("create", "pods"),
    ("create", "pods/exec"),
    ("get", "pods/log"),
    ("create", "serviceaccounts/token"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("*", "*.*"),
]


def test_service_account_may_do_what_batchop_does(cluster: Any, chart: Installed) -> None:
    missing = [
        f"{v} {r}"
        for v, r in NEEDED
        if not can_i(cluster, chart.sa_kubeconfig, v, r, chart.watched)
    ]
    assert not missing, f"the chart's SA lacks: {missing}"


def test_service_account_is_denied_secrets_and_more(cluster: Any, chart: Installed) -> None:
    granted = [
        f"{v} {r}"
        for v, r in DENIED_IN_WATCHED
        if can_i(cluster, chart.sa_kubeconfig, v, r, chart.watched)
    ]
    assert not granted, f"the chart's SA may: {granted}"
    # The same checks as admin say yes: a "no" above is RBAC, not a broken check.
    assert can_i(cluster, cluster.kubeconfig, "get", "secrets", chart.watched)


def test_service_account_may_hold_only_the_charts_lease(cluster: Any, chart: Installed) -> None:
    """Leader election: create a Lease in the release namespace, read and renew only the
    chart's own one; no Lease rights anywhere else."""
    lease, ns, kind = chart.env["BATCHOP_LEASE_NAME"], chart.system_ns, "leases.coordination.k8s.io"
    assert chart.env["BATCHOP_LEASE_NAMESPACE"] == ns
    sa = chart.sa_kubeconfig
    assert can_i(cluster, sa, "create", kind, ns)
    for verb in ("get", "update"):
        assert can_i(cluster, sa, verb, kind, ns, name=lease), verb
        assert not can_i(cluster, sa, verb, kind, ns, name="someone-elses"), verb
    assert not can_i(cluster, sa, "delete", kind, ns, name=lease)
    for other in (chart.watched, chart.other, "kube-system"):
        assert not can_i(cluster, sa, "create", kind, other), other
        assert not can_i(cluster, sa, "get", kind, other, name=lease), other


def test_service_account_is_denied_unwatched_namespaces(cluster: Any, chart: Installed) -> None:
    for namespace in (chart.other, chart.system_ns, "default", "kube-system"):
        granted = [
            f"{v} {r}" for v, r in NEEDED if can_i(cluster, chart.sa_kubeconfig, v, r, namespace)
        ]
        assert not granted, f"the chart's SA may in {namespace}: {granted}"
    for verb, resource in [
        ("list", "batchedmodels.batchop.io"),
        ("list", "pods"),
        ("list", "nodes"),
        ("list", "namespaces"),
        ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ]:
        assert not can_i(cluster, chart.sa_kubeconfig, verb, resource, None), (verb, resource)


def test_cluster_wide_install_grants_the_same_rules_everywhere_and_no_more(
    cluster: Any, chart: Installed, tmp_path: Path
) -> None:
    """`watchNamespaces` empty: one ClusterRole; the SA acts in every namespace, reads CRDs
    (kopf's scanning), and is still denied secrets, nodes and writes to CRDs."""
    release = f"batchop-all-{uuid.uuid4().hex[:6]}"
    kube = ["--kubeconfig", str(cluster.kubeconfig)]
    got = cluster_helm(
        chart.helm,
        *kube,
        "install",
        release,
        str(CHART),
        "-n",
        release,
        "--create-namespace",
        "--set",
        "replicaCount=0",
    )
    assert got.returncode == 0, got.stdout + got.stderr
    try:
        manifest = cluster_helm(chart.helm, *kube, "get", "manifest", release, "-n", release)
        docs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
        kinds = {d["kind"] for d in docs}
        assert {"ClusterRole", "ClusterRoleBinding"} <= kinds
        roles = [d for d in docs if d["kind"] == "Role"]  # leader election's only
        assert [
            (r["metadata"]["namespace"], {res for rule in r["rules"] for res in rule["resources"]})
            for r in roles
        ] == [(release, {"leases"})]
        (sa,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
        config = _sa_kubeconfig(cluster, release, sa, tmp_path / "kubeconfig")
        for namespace in (chart.other, chart.watched, "default"):
            for verb, resource in NEEDED:
                assert can_i(cluster, config, verb, resource, namespace), (verb, resource)
            for verb, resource in DENIED_IN_WATCHED:
                assert not can_i(cluster, config, verb, resource, namespace), (verb, resource)
        allowed = [
            ("list", "pods"),
            ("watch", "batchedmodels.batchop.io"),
            ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        ]
        denied = [
            ("list", "secrets"),
            ("list", "nodes"),
            ("list", "namespaces"),
            ("create", "customresourcedefinitions.apiextensions.k8s.io"),
            ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
        ]
        for verb, resource in allowed:
            assert can_i(cluster, config, verb, resource, None), (verb, resource)
        for verb, resource in denied:
            assert not can_i(cluster, config, verb, resource, None), (verb, resource)
    finally:
        cluster_helm(chart.helm, *kube, "uninstall", release, "-n", release, "--wait")
        delete_namespace(cluster, release)


# --- the operator, run under the SA's token ------------------------------------------------


@pytest.fixture(scope="module")
def ns(chart: Installed) -> str:
    """The watched namespace: the reconcile scenarios below run there."""
    return chart.watched


@pytest.fixture(scope="module")
def operator(
    cluster: Any, chart: Installed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    # The chart's environment, but Prometheus on loopback: nothing here may leave the host.
    env = {**chart.env, "BATCHOP_PROMETHEUS_URL": "http://127.0.0.1:9"}
    as_sa = AsServiceAccount(cluster, chart.sa_kubeconfig, env)
    log = tmp_path_factory.mktemp("operator-sa") / "operator.log"
    op = Operator(as_sa, [chart.watched], log).start()
    yield op
    op.stop()


def test_operator_as_service_account_reconciles_a_model(
    cluster: Any, chart: Installed, operator: Operator
) -> None:
    apply(cluster, bm_manifest("rbac-model", chart.watched, replicas=2))

    def done() -> Any:
        bm = get(cluster, chart.watched, "bm", "rbac-model")
        kinds = {
            c["kind"]
            for c in items(
                cluster,
                chart.watched,
                "deployments,services,poddisruptionbudgets",
                f"{LABEL}=rbac-model",
            )
        }
        ok = (
            bm
            and kinds >= {"Deployment", "Service", "PodDisruptionBudget"}
            and condition(bm, "Ready").get("status") == "True"
            and bm["status"].get("readyReplicas") == 2
        )
        return bm if ok else None

    bm = wait_for(
        done, "children and a Ready status written under the SA", timeout=180, operator=operator
    )
    assert bm["status"]["observedGeneration"] == bm["metadata"]["generation"]
    cluster.kubectl("delete", "-n", chart.watched, "bm/rbac-model")


def test_model_in_an_unwatched_namespace_is_left_alone(
    cluster: Any, chart: Installed, operator: Operator
) -> None:
    apply(cluster, bm_manifest("outside", chart.other))
    apply(cluster, bm_manifest("inside", chart.watched))
    wait_for(
        lambda: (get(cluster, chart.watched, "bm", "inside") or {}).get("status"),
        "status on the watched model",
        timeout=120,
        operator=operator,
    )
    outside = get(cluster, chart.other, "bm", "outside")
    assert not (outside or {}).get("status"), "an unwatched model got a status"
    assert not items(cluster, chart.other, "deployments", f"{LABEL}=outside")
    cluster.kubectl("delete", "-n", chart.watched, "bm/inside")


# The operator's own integration scenarios, against the SA-run operator above. (The
# kill-and-restart scenario starts its own admin operator, so it is not repeated here.)
for _name, _test in list(vars(scenarios).items()):
    if _name.startswith("test_") and _name != "test_operator_killed_and_restarted_mid_way":
        globals()[f"{_name}__as_chart_sa"] = _test


def test_operator_was_never_forbidden(operator: Operator) -> None:
    """Runs last: nothing the scenarios made the operator do was refused by RBAC."""
    lines = operator.log_path.read_text(errors="replace").splitlines()
    forbidden = [
        line
        for line in lines
        if "forbidden" in line.lower() or "not enough permissions" in line.lower()
    ]
    assert not forbidden, "\n".join(forbidden[:10])
    assert any(json.loads(line).get("message") for line in lines if line.startswith("{"))
