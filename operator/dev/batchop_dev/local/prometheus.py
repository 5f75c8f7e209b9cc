"""A real Prometheus for the local stack: discovers Triton pods through the local API server.

Why Debian's build (2.42): it is one `apt-get download` away on every machine this project
runs on, a 19 MB static binary, where building github.com/prometheus/prometheus from Go modules
takes many minutes on two cores. We never `apt-get install` it (that would start Debian's
service on :9090); we unpack the .deb into the venv (`<venv>/opt/prometheus`) and run our own
instance, with our own config, a temporary data dir and a free loopback port.

The scrape config reproduces what the chart's PodMonitor gives in a real cluster: one target
per Triton pod on its metrics port, labelled `namespace`, `pod`, `container` and
`batchedmodel` (from the pod label `batchop.io/batchedmodel`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from batchop.observe.prometheus import BM_LABEL, POD_LABEL
from batchop_dev.local.processes import stop_group

JOB_NAME = "batchop-triton"
METRICS_PORT = 8002
# Debian's package name; `apt-get download` fetches the .deb for this machine's release.
DEB_PACKAGE = "prometheus"


class PrometheusError(RuntimeError):
    """Prometheus could not be installed or started; the message says what to do."""


def _meta_label(label: str) -> str:
    """The kubernetes_sd meta label for a pod label (non-alphanumerics become `_`)."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def _pods_job(
    kubeconfig: Path | str, interval: str, timeout: str, port: int, sd_file: Path | None
) -> dict[str, Any]:
    bm_meta = _meta_label(POD_LABEL)
    address_labels = ["__meta_kubernetes_pod_ip", "__meta_kubernetes_pod_container_port_number"]
    port_labels = [
        "__meta_kubernetes_pod_container_port_name",
        "__meta_kubernetes_pod_container_port_number",
    ]
    return {
        "job_name": JOB_NAME,
        "scrape_interval": interval,
        "scrape_timeout": timeout,
        **(
            {
                "kubernetes_sd_configs": [
                    {"role": "pod", "kubeconfig_file": str(Path(kubeconfig).resolve())}
                ]
            }
            if sd_file is None
            else {"file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": interval}]}
        ),
        "relabel_configs": [
            {"source_labels": [bm_meta], "regex": ".+", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_ip"], "regex": ".+", "action": "keep"},
            {"source_labels": port_labels, "regex": f"metrics;.*|.*;{port}|;", "action": "keep"},
            # A container without declared ports: scrape the default metrics port.
            {
                "source_labels": address_labels,
                "regex": "(.+);",
                "replacement": f"$1:{port}",
                "target_label": "__address__",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "target_label": "container",
            },
            {"source_labels": [bm_meta], "target_label": BM_LABEL},
        ],
    }


def render_config(
    kubeconfig: Path | str | None,
    *,
    scrape_interval_s: float = 5.0,
    metrics_port: int = METRICS_PORT,
    static_targets: list[tuple[str, dict[str, str]]] | None = None,
    sd_file: Path | None = None,
) -> dict[str, Any]:
    """The Prometheus config (as a dict) that scrapes every BatchedModel pod's Triton metrics.

    Pure. Targets: pods carrying the BatchedModel label, on the container port named
    `metrics` or numbered `metrics_port`; a container that declares no port is scraped on
    `metrics_port`. Without a kubeconfig there is no pod discovery. `static_targets`
    ((host:port, labels) pairs) adds a job scraping fixed addresses, for tests that run Triton
    without a cluster. With `sd_file`, pods come from that file_sd file (written by
    `FileDiscovery` with the same meta labels) instead of kubernetes_sd_configs.
    """
    interval = f"{scrape_interval_s:g}s"
    timeout = f"{max(1.0, scrape_interval_s * 0.8):g}s"
    jobs: list[dict[str, Any]] = []
    if kubeconfig is not None:
        jobs.append(_pods_job(kubeconfig, interval, timeout, metrics_port, sd_file))
    if static_targets:
        jobs.append(
            {
                "job_name": f"{JOB_NAME}-static",
                "scrape_interval": interval,
                "scrape_timeout": timeout,
                "static_configs": [
                    {"targets": [addr], "labels": dict(labels)} for addr, labels in static_targets
                ],
            }
        )
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": jobs,
    }


