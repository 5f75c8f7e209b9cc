"""Many BatchedModels, one operator: every one reconciled from cold; the cost is printed.

A benchmark with a correctness check: it asserts that all N models get their children and
status, and prints (does not assert) how long that took, the operator's CPU time and peak
RSS. N is BATCHOP_SCALE_MODELS (default 100, so `make test` stays quick; the figures in
docs/operator.md are from larger runs). Models run 0 replicas: the cluster's pod capacity
(110 per fake node) is not what is measured here.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from operator_harness import (
    Operator,
    bm_manifest,
    condition,
    delete_namespace,
    new_namespace,
    wait_for,
)

pytestmark = pytest.mark.integration


def proc_figures(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS MiB) of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return cpu, peak


def test_many_models_are_all_reconciled(cluster: Any, tmp_path: Path) -> None:
    n = int(os.environ.get("BATCHOP_SCALE_MODELS", "100"))
    cluster.install_crd()
    ns = new_namespace(cluster, "bm-scale")
    models = []
    for i in range(n):
        bm = bm_manifest(f"m{i:04d}", ns, replicas=0, min_replicas=0, max_replicas=2)
        models.append(bm)
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": models})
    )
    op = Operator(cluster, [ns], tmp_path / "operator.log", "--log-format", "plain")
    try:
        t0 = time.monotonic()
        op.start()
        assert op.proc is not None

        def all_reconciled() -> bool:
            listed = cluster.kubectl_json("get", "bm", "-n", ns)["items"]
            done = [
                bm
                for bm in listed
                if (bm.get("status") or {}).get("observedGeneration")
                == bm["metadata"]["generation"]
                and condition(bm, "Ready").get("status") == "True"
            ]
            return len(done) == n

        wait_for(all_reconciled, f"all {n} models reconciled", timeout=60 + 2 * n, operator=op)
        elapsed = time.monotonic() - t0
        cpu, rss = proc_figures(op.proc.pid)
        deployments = cluster.kubectl_json("get", "deployments", "-n", ns)["items"]
        services = cluster.kubectl_json("get", "services", "-n", ns)["items"]
        assert len(deployments) == n and len(services) == n
        print(
            f"\n[scale] {n} BatchedModels reconciled from cold in {elapsed:.1f} s "
            f"({1000 * elapsed / n:.0f} ms each, operator start included); operator CPU "
            f"{cpu:.1f} s ({1000 * cpu / n:.0f} ms per model), peak RSS {rss:.0f} MiB"
        )
        assert op.alive()
    finally:
        op.stop()
        delete_namespace(cluster, ns)
