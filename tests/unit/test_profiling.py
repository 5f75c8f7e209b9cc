"""`batchop profile`'s pure parts, and its refusals that need no Triton.

The measurement itself runs against real tritonserver in e2e/test_profile_cli.py; here: the
batch sizes it picks, the non-decreasing fit, the profile YAML it writes (read back by the
simulator's loader, with comments that hold the spread) and the manifest fields (accepted by
the API model), and the errors for input that never reaches a server: an address nobody
listens on (a real socket), flags that do not go together, an --out that cannot be written.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchop.api.models import parse_batched_model
from batchop.cli.main import main
from batchop.sim.profile import load_profile
from batchop_dev.profiling import (
    MAX_POINTS,
    BatchTiming,
    Measurement,
    ProfileFailed,
    _input_shapes,
    batch_sizes,
    manifest_fields,
    non_decreasing,
    normalise_url,
    profile_document,
    write_profile,
)


@pytest.mark.parametrize("mbs", [1, 2, 31, 32, 33, 64, 100, 1000, 65536])
def test_batch_sizes_are_every_size_up_to_32_else_32_spread_from_1_to_max(mbs: int) -> None:
    sizes = batch_sizes(mbs)
    assert sizes[0] == 1 and sizes[-1] == mbs
    assert sizes == sorted(set(sizes))
    if mbs <= MAX_POINTS:
        assert sizes == list(range(1, mbs + 1))
    else:
        assert len(sizes) == MAX_POINTS


@given(st.lists(st.floats(0.01, 1000.0), min_size=1, max_size=40))
def test_fit_is_non_decreasing_keeps_the_total_and_leaves_a_rising_curve_alone(
    ys: list[float],
) -> None:
    points = [(b + 1, y) for b, y in enumerate(ys)]
    fitted = non_decreasing(points)
    assert [b for b, _ in fitted] == [b for b, _ in points]
    values = [y for _, y in fitted]
    assert all(a <= b + 1e-9 for a, b in zip(values, values[1:], strict=False))
    assert sum(values) == pytest.approx(sum(ys), rel=1e-9)  # a least-squares fit's property
    rising = [(b, y) for b, y in zip(range(1, 50), sorted(ys), strict=False)]
    assert non_decreasing(rising) == rising


def test_fit_pools_a_dip_into_its_neighbour() -> None:
    assert non_decreasing([(1, 1.0), (2, 3.0), (3, 2.0), (4, 5.0)]) == [
        (1, 1.0),
        (2, 2.5),
        (3, 2.5),
        (4, 5.0),
    ]


def _measurement(samples: dict[int, list[float]], mbs: int | None = None) -> Measurement:
    timings = tuple(BatchTiming(b, tuple(s)) for b, s in sorted(samples.items()))
    medians = [(t.batch, t.median_ms) for t in timings]
    return Measurement(
        url="127.0.0.1:8000",
        model="resnet50",
        version="1",
        server_version="2.51.0",
        max_batch_size=mbs or max(samples),
        repeats=3,
        warmup=1,
        timings=timings,
        curve_ms=tuple((b, round(ms, 3)) for b, ms in non_decreasing(medians)),
        dropped=2,
        seconds=1.0,
    )


def test_profile_document_reads_back_with_the_fit_and_carries_the_spread(tmp_path: Path) -> None:
    m = _measurement({1: [2.0, 2.2, 9.0], 2: [2.6, 2.4, 2.5], 3: [2.3, 2.4, 2.2], 4: [4, 4, 4]})
    path = tmp_path / "p.yaml"
    write_profile(path, profile_document(m, startup_seconds=12))
    profile = load_profile(path)
    assert profile.name == "resnet50" and profile.max_batch_size == 4
    assert profile.startup_seconds == 12
    # batch 3's median (2.3) under batch 2's (2.5): both pooled to 2.4
    assert profile.batch_latency_ms == ((1, 2.2), (2, 2.4), (3, 2.4), (4, 4.0))
    text = path.read_text()
    assert "#      1     2.200" in text and "9.000" in text  # the raw median and the max
    assert "2 samples dropped" in text
    assert "127.0.0.1:8000" in text and "compute_infer" in text


def test_manifest_fields_paste_into_a_batched_model() -> None:
    m = _measurement({b: [1.0 + b / 10] * 3 for b in batch_sizes(64)}, mbs=64)
    fields = manifest_fields(m)
    manifest = {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {"slo": {"p99LatencyMilliseconds": 50}, "server": {"gpus": 1}},
    }
    manifest["spec"]["model"] = {"repository": "s3://b/m", **fields["spec"]["model"]}
    bm = parse_batched_model(manifest)
    assert bm.spec.model.max_batch_size == 64
    assert bm.spec.model.profile_points() == m.curve_ms
    assert len(bm.spec.model.latency_profile) == MAX_POINTS  # the API's bound, met


@pytest.mark.parametrize(
    ("url", "want"),
    [("127.0.0.1:8000", "127.0.0.1:8000"), ("http://h:80/", "h:80"), (" a.b:1 ", "a.b:1")],
)
def test_url_forms(url: str, want: str) -> None:
    assert normalise_url(url) == want


@pytest.mark.parametrize("url", ["https://h:443", "h", "h:port", "h:0", ":8000", "h:70000"])
def test_bad_urls_are_refused_naming_the_flag(url: str) -> None:
    with pytest.raises(ValueError, match="--url"):
        normalise_url(url)


def test_inputs_need_fixed_numeric_shapes() -> None:
    meta = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, -1, 3]}]}
    with pytest.raises(ProfileFailed, match=r"--shape x="):
        _input_shapes(meta, {})
    assert _input_shapes(meta, {"x": [7, 3]}) == [("x", "FP32", [7, 3])]
    with pytest.raises(ProfileFailed, match="does not fit"):
        _input_shapes(meta, {"x": [7, 4]})
    with pytest.raises(ProfileFailed, match="names no input"):
        _input_shapes(meta, {"x": [7, 3], "y": [1]})
    text = {"inputs": [{"name": "t", "datatype": "BYTES", "shape": [-1, 1]}]}
    with pytest.raises(ProfileFailed, match="BYTES"):
        _input_shapes(text, {})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.yaml"
    url = f"127.0.0.1:{_closed_port()}"
    code = main(["profile", "--url", url, "--model", "m", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"batchop profile: cannot reach Triton at http://{url}" in err
    assert "Traceback" not in err and not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left either


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "127.0.0.1:1"], "--url needs --model"),
        (["--bm", "ns/n", "--model", "m"], "--model goes with --url"),
        (["--url", "127.0.0.1:1", "--model", "m", "--shape", "x=0"], "--shape x=0"),
        (["--url", "127.0.0.1:1", "--model", "m", "--shape", "x"], "--shape x: must be"),
        (["--url", "https://h:1", "--model", "m"], "only http://"),
    ],
)
def test_flags_that_do_not_go_together_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.yaml"
    assert main(["profile", *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_out_that_cannot_be_written_is_refused_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["profile", "--url", f"127.0.0.1:{_closed_port()}", "--model", "m", "--out"]
    assert main([*base, str(tmp_path / "missing" / "p.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err  # said before trying the server
    assert main([*base, str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
