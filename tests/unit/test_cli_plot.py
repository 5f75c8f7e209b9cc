"""The simulator plot: pure axis helpers, and a PNG rendered from a small simulation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_samples import TINY_PROFILE

from batchop.cli.main import main
from batchop_dev.plot import (
    format_ms,
    latency_range,
    latency_ticks,
    plot_timeline,
    replica_ticks,
    slo_label,
)

PROFILE = TINY_PROFILE


@pytest.mark.parametrize(
    ("lo", "hi", "want"),
    [
        (3.2, 50, [2, 5, 10, 20, 50]),
        (10, 10, [5, 10, 20]),  # one value still gets a span
        (1, 2, [1, 2]),
        (0.013, 0.9, [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1]),
        (0.4, 4000, [0.1, 1, 10, 100, 1000, 10000]),  # wide: decades only
    ],
)
def test_latency_ticks_cover_the_range_on_a_1_2_5_ladder(
    lo: float, hi: float, want: list[float]
) -> None:
    ticks = latency_ticks(lo, hi)
    assert ticks == pytest.approx(want)
    assert ticks[0] <= lo and ticks[-1] >= hi


@pytest.mark.parametrize("bad", [(0, 5), (-1, 5), (1, math.inf), (math.nan, 2)])
def test_latency_ticks_refuse_a_range_a_log_axis_cannot_show(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        latency_ticks(*bad)


def test_tick_labels_are_plain_milliseconds() -> None:
    assert [format_ms(v) for v in (0.05, 0.5, 2.0, 50.0, 1000.0, 2.5)] == [
        "0.05",
        "0.5",
        "2",
        "50",
        "1,000",
        "2.5",
    ]
    assert slo_label(40.0) == "SLO 40 ms" and slo_label(12.5) == "SLO 12.5 ms"


@pytest.mark.parametrize(
    ("top", "want"),
    [
        (1, [0, 1]),
        (3, [0, 1, 2, 3]),
        (7, list(range(8))),
        (8, [0, 2, 4, 6, 8]),
        (20, [0, 3, 6, 9, 12, 15, 18, 21]),
        (0, [0, 1]),
        (2.5, [0, 1, 2, 3]),
    ],
)
def test_replica_ticks_are_whole_numbers_reaching_the_top(top: float, want: list[int]) -> None:
    ticks = replica_ticks(top)
    assert ticks == want
    assert all(isinstance(t, int) for t in ticks) and ticks[-1] >= top and len(ticks) <= 9


def test_latency_range_ignores_gaps_and_includes_the_slo() -> None:
    assert latency_range([None, 3.0, float("nan"), 0.0, 12.0], 40.0) == (3.0, 40.0)
    assert latency_range([None], 40.0) == (40.0, 40.0)


def _simulate(tmp_path: Path, trace: str, *extra: str) -> tuple[dict, Path]:
    profile = tmp_path / "tiny.yaml"
    profile.write_text(PROFILE)
    csv = tmp_path / "t.csv"
    csv.write_text(trace)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(
        [
            "simulate",
            "--profile",
            str(profile),
            "--trace",
            str(csv),
            "--slo-ms",
            "20",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--quiet",
            *extra,
        ]
    )
    assert code == 0
    return json.loads(out.read_text()), png


def _png_size(png: Path) -> tuple[int, int]:
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_simulation_plot_renders_five_panels(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result, png = _simulate(tmp_path, "second,rps\n0,200\n40,900\n80,200\n120,0\n")
    assert result["timeline"] and any(r["avg_batch"] for r in result["timeline"])
    width, height = _png_size(png)
    assert (width, height) == (900, 990)  # 10 x 11 in at 90 dpi: five panels
    assert png.stat().st_size > 30_000  # lines and labels, not a blank canvas


def test_plot_draws_rejected_per_second_when_requests_were_refused(tmp_path: Path) -> None:
    """Drawn from a hand-made result so the rejected series is known; compared with the
    same result without refusals, the image differs (the orange series)."""
    pytest.importorskip("matplotlib")
    from matplotlib import image

    rows = [
        {
            "t": float(t),
            "rps": 100.0,
            "p99_ms": 5.0,
            "served_p99_ms": 4.0,
            "delay_us": 500,
            "avg_batch": 3.0,
            "replicas": 2,
            "ready": 2,
            "rejected": 50 if 30 <= t < 60 else 0,
        }
        for t in range(0, 120, 10)
    ]
    refused = {"timeline": rows, "slo_ms": 20.0, "policy": "p", "rejected": 150}
    clean = {
        "timeline": [{**r, "rejected": 0} for r in rows],
        "slo_ms": 20.0,
        "policy": "p",
        "rejected": 0,
    }
    plot_timeline(refused, tmp_path / "a.png")
    plot_timeline(clean, tmp_path / "b.png")
    a, b = image.imread(tmp_path / "a.png"), image.imread(tmp_path / "b.png")
    orange = (a[..., 0] > 0.95) & (a[..., 1] > 0.45) & (a[..., 1] < 0.6) & (a[..., 2] < 0.1)
    orange_b = (b[..., 0] > 0.95) & (b[..., 1] > 0.45) & (b[..., 1] < 0.6) & (b[..., 2] < 0.1)
    assert orange.sum() > orange_b.sum() + 200  # the rejected/s line (and its legend)
