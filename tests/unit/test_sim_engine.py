"""The simulator against closed-form cases and the behaviours it must show."""

from __future__ import annotations

import numpy as np
import pytest

from batchop.sim.baselines import static_policy
from batchop.sim.engine import SimConfig, SimPolicy, simulate
from batchop.sim.profile import Profile
from batchop.sim.report import summarize
from batchop.sim.trace import Trace, constant_trace
from batchop.tuning.types import TuningSpec

LINEAR = Profile(
    name="linear",
    max_batch_size=16,
    batch_latency_ms=((1, 4.0), (16, 11.5)),  # 4 ms + 0.5 ms per extra sample
    startup_seconds=20.0,
)


def run(
    profile: Profile,
    trace: Trace,
    delay_us: int = 0,
    replicas: int = 1,
    batching: bool = True,
    arrivals: np.ndarray | None = None,
    **config: object,
):
    spec = TuningSpec(
        slo_ms=100.0,
        max_batch_size=profile.max_batch_size,
        start_delay_us=delay_us,
        start_replicas=replicas,
        max_replicas=max(8, replicas),
    )
    policy = SimPolicy("static", static_policy(delay_us, replicas), dynamic_batching=batching)
    sim = simulate(profile, trace, spec, policy, SimConfig(**config), arrivals=arrivals)
    return sim, summarize(sim, spec.slo_ms)


def latencies(sim) -> np.ndarray:
    n = sim.store.n
    return sim.store.end[:n] - sim.store.arrival[:n]


@pytest.mark.parametrize("delay_us", [0, 2000])
def test_constant_sparse_arrivals_wait_exactly_the_delay(delay_us: int) -> None:
    # One request every 20 ms, execution 4 ms: no request ever meets another.
    arrivals = np.arange(0.001, 30.0, 0.020)
    sim, res = run(LINEAR, constant_trace(50, 30), delay_us=delay_us, arrivals=arrivals)
    assert res["requests"] == len(arrivals)
    assert res["avg_batch_size"] == 1.0
    np.testing.assert_allclose(latencies(sim), 0.004 + delay_us / 1e6, atol=1e-9)


def test_constant_dense_arrivals_form_full_batches_at_the_max_batch_size() -> None:
    # One request per ms, max batch 16, delay long enough to fill it: a batch goes when its
    # 16th request arrives, so the first waits 15 ms and every request takes 15 - k + exec.
    arrivals = np.arange(0.0005, 8.0, 0.001)
    sim, res = run(LINEAR, constant_trace(1000, 8), delay_us=50_000, arrivals=arrivals)
    assert res["avg_batch_size"] == pytest.approx(16.0)
    lat = latencies(sim)[:16]
    expected = (15 - np.arange(16)) * 0.001 + LINEAR.latency_ms(16) / 1000
    np.testing.assert_allclose(lat, expected, atol=1e-9)


def test_delay_expiry_sends_what_queued() -> None:
    # One request every 2 ms, delay 7 ms: the oldest times out with 4 requests queued, and
    # the 5.5 ms execution ends before the next batch's oldest request times out.
    arrivals = np.arange(0.0005, 4.0, 0.002)
    sim, res = run(LINEAR, constant_trace(500, 4), delay_us=7000, arrivals=arrivals)
    assert np.all(sim.store.batch[: sim.store.n - 4] == 4)
    np.testing.assert_allclose(latencies(sim)[0], 0.007 + LINEAR.latency_ms(4) / 1000)


def test_no_batching_matches_pollaczek_khinchine() -> None:
    # M/D/1: mean wait = rho * s / (2 (1 - rho)).
    s, rate = 0.004, 175.0
    rho = rate * s
    sim, res = run(LINEAR, constant_trace(rate, 1200), batching=False, seed=3)
    n = sim.store.n
    wait = sim.store.start[:n] - sim.store.arrival[:n]
    expected = rho * s / (2 * (1 - rho))
    assert res["avg_batch_size"] == 1.0
    assert wait.mean() == pytest.approx(expected, rel=0.06)
    assert res["gpu_busy_seconds"] == pytest.approx(n * s)


