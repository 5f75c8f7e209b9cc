"""Read one Triton's Prometheus counters directly (no Prometheus server needed).

Used by tests and benchmarks to compare the client's view with the server's: average batch
is inference_count / exec_count; server latency per request is request_duration_us / success.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
)


@dataclass(frozen=True)
class TritonCounters:
    values: dict[str, float]

    def __sub__(self, earlier: TritonCounters) -> TritonCounters:
        return TritonCounters({k: v - earlier.values.get(k, 0.0) for k, v in self.values.items()})

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)

    @property
    def avg_batch(self) -> float:
        execs = self.get("nv_inference_exec_count")
        return self.get("nv_inference_count") / execs if execs else 0.0

    def per_request_ms(self, name: str) -> float:
        """Mean of a *_duration_us counter per successful request, in ms."""
        n = self.get("nv_inference_request_success")
        return self.get(name) / n / 1000.0 if n else 0.0


def scrape(metrics_url: str, model: str, timeout: float = 5.0) -> TritonCounters:
    """The counters of `model` (summed over versions) from Triton's /metrics."""
    with urllib.request.urlopen(metrics_url, timeout=timeout) as resp:
        text = resp.read().decode()
    values = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # the parser names counter samples NAME_total; Triton exposes them as NAME
            name = sample.name.removesuffix("_total")
            if name in values and sample.labels.get("model") == model:
                values[name] += sample.value
    return TritonCounters(values)


def failures_by_reason(metrics_url: str, model: str, timeout: float = 5.0) -> dict[str, float]:
    """`nv_inference_request_failure` of `model` per `reason` label (Triton 2.51: REJECTED,
    CANCELED, BACKEND, OTHER), summed over versions."""
    with urllib.request.urlopen(metrics_url, timeout=timeout) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.removesuffix("_total") != "nv_inference_request_failure":
                continue
            if sample.labels.get("model") == model:
                reason = sample.labels.get("reason", "")
                out[reason] = out.get(reason, 0.0) + sample.value
    return out
