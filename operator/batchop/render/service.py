"""The Service in front of the Triton pods, and their PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from batchop.api import constants as c
from batchop.api.models import BatchedModel
from batchop.render.names import child_names, object_meta, selector_labels


def render_service(bm: BatchedModel) -> dict[str, Any]:
    """A ClusterIP Service exposing Triton's HTTP, gRPC and metrics ports by name."""
    ports = [
        (c.PORT_NAME_HTTP, c.PORT_HTTP),
        (c.PORT_NAME_GRPC, c.PORT_GRPC),
        (c.PORT_NAME_METRICS, c.PORT_METRICS),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(bm, child_names(bm).service),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(bm),
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in ports
            ],
        },
    }


def wants_pod_disruption_budget(bm: BatchedModel) -> bool:
    """A PDB exists when the model may run more than one replica (maxReplicas > 1).

    Keyed on the bound rather than the current count so that the set of children does not
    change as the tuner scales; with maxUnavailable 1 the PDB never blocks a drain at one
    replica, and at several it keeps all but one serving while nodes are drained.
    """
    return bm.spec.scaling.max_replicas > 1


def render_pod_disruption_budget(bm: BatchedModel) -> dict[str, Any]:
    """At most one Triton pod voluntarily disrupted at a time."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(bm, child_names(bm).pod_disruption_budget),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(bm)},
            # A pod that is not ready serves nothing: evicting it never costs capacity.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