def test_batching_with_one_instance_matches_pk_when_load_is_light_enough() -> None:
    # With a dynamic batcher and delay 0 the mean wait can only be lower than M/D/1's.
    sim, _ = run(LINEAR, constant_trace(175, 600), delay_us=0, seed=4)
    n = sim.store.n
    wait = (sim.store.start[:n] - sim.store.arrival[:n]).mean()
    assert wait < 0.7 * 0.004 / (2 * 0.3)


def test_saturated_regime_serves_full_batches_at_capacity() -> None:
    capacity = LINEAR.capacity_rps()  # 16 / 11.5 ms
    sim, res = run(LINEAR, constant_trace(2 * capacity, 20), delay_us=0, seed=5)
    end = sim.store.end[: sim.store.n]
    served = np.count_nonzero((end > 5.0) & (end <= 20.0))
    assert served / 15.0 == pytest.approx(capacity, rel=0.01)
    late = sim.store.batch[: sim.store.n][(end > 5.0) & (end <= 20.0)]
    assert np.all(late == 16)


def test_longer_delay_builds_bigger_batches_at_moderate_load() -> None:
    rate = 0.2 * LINEAR.capacity_rps()
    batches = []
    p50s = []
    for delay_us in (0, 2000, 8000):
        _, res = run(LINEAR, constant_trace(rate, 120), delay_us=delay_us, seed=6)
        batches.append(res["avg_batch_size"])
        p50s.append(res["p50_ms"])
    assert batches[0] < batches[1] < batches[2]
    assert p50s[0] < p50s[2]  # the batch is bought with waiting


def test_replicas_split_the_load_and_gpu_seconds_count_them() -> None:
    _, one = run(LINEAR, constant_trace(150, 120), replicas=1, batching=False, seed=7)
    _, three = run(LINEAR, constant_trace(150, 120), replicas=3, batching=False, seed=7)
    assert three["p99_ms"] < one["p99_ms"]
    assert one["gpu_seconds"] == pytest.approx(120.0)
    assert three["gpu_seconds"] == pytest.approx(360.0)
    assert three["gpu_busy_seconds"] == pytest.approx(one["gpu_busy_seconds"], rel=0.05)


def test_new_replica_takes_startup_seconds_to_get_traffic() -> None:
    spec = TuningSpec(slo_ms=50, max_batch_size=16, start_replicas=1, interval_s=30)
    scale_to_2 = SimPolicy("static", static_policy(0, 2))
    sim = simulate(LINEAR, constant_trace(100, 120), spec, scale_to_2, SimConfig(seed=8))
    new = sim.pods[1]
    assert new.created_s == 30.0 and new.ready_s == 30.0 + LINEAR.startup_seconds
    got = sim.store.replica[: sim.store.n] == new.id
    assert got.any()
    assert sim.store.arrival[: sim.store.n][got].min() >= new.ready_s
    res = summarize(sim, 50)
    assert res["gpu_seconds"] == pytest.approx(120 + 90)


def test_controller_sees_scraped_rates_close_to_truth() -> None:
    seen = []

    def spy(obs, spec, state):
        seen.append(obs)
        return static_policy(1000, 2)(obs, spec, state)

    spec = TuningSpec(
        slo_ms=50, max_batch_size=16, start_replicas=2, start_delay_us=1000, interval_s=30.0
    )
    sim = simulate(LINEAR, constant_trace(400, 300), spec, SimPolicy("spy", spy), SimConfig(seed=9))
    res = summarize(sim, 50)
    first = seen[0]
    assert first.time_s == 30 and first.age_s == 0
    late = seen[-1]
    assert late.rps == pytest.approx(400, rel=0.05)
    assert late.avg_batch == pytest.approx(res["avg_batch_size"], rel=0.1)
    assert late.compute_ms == pytest.approx(LINEAR.latency_ms(late.avg_batch), rel=0.1)
    assert late.p99_ms == pytest.approx(res["p99_ms"], rel=0.25)
    assert late.replicas == 2 and late.ready_replicas == 2 and late.delay_us == 1000


