"""The BatchedModel models: defaults, wire names, and every rule refused with its field named.

Each refusal is checked twice: by `parse_batched_model` (what `batchop render` and the
operator run) and by the generated CRD as the API server applies it (emulated in
bm_samples.crd_admission), so the two cannot disagree about what is valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from bm_samples import MUTATIONS, crd_admission, minimal, mutated, valid_manifests
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from batchop.api.errors import SpecError
from batchop.api.models import (
    BatchedModel,
    BatchedModelStatus,
    ScalingSpec,
    parse_batched_model,
)

ROOT = Path(__file__).resolve().parents[2]


def full(manifest: dict) -> dict:
    """The manifest with every default spelled out (so mutations find every section)."""
    return parse_batched_model(manifest).model_dump(by_alias=True, exclude_none=True, mode="json")


def test_defaults_match_the_design() -> None:
    spec = parse_batched_model(minimal()).spec
    assert (spec.scaling.replicas, spec.scaling.min_replicas, spec.scaling.max_replicas) == (
        1,
        1,
        8,
    )
    batching = spec.batching
    assert batching.max_queue_delay_microseconds == 500
    assert batching.min_queue_delay_microseconds == 0
    assert batching.max_queue_delay_limit_microseconds == 20_000
    assert spec.server.gpus == 1
    assert spec.server.image is None  # the operator's default image applies at render time
    assert spec.slo.p99_latency_milliseconds == 50
    assert spec.autotune.queue_delay and spec.autotune.replicas
    assert spec.autotune.interval_seconds == 15
    assert spec.autotune.prometheus_url is None
    # the overload guard is on by default, its timeout derived from the SLO
    assert spec.overload.policy == "Reject"
    assert spec.overload.queue_timeout_microseconds is None
    assert spec.overload.max_queue_size == 0
    assert spec.model.latency_profile is None


def test_wire_format_is_camel_case() -> None:
    dumped = full(minimal(batching={"maxQueueDelayMicroseconds": 800}))
    assert set(dumped) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(dumped["spec"]["batching"]) == {
        "maxQueueDelayMicroseconds",
        "minQueueDelayMicroseconds",
        "maxQueueDelayLimitMicroseconds",
    }
    assert dumped["spec"]["batching"]["maxQueueDelayMicroseconds"] == 800
    assert set(dumped["spec"]["slo"]) == {"p99LatencyMilliseconds"}
    assert set(dumped["spec"]["autotune"]) == {
        "queueDelay",
        "replicas",
        "intervalSeconds",
        "scaleDownStabilizationSeconds",
        "coverage",
        "burstMemorySeconds",
        "forecast",
    }


def test_python_code_may_use_snake_case_but_manifests_may_not() -> None:
    assert ScalingSpec(min_replicas=2, replicas=2).min_replicas == 2
    with pytest.raises(SpecError) as caught:
        parse_batched_model(minimal(scaling={"min_replicas": 2}))
    assert "spec.scaling.min_replicas: unknown field" in str(caught.value)


def test_round_trip_is_lossless() -> None:
    manifest = yaml.safe_load((ROOT / "examples" / "resnet50.yaml").read_text())
    once = parse_batched_model(manifest)
    assert parse_batched_model(once.model_dump(by_alias=True, mode="json")) == once


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        assert isinstance(parse_batched_model(doc), BatchedModel)
        assert crd_admission(doc)[1] == []


def test_cpu_demo_example_is_the_demo_model() -> None:
    bm = parse_batched_model(yaml.safe_load((ROOT / "examples" / "cpu-demo.yaml").read_text()))
    assert bm.spec.model.name == "cpu-demo"
    assert bm.spec.server.gpus == 1


@pytest.mark.parametrize(
    ("mutation", "path"), [(m, p) for _, m, p in MUTATIONS], ids=[i for i, _, _ in MUTATIONS]
)
def test_each_rule_is_refused_naming_the_field(mutation, path: str) -> None:
    broken = mutated(full(minimal(server={"args": []})), mutation)
    with pytest.raises(SpecError) as caught:
        parse_batched_model(broken)
    paths = [v.path for v in caught.value.violations]
    assert path in paths, caught.value
    assert str(caught.value).startswith(paths[0] + ": ")
    assert path in crd_admission(broken)[1]


def test_error_names_the_rule_and_the_object() -> None:
    manifest = minimal(scaling={"minReplicas": 3, "maxReplicas": 2, "replicas": 2})
    with pytest.raises(SpecError) as caught:
        parse_batched_model(manifest)
    assert caught.value.name == "resnet"
    assert "spec.scaling.minReplicas: minReplicas must be <= maxReplicas" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_request_above_its_limit_is_refused_naming_the_resource_and_values() -> None:
    requests = {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi"}
    limits = {"cpu": "100m", "memory": "1024Mi", "ephemeral-storage": "2000Mi"}
    manifest = minimal(server={"resources": {"requests": requests, "limits": limits}})
    with pytest.raises(SpecError) as caught:
        parse_batched_model(manifest)
    [violation] = caught.value.violations
    assert violation.path == "spec.server.resources.requests"
    assert violation.message == (
        "each request must be <= its limit (requests.cpu 1 > limits.cpu 100m, "
        "requests.ephemeral-storage 2Gi > limits.ephemeral-storage 2000Mi)"
    )


def test_a_full_resource_set_fits_and_one_more_name_is_refused_by_both_halves() -> None:
    """The bound the older API servers' CEL budget forces still holds a real container's
    resources; past it pydantic and the CRD refuse the map, naming it."""
    full = {
        "cpu": "4",
        "memory": "16Gi",
        "ephemeral-storage": "20Gi",
        "hugepages-2Mi": "1Gi",
        "hugepages-1Gi": "2Gi",
        "rdma/ib": "1",
        "example.com/fpga": "1",
    }
    resources = {"requests": dict(full), "limits": dict(full)}
    parse_batched_model(minimal(server={"resources": resources}))
    assert crd_admission(minimal(server={"resources": resources}))[1] == []
    over = {"requests": {**full, "example.com/nic": "1"}}
    with pytest.raises(SpecError) as caught:
        parse_batched_model(minimal(server={"resources": over}))
    assert [v.path for v in caught.value.violations] == ["spec.server.resources.requests"]
    assert "spec.server.resources.requests" in crd_admission(minimal(server={"resources": over}))[1]


def test_huge_exponents_are_refused_at_the_field() -> None:
    manifest = minimal(server={"resources": {"limits": {"cpu": "1e99999"}}})
    with pytest.raises(SpecError) as caught:
        parse_batched_model(manifest)
    assert [v.path for v in caught.value.violations] == ["spec.server.resources.limits.cpu"]
    assert "exponent" in str(caught.value)


@pytest.mark.parametrize("bad", [None, [], "BatchedModel", 3])
def test_non_mapping_is_refused(bad: object) -> None:
    with pytest.raises(SpecError, match="must be a mapping"):
        parse_batched_model(bad)  # type: ignore[arg-type]


def test_wrong_api_version_is_refused() -> None:
    manifest = minimal()
    manifest["apiVersion"] = "batchop.io/v1"
    with pytest.raises(SpecError) as caught:
        parse_batched_model(manifest)
    assert [v.path for v in caught.value.violations] == ["apiVersion"]


def test_status_accepts_what_the_operator_writes() -> None:
    status = BatchedModelStatus.model_validate(
        {
            "observedGeneration": 3,
            "replicas": 2,
            "readyReplicas": 1,
            "selector": "batchop.io/batchedmodel=resnet",
            "maxQueueDelayMicroseconds": 800,
            "metrics": {"requestsPerSecond": 120.5, "p99LatencyMilliseconds": 21.0},
            "lastDecision": {"time": "2026-01-01T00:00:00Z", "replicas": 2, "reason": "load"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "PodsStarting",
                    "message": "1 of 2 ready",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 3,
                }
            ],
            "fromANewerOperator": True,
        }
    )
    assert status.conditions is not None and status.conditions[0].status == "False"
    assert status.last_decision is not None and status.last_decision.time is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_manifests())
def test_valid_specs_parse_and_the_crd_defaults_them_the_same(manifest: dict) -> None:
    parsed = parse_batched_model(manifest)
    defaulted, errors = crd_admission(manifest)
    assert errors == []
    assert defaulted == parsed.model_dump(by_alias=True, exclude_none=True, mode="json")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_manifests(), st.sampled_from(MUTATIONS))
@example(  # found by hypothesis: with a delay limit of 0 the mutation set the default timeout
    manifest={
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": "a", "namespace": "ml"},
        "spec": {
            "model": {"name": "0", "repository": "s3://bucket/models", "maxBatchSize": 1},
            "scaling": {"minReplicas": 0, "maxReplicas": 1, "replicas": 0},
            "batching": {
                "minQueueDelayMicroseconds": 0,
                "maxQueueDelayMicroseconds": 0,
                "maxQueueDelayLimitMicroseconds": 0,
            },
            "slo": {"p99LatencyMilliseconds": 1.0},
            "autotune": {"replicas": False},
        },
    },
    case=next(c for c in MUTATIONS if c[0] == "timeout-within-delay-limit"),
)
def test_invalid_specs_are_refused_naming_the_field(manifest: dict, case) -> None:
    _, mutation, path = case
    broken = mutated(full(manifest), mutation)
    with pytest.raises(SpecError) as caught:
        parse_batched_model(broken)
    assert path in [v.path for v in caught.value.violations]
    assert path in crd_admission(broken)[1]
