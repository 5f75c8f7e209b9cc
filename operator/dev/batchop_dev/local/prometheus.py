"""A Prometheus server process for the local stack and the tests, and Debian's promtool.

The server is the Prometheus 3 built from Go modules (`make monitoring-binaries`,
batchop_dev.local.build), on a configuration given whole (the stack's: what the real
Prometheus Operator generates, batchop_dev.local.monitoring) or on fixed targets, for tests
that run Triton or the operator without a cluster. Every instance has its own config, data
dir and free loopback port.

promtool, for the unit tests that check the chart's rules and generated jobs, is still
Debian's (2.42): one `apt-get download` away, unpacked into the venv
(`<venv>/opt/prometheus`), never installed as a service, where the Go build has no promtool.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from batchop_dev.local.processes import stop_group

JOB_NAME = "batchop-triton"
METRICS_PORT = 8002
# Debian's package name; `apt-get download` fetches the .deb for this machine's release.
DEB_PACKAGE = "prometheus"


class PrometheusError(RuntimeError):
    """Prometheus could not be installed or started; the message says what to do."""


def render_config(
    static_targets: list[tuple[str, dict[str, str]]], *, scrape_interval_s: float = 5.0
) -> dict[str, Any]:
    """A config scraping fixed addresses ((host:port, labels) pairs) in one job. Pure."""
    interval = f"{scrape_interval_s:g}s"
    timeout = f"{max(1.0, scrape_interval_s * 0.8):g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": f"{JOB_NAME}-static",
                "scrape_interval": interval,
                "scrape_timeout": timeout,
                "static_configs": [
                    {"targets": [addr], "labels": dict(labels)} for addr, labels in static_targets
                ],
            }
        ],
    }


# --------------------------------------------------------------------------- binaries


def server_binary() -> Path:
    """$BATCHOP_PROMETHEUS, else the Prometheus 3 of `make monitoring-binaries` (built here
    when missing, with progress)."""
    env = os.environ.get("BATCHOP_PROMETHEUS")
    if env:
        if not Path(env).is_file():
            raise PrometheusError(f"BATCHOP_PROMETHEUS={env!r}: no such file")
        return Path(env)
    from batchop_dev.local import build

    return build.ensure_monitoring_binaries().prometheus


def _install_root() -> Path:
    return Path(sys.prefix) / "opt" / "prometheus"


def find_promtool() -> Path | None:
    """Debian's promtool unpacked in the venv, else `promtool` on PATH."""
    local = _install_root() / "usr" / "bin" / "promtool"
    if local.is_file():
        return local
    found = shutil.which("promtool")
    return Path(found) if found else None


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def ensure_promtool() -> Path:
    """Return promtool, unpacking Debian's package into the venv if needed.

    Idempotent. Uses `apt-get download` (no service is installed or started) and
    `dpkg-deb -x`; runs `apt-get update` once if the package lists are missing.
    """
    found = find_promtool()
    if found:
        return found
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise PrometheusError(
            "no promtool: install one on PATH (this helper unpacks Debian's `prometheus` "
            "package, which needs apt-get)"
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
    promtool = root / "usr" / "bin" / "promtool"
    if not promtool.is_file():
        raise PrometheusError(f"the {DEB_PACKAGE} package has no promtool at {promtool}")
    return promtool


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- server


class PrometheusServer:
    """One Prometheus process with its own config and data dir; a context manager.

    Give it `config` whole, or `static_targets` ((host:port, labels) pairs) to scrape.
    `url` is its HTTP API. Stopping kills the process and removes the temporary dir; a
    given `workdir` is kept, so a stop and a start keep the data.
    """

    def __init__(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        static_targets: list[tuple[str, dict[str, str]]] | None = None,
        scrape_interval_s: float = 5.0,
        host: str = "127.0.0.1",
        port: int | None = None,
        workdir: Path | None = None,
        binary: Path | None = None,
    ) -> None:
        if (config is None) == (static_targets is None):
            raise PrometheusError("PrometheusServer: give exactly one of config, static_targets")
        self.config = (
            dict(config)
            if config is not None
            else render_config(static_targets or [], scrape_interval_s=scrape_interval_s)
        )
        self.binary = binary
        self.scrape_interval_s = scrape_interval_s
        self.host = host
        self.port = port or free_port(host)
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="batchop-prometheus-"))
        self.process: subprocess.Popen[bytes] | None = None
        # Jobs run after the config's own (the stack's hand-made ServiceMonitor job).
        self.extra_jobs: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def start(self, timeout_s: float = 60.0) -> PrometheusServer:
        binary = self.binary or server_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
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
        config = dict(self.config)
        config["scrape_configs"] = [*(config.get("scrape_configs") or []), *self.extra_jobs]
        path = self.workdir / "prometheus.yml"
        partial = path.with_suffix(".yml.new")
        partial.write_text(yaml.safe_dump(config, sort_keys=False))
        partial.replace(path)
        return path

    def reconfigure(self, config: Mapping[str, Any]) -> None:
        """Run on `config` (with `extra_jobs` after its jobs) from now on: a live reload."""
        self.config = dict(config)
        self._write_config()
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=30) as resp:
            if resp.status != 200:
                raise PrometheusError(f"prometheus reload answered {resp.status}")

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
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchop_dev.local.prometheus",
        description="Install (idempotently) Debian's promtool for the tests that use it.",
    )
    parser.add_argument("--install", action="store_true", help="make sure it is installed")
    parser.parse_args(argv)
    print(ensure_promtool())
    return 0


if __name__ == "__main__":
    sys.exit(main())
