"""Profile and trace loaders: values, interpolation, and errors that name file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchop.sim.profile import ProfileError, load_profile
from batchop.sim.trace import TraceError, load_trace

GOOD_PROFILE = """\
name: toy
max_batch_size: 8
startup_seconds: 12
gpus_per_replica: 2
batch_latency_ms: {1: 2.0, 4: 3.5, 8: 6.0}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_profile_values_and_interpolation(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, "p.yaml", GOOD_PROFILE))
    assert (p.name, p.max_batch_size, p.startup_seconds, p.gpus_per_replica) == ("toy", 8, 12, 2)
    assert p.latency_ms(1) == 2.0
    assert p.latency_ms(2) == pytest.approx(2.0 + (3.5 - 2.0) / 3)
    assert p.latency_ms(6) == pytest.approx((3.5 + 6.0) / 2)
    table = p.latency_table_s()
    assert len(table) == 9 and table[8] == pytest.approx(0.006)


def test_interpolation_is_numpys_to_the_last_bit(tmp_path: Path) -> None:
    """Plain Python in place of numpy.interp (so the operator needs no numpy): the simulator's
    figures must not move, so the same arithmetic, compared bit for bit."""
    np = pytest.importorskip("numpy")
    p = load_profile(
        write(
            tmp_path,
            "p.yaml",
            GOOD_PROFILE.replace(
                "{1: 2.0, 4: 3.5, 8: 6.0}", "{1: 2.1, 2: 2.3, 3: 2.9, 5: 3.7, 8: 6.13}"
            ),
        )
    )
    sizes = [b for b, _ in p.batch_latency_ms]
    times = [t for _, t in p.batch_latency_ms]
    points = [0.0, 0.5, 1.0, 8.0, *np.random.default_rng(3).uniform(1, 8, 500)]
    assert [p.latency_ms(float(x)) for x in points] == [
        float(np.interp(x, sizes, times)) for x in points
    ]


def test_shared_profiles_load() -> None:
    shared = Path(__file__).resolve().parents[3] / "shared" / "profiles"
    if not shared.is_dir():
        pytest.skip("no shared profiles next to the repository")
    for path in shared.glob("*.yaml"):
        p = load_profile(path)
        assert p.latency_ms(1) > 0 and p.max_batch_size >= 1


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD_PROFILE.replace("{1: 2.0, ", "{"), ":5: field `batch_latency_ms`: must include"),
        (GOOD_PROFILE.replace("max_batch_size: 8", "max_batch_size: 0"), ":2: field `max_b"),
        (GOOD_PROFILE.replace("4: 3.5", "4: -1"), "field `batch_latency_ms.4`"),
        (GOOD_PROFILE.replace("name: toy\n", ""), "field `name` is required"),
        (GOOD_PROFILE.replace("startup_seconds: 12", "startup_seconds: -3"), ":3: field `startup"),
        ("name: [unclosed\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a YAML mapping"),
    ],
)
def test_profile_errors_name_line_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(path) in str(err.value)
    assert needle in str(err.value)


def test_profile_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "nope.yaml")


def test_trace_values(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path, "t.csv", "second,rps\n0,100\n10,250.5\n30,0\n"))
    assert t.end == 30
    assert t.rate_at(0) == 100 and t.rate_at(9.99) == 100 and t.rate_at(10) == 250.5
    assert t.rate_at(30) == 0 and t.rate_at(100) == 0
    assert t.mean_rate(0, 30) == pytest.approx((100 * 10 + 250.5 * 20) / 30)
    assert t.max_rate(0, 5) == 100 and t.max_rate(5, 11) == 250.5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("second,rps\n0,100\n10,-5\n20,1\n", ":3: field `rps`: rate must be >= 0"),
        ("second,rps\n0,100\n10,5\n10,1\n", ":4: field `second`: must increase"),
        ("second,rps\n0,100\n5,abc\n", ":3: field `rps`: not a number"),
        ("second,rps\n0,100\n5\n", ":3: expected 2 fields"),
        ("time,rate\n0,1\n5,1\n", ":1: header must be `second,rps`"),
        ("second,rps\n0,100\n", "at least two rows"),
    ],
)
def test_trace_errors_name_line_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_trace_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "nope.csv")
