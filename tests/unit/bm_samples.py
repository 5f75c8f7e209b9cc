"""BatchedModel manifests for the API tests: a minimal one, hypothesis strategies for valid
ones, and single-rule mutations that make a valid one invalid (with the field they break).

Also `crd_admission`: what the API server does with a manifest under the generated CRD,
emulated in Python from the CRD itself (defaults from the schema, OpenAPI validation with a
JSON-schema Draft 4 validator, which reads `exclusiveMinimum` as OpenAPI 3.0 does, and the CEL
rules with cel-python plus cel_quantity's stand-in for the Kubernetes quantity library).
Comparing it with `parse_batched_model` checks that the generated CRD and the pydantic models
enforce the same API.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import cache
from typing import Any

from hypothesis import strategies as st

from batchop.api.models import (
    DELAY_CEILING_US,
    MANAGED_FLAGS,
    RESERVED_MOUNT_PATHS,
    RESERVED_VOLUMES,
)

Manifest = dict[str, Any]


def minimal(name: str = "resnet", **spec: Any) -> Manifest:
    """The smallest valid BatchedModel, with `spec` sections merged in."""
    body: dict[str, Any] = {
        "model": {"name": "resnet50", "repository": "s3://bucket/models", "maxBatchSize": 64}
    }
    body.update(spec)
    return {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": body,
    }


# --- valid manifests ---------------------------------------------------------------------

# In ascending order of amount (by hand, not by the parser under test), with equal amounts
# spelled differently, so that a request drawn at or before its limit's place is <= it.
ASCENDING_QUANTITIES = ["100m", "500m", "0.5", 1, "1", "1000m", "1.5", "2", 4, "512Mi", "8Gi"]
TOLERATIONS = st.sampled_from(
    [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "pool", "operator": "Equal", "value": "inference", "effect": "NoExecute"},
    ]
)
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
            ]
        }
    }
}


@st.composite
def model_sections(draw: st.DrawFn) -> dict[str, Any]:
    max_batch = draw(st.integers(1, 1024))
    model: dict[str, Any] = {
        "name": draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True)),
        "repository": draw(
            st.sampled_from(["s3://bucket/models", "/models", "gs://b/repo", "file:///m"])
        ),
        "maxBatchSize": max_batch,
    }
    if draw(st.booleans()):
        model["preferredBatchSizes"] = draw(
            st.lists(st.integers(1, max_batch), unique=True, min_size=1, max_size=8)
        )
    return model


@st.composite
def server_sections(draw: st.DrawFn) -> dict[str, Any]:
    server: dict[str, Any] = {}
    if draw(st.booleans()):
        server["image"] = draw(st.sampled_from(["tritonserver:dev", "nvcr.io/nvidia/t:24.10"]))
    if draw(st.booleans()):
        server["gpus"] = draw(st.integers(0, 8))
    if draw(st.booleans()):
        resources: dict[str, dict[str, Any]] = {}
        for part in ("limits", "requests"):  # limits first: a request is drawn up to its limit
            if draw(st.booleans()):
                keys = draw(st.lists(st.sampled_from(["cpu", "memory"]), unique=True, min_size=1))
                resources[part] = {}
                for key in keys:
                    limit = resources.get("limits", {}).get(key) if part == "requests" else None
                    choices = ASCENDING_QUANTITIES
                    if limit is not None:
                        choices = choices[: choices.index(limit) + 1]
                    resources[part][key] = draw(st.sampled_from(choices))
        server["resources"] = resources
    if draw(st.booleans()):
        names = draw(
            st.lists(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), unique=True, max_size=4)
        )
        server["env"] = [{"name": n, "value": draw(st.text(max_size=10))} for n in names]
    if draw(st.booleans()):
        server["args"] = draw(
            st.lists(
                st.sampled_from(
                    ["--log-verbose=1", "--exit-timeout-secs=30", "--model-load-thread-count=2"]
                ),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        server["nodeSelector"] = {"pool": draw(st.sampled_from(["gpu", "inference-a"]))}
    if draw(st.booleans()):
        server["tolerations"] = draw(st.lists(TOLERATIONS, max_size=2))
    if draw(st.booleans()):
        server["affinity"] = AFFINITY
    if draw(st.booleans()):
        count = draw(st.integers(1, 3))
        server["volumes"] = [{"name": f"data-{i}", "emptyDir": {}} for i in range(count)]
        server["volumeMounts"] = [
            {"name": f"data-{i}", "mountPath": f"/data/{i}", "readOnly": True} for i in range(count)
        ]
    if draw(st.booleans()):
        server["serviceAccountName"] = "model-reader"
    if draw(st.booleans()):
        server["imagePullSecrets"] = [{"name": "ngc"}]
    return server


@st.composite
def valid_manifests(draw: st.DrawFn) -> Manifest:
    """Any BatchedModel the API accepts (within ranges small enough to be quick)."""
    spec: dict[str, Any] = {"model": draw(model_sections())}
    if draw(st.booleans()):
        spec["server"] = draw(server_sections())
    tune_replicas = draw(st.booleans())
    low = draw(st.integers(1 if tune_replicas else 0, 4))
    high = draw(st.integers(max(low, 1), 12))
    spec["scaling"] = {
        "minReplicas": low,
        "maxReplicas": high,
        "replicas": draw(st.integers(low, high)),
    }
    delays = sorted(draw(st.lists(st.integers(0, 50_000), min_size=3, max_size=3)))
    spec["batching"] = {
        "minQueueDelayMicroseconds": delays[0],
        "maxQueueDelayMicroseconds": delays[1],
        "maxQueueDelayLimitMicroseconds": delays[2],
    }
    slack = draw(st.floats(0.5, 500.0, allow_nan=False))
    spec["slo"] = {"p99LatencyMilliseconds": round(delays[1] / 1000.0 + slack, 3)}
    autotune: dict[str, Any] = {"replicas": tune_replicas}
    if draw(st.booleans()):
        autotune["queueDelay"] = draw(st.booleans())
        autotune["intervalSeconds"] = draw(st.integers(5, 3600))
        autotune["coverage"] = draw(st.floats(0.5, 0.999))
    if draw(st.booleans()):
        autotune["prometheusUrl"] = "http://prometheus.monitoring:9090"
    spec["autotune"] = autotune
    name = draw(st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True))
    return {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
    }


# --- invalid manifests: one broken rule each -----------------------------------------------


def _set(path: str, value: Any) -> Callable[[Manifest], None]:
    def apply(m: Manifest) -> None:
        node = m
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value(m) if callable(value) else value

    return apply


def _append(path: str, item: Any) -> Callable[[Manifest], None]:
    def apply(m: Manifest) -> None:
        node = m
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node.setdefault(leaf, []).append(item(m) if callable(item) else item)

    return apply


# (id, mutation, the field path the error must name)
MUTATIONS: list[tuple[str, Callable[[Manifest], None], str]] = [
    ("name-pattern", _set("metadata.name", "Bad_Name"), "metadata.name"),
    ("name-too-long", _set("metadata.name", "a" * 64), "metadata.name"),
    ("model-name-empty", _set("spec.model.name", ""), "spec.model.name"),
    ("model-name-slash", _set("spec.model.name", "a/b"), "spec.model.name"),
    ("repository-missing", lambda m: m["spec"]["model"].pop("repository"), "spec.model.repository"),
    ("max-batch-zero", _set("spec.model.maxBatchSize", 0), "spec.model.maxBatchSize"),
    (
        "preferred-above-max",
        _append("spec.model.preferredBatchSizes", lambda m: m["spec"]["model"]["maxBatchSize"] + 1),
        "spec.model.preferredBatchSizes",
    ),
    (
        "preferred-duplicate",
        _set("spec.model.preferredBatchSizes", [1, 1]),
        "spec.model.preferredBatchSizes",
    ),
    ("gpus-negative", _set("spec.server.gpus", -1), "spec.server.gpus"),
    (
        "gpu-in-resources",
        _set("spec.server.resources", {"limits": {"nvidia.com/gpu": 2}}),
        "spec.server.resources",
    ),
    (
        "request-above-limit",
        _set("spec.server.resources", {"requests": {"cpu": "1"}, "limits": {"cpu": "100m"}}),
        "spec.server.resources.requests",
    ),
    (
        "extended-request-without-limit",
        _set("spec.server.resources", {"requests": {"example.com/fpga": 1}}),
        "spec.server.resources.requests",
    ),
    (
        "extended-request-below-limit",
        _set(
            "spec.server.resources",
            {"requests": {"example.com/fpga": 1}, "limits": {"example.com/fpga": 2}},
        ),
        "spec.server.resources.requests",
    ),
    (
        "unknown-resource-name",
        _set("spec.server.resources", {"limits": {"gpu": 1}}),
        "spec.server.resources.limits",
    ),
    (
        "negative-limit",
        _set("spec.server.resources", {"limits": {"memory": "-1Gi"}}),
        "spec.server.resources.limits.memory",
    ),
    (
        "negative-request-int",
        _set("spec.server.resources", {"requests": {"cpu": -1}}),
        "spec.server.resources.requests.cpu",
    ),
    (
        "bad-quantity",
        _set("spec.server.resources", {"requests": {"memory": "lots"}}),
        "spec.server.resources.requests.memory",
    ),
    (
        "managed-arg",
        _append("spec.server.args", f"{MANAGED_FLAGS[2]}=poll"),
        "spec.server.args",
    ),
    ("managed-arg-bare", _append("spec.server.args", MANAGED_FLAGS[0]), "spec.server.args"),
    (
        "reserved-volume",
        _append("spec.server.volumes", {"name": RESERVED_VOLUMES[0], "emptyDir": {}}),
        "spec.server.volumes",
    ),
    (
        "reserved-mount",
        _append("spec.server.volumeMounts", {"name": "x", "mountPath": RESERVED_MOUNT_PATHS[0]}),
        "spec.server.volumeMounts",
    ),
    (
        "min-above-max-replicas",
        _set("spec.scaling.minReplicas", lambda m: m["spec"]["scaling"]["maxReplicas"] + 1),
        "spec.scaling.minReplicas",
    ),
    (
        "replicas-above-max",
        _set("spec.scaling.replicas", lambda m: m["spec"]["scaling"]["maxReplicas"] + 1),
        "spec.scaling.replicas",
    ),
    ("max-replicas-zero", _set("spec.scaling.maxReplicas", 0), "spec.scaling.maxReplicas"),
    (
        "min-zero-while-tuning",
        lambda m: (
            m["spec"]["scaling"].update(minReplicas=0, replicas=1),
            m["spec"].setdefault("autotune", {}).update(replicas=True),
        ),
        "spec.scaling.minReplicas",
    ),
    (
        "min-delay-above-delay",
        _set(
            "spec.batching.minQueueDelayMicroseconds",
            lambda m: m["spec"]["batching"]["maxQueueDelayMicroseconds"] + 1,
        ),
        "spec.batching.minQueueDelayMicroseconds",
    ),
    (
        "delay-above-limit",
        _set(
            "spec.batching.maxQueueDelayMicroseconds",
            lambda m: m["spec"]["batching"]["maxQueueDelayLimitMicroseconds"] + 1,
        ),
        "spec.batching.maxQueueDelayMicroseconds",
    ),
    (
        "delay-above-ceiling",
        _set("spec.batching.maxQueueDelayLimitMicroseconds", DELAY_CEILING_US + 1),
        "spec.batching.maxQueueDelayLimitMicroseconds",
    ),
    (
        "delay-exceeds-slo",
        lambda m: (
            _set("spec.batching", {"maxQueueDelayMicroseconds": 5000})(m),
            _set("spec.slo.p99LatencyMilliseconds", 5)(m),
        ),
        "spec.batching.maxQueueDelayMicroseconds",
    ),
    ("slo-zero", _set("spec.slo.p99LatencyMilliseconds", 0), "spec.slo.p99LatencyMilliseconds"),
    (
        "profile-above-max-batch",
        _set(
            "spec.model.latencyProfile",
            lambda m: [
                {"batchSize": 1, "milliseconds": 1},
                {"batchSize": m["spec"]["model"]["maxBatchSize"] + 1, "milliseconds": 9},
            ],
        ),
        "spec.model.latencyProfile",
    ),
    (
        "profile-faster-for-bigger-batch",
        _set(
            "spec.model.latencyProfile",
            [{"batchSize": 1, "milliseconds": 4}, {"batchSize": 2, "milliseconds": 3.5}],
        ),
        "spec.model.latencyProfile",
    ),
    (
        "profile-without-batch-one",
        _set("spec.model.latencyProfile", [{"batchSize": 2, "milliseconds": 4}]),
        "spec.model.latencyProfile",
    ),
    (
        "profile-zero-ms",
        _set("spec.model.latencyProfile", [{"batchSize": 1, "milliseconds": 0}]),
        "spec.model.latencyProfile[0].milliseconds",
    ),
    ("overload-unknown-policy", _set("spec.overload.policy", "Drop"), "spec.overload.policy"),
    (
        "queue-with-a-bound",
        _set("spec.overload", {"policy": "Queue", "maxQueueSize": 8}),
        "spec.overload.policy",
    ),
    (
        "timeout-within-delay-limit",
        # a limit of 0 would make the timeout 0, which is the default (derived), not a
        # timeout within the limit: hypothesis found that valid "invalid" manifest
        lambda m: (
            _set(
                "spec.batching.maxQueueDelayLimitMicroseconds",
                lambda m: max(1, m["spec"]["batching"]["maxQueueDelayLimitMicroseconds"]),
            )(m),
            _set(
                "spec.overload.queueTimeoutMicroseconds",
                lambda m: m["spec"]["batching"]["maxQueueDelayLimitMicroseconds"],
            )(m),
        ),
        "spec.overload.queueTimeoutMicroseconds",
    ),
    (
        "timeout-beyond-slo",
        lambda m: (
            _set("spec.batching.minQueueDelayMicroseconds", 0)(m),
            _set("spec.batching.maxQueueDelayMicroseconds", 500)(m),
            _set("spec.batching.maxQueueDelayLimitMicroseconds", 1000)(m),
            _set(
                "spec.overload.queueTimeoutMicroseconds",
                math.ceil(m["spec"]["slo"]["p99LatencyMilliseconds"] * 1000),
            )(m),
        ),
        "spec.overload.queueTimeoutMicroseconds",
    ),
    (
        "interval-too-short",
        _set("spec.autotune.intervalSeconds", 1),
        "spec.autotune.intervalSeconds",
    ),
    (
        "coverage-too-low",
        _set("spec.autotune.coverage", 0.2),
        "spec.autotune.coverage",
    ),
    (
        "coverage-certain",
        _set("spec.autotune.coverage", 1.0),
        "spec.autotune.coverage",
    ),
    (
        "prometheus-not-url",
        _set("spec.autotune.prometheusUrl", "prom:9090"),
        "spec.autotune.prometheusUrl",
    ),
    ("unknown-field", _set("spec.batching.delay", 5), "spec.batching.delay"),
    ("wrong-type", _set("spec.scaling.replicas", "two"), "spec.scaling.replicas"),
]


def mutated(manifest: Manifest, mutation: Callable[[Manifest], None]) -> Manifest:
    broken = copy.deepcopy(manifest)
    mutation(broken)
    return broken


# --- the API server, emulated from the generated CRD ---------------------------------------


@cache
def _crd_schema() -> dict[str, Any]:
    from batchop.api.crd import generate_crd

    return generate_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Kubernetes structural defaulting: fill absent properties from `default`, top down."""
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    elif isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


