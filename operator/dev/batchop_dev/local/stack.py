"""The local stack around a running local cluster: monitoring, the pod runner, the operator.

One object starts and stops them together so the demo and the e2e fixture share the exact
same wiring: the real Prometheus Operator has a Prometheus 3 scrape the pods of every
PodMonitor (batchop_dev.local.monitoring), the pod runner runs a real tritonserver per pod,
and (optionally) `batchop run` runs as a subprocess pointed at both, creating a PodMonitor
per model as it does in a cluster.
Every listener is on 127.0.0.1 with a free port, so several stacks can run side by side.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchop_dev.local.monitoring import OperatedPrometheus
from batchop_dev.local.podrunner import PodRunner
from batchop_dev.local.processes import stop_group
from batchop_dev.local.prometheus import free_port


class StackError(RuntimeError):
    """A part of the local stack did not start; the message says which and where its log is."""


@dataclass(frozen=True)
class OperatorProcess:
    """One `batchop run` the stack started: its process and where it serves its /metrics."""

    process: subprocess.Popen[bytes]
    metrics_url: str
    log_path: Path


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class LocalStack:
    """Prometheus + pod runner (+ the operator) for the cluster at `kubeconfig`.

    `repository_dir` is where model repositories for the pods live (the demo writes its
    synthetic model there). Use as a context manager, or start()/stop().
    """

    def __init__(
        self,
        kubeconfig: Path | str,
        *,
        workdir: Path | None = None,
        scrape_interval_s: float = 5.0,
        repository_map: dict[str, str] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="batchop-stack-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.repository_dir = self.workdir / "models"
        self.repository_dir.mkdir(exist_ok=True)
        self.say = say or (lambda m: print(m, file=sys.stderr, flush=True))
        self.prometheus = OperatedPrometheus(
            self.kubeconfig,
            scrape_interval_s=scrape_interval_s,
            workdir=self.workdir / "monitoring",
            say=self.say,
        )
        self.runner = PodRunner(
            self.kubeconfig, repository_map=repository_map, log_dir=self.workdir / "triton"
        )
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_metrics_url: str | None = None

    @property
    def operator_log(self) -> Path:
        return self.workdir / "operator.log"

    def start(self, operator: bool = False) -> LocalStack:
        try:
            self.prometheus.start()
            self.say(
                f"prometheus {self.prometheus.url} ({self.prometheus.discovery_mode}, "
                f"scrape every {self.prometheus.scrape_interval_s:g}s)"
            )
            self.runner.start()
            self.say(f"pod runner up (tritonserver logs in {self.runner.log_dir})")
            if operator:
                self.start_operator()
        except BaseException:
            self.stop()
            raise
        return self

    def start_operator(self, extra_args: list[str] | None = None) -> None:
        """`batchop run` as a subprocess against this cluster and this Prometheus.

        A running operator is stopped first: two would fight over the same models, and the
        one no longer referenced here would outlive the stack.
        """
        self.stop_operator()
        launched = self.launch_operator(self.operator_log, extra_args)
        self.operator, self.operator_metrics_url = launched.process, launched.metrics_url
        self.say(f"operator up (log {self.operator_log})")

    def launch_operator(
        self, log_path: Path, extra_args: list[str] | None = None
    ) -> OperatorProcess:
        """Start one more `batchop run` (the caller stops it: processes.stop_group); returns
        once it is live. Several run side by side only with `--leader-elect`."""
        metrics_port, live_port = free_port(), free_port()
        cmd = [
            sys.executable,
            "-m",
            "batchop",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--prometheus-url",
            self.prometheus.url,
            # ~4 scrapes: the stack scrapes every few seconds, so steps show within seconds.
            "--rate-window",
            f"{max(10, round(4 * self.prometheus.scrape_interval_s))}s",
            # The PodMonitors batchop creates ask for the stack's scrape interval.
            "--scrape-interval",
            f"{self.prometheus.scrape_interval_s:g}s",
            "--metrics-address",
            f"127.0.0.1:{metrics_port}",
            "--liveness",
            f"http://127.0.0.1:{live_port}/healthz",
            "--log-format",
            "plain",
            *(extra_args or []),
        ]
        # KUBECONFIG too: kopf's own login reads the environment, not our flag.
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise StackError(f"batchop run exited with {proc.returncode}: {_tail(log_path)}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{live_port}/healthz", timeout=2
                ) as resp:
                    if resp.status == 200:
                        return OperatorProcess(
                            proc, f"http://127.0.0.1:{metrics_port}/metrics", log_path
                        )
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        stop_group(proc)
        raise StackError(f"batchop run not live after 60s: {_tail(log_path)}")

    def operator_running(self) -> bool:
        return self.operator is not None and self.operator.poll() is None

    def observer(self, window: str = "30s") -> Any:
        from batchop.observe.prometheus import PrometheusObserver

        return PrometheusObserver(self.prometheus.url, window=window)

    def stop_operator(self) -> None:
        proc, self.operator = self.operator, None
        stop_group(proc)

    def stop(self) -> None:
        """Stop the operator first (so it does not act on a half-torn stack), then the rest."""
        self.stop_operator()
        self.runner.stop()
        self.prometheus.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
