"""The local cluster itself: GPU nodes, scheduling by nvidia.com/gpu, loopback pod IPs, RBAC."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from batchop_dev.local.cluster import SERVICE_CIDR, LocalCluster
from batchop_dev.local.nodes import GPU_RESOURCE, LOCAL_LABEL
from batchop_dev.local.processes import alive

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def _gpu_pod(name: str, gpus: int) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/never-pulled:1",
                        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                    }
                ]
            },
        }
    )


def test_nodes_are_ready_and_advertise_gpus(cluster: LocalCluster) -> None:
    items = cluster.kubectl_json("get", "nodes", "-l", f"{LOCAL_LABEL}=true")["items"]
    assert len(items) == cluster.node_count
    for node in items:
        assert node["status"]["allocatable"][GPU_RESOURCE] == str(cluster.gpus_per_node)
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        assert ipaddress.ip_network(node["spec"]["podCIDR"]).subnet_of(cluster.pod_network)
    assert cluster.status().gpus == cluster.node_count * cluster.gpus_per_node


def test_clusters_running_at_once_hand_out_disjoint_pod_networks(
    cluster: LocalCluster, own_cluster: LocalCluster
) -> None:
    """Two clusters on one machine once gave two pods the same 127.10.1.x address, and one
    Prometheus scraped the other cluster's Triton."""
    assert not cluster.pod_network.overlaps(own_cluster.pod_network)
    for local in (cluster, own_cluster):
        for node in local.kubectl_json("get", "nodes", "-l", f"{LOCAL_LABEL}=true")["items"]:
            assert ipaddress.ip_network(node["spec"]["podCIDR"]).subnet_of(local.pod_network)


def test_a_restarted_api_server_comes_back_with_the_clusters_objects(
    own_cluster: LocalCluster,
) -> None:
    """What the chaos bench does to kube-apiserver: stopped and started again with its own
    command line; kwokctl's pid file names the new process (so `down()` stops it). The
    controllers that lost their lease meanwhile run again (without that, the chaos run's
    later faults ran with no controller manager and no scheduler)."""
    pid_file = own_cluster.workdir / "pids" / "kube-apiserver.pid"
    before = int(pid_file.read_text())
    name = f"kept-{uuid.uuid4().hex[:6]}"
    own_cluster.kubectl("create", "configmap", name, "--from-literal=a=1")
    down_s = own_cluster.restart_component("kube-apiserver")
    after = int(pid_file.read_text())
    assert after != before and alive(after) and not alive(before) and down_s > 0
    got = own_cluster.kubectl_json("get", "configmap", name)
    assert got["data"] == {"a": "1"}
    # The controllers are back too: kube-controller-manager and kube-scheduler exit when
    # their lease lapses during the restart (about 12 s here); the cluster starts them again,
    # so a new Deployment still gets its pod scheduled and running (Available).
    for peer in ("kube-controller-manager", "kube-scheduler"):
        assert alive(int((own_cluster.workdir / "pids" / f"{peer}.pid").read_text())), peer
    own_cluster.kubectl("create", "deployment", name, "--image=busybox")
    own_cluster.kubectl(
        "wait",
        f"deployment/{name}",
        "--for=condition=Available",
        "--timeout=90s",
        timeout=120,
    )


def test_service_ips_come_from_the_wide_service_range(cluster: LocalCluster) -> None:
    """The default /24 ran out after 253 Services; ClusterIPs now come from SERVICE_CIDR."""
    service_range = ipaddress.ip_network(SERVICE_CIDR)
    assert service_range.num_addresses >= 4096
    ip = cluster.kubectl_json("get", "service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    assert ipaddress.ip_address(ip) in service_range


def test_gpu_pod_runs_with_a_bindable_loopback_ip(cluster: LocalCluster, namespace: str) -> None:
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=_gpu_pod("one-gpu", 1))
    cluster.kubectl(
        "wait",
        "-n",
        namespace,
        "pod/one-gpu",
        "--for=jsonpath={.status.phase}=Running",
        "--timeout=60s",
        timeout=90,
    )
    pod = cluster.kubectl_json("get", "-n", namespace, "pod/one-gpu")
    node = cluster.kubectl_json("get", "node", pod["spec"]["nodeName"])
    ip = ipaddress.ip_address(pod["status"]["podIP"])
    assert ip in ipaddress.ip_network(node["spec"]["podCIDR"])
    with socket.socket() as server:  # a local process can serve on the pod's address
        server.bind((str(ip), 0))
        server.listen()
    # Other tests' pods may come and go meanwhile: check this node counts at least ours.
    by_name = {n.name: n for n in cluster.status().nodes}
    assert by_name[pod["spec"]["nodeName"]].gpus_requested >= 1


