"""Names and labels of the objects a BatchedModel owns; the controller selects by these."""

from __future__ import annotations

from dataclasses import dataclass

from batchop.api import constants as c
from batchop.api.models import BatchedModel


@dataclass(frozen=True)
class ChildNames:
    """Every child is named after its BatchedModel (one of each kind per BatchedModel)."""

    deployment: str
    service: str
    pod_disruption_budget: str
    pod_monitor: str


def child_names(bm: BatchedModel) -> ChildNames:
    name = bm.metadata.name
    return ChildNames(deployment=name, service=name, pod_disruption_budget=name, pod_monitor=name)


def selector_labels(bm: BatchedModel) -> dict[str, str]:
    """The pod selector. Immutable in a Deployment, so it holds only the BatchedModel's name."""
    return {c.LABEL_MODEL: bm.metadata.name}


def selector_string(bm: BatchedModel) -> str:
    """The selector as status.selector (for the scale subresource and `kubectl get -l`)."""
    return ",".join(f"{key}={value}" for key, value in selector_labels(bm).items())


def common_labels(bm: BatchedModel) -> dict[str, str]:
    """Labels on every child object and pod."""
    return {
        c.LABEL_NAME: c.APP_NAME,
        c.LABEL_INSTANCE: bm.metadata.name,
        c.LABEL_COMPONENT: c.COMPONENT,
        c.LABEL_MANAGED_BY: c.MANAGER,
        **selector_labels(bm),
    }


def object_meta(bm: BatchedModel, name: str) -> dict[str, object]:
    """metadata of a child: name, namespace (when the BatchedModel has one), labels."""
    meta: dict[str, object] = {"name": name}
    if bm.metadata.namespace:
        meta["namespace"] = bm.metadata.namespace
    meta["labels"] = common_labels(bm)
    return meta
