"""All the objects batchop creates for one BatchedModel (owner references excepted)."""

from __future__ import annotations

from typing import Any

from batchop.api.models import BatchedModel
from batchop.render.deployment import render_deployment
from batchop.render.monitoring import render_pod_monitor
from batchop.render.options import RenderOptions
from batchop.render.service import (
    render_pod_disruption_budget,
    render_service,
    wants_pod_disruption_budget,
)


def render_children(
    bm: BatchedModel, options: RenderOptions | None = None, replicas: int | None = None
) -> list[dict[str, Any]]:
    """Deployment, Service, PodDisruptionBudget (maxReplicas > 1), PodMonitor (if enabled).

    `replicas` is the count the operator decided (default: spec.scaling.replicas). The
    controller adds owner references; nothing here reads the cluster.
    """
    options = options or RenderOptions()
    children = [render_deployment(bm, options, replicas), render_service(bm)]
    if wants_pod_disruption_budget(bm):
        children.append(render_pod_disruption_budget(bm))
    if options.pod_monitor:
        children.append(render_pod_monitor(bm, options))
    return children