def test_closed_loop_follows_littles_law() -> None:
    # 20 clients, think time mean 20 / 200 rps = 100 ms: throughput = N / (think + latency).
    _, res = run(LINEAR, constant_trace(200, 20), replicas=2, delay_us=2000, clients=20, seed=10)
    cycle = 20 / 200 + res["mean_ms"] / 1000
    assert res["requests"] / 20 == pytest.approx(20 / cycle, rel=0.06)
    # and it throttles itself when the server cannot keep up: 4 clients, 4 ms per answer at
    # best, think time 4/2000 s -> at most 4 / 6 ms per second.
    _, slow = run(LINEAR, constant_trace(2000, 5), batching=False, clients=4, seed=11)
    assert slow["requests"] / 5 < 4 / 0.006
    assert slow["requests"] / 5 == pytest.approx(4 / (0.002 + slow["mean_ms"] / 1000), rel=0.06)
    assert slow["dropped"] == 0


def test_two_instances_overlap_only_as_the_profile_allows() -> None:
    overload = constant_trace(3 * LINEAR.capacity_rps(), 20)

    def served(profile: Profile, instances: int) -> int:
        sim, _ = run(profile, overload, delay_us=0, instances=instances, seed=12)
        end = sim.store.end[: sim.store.n]
        return int(np.count_nonzero((end > 5) & (end <= 20)))

    one = served(LINEAR, 1)
    free = Profile(**{**LINEAR.__dict__, "overlap_slowdown": 1.0})
    assert served(free, 2) == pytest.approx(2 * one, rel=0.02)
    assert served(LINEAR, 2) == pytest.approx(one, rel=0.02)  # default 2.0: no gain


def test_same_seed_same_result() -> None:
    _, a = run(LINEAR, constant_trace(300, 60), delay_us=500, seed=13)
    _, b = run(LINEAR, constant_trace(300, 60), delay_us=500, seed=13)
    _, c = run(LINEAR, constant_trace(300, 60), delay_us=500, seed=14)
    assert a == b
    assert a["requests"] != c["requests"]


def test_scale_down_drains_the_removed_pods_queue_and_loses_nothing() -> None:
    spec = TuningSpec(slo_ms=50, max_batch_size=16, start_replicas=3, interval_s=30)
    to_one = SimPolicy("static", static_policy(0, 1))
    sim = simulate(LINEAR, constant_trace(600, 90), spec, to_one, SimConfig(seed=15))
    res = summarize(sim, 50)
    gone = [p for p in sim.pods if p.removed_s is not None]
    assert len(gone) == 2 and all(p.removed_s == 30.0 for p in gone)
    assert res["dropped"] == 0 and np.isfinite(latencies(sim)).all()
    on_gone = np.isin(sim.store.replica[: sim.store.n], [p.id for p in gone])
    assert sim.store.arrival[: sim.store.n][on_gone].max() < 30.0
    assert res["gpu_seconds"] == pytest.approx(90 + 2 * 30)


def test_requests_with_no_ready_pod_are_dropped() -> None:
    spec = TuningSpec(slo_ms=50, max_batch_size=16, start_replicas=1, min_replicas=0)
    to_zero = SimPolicy("static", static_policy(0, 0))
    sim = simulate(LINEAR, constant_trace(100, 60), spec, to_zero, SimConfig(seed=16))
    res = summarize(sim, 50)
    # the first decision (one interval in) scales to zero
    after = np.count_nonzero(sim.store.arrival[: sim.store.n] >= spec.interval_s)
    assert res["dropped"] == after > 0


def guarded_run(
    trace: Trace, timeout_us: int | None = 20_000, max_queue_size: int = 0, **config: object
):
    """One replica that never scales, under Triton's queue policy (Reject)."""
    spec = TuningSpec(
        slo_ms=40.0,
        max_batch_size=16,
        start_delay_us=1000,
        max_delay_us=5000,
        overload_reject=True,
        queue_timeout_us=timeout_us,
        max_queue_size=max_queue_size,
        prior_batch_latency_ms=((1, 4.0), (16, 11.5)),
    )
    policy = SimPolicy("static", static_policy(1000, 1))
    sim = simulate(LINEAR, trace, spec, policy, SimConfig(**config))
    return sim, summarize(sim, spec.slo_ms)


