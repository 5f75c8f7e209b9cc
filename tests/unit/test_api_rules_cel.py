"""Each cross-field rule's CEL (what the API server runs) agrees with its Python predicate.

cel-python evaluates every rule of every model on generated nodes that pass the per-field
bounds but may break the cross-field rules (boundaries included); the set of rules CEL says
are broken must equal the set pydantic refuses. This is what keeps the two halves of each
rule from drifting.
"""

from __future__ import annotations

from typing import Any

import pytest
from bm_samples import cel_holds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from batchop.api.models import (
    MANAGED_FLAGS,
    RESERVED_MOUNT_PATHS,
    RESERVED_VOLUMES,
    APIModel,
    BatchedModelSpec,
    BatchingSpec,
    ModelSpec,
    OverloadSpec,
    ResourceRequirements,
    ScalingSpec,
    ServerSpec,
)

RULED = [
    ModelSpec, ResourceRequirements, ServerSpec, ScalingSpec, BatchingSpec, OverloadSpec,
    BatchedModelSpec,
]  # fmt: skip


def test_every_rule_bearing_model_is_covered() -> None:
    def subclasses(cls: type) -> set[type]:
        return {c for s in cls.__subclasses__() for c in {s, *subclasses(s)}}

    assert {c for c in subclasses(APIModel) if c.__rules__} == set(RULED)


@pytest.mark.parametrize("model", RULED, ids=lambda c: c.__name__)
def test_every_cel_rule_compiles(model: type[APIModel]) -> None:
    import celpy

    env = celpy.Environment()
    for rule in model.__rules__:
        env.compile(rule.cel)
        assert rule.message and "\n" not in rule.message
        assert rule.field.split(".")[0] in model.model_json_schema(by_alias=True)["properties"]


def python_broken(model: type[APIModel], node: dict[str, Any]) -> set[tuple[str, str]] | None:
    """(field, message) of the rules pydantic refuses `node` for; None if a field bound failed.

    A rule with a `detail` adds it to its message in parentheses; it is matched back to
    the rule's fixed message (the one the CRD carries) here.
    """
    try:
        model.model_validate(node, by_alias=True, by_name=False)
    except ValidationError as exc:
        errors = exc.errors()
        if any(e["type"] != "batchop_rule" or e["loc"] != () for e in errors):
            return None
        said = [pair for e in errors for pair in e["ctx"]["violations"]]
        found = {
            (r.field, r.message)
            for r in model.__rules__
            for field, message in said
            if field == r.field and _says(message, r.message)
        }
        assert len(found) == len(said), (said, found)
        return found
    return set()


def _says(message: str, rule_message: str) -> bool:
    return message == rule_message or (
        message.startswith(rule_message + " (") and message.endswith(")")
    )


def cel_broken(model: type[APIModel], node: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r.field, r.message) for r in model.__rules__ if not cel_holds(r.cel, node)}


def agree(model: type[APIModel], node: dict[str, Any]) -> set[tuple[str, str]]:
    expected = python_broken(model, node)
    assert expected is not None, f"generator produced a node failing a field bound: {node}"
    assert cel_broken(model, node) == expected, node
    return expected


SMALL = st.integers(0, 6)

# Latency points: sizes around maxBatchSize, repeats, with and without batch size 1; times
# as ints and floats, equal and falling ones included.
LATENCY_POINTS = st.lists(
    st.builds(
        lambda b, ms: {"batchSize": b, "milliseconds": ms},
        st.integers(1, 10),
        st.sampled_from([1, 1.0, 2, 2.5, 4.0, 7]),
    ),
    max_size=4,
)

model_nodes = st.builds(
    lambda mbs, sizes, profile: {
        "name": "m",
        "repository": "/models",
        "maxBatchSize": mbs,
        **({} if sizes is None else {"preferredBatchSizes": sizes}),
        **({} if profile is None else {"latencyProfile": profile}),
    },
    st.integers(1, 8),
    st.none() | st.lists(st.integers(1, 10), max_size=5),
    st.none() | LATENCY_POINTS,
)

overload_nodes = st.fixed_dictionaries(
    {"policy": st.sampled_from(["Reject", "Queue"]), "maxQueueSize": st.sampled_from([0, 1])},
    optional={"queueTimeoutMicroseconds": st.sampled_from([0, 1, 5000])},
)

# Spellings of equal and of different amounts, ints included (the fields are int-or-string).
QUANTITY_SPELLINGS = st.sampled_from(
    [0, 1, 2, "1", "2", "500m", "0.5", "1000m", "1001m", ".5", "1e3", "1k", "1E3", "1Gi",
     "1024Mi", "1000Mi", "1G", "0.0000000011", "0.000000002", "1Ki"]
)  # fmt: skip
RESOURCE_NAMES = ["cpu", "memory", "example.com/foo", "hugepages-2Mi", "kubernetes.io/x", "gpu"]
resources_nodes = st.fixed_dictionaries(
    {},
    optional={
        part: st.dictionaries(st.sampled_from(RESOURCE_NAMES), QUANTITY_SPELLINGS, max_size=3)
        for part in ("limits", "requests")
    },
)

