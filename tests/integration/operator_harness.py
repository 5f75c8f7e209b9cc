"""Helpers for the operator's integration tests: namespaces, `batchop run` as a
subprocess, BatchedModel manifests and polling until the cluster converges.

Waiting is bounded by a deadline (convergence, not speed, is what the tests check); a
timeout fails with what was last seen and the tail of the operator's log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from batchop_dev import polling

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(
    probe: Callable[[], T], what: str, timeout: float = 120, operator: Operator | None = None
) -> T:
    """`polling.wait_for` every 0.5 s; a timeout shows the operator's log tail, if given."""
    context = (lambda: f"--- operator log ---\n{operator.log_tail()}") if operator else None
    return polling.wait_for(probe, what, timeout, interval=0.5, context=context)


def new_namespace(cluster: Any, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    return name


def delete_namespace(cluster: Any, name: str) -> None:
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Operator:
    """`batchop run` against the test cluster, watching the given namespaces."""

    def __init__(self, cluster: Any, namespaces: list[str], log_path: Path, *args: str) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.log_path = log_path
        self.args = args
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def liveness_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def start(self) -> Operator:
        command = [
            sys.executable, "-m", "batchop", "run",
            "--kubeconfig", str(self.cluster.kubeconfig),
            "--liveness", self.liveness_url,
            "--metrics-address", "off",
            "--prometheus-url", "http://127.0.0.1:9",  # loopback only; these models don't tune
            "--log-format", "json",
            *[arg for ns in self.namespaces for arg in ("--namespace", ns)],
            *self.args,
        ]  # fmt: skip
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self.cluster.environ(), cwd=REPO
        )
        log.close()
        wait_for(self.healthy, "the operator's liveness endpoint", timeout=90, operator=self)
        return self

    def healthy(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"the operator exited:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.liveness_url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as when a node dies."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def bm_manifest(
    name: str,
    namespace: str,
    *,
    gpus: int = 1,
    replicas: int = 1,
    max_replicas: int = 4,
    min_replicas: int = 1,
) -> dict[str, Any]:
    """A valid BatchedModel whose tuner stays off (these tests are about reconciling)."""
    return {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "resnet50", "repository": "s3://models/zoo", "maxBatchSize": 32},
            "server": {"gpus": gpus},
            "scaling": {
                "replicas": replicas,
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
            },
            "batching": {"maxQueueDelayMicroseconds": 500},
            "slo": {"p99LatencyMilliseconds": 50},
            "autotune": {"queueDelay": False, "replicas": False},
        },
    }


def apply(
    cluster: Any, obj: dict[str, Any], check: bool = True
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "-f", "-", input=json.dumps(obj), check=check)


def get(cluster: Any, namespace: str, *what: str) -> Any | None:
    """The object as JSON, or None when it does not exist."""
    result = cluster.kubectl("get", "-n", namespace, *what, "-o", "json", check=False)
    if result.returncode != 0:
        if "NotFound" in result.stderr or "not found" in result.stderr:
            return None
        raise AssertionError(result.stderr)
    return json.loads(result.stdout)


def items(cluster: Any, namespace: str, kind: str, selector: str | None = None) -> list[Any]:
    args = ["get", "-n", namespace, kind, "-o", "json"]
    if selector:
        args += ["-l", selector]
    return list(json.loads(cluster.kubectl(*args).stdout)["items"])


def condition(bm: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for cond in ((bm or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return {}


def events(cluster: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    listing = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )
    return list(listing["items"])


def keep_env() -> bool:
    """BATCHOP_KEEP_CLUSTER set: leave what a test made for a person to inspect."""
    return bool(os.environ.get("BATCHOP_KEEP_CLUSTER"))
