"""The Kubernetes minors batchop supports: the chart's kubeVersion floor up to the newest
minor with a pinned checker (checkers.APIEXTENSIONS)."""

from __future__ import annotations

import re
from pathlib import Path

import checkers

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "batchop"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

# Chart values that, together, render every template (as tests/unit/test_chart.py's ALL_ON).
HELM_VALUE_SETS = {
    "defaults": [],
    "all-on": [
        "metrics.serviceMonitor.enabled=true",
        "tritonPodMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "dashboard.namespace=monitoring",
        "watchNamespaces={team-a,team-b}",
    ],
}


def chart_floor() -> int:
    """The oldest minor the chart claims, from its kubeVersion (">=1.X.0-0")."""
    text = (CHART / "Chart.yaml").read_text()
    match = re.search(r'^kubeVersion:\s*">=\s*1\.(\d+)\.0-0"\s*$', text, re.MULTILINE)
    if not match:
        raise ValueError(f'{CHART / "Chart.yaml"}: kubeVersion must read ">=1.X.0-0"')
    return int(match[1])


def supported_minors() -> list[int]:
    return list(range(chart_floor(), max(checkers.APIEXTENSIONS) + 1))
