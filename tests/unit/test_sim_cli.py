"""`batchop simulate` and `batchop bench` end to end on tiny inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_samples import TINY_PROFILE, write_inputs

from batchop.cli.main import main

PROFILE = TINY_PROFILE
TRACE = "second,rps\n0,200\n40,900\n80,200\n120,0\n"
CONTRACT = (
    "requests",
    "p50_ms",
    "p99_ms",
    "slo_attainment",
    "window_attainment",
    "gpu_seconds",
    "gpu_busy_seconds",
    "avg_batch_size",
    "dropped",
)


@pytest.fixture()
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    return write_inputs(tmp_path)


def test_simulate_writes_the_contract_fields_and_a_plot(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    profile, trace = inputs
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(
        [
            "simulate",
            "--profile",
            str(profile),
            "--trace",
            str(trace),
            "--slo-ms",
            "20",
            "--policy",
            "hpa",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--quiet",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    for key in CONTRACT:
        assert key in result
    assert result["requests"] > 0.9 * (200 * 80 + 900 * 40)
    assert 0 <= result["slo_attainment"] <= 1 and 0 <= result["window_attainment"] <= 1
    assert result["gpu_busy_seconds"] <= result["gpu_seconds"]
    row = result["timeline"][0]
    assert {"t", "rps", "p99_ms", "delay_us", "replicas", "ready", "avg_batch"} <= set(row)
    assert png.stat().st_size > 1000


def test_simulate_static_keeps_its_replicas(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    profile, trace = inputs
    out = tmp_path / "s.json"
    assert (
        main(
            [
                "simulate",
                "--profile",
                str(profile),
                "--trace",
                str(trace),
                "--slo-ms",
                "20",
                "--policy",
                "static",
                "--replicas",
                "3",
                "--delay-us",
                "1000",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["gpu_seconds"] == pytest.approx(3 * 120)
    assert {r["delay_us"] for r in result["timeline"]} == {1000}


def test_simulate_reports_bad_input_with_file_and_line(
    inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, _ = inputs
    bad = tmp_path / "bad.csv"
    bad.write_text("second,rps\n0,10\n5,-1\n9,0\n")
    code = main(
        [
            "simulate",
            "--profile",
            str(profile),
            "--trace",
            str(bad),
            "--slo-ms",
            "20",
            "--json",
            str(tmp_path / "x.json"),
        ]
    )
    assert code == 2
    assert f"{bad}:3: field `rps`" in capsys.readouterr().err


def _simulate(inputs: tuple[Path, Path], out: Path, *extra: str) -> int:
    profile, trace = inputs
    return main(["simulate", "--profile", str(profile), "--trace", str(trace), "--slo-ms", "20",
                 "--policy", "static", "--replicas", "1", "--max-delay-us", "2000", "--json",
                 str(out), "--quiet", *extra])  # fmt: skip


def test_simulate_rejects_by_default_and_queues_when_asked(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    # one replica of `tiny` serves 1,600 req/s: the 900 req/s step fits, so overload it
    heavy = tmp_path / "heavy.csv"
    heavy.write_text("second,rps\n0,200\n20,3200\n40,200\n60,0\n")
    inputs = (inputs[0], heavy)
    assert _simulate(inputs, tmp_path / "r.json") == 0
    guarded = json.loads((tmp_path / "r.json").read_text())
    assert guarded["rejected"] > 0
    # the API's default timeout: SLO 20 ms minus a full batch (5 ms) = 15 ms, then compute
    assert guarded["served_p99_ms"] <= 15 + 5 + 1e-6
    assert sum(row["rejected"] for row in guarded["timeline"]) == guarded["rejected"]
    assert _simulate(inputs, tmp_path / "q.json", "--overload", "queue") == 0
    queued = json.loads((tmp_path / "q.json").read_text())
    assert queued["rejected"] == 0 and queued["served_p99_ms"] > 1000
    assert _simulate(inputs, tmp_path / "t.json", "--queue-timeout-us", "5000") == 0
    tight = json.loads((tmp_path / "t.json").read_text())
    assert tight["rejected"] > guarded["rejected"] and tight["served_p99_ms"] <= 5 + 5 + 1e-6


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--overload", "queue", "--max-queue-size", "4"], "only with --overload reject"),
        (["--queue-timeout-us", "2000"], "must exceed --max-delay-us"),
        (["--queue-timeout-us", "20000"], "below the SLO"),
        (["--max-queue-size", "-1"], "--max-queue-size: must be in 0.."),
    ],
)
def test_simulate_refuses_overload_flags_the_api_would_refuse(
    inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    says: str,
) -> None:
    assert _simulate(inputs, tmp_path / "x.json", *flags) == 2
    assert says in capsys.readouterr().err


def test_simulate_runs_static_peak_from_the_start_and_keda_by_its_fraction(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    profile, _ = inputs
    heavy = tmp_path / "heavy.csv"
    heavy.write_text("second,rps\n0,200\n60,4000\n120,200\n180,0\n")
    common = ["simulate", "--profile", str(profile), "--trace", str(heavy), "--slo-ms", "20",
              "--max-replicas", "16", "--quiet", "--json"]  # fmt: skip
    assert main([*common, str(tmp_path / "s.json"), "--policy", "static-peak"]) == 0
    peak = json.loads((tmp_path / "s.json").read_text())
    # one replica serves 1,600 req/s at most: the 4,000 req/s minute needs several, held
    # from t = 0 (no decisions), and the SLO holds through the step
    assert peak["max_replicas_used"] >= 3 and peak["decisions"] == []
    assert peak["window_attainment"] == 1.0
    runs = {}
    for fraction in ("0.5", "0.9"):
        out = tmp_path / f"k{fraction}.json"
        args = [*common, str(out), "--policy", "keda", "--hpa-fraction", fraction]
        assert main(args) == 0
        runs[fraction] = json.loads(out.read_text())
    assert runs["0.5"]["gpu_seconds"] > runs["0.9"]["gpu_seconds"]
    assert main([*common, "-", "--policy", "hpa", "--hpa-fraction", "0"]) == 2
