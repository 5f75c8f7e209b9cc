"""The config of a Prometheus on fixed targets (tests that run Triton without a cluster)."""

from __future__ import annotations

import pytest

from batchop_dev.local.prometheus import JOB_NAME, PrometheusError, PrometheusServer, render_config


def test_static_targets_are_one_job_with_their_labels() -> None:
    config = render_config([("127.0.0.1:8002", {"namespace": "n"})], scrape_interval_s=2)
    (job,) = config["scrape_configs"]
    assert job["job_name"] == f"{JOB_NAME}-static" and job["scrape_interval"] == "2s"
    assert job["scrape_timeout"] == "1.6s"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:8002"], "labels": {"namespace": "n"}}]


def test_a_server_takes_a_config_or_targets_not_both() -> None:
    with pytest.raises(PrometheusError, match="exactly one of config, static_targets"):
        PrometheusServer(config={}, static_targets=[])
    with pytest.raises(PrometheusError, match="exactly one"):
        PrometheusServer()
