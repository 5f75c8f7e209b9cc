"""Settings of `batchop run`: flags over environment over defaults; bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchop.cli.main import build_parser
from batchop.controller.settings import Settings, SettingsError, parse_settings


def flags(*argv: str) -> dict[str, object]:
    return vars(build_parser().parse_args(["run", *argv]))


def test_defaults_watch_every_namespace_with_pod_monitor() -> None:
    s = parse_settings(flags(), {})
    assert s == Settings()
    assert s.all_namespaces and s.namespaces == ()
    assert s.pod_monitor is True and s.log_format == "json"


def test_flags_are_parsed() -> None:
    s = parse_settings(
        flags(
            "-n", "team-a", "--namespace", "team-b", "--no-pod-monitor",
            "--prometheus-url", "http://127.0.0.1:9090", "--default-image", "triton:local",
            "--liveness", "http://127.0.0.1:18080/healthz", "--metrics-address", "127.0.0.1:0",
            "--log-format", "plain", "--workers", "3", "-v", "--rate-window", "20s",
            "--scrape-interval", "5s",
        ),
        {},
    )  # fmt: skip
    assert s.namespaces == ("team-a", "team-b") and not s.all_namespaces
    assert s.pod_monitor is False
    assert s.prometheus_url == "http://127.0.0.1:9090"
    assert s.default_image == "triton:local"
    assert s.liveness == "http://127.0.0.1:18080/healthz"
    assert s.metrics_address == ("127.0.0.1", 0)
    assert (s.log_format, s.workers, s.verbose) == ("plain", 3, True)
    assert s.rate_window == "20s" and s.scrape_interval == "5s"


def test_environment_fills_in_and_flags_win() -> None:
    env = {
        "BATCHOP_NAMESPACE": "a, b,a",
        "BATCHOP_POD_MONITOR": "off",
        "BATCHOP_PROMETHEUS_URL": "https://prom.example:9090",
        "BATCHOP_LIVENESS": "off",
        "BATCHOP_METRICS_ADDRESS": ":9100",
        "BATCHOP_WORKERS": "16",
        "BATCHOP_RATE_WINDOW": "2m",
        "BATCHOP_SCRAPE_INTERVAL": "30s",
    }
    s = parse_settings(flags(), env)
    assert s.namespaces == ("a", "b")
    assert s.pod_monitor is False and s.liveness is None
    assert s.metrics_address == ("0.0.0.0", 9100) and s.workers == 16
    assert s.rate_window == "2m" and s.scrape_interval == "30s"
    s = parse_settings(flags("--pod-monitor", "-n", "c", "--workers", "2"), env)
    assert s.pod_monitor is True and s.namespaces == ("c",) and s.workers == 2


@pytest.mark.parametrize(
    ("argv", "env", "names"),
    [
        ([], {"BATCHOP_POD_MONITOR": "maybe"}, ["BATCHOP_POD_MONITOR", "boolean"]),
        (["--prometheus-url", "prometheus:9090"], {}, ["--prometheus-url", "http"]),
        ([], {"BATCHOP_PROMETHEUS_URL": "http://:9090"}, ["BATCHOP_PROMETHEUS_URL", "host"]),
        ([], {"BATCHOP_PROMETHEUS_URL": "http://p:99999"}, ["BATCHOP_PROMETHEUS_URL", "port"]),
        (["--namespace", "Team_A"], {}, ["--namespace", "Team_A"]),
        ([], {"BATCHOP_NAMESPACE": "ok,-bad"}, ["BATCHOP_NAMESPACE", "-bad"]),
        (["--liveness", "http://0.0.0.0:8080"], {}, ["--liveness", "path"]),
        (["--metrics-address", "localhost"], {}, ["--metrics-address", "HOST:PORT"]),
        ([], {"BATCHOP_METRICS_ADDRESS": "h:70000"}, ["BATCHOP_METRICS_ADDRESS", "0..65535"]),
        (["--workers", "many"], {}, ["--workers", "whole number"]),
        (["--rate-window", "5s"], {}, ["--rate-window", "between 10s and 10m"]),
        ([], {"BATCHOP_RATE_WINDOW": "1d"}, ["BATCHOP_RATE_WINDOW", "duration"]),
        (["--scrape-interval", "0s"], {}, ["--scrape-interval", "between 1s and 5m"]),
        ([], {"BATCHOP_SCRAPE_INTERVAL": "10m"}, ["BATCHOP_SCRAPE_INTERVAL", "between"]),
        ([], {"BATCHOP_WORKERS": "0"}, ["BATCHOP_WORKERS", "between"]),
        ([], {"BATCHOP_LOG_FORMAT": "xml"}, ["BATCHOP_LOG_FORMAT", "json"]),
        ([], {"BATCHOP_DEFAULT_IMAGE": "triton server"}, ["BATCHOP_DEFAULT_IMAGE", "spaces"]),
        (["--kubeconfig", "/nonexistent/kubeconfig"], {}, ["--kubeconfig", "no such file"]),
        ([], {"BATCHOP_VERBOSE": "loud"}, ["BATCHOP_VERBOSE"]),
        (["-n", "a"], {"BATCHOP_ALL_NAMESPACES": "true"}, ["--all-namespaces", "--namespace"]),
    ],
)
def test_bad_values_name_their_source(
    argv: list[str], env: dict[str, str], names: list[str]
) -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(flags(*argv), env)
    for name in names:
        assert name in str(info.value)


def test_namespace_and_all_namespaces_flags_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "-n", "a", "--all-namespaces"])


def test_cli_reports_bad_setting_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    from batchop.cli.main import main

    assert main(["run", "--prometheus-url", "ftp://x"]) == 2
    assert "--prometheus-url" in capsys.readouterr().err


def test_unusable_kubeconfig_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from batchop.cli.main import main

    empty = tmp_path / "kubeconfig"
    empty.write_text("")
    assert main(["run", "--kubeconfig", str(empty), "--liveness", "off"]) == 2
    err = capsys.readouterr().err
    assert "cannot configure the Kubernetes client" in err and str(empty) in err


def test_the_scrape_interval_reaches_the_pod_monitors_batchop_renders() -> None:
    """The PodMonitor asks what `--scrape-interval` says (the local stack scrapes every 5 s)."""
    from batchop.controller.reconcile import render_options

    assert render_options(parse_settings(flags(), {})).scrape_interval == "15s"
    options = render_options(parse_settings(flags("--scrape-interval", "5s"), {}))
    assert options.scrape_interval == "5s" and options.pod_monitor is True
