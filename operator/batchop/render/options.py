"""Operator-wide settings that shape what the renderers produce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from batchop.api.constants import DEFAULT_IMAGE


@dataclass(frozen=True)
class RenderOptions:
    """What the operator (not the BatchedModel) decides about the children.

    `default_image` is used when spec.server.image is unset. `pod_monitor` False omits the
    PodMonitor (clusters without the Prometheus Operator). `pod_monitor_labels` lets the
    PodMonitor match a Prometheus's podMonitorSelector (e.g. `release: kube-prometheus-stack`).
    """

    default_image: str = DEFAULT_IMAGE
    pod_monitor: bool = True
    pod_monitor_labels: Mapping[str, str] = field(default_factory=dict)
    scrape_interval: str = "15s"
    image_pull_policy: str | None = None  # None: Kubernetes' default for the tag