ARGS = st.sampled_from(
    [
        *MANAGED_FLAGS,
        *(f + "=x" for f in MANAGED_FLAGS),
        "--model-repository-extra=1",  # a prefix of a managed flag, but another flag
        "--log-verbose=1",
        "x--load-model=a",
        "",
    ]
)


def _within_resource_rules(limits: dict[str, Any], keep: list[bool]) -> dict[str, Any]:
    """Resources that break no rule of their own (requests are some of the limits, of the
    same amount), so that ServerSpec's rules are the only ones in play."""
    requests = {k: limits[k] for k, on in zip(sorted(limits), keep, strict=False) if on}
    return {"limits": limits, "requests": requests} if limits else {}


server_nodes = st.fixed_dictionaries(
    {"gpus": st.integers(0, 2)},
    optional={
        "resources": st.builds(
            _within_resource_rules,
            st.dictionaries(
                st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpus"]),
                st.sampled_from([1, "1", "1000m"]),
                max_size=3,
            ),
            st.lists(st.booleans(), min_size=4, max_size=4),
        ),
        "args": st.lists(ARGS, max_size=4),
        "volumes": st.lists(
            st.builds(
                lambda n: {"name": n, "emptyDir": {}},
                st.sampled_from([*RESERVED_VOLUMES, "data", "batchop-tmp2"]),
            ),
            max_size=3,
        ),
        "volumeMounts": st.lists(
            st.builds(
                lambda p: {"name": "data", "mountPath": p},
                st.sampled_from([*RESERVED_MOUNT_PATHS, "/tmp/x", "/data", "/dev/shm2"]),
            ),
            max_size=3,
        ),
    },
)

scaling_nodes = st.builds(
    lambda a, b, c: {"replicas": a, "minReplicas": b, "maxReplicas": c},
    SMALL,
    SMALL,
    st.integers(1, 6),
)

DELAYS = st.sampled_from([0, 1, 999, 1000, 1001, 5000])
batching_nodes = st.builds(
    lambda a, b, c: {
        "maxQueueDelayMicroseconds": a,
        "minQueueDelayMicroseconds": b,
        "maxQueueDelayLimitMicroseconds": c,
    },
    DELAYS,
    DELAYS,
    DELAYS,
)


@st.composite
def spec_nodes(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(0, 2))
    delay = draw(DELAYS)
    return {
        "model": {"name": "m", "repository": "/models", "maxBatchSize": 4},
        "server": {"gpus": 1},
        "scaling": {"replicas": max(low, 1), "minReplicas": low, "maxReplicas": 3},
        "batching": {
            "maxQueueDelayMicroseconds": delay,
            "minQueueDelayMicroseconds": 0,
            "maxQueueDelayLimitMicroseconds": 5000,
        },
        # ints and floats both: the API server sees whatever JSON number the user wrote
        "slo": {"p99LatencyMilliseconds": draw(st.sampled_from([0.5, 1, 1.0, 1.001, 5, 5.0, 50]))},
        "autotune": {"queueDelay": True, "replicas": draw(st.booleans()), "intervalSeconds": 30},
        "overload": {
            "policy": "Reject",
            "maxQueueSize": 0,
            **draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "queueTimeoutMicroseconds": st.sampled_from(
                            [0, 1, 4999, 5000, 5001, 49_999, 50_000, 50_001]
                        )
                    },
                )
            ),
        },
    }


FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(model_nodes)
def test_model_rules_agree(node: dict[str, Any]) -> None:
    agree(ModelSpec, node)


@FAST
@given(resources_nodes)
def test_resources_rules_agree(node: dict[str, Any]) -> None:
    agree(ResourceRequirements, node)


@FAST
@given(server_nodes)
def test_server_rules_agree(node: dict[str, Any]) -> None:
    agree(ServerSpec, node)


@FAST
@given(scaling_nodes)
def test_scaling_rules_agree(node: dict[str, Any]) -> None:
    agree(ScalingSpec, node)


@FAST
@given(batching_nodes)
def test_batching_rules_agree(node: dict[str, Any]) -> None:
    agree(BatchingSpec, node)


@FAST
@given(overload_nodes)
def test_overload_rules_agree(node: dict[str, Any]) -> None:
    agree(OverloadSpec, node)


@FAST
@given(spec_nodes())
def test_spec_rules_agree(node: dict[str, Any]) -> None:
    agree(BatchedModelSpec, node)


