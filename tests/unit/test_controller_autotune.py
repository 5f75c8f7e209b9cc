"""The tuning loop's wiring: spec mapping, per-pod delay convergence, recorded decisions,
holds when Prometheus is away (pure parts, and the loop against the in-memory stand-in)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from controller_fakes import World

from batchop.act.triton_reload import ReloadResult
from batchop.api.tuning_spec import manifest_tuning_spec as tuning_spec
from batchop.controller.autotune import (
    applied_delay,
    desired_delay,
    pods_to_reload,
    steady_metrics,
    tuner_status,
)
from batchop.controller.reconcile import slim_model
from batchop.controller.tuning_loop import TuningLoop
from batchop.observe.prometheus import ObservationParts, PrometheusUnavailable
from batchop.tuning.overload import QUEUE, QueuePolicy
from batchop.tuning.types import Decision, Observation, TuningState

NOW_S = 1_800_000_000.0


def ready_pod(name: str, ip: str, delay: int | None = None) -> dict[str, Any]:
    annotations = {} if delay is None else {"batchop.io/max-queue-delay-us": str(delay)}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": []},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_tuning_spec_follows_the_batchedmodel() -> None:
    w = World()
    spec = tuning_spec(w.bm)
    s = w.cluster.model["spec"]
    assert spec.slo_ms == s["slo"]["p99LatencyMilliseconds"]
    assert spec.max_batch_size == s["model"]["maxBatchSize"]
    assert (spec.min_replicas, spec.max_replicas) == (
        s["scaling"]["minReplicas"],
        s["scaling"]["maxReplicas"],
    )
    assert spec.max_delay_us == s["batching"]["maxQueueDelayLimitMicroseconds"]
    assert spec.interval_s == s["autotune"]["intervalSeconds"]
    assert spec.scale_down_window_s == 60  # the API's default when the field is absent
    s["autotune"]["scaleDownStabilizationSeconds"] = 45
    assert tuning_spec(w.cluster.model).scale_down_window_s == 45


def test_tuning_spec_maps_the_latency_profile_and_the_overload_guard() -> None:
    bm = World().bm
    assert tuning_spec(bm).overload_reject  # the API's default: Reject, timeout derived
    assert tuning_spec(bm).queue_timeout_us is None
    bm["spec"]["model"]["latencyProfile"] = [
        {"batchSize": 8, "milliseconds": 6},
        {"batchSize": 1, "milliseconds": 4.0},
    ]
    bm["spec"]["overload"] = {
        "policy": "Reject",
        "queueTimeoutMicroseconds": 30_000,
        "maxQueueSize": 12,
    }
    spec = tuning_spec(bm)
    assert spec.prior_batch_latency_ms == ((1, 4.0), (8, 6.0))
    assert (spec.queue_timeout_us, spec.max_queue_size) == (30_000, 12)
    bm["spec"]["overload"] = {"policy": "Queue"}
    assert not tuning_spec(bm).overload_reject


def test_desired_delay_is_the_recorded_decision_within_bounds() -> None:
    bm = World().bm
    assert desired_delay(bm) == bm["spec"]["batching"]["maxQueueDelayMicroseconds"]
    bm["status"] = {"lastDecision": {"maxQueueDelayMicroseconds": 2000}}
    assert desired_delay(bm) == 2000
    bm["status"]["lastDecision"]["maxQueueDelayMicroseconds"] = 10**9
    assert desired_delay(bm) == bm["spec"]["batching"]["maxQueueDelayLimitMicroseconds"]
    bm["spec"]["autotune"]["queueDelay"] = False
    assert desired_delay(bm) == bm["spec"]["batching"]["maxQueueDelayMicroseconds"]


def test_pods_to_reload_are_ready_pods_that_differ() -> None:
    pending = {"metadata": {"name": "p"}, "status": {"phase": "Pending"}}
    unready = ready_pod("u", "127.10.0.9")
    unready["status"]["conditions"][0]["status"] = "False"
    pods = [ready_pod("a", "127.10.0.2", 500), ready_pod("b", "127.10.0.3"), pending, unready]
    assert [p["metadata"]["name"] for p in pods_to_reload(pods, 500)] == ["b"]
    assert [p["metadata"]["name"] for p in pods_to_reload(pods, 700)] == ["a", "b"]
    assert applied_delay(pods) is None
    assert applied_delay([pods[0], ready_pod("c", "127.10.0.4", 500)]) == 500


def test_tuner_status_records_only_changes() -> None:
    bm = World().bm
    spec = tuning_spec(bm)
    obs = Observation(time_s=0, rps=10, avg_batch=2, compute_ms=5, p99_ms=80, replicas=1)
    when = datetime(2026, 3, 1, tzinfo=UTC)
    status = tuner_status(bm, obs, spec, None, when)
    assert "lastDecision" not in status
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["SLOMet"]["status"] == ("False" if spec.slo_ms < 80 else "True")
    assert conds["MetricsAvailable"]["status"] == "True"
    assert status["metrics"]["p99LatencyMilliseconds"] == 80


class FakeObserver:
    def __init__(self, parts: dict[tuple[str, str], ObservationParts]) -> None:
        self.parts = parts
        self.calls = 0
        self.down = False

    def observe(self) -> dict[tuple[str, str], ObservationParts]:
        self.calls += 1
        if self.down:
            raise PrometheusUnavailable("connection refused")
        return self.parts


def scale_to_max(obs: Observation, spec: Any, state: TuningState) -> Decision:
    """A stand-in policy that always wants the most replicas and a 2 ms delay."""
    return Decision(spec.max_replicas, 2000, "stand-in: max", state, kind="scale-up+delay-up")


class Harness:
    def __init__(
        self, parts: ObservationParts | None = None, decide: Any = None, reconciled: bool = True
    ) -> None:
        self.w = World()
        if reconciled:  # else a new model its creation handler has not run for yet
            self.w.handlers.reconcile(self.w.bm)
            dep = self.w.deployment()
            assert dep is not None
            dep["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
            self.w.pods = [ready_pod("cpu-demo-a", "127.10.0.2")]
        self.observer = FakeObserver({("ml", "cpu-demo"): parts} if parts else {})
        self.reloads: list[tuple[str, str, int]] = []
        self.policies: list[QueuePolicy] = []
        self.fail_reload = False
        self.via = "grpc"  # the protocol the stand-in reload reports
        self.now = NOW_S
        self.loop = TuningLoop(
            self.w.handlers,
            self.w.cluster,
            lambda: [slim_model(self.w.cluster.model)],
            "http://127.0.0.1:9",
            observer_factory=lambda url: self.observer,
            reload=self.reload,
            decide=decide,
            clock=lambda: self.now,
        )

    def reload(self, url: str, model: str, delay: int, policy: QueuePolicy) -> ReloadResult:
        if self.fail_reload:
            raise ConnectionRefusedError(f"{url} refused")
        self.reloads.append((url, model, delay))
        self.policies.append(policy)
        return ReloadResult(url, model, 0, delay, True, 0.1, self.via, policy)

    def conditions(self) -> dict[str, dict[str, Any]]:
        return self.w.conditions()


def busy(p99_ms: float, rps: float = 400.0) -> ObservationParts:
    return ObservationParts(
        rps=rps, avg_batch=4.0, queue_ms=1.0, compute_ms=6.0, p99_ms=p99_ms, pending=0.0,
        rejected_rps=2.5, age_s=5.0, scraped_pods=1,
    )  # fmt: skip


def test_a_tick_records_metrics_and_conditions_and_brings_pods_to_the_delay() -> None:
    h = Harness(busy(p99_ms=12.0))
    h.loop.tick()
    status = h.w.cluster.model["status"]
    assert status["metrics"]["requestsPerSecond"] == 400.0
    assert status["metrics"]["rejectedPerSecond"] == 2.5
    assert h.conditions()["MetricsAvailable"]["status"] == "True"
    assert h.conditions()["SLOMet"]["status"] == "True"
    # The operator's own conditions survive the tuner's write.
    assert {"Ready", "Progressing", "Degraded", "CapacityLimited"} <= set(h.conditions())
    want = desired_delay(slim_model(h.w.cluster.model))
    assert h.reloads == [("127.10.0.2:8000", "cpu-demo", want)]
    assert h.w.pods[0]["metadata"]["annotations"]["batchop.io/max-queue-delay-us"] == str(want)
    h.loop.tick()  # level-triggered: nothing left to reload
    assert len(h.reloads) == 1


def test_a_recorded_decision_is_what_the_deployment_and_pods_get() -> None:
    h = Harness(busy(p99_ms=400.0, rps=3000.0), decide=scale_to_max)
    h.loop.tick()
    decision = h.w.cluster.model["status"]["lastDecision"]
    top = h.w.cluster.model["spec"]["scaling"]["maxReplicas"]
    assert (decision["replicas"], decision["maxQueueDelayMicroseconds"]) == (top, 2000)
    assert decision["reason"] == "stand-in: max"
    dep = h.w.deployment()
    assert dep is not None and dep["spec"]["replicas"] == top
    assert h.reloads == [("127.10.0.2:8000", "cpu-demo", 2000)]
    assert ("Normal", "Tuned") in [(e[0], e[1]) for e in h.w.events]
    # The next tick sees the same intent: nothing is done twice.
    h.now += 3600
    h.loop.tick()
    assert len(h.reloads) == 1


def test_a_reversal_is_counted_and_raised_as_a_warning_event() -> None:
    from batchop import metrics

    def reverse(obs: Observation, spec: Any, state: TuningState) -> Decision:
        why = "stand-in: up; reverses the scale-down of 40 s ago"
        return Decision(obs.replicas + 1, obs.delay_us, why, state, kind="scale-up",
                        reversal=True)  # fmt: skip

    def count() -> float:
        ns, name = h.w.cluster.model["metadata"]["namespace"], h.w.cluster.model["metadata"]["name"]
        got = metrics.METRICS.registry.get_sample_value(
            "batchop_reversals_total", {"namespace": ns, "batchedmodel": name}
        )
        return got or 0.0

    h = Harness(busy(p99_ms=12.0), decide=reverse)
    before = count()
    h.loop.tick()
    warnings = [e for e in h.w.events if e[0] == "Warning" and e[1] == "ScaleReversed"]
    assert len(warnings) == 1 and "reverses the scale-down" in warnings[0][2]
    assert count() == before + 1
    plain = Harness(busy(p99_ms=12.0), decide=scale_to_max)
    plain.loop.tick()
    assert not [e for e in plain.w.events if e[1] == "ScaleReversed"]


def test_a_new_process_resumes_what_status_learned_and_writes_it_back() -> None:
    h = Harness(busy(p99_ms=12.0))
    key = (h.w.cluster.model["metadata"]["namespace"], h.w.cluster.model["metadata"]["name"])
    labels = [[NOW_S - 600.0 + 15.0 * i, 400.0, 0.0, 1.5, 1.6] for i in range(10)]
    h.w.cluster.model["status"]["learned"] = {"growth": labels, "startupSeconds": 42.0}
    h.loop.tick()
    state = h.loop.states[key]
    assert state.startup_s == 42.0
    assert [lab[0] for lab in state.sizing.labels[:10]] == [row[0] for row in labels]
    kept = h.w.cluster.model["status"]["learned"]
    assert kept["startupSeconds"] == 42.0 and len(kept["growth"]) >= 10
    # A process that already holds a state does not read status again.
    h.w.cluster.model["status"]["learned"] = {"growth": [], "startupSeconds": 7.0}
    h.now += 15
    h.loop.tick()
    assert h.loop.states[key].startup_s == 42.0


def test_a_changed_overload_spec_reloads_pods_without_touching_the_template() -> None:
    h = Harness(busy(p99_ms=12.0), decide=hold)
    h.loop.tick()
    first = h.policies[-1]
    assert first.reject and first.timeout_us > 0  # the default guard is applied
    annotations = h.w.pods[0]["metadata"]["annotations"]
    assert annotations["batchop.io/queue-policy"] == first.annotation()
    template = copy.deepcopy(h.w.deployment()["spec"]["template"])
    h.w.cluster.model["spec"]["overload"] = {"policy": "Queue"}
    h.now += 1
    h.loop.tick()  # level-triggered on the policy too: the pod is reloaded, delay kept
    assert h.policies[-1] == QUEUE and len(h.reloads) == 2
    assert h.reloads[-1][2] == h.reloads[0][2]
    assert annotations["batchop.io/queue-policy"] == "Queue"
    h.now += 1
    h.loop.tick()
    assert len(h.reloads) == 2  # converged: nothing more to do
    assert h.w.deployment()["spec"]["template"] == template


def test_a_spec_edited_in_place_is_parsed_again() -> None:
    """The loop keeps each model's parsed spec between ticks; an edit of a nested field
    (the SLO) must reach the policy and status on the next tick."""
    h = Harness(busy(p99_ms=12.0), decide=hold)
    h.loop.tick()
    assert "SLO 40 ms" in h.conditions()["SLOMet"]["message"]
    h.w.cluster.model["spec"]["slo"]["p99LatencyMilliseconds"] = 10
    h.now += 60
    h.loop.tick()
    assert h.conditions()["SLOMet"]["status"] == "False"
    assert "SLO 10 ms" in h.conditions()["SLOMet"]["message"]


def test_pods_to_reload_compares_the_queue_policy_when_given() -> None:
    guard = QueuePolicy(True, 25_000, 0)
    pod = ready_pod("a", "127.10.0.2", delay=500)
    assert pods_to_reload([pod], 500) == []  # the delay alone matches
    assert pods_to_reload([pod], 500, guard) == [pod]  # never set: reload
    pod["metadata"]["annotations"]["batchop.io/queue-policy"] = guard.annotation()
    assert pods_to_reload([pod], 500, guard) == []
    assert pods_to_reload([pod], 500, QUEUE) == [pod]


def test_the_real_policy_runs_in_the_loop() -> None:
    h = Harness(busy(p99_ms=400.0, rps=3000.0))
    for _ in range(6):
        h.loop.tick()
        h.now += 60
    status = h.w.cluster.model["status"]
    assert h.loop.states  # decide() returned a state that is fed back
    decision = status.get("lastDecision")
    if decision is not None:  # whatever it decided is what runs
        dep = h.w.deployment()
        assert dep is not None and dep["spec"]["replicas"] == decision["replicas"]


def test_prometheus_down_holds_and_says_so() -> None:
    h = Harness(busy(p99_ms=400.0, rps=3000.0))
    h.observer.down = True
    before = copy.deepcopy(h.w.deployment())
    h.loop.tick()
    assert h.conditions()["MetricsAvailable"]["status"] == "False"
    assert "connection refused" in h.conditions()["MetricsAvailable"]["message"]
    assert h.conditions()["SLOMet"]["status"] == "Unknown"
    assert "lastDecision" not in h.w.cluster.model["status"]
    assert h.w.deployment() == before
    h.observer.down = False
    h.now += 60
    h.loop.tick()
    assert h.conditions()["MetricsAvailable"]["status"] == "True"


def test_each_model_is_tuned_once_per_interval_with_one_observation() -> None:
    h = Harness(busy(p99_ms=12.0))
    h.loop.tick()
    h.now += 1
    h.loop.tick()
    assert h.observer.calls == 1
    h.now += h.w.cluster.model["spec"]["autotune"]["intervalSeconds"]
    h.loop.tick()
    assert h.observer.calls == 2


def test_unreachable_pod_is_retried_with_backoff_and_warned_once() -> None:
    h = Harness(busy(p99_ms=12.0))
    h.fail_reload = True
    h.loop.tick()
    h.now += 1
    h.loop.tick()  # within the backoff: not tried again
    retry = h.loop.retries[(("ml", "cpu-demo"), "cpu-demo-a")]
    assert retry.failures == 1 and "refused" in retry.reason
    h.now += 60
    h.loop.tick()
    assert h.loop.retries[(("ml", "cpu-demo"), "cpu-demo-a")].failures == 2
    assert [e[1] for e in h.w.events].count("ReloadFailed") == 1
    degraded = h.conditions()["Degraded"]  # status names the laggard
    assert (degraded["status"], degraded["reason"]) == ("True", "DelayNotApplied")
    assert "cpu-demo-a" in degraded["message"] and "refused" in degraded["message"]
    h.fail_reload = False
    h.now += 600
    h.loop.tick()
    assert not h.loop.retries and h.reloads
    assert h.conditions()["Degraded"]["status"] == "False"


def test_deleted_model_is_forgotten() -> None:
    h = Harness(busy(p99_ms=12.0))
    h.fail_reload = True
    h.loop.tick()
    assert h.loop.states and h.loop.retries
    h.loop.models = lambda: []
    h.loop.tick()
    assert not h.loop.states and not h.loop.last_tuned and not h.loop.retries


def test_a_pod_that_leaves_is_no_longer_retried() -> None:
    h = Harness(busy(p99_ms=12.0))
    h.fail_reload = True
    h.loop.tick()
    assert h.loop.retries
    h.w.pods = []
    h.loop.tick()
    assert not h.loop.retries
    assert h.conditions()["Degraded"]["status"] == "False"


@pytest.mark.parametrize("tune", [{"queueDelay": False, "replicas": False}])
def test_models_without_tuning_are_left_alone(tune: dict[str, bool]) -> None:
    h = Harness(busy(p99_ms=400.0, rps=3000.0))
    h.w.cluster.model["spec"]["autotune"].update(tune)
    h.loop.tick()
    assert h.observer.calls == 0 and not h.reloads


def test_one_observation_per_tick_whatever_the_number_of_models() -> None:
    """Prometheus cost per tick must not grow with N: one observe() (one query per metric)
    per Prometheus URL per tick, for every due model at once."""
    h = Harness(busy(p99_ms=12.0))
    many = []
    for i in range(50):
        bm = slim_model(copy.deepcopy(h.w.cluster.model))
        bm["metadata"]["name"] = f"m{i}"
        many.append(bm)
    h.loop.models = lambda: many
    h.loop.tick()
    assert h.observer.calls == 1
    assert len(h.loop.states) == 50


def hold(obs: Observation, spec: Any, state: TuningState) -> Decision:
    """A stand-in policy that keeps what runs."""
    return Decision(obs.replicas, obs.delay_us, "stand-in: hold", state, kind="hold")


def test_an_index_that_lags_behind_the_tuners_write_costs_no_api_call() -> None:
    """The kopf index can show a model as it was before the tuner's last write (with 1,000
    models it lagged by tens of seconds). A steady tick must not take that old copy for a
    change: no status patch, no conflict, no re-read; a real change still lands."""
    h = Harness(busy(p99_ms=12.0), decide=hold)
    stale = slim_model(copy.deepcopy(h.w.cluster.model))  # before the tuner wrote anything
    h.loop.models = lambda: [stale]
    reads: list[str] = []
    get_model = h.w.cluster.get_model
    h.w.cluster.get_model = lambda ns, name: reads.append(name) or get_model(ns, name)
    for _ in range(2):  # metrics and conditions, then the delay the pod now runs
        h.loop.tick()
        h.now += 60
    assert h.w.cluster.model["status"]["maxQueueDelayMicroseconds"] == desired_delay(stale)
    writes, read = h.w.cluster.writes.count("status"), len(reads)
    version = h.w.cluster.model["metadata"]["resourceVersion"]
    for _ in range(3):
        h.loop.tick()
        h.now += 60
    assert (h.w.cluster.writes.count("status"), len(reads)) == (writes, read)
    assert h.w.cluster.model["metadata"]["resourceVersion"] == version
    h.observer.parts[("ml", "cpu-demo")] = busy(p99_ms=30.0)
    h.loop.tick()
    status = h.w.cluster.model["status"]
    assert status["metrics"]["p99LatencyMilliseconds"] == 30.0
    assert {"Ready", "SLOMet", "MetricsAvailable"} <= {c["type"] for c in status["conditions"]}


def test_a_new_models_first_figures_go_with_its_creation_handlers_status_write() -> None:
    """The tuner's pass before a new model's creation handler ran writes nothing; the
    handler's first status write carries the tuner's figures too: one patch, not two."""
    h = Harness(busy(p99_ms=12.0), decide=hold, reconciled=False)
    h.loop.tick()
    assert h.w.cluster.writes.count("status") == 0
    h.w.handlers.reconcile(h.w.bm)
    assert h.w.cluster.writes.count("status") == 1
    status = h.w.cluster.model["status"]
    assert status["observedGeneration"] == 1
    assert status["metrics"]["p99LatencyMilliseconds"] == 12.0
    assert {"Ready", "Progressing", "SLOMet", "MetricsAvailable"} <= set(h.conditions())
    h.now += 60
    h.loop.tick()  # the same figures: already written
    assert h.w.cluster.writes.count("status") == 1
    h.observer.parts[("ml", "cpu-demo")] = busy(p99_ms=30.0)
    h.now += 60
    h.loop.tick()  # a reconciled model's new figures: written by the tuner at once
    assert h.w.cluster.model["status"]["metrics"]["p99LatencyMilliseconds"] == 30.0


def test_a_decision_on_a_new_model_is_recorded_at_once() -> None:
    """A decision is recorded before anything acts on it, creation handler or not."""
    h = Harness(busy(p99_ms=400.0, rps=3000.0), decide=scale_to_max, reconciled=False)
    h.loop.tick()
    decision = h.w.cluster.model["status"]["lastDecision"]
    assert decision["replicas"] == h.w.cluster.model["spec"]["scaling"]["maxReplicas"]


def test_steady_metrics_keeps_stored_figures_that_barely_moved() -> None:
    stored = {"requestsPerSecond": 100.0, "p99LatencyMilliseconds": 20.0, "queueMilliseconds": 0.0}
    fresh = {"requestsPerSecond": 103.0, "p99LatencyMilliseconds": 25.0,
             "queueMilliseconds": 0.004, "rejectedPerSecond": 1.0}  # fmt: skip
    assert steady_metrics(stored, fresh) == {
        "requestsPerSecond": 100.0,  # 3% moved: kept
        "p99LatencyMilliseconds": 25.0,  # 25% moved: written
        "queueMilliseconds": 0.0,  # within the absolute floor
        "rejectedPerSecond": 1.0,  # new
    }
    assert steady_metrics(stored, {"requestsPerSecond": None}) == {"requestsPerSecond": None}
    assert steady_metrics(None, fresh) == fresh


def test_figures_that_jitter_every_tick_cost_no_status_write() -> None:
    """A real Prometheus's rates and ages move a little every tick; at 1,000 models a status
    patch per model per tick made a tick 29 s long and 10 s of CPU. Jitter within the
    dead-band writes nothing; a real move (and the SLO condition) still lands."""
    h = Harness(busy(p99_ms=12.0), decide=hold)
    for _ in range(2):  # metrics and conditions, then the delay the pod now runs
        h.loop.tick()
        h.now += 60
    writes = h.w.cluster.writes.count("status")
    for i, (rps, p99, age) in enumerate([(401.7, 12.2, 1.0), (398.9, 11.9, 14.0), (404, 12, 7)]):
        h.observer.parts[("ml", "cpu-demo")] = replace(
            busy(p99_ms=p99, rps=rps), age_s=age, rejected_rps=2.5 + i / 100
        )
        h.loop.tick()
        h.now += 60
    assert h.w.cluster.writes.count("status") == writes
    assert h.w.cluster.model["status"]["metrics"]["requestsPerSecond"] == 400.0
    h.observer.parts[("ml", "cpu-demo")] = busy(p99_ms=900.0, rps=460.0)
    h.loop.tick()
    assert h.w.cluster.writes.count("status") == writes + 1
    assert h.w.cluster.model["status"]["metrics"]["requestsPerSecond"] == 460.0
    assert h.conditions()["SLOMet"]["status"] == "False"
    assert "900.0 ms" in h.conditions()["SLOMet"]["message"]


def test_last_decision_records_its_kind_and_prediction() -> None:
    """`batchop explain` shows what the tuner decided, of what kind, and the p99 it expected."""
    h = Harness(busy(p99_ms=400.0, rps=3000.0))
    for _ in range(6):
        h.loop.tick()
        h.now += 60
    decision = h.w.cluster.model["status"].get("lastDecision")
    if decision is None:
        pytest.skip("the policy made no change on this load: nothing to record")
    assert decision["kind"] not in ("", "hold")  # a recorded decision changes something
    assert decision["predictedP99Milliseconds"] >= 0
    assert f"{decision['predictedP99Milliseconds']:.0f} ms" in decision["reason"]


@pytest.mark.parametrize("via", ["grpc", "http"])
def test_the_reload_protocol_is_recorded_in_status_and_metrics(via: str) -> None:
    """The HTTP fallback stalls requests during a reload: status and metrics say it was used."""
    from batchop.metrics import METRICS

    h = Harness(busy(p99_ms=12.0), decide=hold)
    h.via = via
    labels = {"namespace": "ml", "batchedmodel": "cpu-demo", "protocol": via}
    before = METRICS.registry.get_sample_value("batchop_delay_reloads_total", labels) or 0.0
    h.loop.tick()
    assert len(h.reloads) == 1
    assert h.w.cluster.model["status"]["reloadProtocol"] == via
    after = METRICS.registry.get_sample_value("batchop_delay_reloads_total", labels)
    assert after == before + 1
    h.now += 60
    h.loop.tick()  # records the delay the pod now runs
    writes = h.w.cluster.writes.count("status")
    h.now += 60
    h.loop.tick()  # nothing to reload, nothing new to record
    assert len(h.reloads) == 1 and h.w.cluster.writes.count("status") == writes
    assert h.w.cluster.model["status"]["reloadProtocol"] == via


def test_a_bug_in_the_reload_is_logged_with_its_trace_not_retried_as_a_pod_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only Triton's and the API server's refusals are retried with backoff and reported as
    ReloadFailed; anything else is a bug: logged with its traceback, other models go on."""
    h = Harness(busy(p99_ms=12.0), decide=hold)

    def broken(url: str, model: str, delay: int, policy: QueuePolicy) -> ReloadResult:
        raise TypeError("a bug")

    h.loop.reload = broken
    with caplog.at_level("ERROR", logger="batchop.tuning"):
        h.loop.tick()
    assert not h.loop.retries and "ReloadFailed" not in [e[1] for e in h.w.events]
    traced = [r for r in caplog.records if r.exc_info and "not converged" in r.getMessage()]
    assert traced and "a bug" in str(traced[0].exc_info[1])


