"""The real Prometheus Operator and a Prometheus 3 server (both built from Go modules) on a
local cluster: a first stage of replacing the hand translation of monitors (issue 25).

- `PrometheusOperator` runs `cmd/operator` outside the cluster against the local API server
  (the admin client certificate of the cluster's kubeconfig), scoped to some namespaces. It
  needs no kubelet: it writes the generated Prometheus configuration into the Secret
  `prometheus-<name>` (key `prometheus.yaml.gz`) whatever becomes of the StatefulSet it also
  creates (KWOK only pretends to run its pods; its config-reloader never runs).
- `prometheus_resource` is a `Prometheus` object that selects monitors by labels and points
  Kubernetes discovery at the local API server (`spec.apiserverConfig`, with the kubeconfig's
  certificate files), so the generated configuration runs as it is outside the cluster.
- Prometheus 3 runs such a configuration as `PrometheusServer(None, binary=..., config=...)`.

batchop_dev.local.monitoring puts these together as the local stack's monitoring.
"""

from __future__ import annotations

import base64
import gzip
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from batchop_dev.local.processes import stop_group
from batchop_dev.local.prometheus import free_port

CONFIG_KEY = "prometheus.yaml.gz"


class PrometheusOperatorError(RuntimeError):
    """The operator or Prometheus could not start, or produced nothing; the message says why."""


@dataclass(frozen=True)
class KubeAccess:
    """How to reach the API server, from a kubeconfig that names certificate files."""

    server: str
    ca_file: str
    cert_file: str
    key_file: str


def kube_access(kubeconfig: Path) -> KubeAccess:
    """The current context's server and certificate files (KWOK's kubeconfig names files)."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    user = next(u for u in config["users"] if u["name"] == context["context"]["user"])
    try:
        return KubeAccess(
            server=cluster["cluster"]["server"],
            ca_file=cluster["cluster"]["certificate-authority"],
            cert_file=user["user"]["client-certificate"],
            key_file=user["user"]["client-key"],
        )
    except KeyError as exc:
        raise PrometheusOperatorError(
            f"{kubeconfig}: expected certificate files (certificate-authority, "
            f"client-certificate, client-key), missing {exc}"
        ) from exc


def prometheus_resource(
    name: str,
    namespace: str,
    access: KubeAccess,
    *,
    pod_monitor_labels: Mapping[str, str],
    version: str,
    scrape_interval: str = "5s",
    every_namespace: bool = False,
) -> dict[str, Any]:
    """A `Prometheus` selecting the PodMonitors (in its namespace, or in `every_namespace`)
    that carry these labels (no labels: every PodMonitor)."""
    resource: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "version": version,
            "replicas": 1,
            "scrapeInterval": scrape_interval,
            "podMonitorSelector": {"matchLabels": dict(pod_monitor_labels)},
            "apiserverConfig": {
                "host": access.server,
                "tlsConfig": {
                    "caFile": access.ca_file,
                    "certFile": access.cert_file,
                    "keyFile": access.key_file,
                },
            },
        },
    }
    if every_namespace:
        resource["spec"]["podMonitorNamespaceSelector"] = {}
    return resource


def config_bytes(secret: Mapping[str, Any]) -> bytes:
    """The gzipped Prometheus configuration held in the operator's Secret."""
    data = (secret.get("data") or {}).get(CONFIG_KEY)
    if not data:
        raise PrometheusOperatorError(f"secret has no {CONFIG_KEY}")
    return base64.b64decode(data)


def decode_config(secret: Mapping[str, Any]) -> dict[str, Any]:
    """The Prometheus configuration held in the operator's Secret (gzip, base64), as the
    operator wrote it: `$(SHARD)` and `$(POD_NAME)` not yet expanded (`expand_config`)."""
    return dict(yaml.safe_load(gzip.decompress(config_bytes(secret))))


def reloader_env(statefulset: Mapping[str, Any], pod_name: str) -> dict[str, str]:
    """The environment the operator's StatefulSet gives its init-config-reloader container
    (literal values, e.g. SHARD), with POD_NAME as the downward API would set it."""
    containers = statefulset["spec"]["template"]["spec"].get("initContainers") or []
    init = next((c for c in containers if c["name"] == "init-config-reloader"), None)
    if init is None:
        raise PrometheusOperatorError("the operator's StatefulSet has no init-config-reloader")
    env = {e["name"]: e["value"] for e in init.get("env") or [] if "value" in e}
    return {**env, "POD_NAME": pod_name}


def expand_config(
    reloader: Path, config_gz: bytes, workdir: Path, env: Mapping[str, str]
) -> dict[str, Any]:
    """Run prometheus-config-reloader once (`--watch-interval=0`, as the operator's init
    container does) on the generated config; the configuration Prometheus then reads."""
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / CONFIG_KEY
    source.write_bytes(config_gz)
    out = workdir / "prometheus.env.yaml"
    result = subprocess.run(
        [
            str(reloader),
            f"--config-file={source}",
            f"--config-envsubst-file={out}",
            "--watch-interval=0",
            f"--listen-address=127.0.0.1:{free_port()}",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0 or not out.exists():
        raise PrometheusOperatorError(
            f"prometheus-config-reloader exited {result.returncode}: {result.stderr[-1500:]}"
        )
    return dict(yaml.safe_load(out.read_text()))


def _wait_http(
    url: str, process: subprocess.Popen[bytes], log: Path, what: str, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusOperatorError(
                f"{what} exited with {process.returncode}: "
                f"{log.read_text(errors='replace')[-1500:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise PrometheusOperatorError(f"{what} did not answer {url} within {timeout_s:g}s")


class PrometheusOperator:
    """cmd/operator against a local cluster, scoped to `namespaces` (none: every namespace);
    a context manager."""

    def __init__(
        self, binary: Path, kubeconfig: Path, namespaces: list[str], workdir: Path
    ) -> None:
        self.binary = binary
        self.access = kube_access(kubeconfig)
        self.namespaces = namespaces
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus-operator.log"

    def command(self) -> list[str]:
        return [
            str(self.binary),
            f"--apiserver={self.access.server}",
            f"--ca-file={self.access.ca_file}",
            f"--cert-file={self.access.cert_file}",
            f"--key-file={self.access.key_file}",
            *([f"--namespaces={','.join(self.namespaces)}"] if self.namespaces else []),
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log-level=info",
        ]

    def start(self, timeout_s: float = 60.0) -> PrometheusOperator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            _wait_http(
                f"http://127.0.0.1:{self.port}/healthz",
                self.process,
                self.log_path,
                "prometheus-operator",
                timeout_s,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        proc, self.process = self.process, None
        stop_group(proc)

    def __enter__(self) -> PrometheusOperator:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