# Hand-picked boundaries, so that each rule is seen both holding and broken on every run.
@pytest.mark.parametrize(
    ("model", "node", "broken"),
    [
        (ScalingSpec, {"replicas": 3, "minReplicas": 3, "maxReplicas": 3}, 0),
        (ScalingSpec, {"replicas": 3, "minReplicas": 4, "maxReplicas": 3}, 2),
        (ScalingSpec, {"replicas": 4, "minReplicas": 1, "maxReplicas": 3}, 1),
        (BatchingSpec, {"maxQueueDelayMicroseconds": 7, "minQueueDelayMicroseconds": 7,
                        "maxQueueDelayLimitMicroseconds": 7}, 0),
        (BatchingSpec, {"maxQueueDelayMicroseconds": 7, "minQueueDelayMicroseconds": 8,
                        "maxQueueDelayLimitMicroseconds": 6}, 2),
        (ModelSpec, {"name": "m", "repository": "r", "maxBatchSize": 4,
                     "preferredBatchSizes": [4, 2]}, 0),
        (ModelSpec, {"name": "m", "repository": "r", "maxBatchSize": 4,
                     "preferredBatchSizes": [5, 5]}, 2),
        (ModelSpec, {"name": "m", "repository": "r", "maxBatchSize": 8, "latencyProfile": [
            {"batchSize": 8, "milliseconds": 6}, {"batchSize": 1, "milliseconds": 4.0},
            {"batchSize": 4, "milliseconds": 4}]}, 0),
        (ModelSpec, {"name": "m", "repository": "r", "maxBatchSize": 4, "latencyProfile": [
            {"batchSize": 8, "milliseconds": 6}, {"batchSize": 1, "milliseconds": 4.0},
            {"batchSize": 4, "milliseconds": 3.5}]}, 2),
        (ModelSpec, {"name": "m", "repository": "r", "maxBatchSize": 4, "latencyProfile": [
            {"batchSize": 2, "milliseconds": 6}, {"batchSize": 2, "milliseconds": 6}]}, 2),
        (OverloadSpec, {"policy": "Queue", "maxQueueSize": 0, "queueTimeoutMicroseconds": 0}, 0),
        (OverloadSpec, {"policy": "Queue", "maxQueueSize": 5}, 1),
        (OverloadSpec, {"policy": "Reject", "maxQueueSize": 5,
                        "queueTimeoutMicroseconds": 9}, 0),
        (ServerSpec, {"gpus": 1, "args": ["--model-control-mode", "poll"]}, 1),
        (ServerSpec, {"gpus": 1, "args": ["--model-control-modes=x"]}, 0),
        (ServerSpec, {"gpus": 0, "resources": {"requests": {"nvidia.com/gpu": 1},
                                               "limits": {"nvidia.com/gpu": 1}}}, 1),
        (ServerSpec, {"gpus": 0, "resources": {"limits": {"nvidia.com/gpu": 1}}}, 1),
        (ResourceRequirements, {"requests": {"cpu": "1"}, "limits": {"cpu": "100m"}}, 1),
        (ResourceRequirements, {"requests": {"cpu": "500m"}, "limits": {"cpu": "0.5"}}, 0),
        (ResourceRequirements, {"requests": {"cpu": 1}, "limits": {"cpu": "1000m"}}, 0),
        (ResourceRequirements, {"requests": {"cpu": 2}, "limits": {"cpu": "1999m"}}, 1),
        (ResourceRequirements, {"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}}, 1),
        (ResourceRequirements, {"requests": {"memory": "1Gi"}, "limits": {"memory": "1024Mi"}}, 0),
        (ResourceRequirements, {"requests": {"memory": "1Gi"}, "limits": {"cpu": "1"}}, 0),
        (ResourceRequirements, {"requests": {"example.com/foo": 1}}, 1),
        (ResourceRequirements, {"requests": {"example.com/foo": 1},
                                "limits": {"example.com/foo": "1000m"}}, 0),
        (ResourceRequirements, {"requests": {"example.com/foo": 1},
                                "limits": {"example.com/foo": 2}}, 1),
        (ResourceRequirements, {"requests": {"example.com/foo": 3},
                                "limits": {"example.com/foo": 2}}, 2),
        (ResourceRequirements, {"limits": {"example.com/foo": 2}}, 0),
        (ResourceRequirements, {"requests": {"hugepages-2Mi": "2Mi"},
                                "limits": {"hugepages-2Mi": "4Mi"}}, 1),
        (ResourceRequirements, {"requests": {"kubernetes.io/x": 1},
                                "limits": {"kubernetes.io/x": 2}}, 0),
        (ResourceRequirements, {"requests": {"gpu": 1}, "limits": {"gpu": 1}}, 2),
        (ResourceRequirements, {"limits": {"storage": 1, "ephemeral-storage": 1}}, 1),
        # below 1n, the API server rounds up to the nano: 1.1n is 2n
        (ResourceRequirements, {"requests": {"cpu": "0.0000000011"},
                                "limits": {"cpu": "0.000000001"}}, 1),
        (ResourceRequirements, {"requests": {"cpu": "0.0000000011"},
                                "limits": {"cpu": "0.000000002"}}, 0),
    ],
)  # fmt: skip
def test_rule_boundaries(model: type[APIModel], node: dict[str, Any], broken: int) -> None:
    assert len(agree(model, node)) == broken