def test_gauges_come_back_for_a_model_created_again_under_the_same_name() -> None:
    """The loop sets a model's gauges only when a figure moved; a model deleted (its series
    dropped) and created again with the same figures must still get them back."""
    from batchop.metrics import METRICS

    h = Harness(busy(p99_ms=12.0), decide=hold)
    labels = {"namespace": "ml", "batchedmodel": "cpu-demo"}

    def slo() -> float | None:
        return METRICS.registry.get_sample_value("batchop_slo_p99_milliseconds", labels)

    h.loop.tick()
    assert slo() == 40.0
    h.now += 60
    h.loop.tick()  # nothing moved: nothing set, the gauge stays
    assert slo() == 40.0
    METRICS.forget("ml", "cpu-demo")  # the model-gone handler, on deletion
    assert slo() is None
    h.w.cluster.model["metadata"]["uid"] = "uid-2"  # created again, same spec
    h.now += 60
    h.loop.tick()
    assert slo() == 40.0


def test_each_kind_of_hold_is_logged_once_and_its_figures_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A model held first for missing metrics, then for no curve yet, must say both: the
    demo's log showed only the first hold of a run that never decided."""
    reasons = iter(
        [
            "holding: metrics missing (rps, p99_ms)",
            "holding: metrics missing (p99_ms)",
            "holding: no batch-latency data yet (no profile, no settled tick with traffic seen)",
            "steady: p99 12 ms (SLO 50 ms) at 400 rps",
            "steady: p99 13 ms (SLO 50 ms) at 410 rps",
        ]
    )

    def holds(obs: Observation, spec: Any, state: TuningState) -> Decision:
        return Decision(obs.replicas, obs.delay_us, next(reasons), state, kind="hold")

    h = Harness(busy(p99_ms=12.0), decide=holds)
    with caplog.at_level("INFO", logger="batchop.tuning"):
        for _ in range(5):
            h.loop.tick()
            h.now += 3600
    logged = [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.levelname == "INFO"]
    assert logged == [
        "holding: metrics missing (rps, p99_ms)",
        "holding: no batch-latency data yet (no profile, no settled tick with traffic seen)",
        "steady: p99 12 ms (SLO 50 ms) at 400 rps",
    ]
