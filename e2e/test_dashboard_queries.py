"""Every query of the Grafana dashboard returns data for a running, tuned model.

Real parts only: the operator (`batchop run`) reconciles and tunes a BatchedModel on the
local cluster, the pod runner runs a real Triton per pod, the stack's Prometheus scrapes
Triton, and open-loop load runs against the pods. The operator's own /metrics are scraped
by a second Prometheus (the stack's scrapes pods only; in a cluster, the chart's
ServiceMonitor puts both in one Prometheus). Each query, with the dashboard's variables
filled in, is run as a range query over the test's window against the Prometheus that holds
its series; the test fails naming every panel whose query stayed empty.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop import dashboard
from batchop.api.models import parse_batched_model
from batchop.sim.profile import load_profile
from batchop.sim.trace import Trace
from batchop_dev.local.load import BatchedModelPods, run_load
from batchop_dev.local.prometheus import PrometheusServer
from batchop_dev.local.triton import write_model_repository

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "e2e-dashboard"
NAME = "dash-demo"
# Low load, then a step up that the tuner must answer (delay and/or replicas).
TRACE = Trace(seconds=(0.0, 45.0, 150.0), rps=(30.0, 260.0, 260.0), name="dashboard-step")
DEADLINE_S = 240.0


def query_range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode(
        {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "5"}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def has_values(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(v)) for series in result for _, v in series.get("values", []))


@pytest.fixture(scope="module")
def operator_prometheus(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not stack.operator_running():
        stack.start_operator()
    target = urllib.parse.urlsplit(stack.operator_metrics_url).netloc
    prom = PrometheusServer(
        scrape_interval_s=5.0,
        workdir=tmp_path_factory.mktemp("operator-prometheus"),
        static_targets=[(target, {"job": "batchop-operator"})],
    )
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="module")
def model(cluster: Any, stack: Any) -> Iterator[dict[str, Any]]:
    manifest = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "cpu-demo.yaml").read_text()))
    manifest["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    manifest["spec"]["model"]["name"] = NAME
    manifest["spec"]["model"]["repository"] = str(stack.repository_dir)
    manifest["spec"]["autotune"]["intervalSeconds"] = 10
    parse_batched_model(manifest)  # a bad example fails here, with the field named
    write_model_repository(
        stack.repository_dir,
        NAME,
        load_profile(ROOT / "examples" / "profiles" / "cpu-demo.yaml"),
        max_queue_delay_us=manifest["spec"]["batching"]["maxQueueDelayMicroseconds"],
    )
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    yield manifest
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def _ready_pods(cluster: Any) -> int:
    bm = cluster.kubectl_json("get", "bm", "-n", NAMESPACE, NAME)
    return int((bm.get("status") or {}).get("readyReplicas") or 0)


def test_every_dashboard_query_returns_data(
    cluster: Any, stack: Any, operator_prometheus: Any, model: dict[str, Any]
) -> None:
    deadline = time.monotonic() + 180
    while _ready_pods(cluster) < 1:
        assert time.monotonic() < deadline, "the model never got a Ready pod"
        time.sleep(2)

    source = BatchedModelPods(NAMESPACE, NAME, kubeconfig=str(cluster.kubeconfig))
    report: dict[str, Any] = {}

    def drive() -> None:
        report.update(asyncio.run(run_load(TRACE, source, keep_records=False)))

    start = time.time()
    load = threading.Thread(target=drive, daemon=True)
    load.start()
    urls = {"triton": stack.prometheus.url, "operator": operator_prometheus.url}
    pending = dashboard.all_queries()
    finish = time.monotonic() + DEADLINE_S
    while pending and time.monotonic() < finish:
        time.sleep(10)
        now = time.time()
        still = []
        for title, query in pending:
            expr = dashboard.substitute(query.expr, NAMESPACE, NAME, interval="30s")
            if not has_values(query_range(urls[query.source], expr, start - 60, now)):
                still.append((title, query))
        pending = still
    load.join(timeout=TRACE.end + 60)
    assert report.get("ok", 0) > 0, f"the load generator got no answers: {report}"
    assert not pending, "no data for: " + "; ".join(
        f"{title}: {dashboard.substitute(q.expr, NAMESPACE, NAME, '30s')}" for title, q in pending
    )
