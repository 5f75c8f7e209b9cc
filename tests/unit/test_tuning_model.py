"""The queueing model and the learned batch-latency curve: sanity properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchop.tuning import curve
from batchop.tuning.model import MAX_UTILISATION, capacity_at_slo, capacity_rps, predict

# Shapes like the shared profiles (fixed cost + per-sample cost, with kinks).
PROFILES = {
    "cpu-demo": (32, ((1, 4.0), (4, 5.0), (8, 6.0), (16, 8.0), (32, 12.0))),
    "bert": (64, ((1, 2.0), (2, 2.2), (4, 2.6), (8, 3.5), (16, 5.6), (32, 9.8), (64, 18.5))),
    "resnet": (
        128,
        ((1, 0.9), (2, 1.0), (4, 1.2), (8, 1.6), (16, 2.4), (32, 3.9), (64, 6.8), (128, 12.9)),
    ),
}

profile_names = st.sampled_from(sorted(PROFILES))


def _profile(name: str) -> tuple[int, curve.Curve]:
    mbs, pts = PROFILES[name]
    return mbs, curve.prior_curve(pts)


@given(profile_names, st.floats(0.0, 0.96), st.floats(0.0, 0.96), st.integers(0, 20_000))
@settings(max_examples=200, deadline=None)
def test_batch_and_p99_grow_with_load(name: str, f1: float, f2: float, delay: int) -> None:
    mbs, lat = _profile(name)
    cap = capacity_rps(mbs, lat)
    lo, hi = sorted((f1 * cap, f2 * cap))
    a, b = predict(lo, delay, mbs, lat), predict(hi, delay, mbs, lat)
    assert 1.0 <= a.avg_batch <= b.avg_batch * (1 + 1e-5) <= mbs * (1 + 1e-5)
    assert 0.0 <= a.busy <= 1.0 and 0.0 <= b.busy <= 1.0
    if delay == 0:  # with a delay, more load can fill a batch sooner: p99 may fall
        assert a.p99_ms <= b.p99_ms * (1 + 1e-5)


@given(profile_names, st.floats(0.0, 0.9), st.integers(0, 20_000), st.integers(0, 20_000))
@settings(max_examples=200, deadline=None)
def test_longer_delay_gives_bigger_batches_and_less_gpu_time(
    name: str, f: float, d1: int, d2: int
) -> None:
    mbs, lat = _profile(name)
    rate = f * capacity_rps(mbs, lat)
    short, long_ = sorted((d1, d2))
    a, b = predict(rate, short, mbs, lat), predict(rate, long_, mbs, lat)
    # (the fixed point is solved to 1e-6: compare with that tolerance)
    assert a.avg_batch <= b.avg_batch * (1 + 1e-5)
    assert b.gpu_ms_per_inference <= a.gpu_ms_per_inference * (1 + 1e-5)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_capacity_matches_profile(name: str) -> None:
    mbs, pts = PROFILES[name]
    lat = curve.prior_curve(pts)
    full_batch_ms = dict(pts)[mbs]
    assert capacity_rps(mbs, lat) == pytest.approx(1000.0 * mbs / full_batch_ms)
    cap = capacity_rps(mbs, lat)
    assert predict(cap * (MAX_UTILISATION - 0.01), 0, mbs, lat).stable
    over = predict(cap * 1.01, 0, mbs, lat)
    assert not over.stable and over.p99_ms == math.inf and over.avg_batch == mbs
    # Capacity at a generous SLO approaches the hardware capacity; a tight one is below it.
    loose = capacity_at_slo(10_000.0, mbs, lat)
    tight = capacity_at_slo(1.5 * full_batch_ms, mbs, lat)
    assert 0.9 * MAX_UTILISATION * cap <= loose <= cap
    assert 0 < tight < loose


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_light_load_batch_forms_over_the_delay(name: str) -> None:
    mbs, lat = _profile(name)
    rate, delay_us = 50.0, 10_000  # 0.5 requests expected in the window: far from full
    p = predict(rate, delay_us, mbs, lat)
    assert p.avg_batch == pytest.approx(1 + rate * delay_us / 1e6, rel=0.15)
    # The first request of a batch waits the whole delay, then executes.
    assert p.p99_ms >= delay_us / 1000.0 + lat(1)


def test_heavy_load_delay_adds_little() -> None:
    """Near capacity the batch is what queued during the last execution, whatever the delay."""
    mbs, lat = _profile("cpu-demo")
    rate = 0.8 * capacity_rps(mbs, lat)
    no_delay, small_delay = predict(rate, 0, mbs, lat), predict(rate, 2000, mbs, lat)
    assert small_delay.avg_batch == pytest.approx(no_delay.avg_batch, rel=0.02)
    assert no_delay.avg_batch > 10  # it batches without any delay


def test_model_rejects_bad_input() -> None:
    mbs, lat = _profile("cpu-demo")
    with pytest.raises(ValueError, match="rate_rps"):
        predict(-1.0, 0, mbs, lat)
    with pytest.raises(ValueError, match="max_batch"):
        predict(1.0, 0, 0, lat)


# --- the learned curve ------------------------------------------------------------------------


def _feed(points: list[tuple[float, float]], times: int) -> tuple[curve.Bucket, ...]:
    buckets: tuple[curve.Bucket, ...] = ()
    for _ in range(times):
        for b, ms in points:
            buckets = curve.update(buckets, b, ms)
    return buckets


@given(st.floats(0.3, 3.0), st.sampled_from([1.0, 3.0, 8.0, 20.0]))
@settings(max_examples=50, deadline=None)
def test_curve_scales_the_prior_to_what_it_sees(factor: float, batch: float) -> None:
    mbs, pts = PROFILES["cpu-demo"]
    prior = curve.prior_curve(pts)
    buckets = _feed([(batch, factor * prior(batch))], 40)
    learned = curve.estimate(buckets, pts, mbs)
    assert learned is not None
    assert learned(batch) == pytest.approx(factor * prior(batch), rel=0.03)
    assert learned(mbs) == pytest.approx(factor * prior(mbs), rel=0.03)  # shape kept


def test_curve_falls_back_to_the_prior_without_data() -> None:
    mbs, pts = PROFILES["bert"]
    learned = curve.estimate((), pts, mbs)
    assert learned is not None and learned.scale == 1.0
    assert curve.estimate((), (), mbs) is None


@given(st.floats(0.5, 10.0), st.floats(0.01, 1.0))
@settings(max_examples=50, deadline=None)
def test_curve_fits_a_line_from_data_alone(fixed: float, per_sample: float) -> None:
    batches = [1.0, 2.5, 6.0, 14.0, 30.0]
    buckets = _feed([(b, fixed + per_sample * b) for b in batches], 5)
    learned = curve.estimate(buckets, (), 32)
    assert learned is not None and learned.source == "fitted"
    for b in (1.0, 16.0, 32.0):
        assert learned(b) == pytest.approx(fixed + per_sample * b, rel=0.02)


def test_curve_from_one_batch_size_is_conservative() -> None:
    """One point cannot tell fixed from per-sample cost: batching must help, but less than
    on a typical GPU model (where ~90% of a small batch's time is fixed cost)."""
    buckets = _feed([(4.0, 8.0)], 3)
    learned = curve.estimate(buckets, (), 32)
    assert learned is not None and learned.source == "default"
    assert learned(4.0) == pytest.approx(8.0)
    assert learned(32.0) > learned(4.0) and learned(32.0) / 32 < learned(4.0) / 4
    typical_32 = 8.0 * 0.9 + 8.0 * 0.1 * 32 / 4
    assert learned(32.0) > typical_32


def test_curve_forgets_old_data() -> None:
    buckets = _feed([(8.0, 6.0)], 30)
    buckets = _feed([(8.0, 12.0)], 30)
    ((b, ms, _w),) = buckets
    assert ms == pytest.approx(12.0, rel=0.05)


def test_curve_ignores_nonsense_points() -> None:
    assert curve.update((), 0.0, 5.0) == ()
    assert curve.update((), 2.0, -1.0) == ()
    assert curve.update((), float("nan"), 1.0) == ()
    with pytest.raises(ValueError, match="batch size 1"):
        curve.Curve(((2.0, 1.0),))


def test_a_rate_too_small_to_divide_by_is_no_load() -> None:
    # Hypothesis found it: 5e-324 req/s is > 0 but underflows to 0 per millisecond.
    mbs, lat = _profile("cpu-demo")
    tiny = predict(5e-324, 500, mbs, lat)
    assert tiny.avg_batch == 1.0 and math.isfinite(tiny.p99_ms)
