"""`batchop load --bm`: targets are the BatchedModel's Ready pods, found through the API server.

The session stack (real cluster, pod runner): the pods declare a local model repository, the
pod runner starts a real tritonserver on each pod's 127.10.x.y address and marks the pod Ready
when Triton is, and the generator finds and spreads over exactly those pods. The operator is
stopped for this test: its own Deployments would add pods to the BatchedModels.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchop.api.constants import LABEL_MODEL
from batchop.sim.profile import load_profile
from batchop_dev.local.load import BatchedModelPods
from batchop_dev.local.triton import write_model_repository

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "examples" / "profiles" / "cpu-demo.yaml"
MODEL = "synthload"  # the Triton model name the BatchedModel declares


def _bm(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": MODEL, "repository": "s3://models/zoo", "maxBatchSize": 32},
            "server": {"gpus": 0},
            "scaling": {"replicas": 2, "minReplicas": 1, "maxReplicas": 2},
            "autotune": {"queueDelay": False, "replicas": False},
        },
    }


def _pod(name: str, namespace: str, bm: str, repo: Path) -> dict[str, Any]:
    args = [f"--model-repository={repo}", "--model-control-mode=explicit", f"--load-model={MODEL}"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MODEL: bm}},
        "spec": {
            "containers": [
                {
                    "name": "tritonserver",
                    "image": "triton:none",
                    "command": ["tritonserver"],
                    "args": args,
                }
            ]
        },
    }


def _triton_ready(ip: str) -> bool:
    # KWOK marks a new pod Ready for about a second before the pod runner corrects it, so ask
    # the server itself as well.
    try:
        with urllib.request.urlopen(f"http://{ip}:8000/v2/models/{MODEL}/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _ready_ips(cluster: Any, namespace: str, bm: str, want: int) -> list[str]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"{LABEL_MODEL}={bm}")
        ips = [
            p["status"]["podIP"]
            for p in pods["items"]
            if p["status"].get("podIP")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        if len(ips) >= want and all(_triton_ready(ip) for ip in ips):
            return sorted(ips)
        time.sleep(0.5)
    raise AssertionError(f"pods of {namespace}/{bm} not Ready with an IP after 120 s")


@pytest.fixture
def namespace(cluster: Any) -> Iterator[str]:
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(ROOT / "crds" / "batchedmodel.yaml"),
    )
    cluster.wait_established("batchedmodels.batchop.io")
    ns = f"load-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_load_spreads_over_ready_pods_of_the_batchedmodel(
    cluster: Any, stack: Any, namespace: str, tmp_path: Path
) -> None:
    if stack.operator_running():
        stack.stop_operator()
    repo = tmp_path / "repo"
    write_model_repository(repo, MODEL, load_profile(PROFILE), max_queue_delay_us=1000)
    objs = [
        _bm("demo", namespace),
        _bm("other", namespace),
        _pod("demo-a", namespace, "demo", repo),
        _pod("demo-b", namespace, "demo", repo),
        _pod("other-a", namespace, "other", repo),
    ]
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    )
    ips = _ready_ips(cluster, namespace, "demo", 2)
    assert all(ip.startswith("127.") for ip in ips)

    source = BatchedModelPods(namespace, "demo", str(cluster.kubeconfig))
    targets = asyncio.run(source.targets())
    assert [t.url for t in targets] == [f"{ip}:8000" for ip in ips]
    assert {t.model for t in targets} == {MODEL}  # from the BatchedModel's spec.model.name

    out = tmp_path / "load.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchop",
            "load",
            "--rps",
            "80",
            "--duration",
            "4",
            "--bm",
            f"{namespace}/demo",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["failed"] == 0 and report["ok"] == report["requests"] > 100
    assert report["targets"] == [f"{ip}:8000" for ip in ips]
    per_target = {u: report["records"]["target"].count(u) for u in report["targets"]}
    assert min(per_target.values()) >= report["requests"] // 2 - 1  # round-robin

    # a pod that goes away stops being a target
    cluster.kubectl("delete", "pod", "demo-b", "-n", namespace, "--wait=true")
    remaining = asyncio.run(source.targets())
    assert len(remaining) == 1
