"""Pure renderers: a BatchedModel spec to the Kubernetes objects and Triton config it implies."""

from batchop.render.children import render_children
from batchop.render.deployment import render_deployment, triton_args
from batchop.render.monitoring import render_pod_monitor
from batchop.render.names import (
    ChildNames,
    child_names,
    common_labels,
    selector_labels,
    selector_string,
)
from batchop.render.options import RenderOptions
from batchop.render.service import (
    render_pod_disruption_budget,
    render_service,
    wants_pod_disruption_budget,
)
from batchop.render.triton_config import dynamic_batching, render_model_config

__all__ = [
    "ChildNames",
    "RenderOptions",
    "child_names",
    "common_labels",
    "dynamic_batching",
    "render_children",
    "render_deployment",
    "render_model_config",
    "render_pod_disruption_budget",
    "render_pod_monitor",
    "render_service",
    "selector_labels",
    "selector_string",
    "triton_args",
    "wants_pod_disruption_budget",
]