# --------------------------------------------------------------------------- install


def _install_root() -> Path:
    return Path(sys.prefix) / "opt" / "prometheus"


def find_binary() -> Path | None:
    """$BATCHOP_PROMETHEUS, then the copy unpacked in the venv, then `prometheus` on PATH."""
    env = os.environ.get("BATCHOP_PROMETHEUS")
    if env:
        return Path(env) if Path(env).is_file() else None
    local = _install_root() / "usr" / "bin" / "prometheus"
    if local.is_file():
        return local
    found = shutil.which("prometheus")
    return Path(found) if found else None


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def ensure_binary() -> Path:
    """Return a Prometheus binary, unpacking Debian's package into the venv if needed.

    Idempotent. Uses `apt-get download` (no service is installed or started) and
    `dpkg-deb -x`; runs `apt-get update` once if the package lists are missing.
    """
    found = find_binary()
    if found:
        return found
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise PrometheusError(
            "no Prometheus binary: install one on PATH or set BATCHOP_PROMETHEUS "
            "(this helper unpacks Debian's `prometheus` package, which needs apt-get)"
        )
    root = _install_root()
    with tempfile.TemporaryDirectory(prefix="batchop-prom-deb-") as tmp:
        work = Path(tmp)
        got = _run(["apt-get", "download", "-q", DEB_PACKAGE], work)
        if got.returncode != 0:
            _run(["apt-get", "update", "-q"], work)
            got = _run(["apt-get", "download", "-q", DEB_PACKAGE], work)
        debs = sorted(work.glob(f"{DEB_PACKAGE}_*.deb"))
        if got.returncode != 0 or not debs:
            raise PrometheusError(
                f"`apt-get download {DEB_PACKAGE}` failed: {got.stderr.strip()[-400:]}"
            )
        staging = Path(tempfile.mkdtemp(prefix=".prometheus-", dir=_ensure_dir(root.parent)))
        unpacked = _run(["dpkg-deb", "-x", str(debs[0]), str(staging)], work)
        if unpacked.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise PrometheusError(f"dpkg-deb -x failed: {unpacked.stderr.strip()[-400:]}")
        if root.exists():  # a concurrent installer won; keep theirs
            shutil.rmtree(staging, ignore_errors=True)
        else:
            os.replace(staging, root)
    binary = root / "usr" / "bin" / "prometheus"
    if not binary.is_file():
        raise PrometheusError(f"the {DEB_PACKAGE} package has no binary at {binary}")
    return binary


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ file-based discovery


