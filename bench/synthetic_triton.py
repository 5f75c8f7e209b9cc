"""SYNTHETIC TRITON, FOR BENCHMARKS ONLY: one HTTP endpoint standing in for N Triton pods.

At 1,000 BatchedModels there are no Triton pods to scrape (the local cluster runs them on KWOK
fake nodes), yet the operator's tick must be measured against a real Prometheus answering the
observer's real PromQL over N models. This exporter is the only stand-in: a real Prometheus
(batchop_dev.local.prometheus) scrapes it as N targets, one per synthetic pod, and the operator's
PrometheusObserver queries that Prometheus as it would in a cluster.

Each target is the same address with `?pod=<name>` (the `__param_pod` target label) and
carries the labels the stack's scrape config and the chart's PodMonitor give a Triton pod
(`namespace`, `pod`, `container`, `batchedmodel`). A scrape answers that pod's series in
Triton's own exposition format (model/version labels, counters, the pending gauge, the
request summary with quantiles), counters growing at fixed healthy rates so that every
`rate()` the observer takes is defined: `rps` requests/s in batches of `batch`, `queue_ms`
and `compute_ms` per request, p99 `p99_ms` (SLO in the benchmark: 50 ms).
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from batchop.api.constants import PROM_LABEL_MODEL

MODEL = "resnet50"  # Triton's own `model` label: the model in the repository


@dataclass(frozen=True)
class Traffic:
    """The fixed per-pod figures every synthetic pod reports."""

    rps: float = 100.0
    batch: float = 4.0
    queue_ms: float = 1.0
    compute_ms: float = 5.0
    p99_ms: float = 20.0


def exposition(elapsed_s: float, traffic: Traffic) -> str:
    """One Triton pod's /metrics after `elapsed_s` s of `traffic`, in Triton's format. Pure."""
    t = traffic
    served = t.rps * elapsed_s
    labels = f'model="{MODEL}",version="1"'
    lines: list[str] = []

    def family(name: str, kind: str, samples: list[tuple[str, str, float]]) -> None:
        lines.append(f"# HELP {name} {name.removeprefix('nv_').replace('_', ' ')}")
        lines.append(f"# TYPE {name} {kind}")
        for suffix, extra, value in samples:
            lines.append(f"{name}{suffix}{{{labels}{extra}}} {value:.6g}")

    family("nv_inference_request_success", "counter", [("", "", served)])
    family("nv_inference_request_failure", "counter", [
        ("", f',reason="{reason}"', 0.0) for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER")
    ])  # fmt: skip
    family("nv_inference_count", "counter", [("", "", served)])
    family("nv_inference_exec_count", "counter", [("", "", served / t.batch)])
    family("nv_inference_request_duration_us", "counter",
           [("", "", served * (t.queue_ms + t.compute_ms) * 1000)])  # fmt: skip
    family("nv_inference_queue_duration_us", "counter", [("", "", served * t.queue_ms * 1000)])
    family("nv_inference_compute_infer_duration_us", "counter",
           [("", "", served * t.compute_ms * 1000)])  # fmt: skip
    family("nv_inference_pending_request_count", "gauge", [("", "", 0.0)])
    mean_us = (t.queue_ms + t.compute_ms) * 1000
    family("nv_inference_request_summary_us", "summary", [
        ("", ',quantile="0.5"', mean_us),
        ("", ',quantile="0.9"', (mean_us + t.p99_ms * 1000) / 2),
        ("", ',quantile="0.99"', t.p99_ms * 1000),
        ("_sum", "", served * mean_us),
        ("_count", "", served),
    ])  # fmt: skip
    return "\n".join(lines) + "\n"


class SyntheticTritonExporter:
    """Serves `exposition` for any `?pod=` on 127.0.0.1; counts scrapes. A context manager."""

    def __init__(self, traffic: Traffic = Traffic()) -> None:
        self.traffic = traffic
        self.started = time.monotonic()
        self.scrapes = 0
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                url = urllib.parse.urlsplit(self.path)
                if url.path != "/metrics" or "pod" not in urllib.parse.parse_qs(url.query):
                    self.send_error(404, "GET /metrics?pod=<name>")
                    return
                with exporter._lock:
                    exporter.scrapes += 1
                body = exposition(time.monotonic() - exporter.started, exporter.traffic).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def targets(self, models: list[tuple[str, str]]) -> list[tuple[str, dict[str, str]]]:
        """Static scrape targets, one synthetic pod per (namespace, BatchedModel), labelled as
        the pod-discovery relabeling labels a Triton pod (and `__param_pod` picks its page)."""
        out = []
        for ns, name in models:
            pod = f"{name}-triton-0"
            labels = {
                "namespace": ns,
                "pod": pod,
                "container": "triton",
                PROM_LABEL_MODEL: name,
                "__param_pod": pod,
            }
            out.append((self.address, labels))
        return out

    def count(self) -> int:
        with self._lock:
            return self.scrapes

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> SyntheticTritonExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
