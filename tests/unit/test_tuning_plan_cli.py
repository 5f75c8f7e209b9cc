"""`batchop plan`: what it prints agrees with `recommend`, and bad input is refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchop.cli.main import main
from batchop.tuning.curve import prior_curve
from batchop.tuning.policy import recommend
from batchop.tuning.types import TuningSpec

PROFILE = """\
name: test-model
max_batch_size: 32
gpus_per_replica: 1
startup_seconds: 5
batch_latency_ms: {1: 4.0, 4: 5.0, 8: 6.0, 16: 8.0, 32: 12.0}
"""
POINTS = ((1, 4.0), (4, 5.0), (8, 6.0), (16, 8.0), (32, 12.0))


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(PROFILE)
    return path


@pytest.mark.parametrize("rps,slo", [(100.0, 50.0), (1800.0, 15.0), (6000.0, 25.0)])
def test_plan_json_matches_recommend(
    profile: Path, capsys: pytest.CaptureFixture[str], rps: float, slo: float
) -> None:
    code = main(
        ["plan", "--profile", str(profile), "--rps", str(rps), "--slo-ms", str(slo), "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    spec = TuningSpec(slo_ms=slo, max_batch_size=32, prior_batch_latency_ms=POINTS)
    want = recommend(prior_curve(POINTS), rps, spec)
    assert code == 0 and out["profile"] == "test-model"
    assert (out["replicas"], out["delay_us"]) == (want.replicas, want.delay_us)
    assert out["predicted_p99_ms"] <= 0.85 * slo
    assert out["rps_per_gpu"] == pytest.approx(rps / want.replicas)


def test_plan_text_names_the_figures(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--profile", str(profile), "--rps", "500", "--slo-ms", "40"]) == 0
    text = capsys.readouterr().out
    for words in (
        "replicas",
        "max queue delay",
        "predicted p99",
        "average batch",
        "throughput per GPU",
    ):
        assert words in text


def test_plan_infeasible_exits_1(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 2 replicas of ~2,600 req/s each cannot serve 50,000 req/s.
    code = main(
        [
            "plan",
            "--profile",
            str(profile),
            "--rps",
            "50000",
            "--slo-ms",
            "25",
            "--max-replicas",
            "2",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert "--max-replicas 2 serves about" in captured.err
    assert "raise --max-replicas to" in captured.err and "req/s served" not in captured.err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--rps", "-1", "--slo-ms", "10"], "--rps: must be >= 0"),
        (["--rps", "10", "--slo-ms", "0"], "--slo-ms: must be > 0"),
        (
            ["--rps", "10", "--slo-ms", "10", "--min-replicas", "3", "--max-replicas", "2"],
            "--min-replicas",
        ),
    ],
)
def test_plan_refuses_bad_flags(
    profile: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    assert main(["plan", "--profile", str(profile), *args]) == 2
    assert needle in capsys.readouterr().err


def test_plan_names_a_bad_profile_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["plan", "--profile", str(missing), "--rps", "1", "--slo-ms", "5"]) == 2
    assert str(missing) in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmax_batch_size: 8\nbatch_latency_ms: {2: 1.0}\n")
    assert main(["plan", "--profile", str(bad), "--rps", "1", "--slo-ms", "5"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "batch size 1" in err