def test_pod_wanting_more_gpus_than_any_node_stays_pending(
    cluster: LocalCluster, namespace: str
) -> None:
    too_many = cluster.gpus_per_node + 1
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=_gpu_pod("too-big", too_many))
    cluster.kubectl(
        "wait",
        "-n",
        namespace,
        "pod/too-big",
        "--for=condition=PodScheduled=false",
        "--timeout=60s",
        timeout=90,
    )
    pod = cluster.kubectl_json("get", "-n", namespace, "pod/too-big")
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert pod["status"]["phase"] == "Pending"
    assert scheduled["reason"] == "Unschedulable"
    assert f"Insufficient {GPU_RESOURCE}" in scheduled["message"]


def test_rbac_is_enforced(cluster: LocalCluster) -> None:
    result = cluster.kubectl(
        "auth",
        "can-i",
        "list",
        "secrets",
        "--all-namespaces",
        "--as=system:serviceaccount:default:default",
        check=False,
    )
    assert result.stdout.strip() == "no"


def test_cli_reports_the_cluster_and_refuses_a_second_of_the_same_name(
    cluster: LocalCluster,
) -> None:
    def batchop(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "batchop.cli.main", "local", *args, "--name", cluster.name],
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert batchop("kubeconfig").stdout.strip() == str(cluster.kubeconfig)
    status = json.loads(batchop("status", "--json").stdout)
    assert status["up"] and len(status["nodes"]) == cluster.node_count
    again = batchop("up")
    assert again.returncode == 1 and "already up" in again.stderr


def _ready(pod: dict) -> str | None:
    return next(
        (c["status"] for c in pod["status"].get("conditions", []) if c["type"] == "Ready"), None
    )


def test_probes_mode_leaves_readiness_to_the_prober(probed_cluster: LocalCluster) -> None:
    """In "probes" mode a pod with a readinessProbe is Running but not Ready until a prober
    (the pod runner) reports it; a pod without one is Ready at once, as under a kubelet."""
    cluster = probed_cluster
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    try:
        probed = json.loads(_gpu_pod("probed", 1))
        probed["spec"]["containers"][0]["readinessProbe"] = {
            "httpGet": {"path": "/v2/health/ready", "port": 8000}
        }
        cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(probed))
        cluster.kubectl("create", "-n", ns, "-f", "-", input=_gpu_pod("plain", 1))
        for name in ("probed", "plain"):
            cluster.kubectl(
                "wait",
                "-n",
                ns,
                f"pod/{name}",
                "--timeout=60s",
                "--for=jsonpath={.status.phase}=Running",
                timeout=90,
            )
        items = cluster.kubectl_json("get", "pods", "-n", ns)["items"]
        pods = {p["metadata"]["name"]: p for p in items}
        assert _ready(pods["plain"]) == "True"
        assert _ready(pods["probed"]) == "False"
        assert pods["probed"]["status"]["podIP"]  # it has an address for the prober to bind

        # The prober's verdict sticks: KWOK does not put its own back.
        conditions = [
            {**c, "status": "True"} if c["type"] in ("Ready", "ContainersReady") else c
            for c in pods["probed"]["status"]["conditions"]
        ]
        cluster.kubectl(
            "patch",
            "-n",
            ns,
            "pod/probed",
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"conditions": conditions}}),
        )
        cluster.kubectl(
            "wait", "-n", ns, "pod/probed", "--for=condition=Ready", "--timeout=30s", timeout=60
        )
        cluster.kubectl("delete", "-n", ns, "pod/probed", "pod/plain", "--timeout=60s", timeout=90)
        assert cluster.kubectl_json("get", "pods", "-n", ns)["items"] == []
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