def pod_targets(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """file_sd target groups for one pod, with the meta labels kubernetes_sd role=pod gives.

    Pure. One target per declared container port (address podIP:port), one per container
    without ports (address podIP); none for a pod without an IP.
    """
    meta, status, spec = pod.get("metadata", {}), pod.get("status", {}), pod.get("spec", {})
    ip = status.get("podIP")
    if not ip:
        return []
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    common = {
        "__meta_kubernetes_namespace": meta.get("namespace", ""),
        "__meta_kubernetes_pod_name": meta.get("name", ""),
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_ready": "true" if ready else "false",
    }
    for key, value in (meta.get("labels") or {}).items():
        common[_meta_label(key)] = value
        common[_meta_label(key).replace("_label_", "_labelpresent_", 1)] = "true"
    groups = []
    for container in spec.get("containers") or []:
        labels = dict(common, __meta_kubernetes_pod_container_name=container.get("name", ""))
        ports = container.get("ports") or []
        if not ports:
            groups.append({"targets": [ip], "labels": labels})
        for port in ports:
            number = str(port.get("containerPort", ""))
            groups.append(
                {
                    "targets": [f"{ip}:{number}"],
                    "labels": dict(
                        labels,
                        __meta_kubernetes_pod_container_port_name=port.get("name", ""),
                        __meta_kubernetes_pod_container_port_number=number,
                        __meta_kubernetes_pod_container_port_protocol=port.get("protocol", "TCP"),
                    ),
                }
            )
    return groups


def supports_kubernetes_sd(binary: Path) -> bool:
    """Whether this Prometheus build has kubernetes_sd_configs (Debian's strips it out)."""
    promtool = binary.parent / "promtool"
    if not promtool.is_file():
        return True
    with tempfile.TemporaryDirectory(prefix="batchop-promcheck-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
        config = Path(tmp) / "prometheus.yml"
        config.write_text(yaml.safe_dump(render_config(kubeconfig)))
        done = _run([str(promtool), "check", "config", str(config)], Path(tmp))
    return done.returncode == 0


class FileDiscovery:
    """Writes the BatchedModel pods as a file_sd file, for Prometheus builds without k8s SD.

    Watches pods through the API server (list + watch + resync) and rewrites the file
    atomically on every change; Prometheus picks it up by inotify and `refresh_interval`.
    """

    def __init__(self, kubeconfig: Path, path: Path, label_selector: str = POD_LABEL) -> None:
        self.kubeconfig = kubeconfig
        self.path = path
        self.label_selector = label_selector
        self._watch: Any = None
        self._lock = threading.Lock()

    def start(self) -> FileDiscovery:
        from kubernetes import config as kconfig

        from batchop_dev.local.podwatch import PodWatch

        self._write([])
        api = kconfig.new_client_from_config(config_file=str(self.kubeconfig))
        self._watch = PodWatch(api, self.label_selector, self._changed, resync_s=30.0).start()
        self._changed()
        return self

    def _changed(self) -> None:
        if self._watch is None:
            return
        groups = [g for pod in self._watch.pods.values() for g in pod_targets(pod)]
        self._write(groups)

    def _write(self, groups: list[dict[str, Any]]) -> None:
        import json

        with self._lock:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(groups, indent=1, sort_keys=True))
            os.replace(tmp, self.path)

    def stop(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()


# --------------------------------------------------------------------------- server


class PrometheusServer:
    """One Prometheus process with its own config and data dir; a context manager.

    `url` is its HTTP API. Stopping kills the process and removes the temporary dir.
    """

    def __init__(
        self,
        kubeconfig: Path | str | None,
        *,
        scrape_interval_s: float = 5.0,
        host: str = "127.0.0.1",
        port: int | None = None,
        workdir: Path | None = None,
        static_targets: list[tuple[str, dict[str, str]]] | None = None,
        binary: Path | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """`binary` and `config`: another Prometheus (the Prometheus 3 the Prometheus
        Operator's tests build) on a configuration given whole (no discovery of our own)."""
        self.kubeconfig = Path(kubeconfig) if kubeconfig is not None else None
        self.binary = binary
        self.config = dict(config) if config is not None else None
        self.static_targets = static_targets
        self.scrape_interval_s = scrape_interval_s
        self.host = host
        self.port = port or free_port(host)
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="batchop-prometheus-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.discovery: FileDiscovery | None = None
        self.discovery_mode = "none"
        self._sd_file: Path | None = None
        self.extra_jobs: list[dict[str, Any]] = []
        self._extra_discovery: list[FileDiscovery] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def start(self, timeout_s: float = 60.0) -> PrometheusServer:
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            raise PrometheusError(f"kubeconfig {self.kubeconfig} does not exist")
        binary = self.binary or ensure_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        sd_file = None
        if self.kubeconfig is not None and self.config is None:
            self.discovery_mode = "kubernetes_sd"
            if not supports_kubernetes_sd(binary):
                self.discovery_mode = "file_sd"
                sd_file = self.workdir / "pods.json"
                self.discovery = FileDiscovery(self.kubeconfig, sd_file).start()
        self._sd_file = sd_file
        config_path = self._write_config()
        data = _ensure_dir(self.workdir / "data")
        cmd = [
            str(binary),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address={self.host}:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _write_config(self) -> Path:
        if self.config is not None:
            config = dict(self.config)
            config["scrape_configs"] = [*(config.get("scrape_configs") or []), *self.extra_jobs]
        else:
            config = render_config(
                self.kubeconfig,
                scrape_interval_s=self.scrape_interval_s,
                static_targets=self.static_targets,
                sd_file=self._sd_file,
            )
            config["scrape_configs"] += self.extra_jobs
        path = self.workdir / "prometheus.yml"
        partial = path.with_suffix(".yml.new")
        partial.write_text(yaml.safe_dump(config, sort_keys=False))
        partial.replace(path)
        return path

    def reconfigure(self, config: Mapping[str, Any]) -> None:
        """Run on `config` (with `extra_jobs` after its jobs) from now on: a live reload."""
        self.config = dict(config)
        self._write_config()
        self.reload()

    def reload(self) -> None:
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=30) as resp:
            if resp.status != 200:
                raise PrometheusError(f"prometheus reload answered {resp.status}")

    def add_service_monitor(self, monitor: dict[str, Any], service: dict[str, Any]) -> list[str]:
        """Scrape what a ServiceMonitor selects (batchop_dev.local.servicemonitor), as the
        Prometheus Operator would configure it; live (config reload). Returns the job names."""
        from batchop_dev.local.servicemonitor import service_monitor_jobs

        if self.kubeconfig is None or self.process is None:
            raise PrometheusError("add_service_monitor needs a started server with a cluster")
        selector = ",".join(
            f"{k}={v}"
            for k, v in sorted(((service.get("spec") or {}).get("selector") or {}).items())
        )
        if self.discovery_mode == "file_sd":
            index = len(self._extra_discovery)
            sd_file = self.workdir / f"servicemonitor-{index}.json"
            self._extra_discovery.append(
                FileDiscovery(self.kubeconfig, sd_file, label_selector=selector).start()
            )
            interval = f"{self.scrape_interval_s:g}s"
            sd: dict[str, Any] = {
                "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": interval}]
            }
        else:
            sd = {
                "kubernetes_sd_configs": [
                    {
                        "role": "pod",
                        "kubeconfig_file": str(self.kubeconfig.resolve()),
                        "selectors": [{"role": "pod", "label": selector}],
                    }
                ]
            }
        jobs = service_monitor_jobs(monitor, service, sd)
        self.extra_jobs += jobs
        self._write_config()
        self.reload()
        return [job["job_name"] for job in jobs]

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited with {self.process.returncode}: "
                    f"{self.log_path.read_text(errors='replace')[-1500:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise PrometheusError(f"prometheus not ready on {self.url} after {timeout_s:g}s")

    def active_targets(self) -> list[dict[str, Any]]:
        """The scrape targets Prometheus has now (its /api/v1/targets, active ones)."""
        import json

        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=5) as r:
            return list(json.load(r)["data"]["activeTargets"])

    def dropped_targets(self) -> list[dict[str, Any]]:
        """The targets discovery found and relabeling dropped (for a failure's message)."""
        import json

        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=dropped", timeout=5) as r:
            return list(json.load(r)["data"]["droppedTargets"])

    def stop(self) -> None:
        proc, self.process = self.process, None
        stop_group(proc)
        discovery, self.discovery = self.discovery, None
        if discovery is not None:
            discovery.stop()
        for extra in self._extra_discovery:
            extra.stop()
        self._extra_discovery = []
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchop_dev.local.prometheus",
        description="Install (idempotently) and optionally run the local stack's Prometheus.",
    )
    parser.add_argument("--install", action="store_true", help="only make sure it is installed")
    parser.add_argument("--kubeconfig", help="run Prometheus against this cluster")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.install or not args.kubeconfig:
        print(ensure_binary())
        return 0
    server = PrometheusServer(
        args.kubeconfig, port=args.port, scrape_interval_s=args.scrape_interval
    ).start()
    print(f"prometheus on {server.url} (logs: {server.log_path}); Ctrl-C stops it", flush=True)
    try:
        while server.process is not None and server.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
