"""Manifests of the fake GPU nodes of the local cluster (pure; no I/O).

KWOK keeps these nodes Ready and plays kubelet for pods bound to them. Each node gets a /24
of its cluster's pod network (a 127.N.0.0/16) as spec.podCIDR; KWOK gives pods addresses from
their node's podCIDR, so every pod IP is a loopback address a local process (the pod runner)
can bind. Clusters running at once get different networks (see pod_network), so two pods of
two clusters never share an address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
# The first cluster's pod network, and the one a cluster made before networks were chosen
# per cluster used. Later clusters take 127.11/16, 127.12/16, ... (127.0/8's other /16s are
# left to the tests' own servers: Triton on 127.0.x.y, Prometheus on 127.0.0.1).
POD_NETWORK = ipaddress.IPv4Network("127.10.0.0/16")
LAST_NETWORK_OCTET = 250
NODE_PREFIX = "gpu-node"
LOCAL_LABEL = "batchop.io/local-node"
MAX_NODES = 254  # 127.N.1.0/24 .. 127.N.254.0/24

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def pod_network(taken: Iterable[str]) -> ipaddress.IPv4Network:
    """The first 127.N.0.0/16 (N from 10) that no network in `taken` overlaps."""
    used = [ipaddress.ip_network(t) for t in taken]
    first = int(POD_NETWORK.network_address.packed[1])
    for octet in range(first, LAST_NETWORK_OCTET + 1):
        candidate = ipaddress.IPv4Network(f"127.{octet}.0.0/16")
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise ValueError(
        f"every pod network 127.{first}.0.0/16 .. 127.{LAST_NETWORK_OCTET}.0.0/16 is taken "
        "by another local cluster; `batchop local down --name NAME` one of them"
    )


def pod_cidr(index: int, network: ipaddress.IPv4Network = POD_NETWORK) -> str:
    """The podCIDR of node `index` (0-based): 127.N.<index+1>.0/24 of `network`."""
    if not 0 <= index < MAX_NODES:
        raise ValueError(f"node index {index}: must be in [0, {MAX_NODES})")
    subnet = list(network.subnets(new_prefix=24))[index + 1]
    return str(subnet)


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}-{index}"


def node_manifest(
    index: int,
    gpus: int,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: int = 110,
    network: ipaddress.IPv4Network = POD_NETWORK,
) -> dict[str, Any]:
    """A Node that KWOK manages, advertising `gpus` nvidia.com/gpu plus cpu/memory/pods.

    No taint: nothing real can run here anyway, and untainted nodes let workloads schedule
    without KWOK-specific tolerations. status is accepted on create for Nodes; KWOK keeps the
    capacity it finds and fills in conditions, addresses and nodeInfo.
    """
    if gpus < 0:
        raise ValueError(f"gpus per node: {gpus} must be >= 0")
    if pods < 1:
        raise ValueError(f"pods per node: {pods} must be >= 1")
    for field, value in (("cpu", cpu), ("memory", memory)):
        if not _QUANTITY.match(value):
            raise ValueError(f"{field} {value!r}: not a Kubernetes quantity (e.g. 32, 256Gi)")
    name = node_name(index)
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                LOCAL_LABEL: "true",
                "nvidia.com/gpu.present": "true" if gpus else "false",
            },
        },
        "spec": {"podCIDR": pod_cidr(index, network), "podCIDRs": [pod_cidr(index, network)]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def node_list(
    count: int,
    gpus_per_node: int,
    cpu: str = "32",
    memory: str = "256Gi",
    network: ipaddress.IPv4Network = POD_NETWORK,
) -> dict:
    """A v1 List of `count` GPU nodes, ready for `kubectl create -f -`."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"nodes: {count} must be in [1, {MAX_NODES}]")
    items = [node_manifest(i, gpus_per_node, cpu, memory, network=network) for i in range(count)]
    return {"apiVersion": "v1", "kind": "List", "items": items}