def test_reject_keeps_served_latency_bounded_and_counts_refusals() -> None:
    # 2x one replica's capacity for 60 s, then two quiet minutes
    trace = Trace((0.0, 60.0, 180.0), (2 * LINEAR.capacity_rps(), 100.0, 0.0), "burst")
    sim, res = guarded_run(trace, seed=30)
    n = sim.store.n
    refused = np.isfinite(sim.store.rejected[:n])
    assert res["rejected"] == int(refused.sum()) > 0.3 * n
    assert res["dropped"] == 0  # refused requests are answered, not dropped
    # served: the timeout (20 ms) plus a full batch (11.5 ms) at most
    assert res["served_p99_ms"] <= 20.0 + 11.5 + 1e-6
    lat = latencies(sim)
    assert res["slo_attainment"] == pytest.approx(np.count_nonzero(lat <= 0.040) / n)
    assert res["slo_attainment"] < 1 - res["rejected"] / n + 1e-9  # refusals count against
    assert sum(row["rejected"] for row in res["timeline"]) == res["rejected"]
    assert max(row["served_p99_ms"] or 0 for row in res["timeline"]) <= 20.0 + 11.5 + 1e-6
    assert all(row["rejected"] == 0 for row in res["timeline"] if row["t"] >= 61)
    # the controller sees the refusals at the rate Triton's failure counter would show
    seen = [o.rejected_rps for o in sim.observations if 30 <= o.time_s <= 60]
    truth = res["rejected"] / 60.0
    assert seen and all(r == pytest.approx(truth, rel=0.15) for r in seen)
    quiet = [o.rejected_rps for o in sim.observations if o.time_s >= 150]
    assert quiet and all(r == 0 for r in quiet)


def test_queue_policy_waits_seconds_where_reject_refuses() -> None:
    trace = constant_trace(2 * LINEAR.capacity_rps(), 30)
    _, rejected = guarded_run(trace, seed=31)
    spec = TuningSpec(slo_ms=40.0, max_batch_size=16, start_delay_us=1000, overload_reject=False)
    queued = summarize(
        simulate(
            LINEAR, trace, spec, SimPolicy("static", static_policy(1000, 1)), SimConfig(seed=31)
        ),
        40.0,
    )
    assert queued["rejected"] == 0 and queued["served_p99_ms"] > 5000
    assert rejected["served_p99_ms"] < 40


def test_closed_loop_clients_get_their_refusals_back_and_send_again() -> None:
    sim, res = guarded_run(constant_trace(5000, 20), max_queue_size=4, clients=200, seed=32)
    assert res["rejected"] > 0 and res["dropped"] == 0
    assert res["requests"] > 10 * 200  # no client waits forever on a refused request


def test_lost_windows_name_the_jump_the_ready_replicas_and_the_busiest_second() -> None:
    # One replica serves about 1,390 req/s at full batches: the middle minute's 3,000 req/s
    # breaks the SLO; the quiet minute before it does not.
    trace = Trace((0.0, 60.0, 120.0, 180.0), (200.0, 3000.0, 200.0, 0.0), "jump")
    _, res = run(LINEAR, trace)
    lost = res["lost_windows"]
    starts = [w["t"] for w in lost]
    assert starts[0] == 60.0 and 0.0 not in starts
    first = lost[0]
    assert first["rps_before"] == pytest.approx(200, rel=0.1)
    assert first["rps"] == pytest.approx(3000, rel=0.05)
    assert first["peak_rps"] >= first["rps"]
    assert (first["ready"], first["ready_max"], first["desired_max"]) == (1, 1, 1)
    assert first["p99_ms"] is None or first["p99_ms"] > 100
    held = 1 - len(lost) / 3
    assert res["window_attainment"] == pytest.approx(held)
