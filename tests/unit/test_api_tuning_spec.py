"""The one BatchedModel -> TuningSpec mapping: the spec's own bounds, the API's defaults, and
the same answer for the operator (stored manifest), the API (parsed model) and the CLIs."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest
from bm_samples import MUTATIONS, crd_admission, minimal, mutated, valid_manifests
from hypothesis import HealthCheck, given, settings

from batchop.api.errors import SpecError
from batchop.api.models import parse_batched_model
from batchop.api.tuning_spec import (
    api_defaults,
    manifest_tuning_spec,
    profile_tuning_spec,
    tuning_spec,
)
from batchop.cli.main import build_parser
from batchop.controller import autotune
from batchop.sim.profile import load_profile
from batchop.tuning.curve import prior_curve
from batchop.tuning.policy import recommend
from batchop.tuning.types import TuningSpec

PROFILE = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "cpu-demo.yaml"


def test_bounds_and_targets_come_from_the_spec() -> None:
    manifest = minimal(
        model={"name": "m", "repository": "/m", "maxBatchSize": 32, "preferredBatchSizes": [16, 8]},
        server={"gpus": 2},
        scaling={"replicas": 3, "minReplicas": 2, "maxReplicas": 6},
        batching={
            "maxQueueDelayMicroseconds": 700,
            "minQueueDelayMicroseconds": 100,
            "maxQueueDelayLimitMicroseconds": 9000,
        },
        slo={"p99LatencyMilliseconds": 25},
        autotune={"queueDelay": False, "intervalSeconds": 15, "scaleDownStabilizationSeconds": 90},
    )
    spec = tuning_spec(parse_batched_model(manifest), prior_batch_latency_ms=((1, 2.0),))
    assert (spec.slo_ms, spec.max_batch_size) == (25.0, 32)
    assert (spec.min_replicas, spec.start_replicas, spec.max_replicas) == (2, 3, 6)
    assert (spec.min_delay_us, spec.start_delay_us, spec.max_delay_us) == (100, 700, 9000)
    assert spec.preferred_batch_sizes == (8, 16)
    assert (spec.tune_delay, spec.tune_replicas, spec.interval_s) == (False, True, 15.0)
    assert spec.gpus_per_replica == 2
    assert spec.scale_down_window_s == 90.0
    assert spec.prior_batch_latency_ms == ((1, 2.0),)
    assert manifest_tuning_spec(manifest) == replace(spec, prior_batch_latency_ms=())


def test_a_cpu_model_keeps_its_zero_gpus() -> None:
    spec = manifest_tuning_spec(minimal(server={"gpus": 0}))
    assert spec.gpus_per_replica == 0
    # the one per-GPU figure counts a CPU model's replica as the unit instead of dividing by 0
    plan = recommend(prior_curve(((1, 4.0), (8, 10.0))), 100.0, replace(spec, slo_ms=100.0))
    assert plan.rps_per_gpu == pytest.approx(100.0 / plan.replicas)


def test_preferred_batch_sizes_in_any_order_are_the_same_spec() -> None:
    a = minimal(model={"name": "m", "repository": "/m", "maxBatchSize": 32,
                       "preferredBatchSizes": [16, 4, 8]})  # fmt: skip
    b = minimal(model={"name": "m", "repository": "/m", "maxBatchSize": 32,
                       "preferredBatchSizes": [4, 8, 16]})  # fmt: skip
    assert manifest_tuning_spec(a) == manifest_tuning_spec(b)
    assert manifest_tuning_spec(a).preferred_batch_sizes == (4, 8, 16)


def test_tuning_specs_defaults_are_the_apis() -> None:
    """TuningSpec's own defaults (used by tests and benches) may not drift from the API's."""
    assert TuningSpec(slo_ms=api_defaults().slo_ms, max_batch_size=1) == api_defaults()
    assert manifest_tuning_spec(minimal()) == replace(api_defaults(), max_batch_size=64)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_manifests())
def test_operator_and_api_mappings_agree(manifest: dict) -> None:
    """What the operator reads from a stored object (as the API server defaulted it, from
    the CRD) maps to the same TuningSpec as the API's parsed model."""
    parsed = tuning_spec(parse_batched_model(manifest))
    stored, refused = crd_admission(manifest)
    assert refused == []
    assert manifest_tuning_spec(manifest) == parsed
    assert manifest_tuning_spec(stored) == parsed
    # the operator's per-poll reads agree with the full mapping
    assert autotune.tunes(stored) == (parsed.tune_delay or parsed.tune_replicas)
    assert autotune.interval_s(manifest) == autotune.interval_s(stored) == parsed.interval_s
    assert autotune.desired_delay(manifest) == parsed.start_delay_us


