"""The Prometheus observer against a real Prometheus scraping a real tritonserver under load.

No cluster here: Prometheus scrapes the server as a static target labelled the way the pod
relabeling labels pods, so the queries are exercised on Triton's real metric names and values.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from batchop.observe.prometheus import BM_LABEL, PrometheusObserver, build_observation
from batchop.sim.profile import load_profile
from batchop.sim.trace import constant_trace
from batchop_dev.local.load import StaticTargets, run_load
from batchop_dev.local.prometheus import PrometheusServer
from batchop_dev.local.triton import TritonProcess, write_model_repository

pytestmark = pytest.mark.e2e

PROFILE = Path(__file__).resolve().parents[1] / "examples" / "profiles" / "cpu-demo.yaml"


def test_observer_reads_real_triton_metrics(tmp_path: Path) -> None:
    address = f"127.{random.randint(30, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"
    profile = load_profile(PROFILE)
    write_model_repository(tmp_path / "repo", "demo", profile, max_queue_delay_us=2000)
    labels = {"namespace": "team", BM_LABEL: "demo", "pod": "demo-0"}
    with (
        TritonProcess(tmp_path / "repo", address, load_models=["demo"]) as triton,
        PrometheusServer(static_targets=[(f"{address}:8002", labels)], scrape_interval_s=1) as prom,
    ):
        observer = PrometheusObserver(prom.url, window="10s")
        report = asyncio.run(
            run_load(
                constant_trace(80.0, 12.0), StaticTargets([triton.url], "demo"), keep_records=False
            )
        )
        assert report["ok"] > 0, report
        time.sleep(2.0)  # one more scrape after the last request
        parts = observer.observe()
        assert observer.queries_sent == len(observer.queries)
        # The forecast's history: one range query more, every model's recent arrival rate.
        with_history = observer.observe(history_s=60.0)
        assert observer.queries_sent == 2 * len(observer.queries) + 1
    got = parts[("team", "demo")]
    assert got.scraped_pods == 1
    assert got.rps is not None and got.rps > 0
    assert got.avg_batch is not None and got.avg_batch >= 1.0
    # The synthetic model sleeps >= 4 ms per execution (cpu-demo profile).
    assert got.compute_ms is not None and got.compute_ms >= 3.5
    assert got.p99_ms is not None and got.p99_ms >= got.compute_ms
    assert got.queue_ms is not None and got.queue_ms >= 0
    assert got.age_s is not None and got.age_s < 10
    # The busiest scrape interval of the window: at least about the window's mean.
    assert got.peak_rps is not None and got.peak_rps >= 0.8 * got.rps
    history = with_history[("team", "demo")].rate_history
    assert history and max(r for _, r in history) > 0, history
    assert [t for t, _ in history] == sorted(t for t, _ in history)
    obs = build_observation(
        got, time_s=time.time(), replicas=1, ready_replicas=1, delay_us=2000, max_age_s=30
    )
    assert obs.complete and obs.rps == got.rps