@cache
def _cel_program(expression: str) -> Any:
    import celpy
    from cel_quantity import FUNCTIONS

    env = celpy.Environment()
    return env.program(env.compile(expression), functions=FUNCTIONS)


def cel_holds(expression: str, node: Any) -> bool:
    import celpy

    return bool(_cel_program(expression).evaluate({"self": celpy.json_to_cel(node)}))


def _cel_violations(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    found = []
    for rule in schema.get("x-kubernetes-validations", ()):
        if not cel_holds(rule["rule"], value):
            found.append(path + rule.get("fieldPath", ""))
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                found += _cel_violations(sub, value[key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            found += _cel_violations(schema["items"], item, f"{path}[]")
    return found


def crd_admission(manifest: Manifest) -> tuple[Manifest, list[str]]:
    """(the defaulted object, the field paths the API server would refuse it for)."""
    import jsonschema

    schema = _crd_schema()
    obj = apply_defaults(schema, copy.deepcopy(manifest))
    # Structural schemas prune unknown fields; kubectl's strict field validation refuses them.
    errors = []
    validator = jsonschema.Draft4Validator(_closed(schema))
    for error in validator.iter_errors(obj):
        where = "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        )  # list items as the API server names them: latencyProfile[0].milliseconds
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            where = ".".join(filter(None, [where, *extra]))
        elif error.validator == "required":
            where = ".".join(filter(None, [where, error.message.split("'")[1]]))
        errors.append(where.lstrip("."))
    if not errors:
        errors = [p.lstrip(".") for p in _cel_violations(schema, obj, "")]
    return obj, errors


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused where it does not preserve them."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items() if k != "x-kubernetes-validations"}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
        and schema is not _crd_schema()["properties"]["metadata"]
    ):
        out["additionalProperties"] = False
    return out
