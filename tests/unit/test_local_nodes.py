"""Fake GPU node manifests of the local cluster."""

from __future__ import annotations

import ipaddress

import pytest

from batchop_dev.local import nodes


def test_each_node_gets_its_own_loopback_slash_24() -> None:
    listing = nodes.node_list(count=5, gpus_per_node=4)
    cidrs = [ipaddress.ip_network(n["spec"]["podCIDR"]) for n in listing["items"]]
    assert all(c.prefixlen == 24 and c.subnet_of(nodes.POD_NETWORK) for c in cidrs)
    assert all(c.network_address.is_loopback for c in cidrs)
    assert len(set(cidrs)) == len(cidrs)
    # The .0 /24 is skipped: node 0 gets 127.10.1.0/24.
    assert str(cidrs[0]) == "127.10.1.0/24"


def test_a_cluster_takes_the_first_pod_network_no_other_cluster_holds() -> None:
    assert nodes.pod_network([]) == nodes.POD_NETWORK
    assert str(nodes.pod_network(["127.10.0.0/16"])) == "127.11.0.0/16"
    assert str(nodes.pod_network(["127.11.0.0/16", "127.10.0.0/16"])) == "127.12.0.0/16"
    # A gap left by a cluster taken down is reused.
    assert str(nodes.pod_network(["127.10.0.0/16", "127.12.0.0/16"])) == "127.11.0.0/16"
    listing = nodes.node_list(2, 4, network=nodes.pod_network(["127.10.0.0/16"]))
    assert [n["spec"]["podCIDR"] for n in listing["items"]] == ["127.11.1.0/24", "127.11.2.0/24"]


def test_no_pod_network_left_is_an_error_that_says_what_to_do() -> None:
    every = [f"127.{octet}.0.0/16" for octet in range(10, nodes.LAST_NETWORK_OCTET + 1)]
    with pytest.raises(ValueError, match="batchop local down"):
        nodes.pod_network(every)


def test_node_advertises_gpus_cpu_memory_and_kwok_marks() -> None:
    node = nodes.node_manifest(3, gpus=8, cpu="16", memory="64Gi")
    for key in ("capacity", "allocatable"):
        assert node["status"][key][nodes.GPU_RESOURCE] == "8"
        assert node["status"][key]["cpu"] == "16"
        assert node["status"][key]["memory"] == "64Gi"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]
    assert "taints" not in node["spec"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0, "gpus_per_node": 4}, "nodes: 0"),
        ({"count": 255, "gpus_per_node": 4}, "nodes: 255"),
        ({"count": 1, "gpus_per_node": -1}, "gpus per node"),
        ({"count": 1, "gpus_per_node": 1, "memory": "lots"}, "memory 'lots'"),
    ],
)
def test_bad_sizes_are_refused_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nodes.node_list(**kwargs)


def test_node_manifests_pass_the_kubernetes_schema() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for node in nodes.node_list(2, 4)["items"]:
        kubernetes_validate.validate(node, "1.34", strict=True)
