"""The local stack end to end: rendered Deployment and PodMonitor -> pods -> real Triton per
pod -> the real Prometheus Operator has Prometheus scrape them -> the observer sees the load
from the load generator.

The children come from batchop.render (not the operator), so this checks the stack's own
parts: the pod runner's kubelet role (readiness, restarts, stop on delete), the PodMonitor
read by the real Prometheus Operator, Prometheus's pod discovery and labels, and the
observer's queries.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop.api.constants import LABEL_MODEL
from batchop.api.models import parse_batched_model
from batchop.render import RenderOptions, render_children
from batchop.sim.profile import load_profile
from batchop.sim.trace import constant_trace
from batchop_dev.local.load import StaticTargets, run_load
from batchop_dev.local.triton import write_model_repository
from batchop_dev.polling import wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "e2e-stack"
NAME = "stack-demo"


def _pods(cluster: Any) -> list[dict[str, Any]]:
    return cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", f"{LABEL_MODEL}={NAME}")[
        "items"
    ]


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


@pytest.fixture(scope="module")
def deployed(cluster: Any, stack: Any) -> Any:
    manifest = yaml.safe_load((ROOT / "examples" / "cpu-demo.yaml").read_text())
    manifest = copy.deepcopy(manifest)
    manifest["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    manifest["spec"]["model"]["name"] = NAME
    manifest["spec"]["model"]["repository"] = str(stack.repository_dir)
    manifest["spec"]["scaling"]["replicas"] = 2
    bm = parse_batched_model(manifest)
    write_model_repository(
        stack.repository_dir,
        NAME,
        load_profile(ROOT / "examples" / "profiles" / "cpu-demo.yaml"),
        max_queue_delay_us=1000,
    )
    cluster.kubectl("create", "namespace", NAMESPACE)
    children = render_children(bm, RenderOptions(scrape_interval="5s"))
    assert any(child["kind"] == "PodMonitor" for child in children)
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": children}),
    )
    yield bm
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def test_pods_get_a_real_triton_and_turn_ready(cluster: Any, stack: Any, deployed: Any) -> None:
    pods = wait_for(
        lambda: (
            [p for p in _pods(cluster) if _ready(p)]
            if sum(_ready(p) for p in _pods(cluster)) == 2
            else None
        ),
        "2 Ready pods",
        180,
    )
    servers = stack.runner.servers()
    for pod in pods:
        key = (NAMESPACE, pod["metadata"]["name"])
        assert key in servers, f"no tritonserver for {key}"
        assert servers[key].address == pod["status"]["podIP"]
        assert servers[key].is_ready()
        (cs,) = pod["status"]["containerStatuses"]
        assert cs["ready"] is True and cs["restartCount"] == 0


def test_prometheus_scrapes_pods_and_observer_sees_load(
    cluster: Any, stack: Any, deployed: Any
) -> None:
    wait_for(lambda: sum(_ready(p) for p in _pods(cluster)) == 2, "2 Ready pods", 180)

    def scraped() -> list[dict[str, Any]]:
        ups = [
            t
            for t in stack.prometheus.active_targets()
            if t["labels"].get("batchedmodel") == NAME and t["health"] == "up"
        ]
        return ups if len(ups) == 2 else []

    targets = wait_for(scraped, "Prometheus scraping both pods", 60)
    for t in targets:
        # The job the Prometheus Operator made of the PodMonitor, scraping at its interval.
        assert t["scrapePool"].startswith(f"podMonitor/{NAMESPACE}/"), t["scrapePool"]
        assert t["scrapeInterval"] == "5s"
        assert t["labels"]["namespace"] == NAMESPACE
        assert t["labels"]["pod"].startswith(NAME)
        assert t["labels"]["container"] == "tritonserver"
    # No BatchedModel object here (no operator): target the Ready pods' addresses directly.
    urls = [f"{p['status']['podIP']}:8000" for p in _pods(cluster) if _ready(p)]
    source = StaticTargets(urls, NAME)
    report = asyncio.run(run_load(constant_trace(60.0, 20.0), source, keep_records=False))
    assert report["ok"] > 0 and report["failed"] == 0, report["errors"]
    assert len(report["targets"]) == 2  # spread over both pods
    observer = stack.observer(window="30s")

    def observed() -> Any:
        parts = observer.observe().get((NAMESPACE, NAME))
        return parts if parts and parts.rps and parts.scraped_pods == 2 else None

    parts = wait_for(observed, "the observer to see the load", 30)
    assert parts.rps > 0 and parts.p99_ms is not None and parts.p99_ms > 0
    assert parts.avg_batch is not None and parts.avg_batch >= 1


def test_crashed_triton_is_restarted_and_counted(cluster: Any, stack: Any, deployed: Any) -> None:
    wait_for(lambda: sum(_ready(p) for p in _pods(cluster)) == 2, "2 Ready pods", 180)
    name = _pods(cluster)[0]["metadata"]["name"]
    server = stack.runner.servers()[(NAMESPACE, name)]
    os.killpg(server.proc.pid, signal.SIGKILL)

    def restarted() -> Any:
        pod = cluster.kubectl_json("get", "pod", "-n", NAMESPACE, name)
        (cs,) = pod["status"]["containerStatuses"]
        return pod if cs["restartCount"] >= 1 and _ready(pod) else None

    pod = wait_for(restarted, "the pod to be restarted and Ready again", 120)
    (cs,) = pod["status"]["containerStatuses"]
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    assert stack.runner.servers()[(NAMESPACE, name)].proc.pid != server.proc.pid


def test_server_stops_when_its_pod_goes(cluster: Any, stack: Any, deployed: Any) -> None:
    wait_for(lambda: sum(_ready(p) for p in _pods(cluster)) == 2, "2 Ready pods", 180)
    cluster.kubectl("scale", "deployment", "-n", NAMESPACE, "--all", "--replicas=1")
    wait_for(lambda: len(_pods(cluster)) == 1, "one pod left", 120)
    wait_for(
        lambda: len([k for k in stack.runner.servers() if k[0] == NAMESPACE]) == 1,
        "one tritonserver left",
        30,
    )
