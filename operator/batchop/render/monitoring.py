"""The PodMonitor that has a Prometheus Operator scrape Triton's metrics port."""

from __future__ import annotations

from typing import Any

from batchop.api import constants as c
from batchop.api.models import BatchedModel
from batchop.render.names import child_names, common_labels, object_meta, selector_labels
from batchop.render.options import RenderOptions


def render_pod_monitor(bm: BatchedModel, options: RenderOptions) -> dict[str, Any]:
    """Scrape every pod's `metrics` port, carrying the BatchedModel name as `batchedmodel`.

    The Prometheus Operator already adds `namespace`, `pod` and `container`; the relabeling
    here gives the series the label batchop's queries group by (`c.PROM_LABEL_MODEL`).
    """
    meta = object_meta(bm, child_names(bm).pod_monitor)
    meta["labels"] = {**common_labels(bm), **dict(options.pod_monitor_labels)}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": selector_labels(bm)},
            "podMetricsEndpoints": [
                {
                    "port": c.PORT_NAME_METRICS,
                    "path": "/metrics",
                    "interval": options.scrape_interval,
                    "relabelings": [
                        {
                            "action": "replace",
                            "sourceLabels": [c.PROM_META_LABEL_MODEL],
                            "targetLabel": c.PROM_LABEL_MODEL,
                        }
                    ],
                }
            ],
        },
    }