@pytest.mark.parametrize(
    ("mutation", "field"),
    [(m, f) for _, m, f in MUTATIONS if f.startswith("spec.")],
    ids=[i for i, _, f in MUTATIONS if f.startswith("spec.")],
)
def test_the_operator_refuses_to_tune_an_invalid_spec(mutation, field: str) -> None:  # noqa: ANN001
    stored = crd_admission(minimal(server={"args": []}))[0]  # every default spelled out
    with pytest.raises(SpecError) as err:
        manifest_tuning_spec(mutated(stored, mutation))
    assert any(v.path.startswith(field) for v in err.value.violations), err.value


def test_a_manifest_without_a_spec_is_refused_naming_it() -> None:
    with pytest.raises(SpecError, match="^spec: must be a mapping"):
        manifest_tuning_spec({"metadata": {"name": "x"}})


def test_profile_specs_take_the_profile_and_the_apis_defaults() -> None:
    profile = load_profile(PROFILE)
    spec = profile_tuning_spec(profile, 40, max_replicas=3, min_replicas=None)
    assert (spec.slo_ms, spec.max_batch_size) == (40.0, profile.max_batch_size)
    assert spec.gpus_per_replica == profile.gpus_per_replica
    assert spec.prior_batch_latency_ms == profile.batch_latency_ms
    assert spec.max_replicas == 3
    assert spec.min_replicas == api_defaults().min_replicas  # None: not given
    with pytest.raises(TypeError, match="max_replica"):
        profile_tuning_spec(profile, 40, max_replica=3)


# flag dest -> TuningSpec field, for the commands that build a TuningSpec from flags
FLAGS = {
    "simulate": {
        "replicas": "start_replicas",
        "min_replicas": "min_replicas",
        "max_replicas": "max_replicas",
        "delay_us": "start_delay_us",
        "min_delay_us": "min_delay_us",
        "max_delay_us": "max_delay_us",
        "interval": "interval_s",
    },
    "plan": {
        "min_replicas": "min_replicas",
        "max_replicas": "max_replicas",
        "min_delay_us": "min_delay_us",
        "max_delay_us": "max_delay_us",
    },
}


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_cli_flag_defaults_are_the_apis_defaults(command: str) -> None:
    """`batchop simulate`/`plan` without bounds simulate what a BatchedModel without them gets."""
    argv = {
        "simulate": ["simulate", "--profile", "p", "--trace", "t", "--slo-ms", "9", "--json", "-"],
        "plan": ["plan", "--profile", "p", "--rps", "1", "--slo-ms", "9"],
    }[command]
    args = build_parser().parse_args(argv)
    assert set(FLAGS[command].values()) <= {f.name for f in fields(TuningSpec)}
    got = {field: getattr(args, dest) for dest, field in FLAGS[command].items()}
    want = {field: getattr(api_defaults(), field) for field in FLAGS[command].values()}
    assert got == want


def test_simulate_builds_its_spec_through_the_shared_mapping() -> None:
    from batchop.cli.simulate import build_spec

    argv = ["simulate", "--profile", str(PROFILE), "--trace", "t", "--slo-ms", "40",
            "--max-replicas", "4", "--json", "-"]  # fmt: skip
    profile = load_profile(PROFILE)
    spec = build_spec(build_parser().parse_args(argv), profile)
    assert spec == profile_tuning_spec(profile, 40, max_replicas=4)


def test_latency_profile_and_overload_reach_the_policy_as_the_operator_maps_them() -> None:
    from batchop.tuning.overload import queue_policy

    manifest = minimal(
        model={
            "name": "m",
            "repository": "/m",
            "maxBatchSize": 32,
            "latencyProfile": [
                {"batchSize": 32, "milliseconds": 12},
                {"batchSize": 1, "milliseconds": 4},
            ],
        },
        batching={"maxQueueDelayLimitMicroseconds": 5000},
        slo={"p99LatencyMilliseconds": 40},
    )
    spec = tuning_spec(parse_batched_model(manifest))
    assert spec.prior_batch_latency_ms == ((1, 4.0), (32, 12.0))
    assert spec.overload_reject and spec.queue_timeout_us is None and spec.max_queue_size == 0
    assert queue_policy(spec).timeout_us == 28_000  # SLO 40 ms - a full batch's 12 ms
    # the operator's mapping (from the raw object) gives the policy the same view
    assert manifest_tuning_spec(manifest).prior_batch_latency_ms == spec.prior_batch_latency_ms
    assert queue_policy(manifest_tuning_spec(manifest)) == queue_policy(spec)
    given = minimal(
        overload={"policy": "Reject", "queueTimeoutMicroseconds": 30_000, "maxQueueSize": 4},
        slo={"p99LatencyMilliseconds": 40},
    )
    spec = tuning_spec(parse_batched_model(given))
    assert (spec.queue_timeout_us, spec.max_queue_size) == (30_000, 4)
    assert queue_policy(manifest_tuning_spec(given)) == queue_policy(spec)
    queued = tuning_spec(parse_batched_model(minimal(overload={"policy": "Queue"})))
    assert not queued.overload_reject and not queue_policy(queued).guards
