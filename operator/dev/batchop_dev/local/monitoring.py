"""The local stack's monitoring, as users run it: the real Prometheus Operator configures a
Prometheus 3 (both built from Go modules) that finds pods through the local API server.

batchop creates a PodMonitor per BatchedModel; the operator turns every PodMonitor into a
scrape job with Kubernetes discovery, as in a cluster with kube-prometheus-stack. What the
kubelet and the operator's sidecars would do for the Prometheus pod is done here, outside the
cluster, since KWOK only pretends to run the operator's StatefulSet:
- the operator writes the configuration into the Secret `prometheus-<name>`; a thread reads
  it whenever it changes, as a secret volume delivers it;
- prometheus-config-reloader expands it (`$(SHARD)`, `$(POD_NAME)`), as the init container
  does, and Prometheus reloads, as the reloader sidecar has it do.

The one part still translated by hand is the chart's ServiceMonitor (`add_service_monitor`):
its endpoints-role job cannot find the operator's pod, as the local cluster's Endpoints
refuse loopback addresses.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from batchop_dev.local import build, versions
from batchop_dev.local.prometheus import PrometheusError, PrometheusServer, free_port
from batchop_dev.local.promoperator import (
    CONFIG_KEY,
    PrometheusOperator,
    config_bytes,
    expand_config,
    prometheus_resource,
    reloader_env,
)

log = logging.getLogger("batchop.monitoring")

NAMESPACE = "batchop-monitoring"
NAME = "local"
# How often the Secret is read: a new model's PodMonitor is scraped seconds after it is
# created (a kubelet refreshes a secret volume within about a minute).
SYNC_S = 1.0
# The operator's CRDs this stack waits for before it starts the operator.
SERVED = ("podmonitors", "servicemonitors", "prometheuses")


class OperatedPrometheus:
    """The Prometheus Operator and the Prometheus 3 it configures, for one local cluster.

    The stack's handle on its Prometheus: `url`, `scrape_interval_s`, `active_targets()`,
    `start()`/`stop()` (a restart keeps the port and the data), and `restart_server()` and
    `restart_operator()` for the faults of batchop_dev.chaos.
    """

    discovery_mode = "Prometheus Operator, kubernetes_sd"

    def __init__(
        self,
        kubeconfig: Path,
        *,
        workdir: Path,
        scrape_interval_s: float = 5.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.workdir = workdir
        self.scrape_interval_s = scrape_interval_s
        self.say = say or log.info
        self.port = free_port()
        self.binaries: build.MonitoringBinaries | None = None
        self.operator: PrometheusOperator | None = None
        self.server: PrometheusServer | None = None
        self.extra_jobs: list[dict[str, Any]] = []
        self.sync_errors = 0  # failed reads or reloads of the generated config, retried
        self._lock = threading.Lock()  # one reconfiguration at a time
        self._version: str | None = None
        self._reloader_env: dict[str, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -----------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> OperatedPrometheus:
        try:
            self.binaries = build.ensure_monitoring_binaries(self.say)
            self._install_crds(timeout_s)
            self.start_operator(timeout_s)
            self._kubectl_apply(self._resource())
            config = self._wait_config(timeout_s)
            self.server = PrometheusServer(
                binary=self.binaries.prometheus,
                config=config,
                port=self.port,
                workdir=self.workdir / "prometheus",
                scrape_interval_s=self.scrape_interval_s,
            )
            self.server.extra_jobs = self.extra_jobs
            self.server.start()
            self._stop.clear()
            self._thread = threading.Thread(target=self._sync_loop, name="promsync", daemon=True)
            self._thread.start()
        except BaseException:
            self.stop()
            raise
        return self

    def start_operator(self, timeout_s: float = 60.0) -> None:
        assert self.binaries is not None
        self.operator = PrometheusOperator(
            self.binaries.prometheus_operator, self.kubeconfig, [], self.workdir / "operator"
        ).start(timeout_s)

    def restart_operator(self) -> None:
        """SIGTERM the Prometheus Operator and start it again (Prometheus keeps scraping)."""
        operator, self.operator = self.operator, None
        if operator is not None:
            operator.stop()
        self.start_operator()

    def restart_server(self) -> None:
        """Stop Prometheus and start it again on the same port, data and configuration."""
        if self.server is None:
            raise PrometheusError("restart_server: the stack's Prometheus is not running")
        self.server.stop()
        self.server.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        server, self.server = self.server, None
        if server is not None:
            server.stop()
        operator, self.operator = self.operator, None
        if operator is not None:
            operator.stop()
        self._version = None

    def __enter__(self) -> OperatedPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the stack and the tests read -----------------------------------------------
    def active_targets(self) -> list[dict[str, Any]]:
        if self.server is None:
            raise PrometheusError("active_targets: the stack's Prometheus is not running")
        return self.server.active_targets()

    def add_service_monitor(self, monitor: dict[str, Any], service: dict[str, Any]) -> list[str]:
        """Scrape what a ServiceMonitor selects, through its pods (the hand translation of
        batchop_dev.local.servicemonitor; see the module's docstring). Returns the jobs."""
        from batchop_dev.local.servicemonitor import pod_discovery, service_monitor_jobs

        if self.server is None:
            raise PrometheusError("add_service_monitor needs the stack's Prometheus running")
        jobs = service_monitor_jobs(monitor, service, pod_discovery(self.kubeconfig, service))
        with self._lock:
            self.extra_jobs += jobs
            self.server.reconfigure(self.server.config)
        return [job["job_name"] for job in jobs]

    # --- the operator's configuration, delivered as a pod would get it --------------------
    def _resource(self) -> dict[str, Any]:
        assert self.operator is not None
        return prometheus_resource(
            NAME,
            NAMESPACE,
            self.operator.access,
            pod_monitor_labels={},
            version=versions.load_monitoring_pins().prometheus_release,
            scrape_interval=f"{self.scrape_interval_s:g}s",
            every_namespace=True,
        )

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api

    def _read(self) -> tuple[str, bytes] | None:
        """(resourceVersion, gzipped config) of the operator's Secret; None before it exists."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            secret = client.CoreV1Api(self._client()).read_namespaced_secret(
                f"prometheus-{NAME}", NAMESPACE
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if not (secret.data or {}).get(CONFIG_KEY):
            return None
        return str(secret.metadata.resource_version), config_bytes({"data": secret.data})

    def _expanded(self, config_gz: bytes) -> dict[str, Any]:
        if self._reloader_env is None:
            from kubernetes import client

            apps = client.AppsV1Api(self._client())
            statefulset = apps.read_namespaced_stateful_set(f"prometheus-{NAME}", NAMESPACE)
            as_json = self._client().sanitize_for_serialization(statefulset)
            self._reloader_env = reloader_env(as_json, f"prometheus-{NAME}-0")
        assert self.binaries is not None
        return expand_config(
            self.binaries.config_reloader, config_gz, self.workdir / "reloader", self._reloader_env
        )

    def _wait_config(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self._read()
            if got is not None:
                try:
                    config = self._expanded(got[1])
                except Exception as exc:  # the StatefulSet may lag the Secret by a moment
                    if time.monotonic() + 1 > deadline:
                        raise PrometheusError(f"expanding the operator's config: {exc}") from exc
                else:
                    self._version = got[0]
                    return config
            time.sleep(0.5)
        tail = self.operator.log_tail() if self.operator is not None else ""
        raise PrometheusError(
            f"the Prometheus Operator wrote no Secret {NAMESPACE}/prometheus-{NAME} within "
            f"{timeout_s:g}s; its log:\n{tail}"
        )

    def _sync_loop(self) -> None:
        while not self._stop.wait(SYNC_S):
            try:
                got = self._read()
                if got is None or got[0] == self._version:
                    continue
                server = self.server
                if server is None or server.process is None:
                    continue  # stopped or restarting: next time
                config = self._expanded(got[1])
                with self._lock:
                    server.reconfigure(config)  # a restart in between starts on it too
                self._version = got[0]
            except Exception as exc:  # keep the last good config and try again
                self.sync_errors += 1
                log.warning("prometheus config sync: %s", exc)

    # --- the cluster side ------------------------------------------------------------------
    def _kubectl(self, *args: str, input: str | None = None) -> str:
        from batchop_dev.local.cluster import find_kubectl

        got = subprocess.run(
            [str(find_kubectl()), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if got.returncode != 0:
            raise PrometheusError(f"kubectl {' '.join(args[:3])}: {got.stderr.strip()[-800:]}")
        return got.stdout

    def _kubectl_apply(self, *objects: dict[str, Any]) -> None:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._kubectl(
            "apply",
            "--server-side",
            "--field-manager=batchop-local-monitoring",
            "-f",
            "-",
            input=yaml.safe_dump_all([namespace, *objects]),
        )

    def _install_crds(self, timeout_s: float) -> None:
        """The operator's CRDs from its own module version (idempotent)."""
        assert self.binaries is not None
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.binaries.crds))
        deadline = time.monotonic() + timeout_s
        for crd in SERVED:
            name = f"{crd}.monitoring.coreos.com"
            while not self._established(name):
                if time.monotonic() > deadline:
                    raise PrometheusError(f"CRD {name} not Established after {timeout_s:g}s")
                time.sleep(0.3)

    def _established(self, crd: str) -> bool:
        """Not `kubectl wait`: it fails at once on a CRD whose conditions are not written yet
        (as LocalCluster.wait_established says)."""
        conditions = (
            json.loads(self._kubectl("get", "crd", crd, "-o", "json")).get("status") or {}
        ).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
