"""GPU accounting of `batchop local status` (pure part) and cluster argument checks."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from batchop_dev.local.cluster import ClusterError, LocalCluster, PortInUse, summarize_nodes


def _node(name: str, gpus: str, ready: str = "True") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"podCIDR": "127.10.1.0/24"},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def _pod(node: str | None, gpus: int, phase: str = "Running", use_limits: bool = False) -> dict:
    key = "limits" if use_limits else "requests"
    return {
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {key: {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_live_pods_on_a_node_use_its_gpus() -> None:
    pods = [
        _pod("a", 1),
        _pod("a", 2, use_limits=True),
        _pod("b", 1, phase="Succeeded"),
        _pod(None, 4, phase="Pending"),
    ]
    by_name = {n.name: n for n in summarize_nodes([_node("a", "4"), _node("b", "4")], pods)}
    assert (by_name["a"].gpus_requested, by_name["a"].gpus_free) == (3, 1)
    assert (by_name["b"].gpus_requested, by_name["b"].gpus_free) == (0, 4)


def test_node_without_gpus_or_not_ready() -> None:
    (node,) = summarize_nodes([{"metadata": {"name": "cpu"}, "status": {}}], [])
    assert (node.gpus, node.ready) == (0, False)


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "a" * 41, "under_score"])
def test_bad_cluster_names_are_refused(name: str) -> None:
    with pytest.raises(ClusterError, match="cluster name"):
        LocalCluster(name)


def test_a_port_in_use_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KWOK_WORKDIR", str(tmp_path))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is in use"):
            LocalCluster("port-test", port=port).up()
    assert not (tmp_path / "clusters" / "port-test").exists()
