"""The BatchedModel API as pydantic models: the one source of truth.

The CRD schema (`batchop crd`) is generated from these classes: field descriptions become
`kubectl explain` text, `Field` bounds become OpenAPI bounds, and each class's `__rules__`
become CEL `x-kubernetes-validations`. Python code uses snake_case attributes; the wire format
(and `model_dump(by_alias=True)`) is camelCase exactly as the API documents it.

Free-form Kubernetes types embedded in the spec (affinity, tolerations, env `valueFrom`) are
kept as plain dicts and emitted with `x-kubernetes-preserve-unknown-fields`; the API server
validates them when the Deployment that carries them is applied. Volumes and volume mounts
declare just the keys a rule reads (CEL cannot see undeclared fields) and keep the rest.

The server image is optional here: a missing image means "the operator's default image"
(`RenderOptions.default_image`, set by the operator's flag/env), so one operator setting can
move every BatchedModel that does not pin an image.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from batchop.api.constants import API_VERSION, KIND, SHM_PATH, SHM_VOLUME, TMP_PATH, TMP_VOLUME
from batchop.api.errors import SpecError, Violation
from batchop.api.quantity import NON_NEGATIVE_QUANTITY, amount
from batchop.api.rules import Rule, failed

# Patterns are written to mean the same in Python `re` and in the API server's (Go RE2 /
# ECMA) dialect: no look-arounds, no backreferences.
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NO_SPACE = r"^\S+$"
HTTP_URL = r"^https?://\S+$"
CONDITION_TYPE = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?" + (
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

# What each pattern means, for error messages a person can act on.
PATTERN_MEANINGS = {
    DNS1035_LABEL: "must be a DNS-1035 label: lowercase letters, digits and '-', starting "
    "with a letter and ending with a letter or digit",
    DNS1123_LABEL: "must be a DNS-1123 label: lowercase letters, digits and '-'",
    DNS1123_SUBDOMAIN: "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.'",
    MODEL_NAME: "must start with a letter or digit and hold only letters, digits, '_', '.', '-'",
    NO_SPACE: "must not be empty or contain whitespace",
    HTTP_URL: "must be an http:// or https:// URL",
}

# Triton flags batchop sets itself; a user arg that overrides one would break the live
# reload (explicit model control) or the ports the Service and probes use.
MANAGED_FLAGS = (
    "--model-repository",
    "--model-store",
    "--model-control-mode",
    "--load-model",
    "--http-port",
    "--grpc-port",
    "--metrics-port",
    "--allow-http",
    "--allow-metrics",
)
RESERVED_VOLUMES = (TMP_VOLUME, SHM_VOLUME)  # emptyDirs the renderer adds to every pod
RESERVED_MOUNT_PATHS = (TMP_PATH, SHM_PATH)

GPU_RESOURCE = "nvidia.com/gpu"


def _add_rules(schema: dict[str, Any], cls: type) -> None:
    rules: tuple[Rule, ...] = getattr(cls, "__rules__", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.crd_entry() for rule in rules]


class APIModel(BaseModel):
    """Base: camelCase on the wire, unknown fields refused, rules checked after fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        json_schema_extra=_add_rules,
    )
    __rules__: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> APIModel:
        broken = failed(type(self).__rules__, self)
        if broken:
            raise PydanticCustomError(
                "batchop_rule",
                "{summary}",
                {
                    "summary": "; ".join(f"{r.field}: {r.explain(self)}" for r in broken),
                    "violations": tuple((r.field, r.explain(self)) for r in broken),
                },
            )
        return self


def _default_section(section: type[APIModel]) -> dict[str, Any]:
    """`default:` for an optional section: the section with every field at its default.

    Kubernetes defaults only the fields of objects that exist, so an omitted section needs a
    default of its own; and the API server checks that default against the section's CEL
    rules as written (without filling in nested defaults), so it must be complete.
    """
    return {"default": section().model_dump(by_alias=True, exclude_none=True, mode="json")}


# --- spec ------------------------------------------------------------------------------------

PositiveBatch = Annotated[int, Field(ge=1, le=65536)]


LATENCY_CEILING_MS = 600_000.0  # 10 minutes: beyond any batch a latency SLO could allow


class LatencyPoint(APIModel):
    """One measured point of the model's batch-latency curve."""

    batch_size: PositiveBatch = Field(description="Batch size, within 1..maxBatchSize.")
    milliseconds: float = Field(
        gt=0,
        le=LATENCY_CEILING_MS,
        description="Execution (compute) time of one batch of this size, in milliseconds.",
    )


def _profile_decreases(points: list[LatencyPoint] | None) -> list[str]:
    """`8 -> 16` for each pair where a larger batch is said to run faster than a smaller."""
    ordered = sorted(points or (), key=lambda p: p.batch_size)
    return [
        f"{a.batch_size} -> {b.batch_size}"
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
        if b.batch_size > a.batch_size and b.milliseconds < a.milliseconds
    ]


class ModelSpec(APIModel):
    """The Triton model this BatchedModel serves."""

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=MODEL_NAME,
        description="Triton model name: the model's directory in the repository; loaded with "
        "--load-model and reloaded live with a new dynamic_batching config.",
    )
    repository: str = Field(
        min_length=1,
        max_length=2048,
        pattern=NO_SPACE,
        description="Triton --model-repository URI (s3://, gs://, as://, or a local path "
        "mounted into the pod with server.volumes/volumeMounts).",
    )
    max_batch_size: PositiveBatch = Field(
        description="The model's max_batch_size: the largest batch Triton's dynamic batcher "
        "forms. Must not exceed what the model supports.",
    )
    preferred_batch_sizes: list[PositiveBatch] | None = Field(
        default=None,
        max_length=32,
        description="Triton dynamic_batching.preferred_batch_size: batch sizes the batcher "
        "dispatches as soon as it has them. Each in 1..maxBatchSize, no duplicates.",
    )

    latency_profile: list[LatencyPoint] | None = Field(
        default=None,
        max_length=32,
        description="Optional prior for the batch-latency curve: measured (batchSize, "
        "milliseconds) points, interpolated piecewise-linearly. Must include batch size 1; "
        "batch sizes unique and within 1..maxBatchSize; time never falls as the batch "
        "grows. The tuner starts from it and refines it from Triton's metrics; the "
        "default queue timeout (spec.overload) is the SLO minus a full batch's time by it.",
    )

    __rules__ = (
        Rule(
            cel="!has(self.preferredBatchSizes) || "
            "self.preferredBatchSizes.all(s, s <= self.maxBatchSize)",
            message="every preferred batch size must be <= maxBatchSize",
            field="preferredBatchSizes",
            check=lambda m: all(s <= m.max_batch_size for s in m.preferred_batch_sizes or ()),
        ),
        Rule(
            cel="!has(self.preferredBatchSizes) || self.preferredBatchSizes.all(s, "
            "self.preferredBatchSizes.exists_one(t, t == s))",
            message="preferred batch sizes must be unique",
            field="preferredBatchSizes",
            check=lambda m: (
                len(set(m.preferred_batch_sizes or ())) == len(m.preferred_batch_sizes or ())
            ),
            reason="FieldValueDuplicate",
        ),
        Rule(
            cel="!has(self.latencyProfile) || "
            "self.latencyProfile.all(p, p.batchSize <= self.maxBatchSize)",
            message="every latencyProfile batchSize must be <= maxBatchSize",
            field="latencyProfile",
            check=lambda m: all(p.batch_size <= m.max_batch_size for p in m.latency_profile or ()),
        ),
        Rule(
            cel="!has(self.latencyProfile) || self.latencyProfile.all(p, "
            "self.latencyProfile.exists_one(q, q.batchSize == p.batchSize))",
            message="latencyProfile batch sizes must be unique",
            field="latencyProfile",
            check=lambda m: (
                len({p.batch_size for p in m.latency_profile or ()}) == len(m.latency_profile or ())
            ),
            reason="FieldValueDuplicate",
        ),
        Rule(
            cel="!has(self.latencyProfile) || size(self.latencyProfile) == 0 || "
            "self.latencyProfile.exists(p, p.batchSize == 1)",
            message="latencyProfile must include batch size 1 (the cost of one call)",
            field="latencyProfile",
            check=lambda m: (
                not m.latency_profile or any(p.batch_size == 1 for p in m.latency_profile)
            ),
        ),
        Rule(
            cel="!has(self.latencyProfile) || self.latencyProfile.all(p, "
            "self.latencyProfile.all(q, q.batchSize <= p.batchSize || "
            "double(q.milliseconds) >= double(p.milliseconds)))",
            message="latencyProfile milliseconds must not decrease as batchSize grows",
            field="latencyProfile",
            check=lambda m: not _profile_decreases(m.latency_profile),
            detail=lambda m: "falls at " + ", ".join(_profile_decreases(m.latency_profile)),
        ),
    )

    def profile_points(self) -> tuple[tuple[int, float], ...]:
        """The latency profile as sorted (batch size, ms) pairs; () when none is given."""
        points = self.latency_profile or ()
        return tuple(sorted((p.batch_size, float(p.milliseconds)) for p in points))


_QUANTITY_RE = re.compile(NON_NEGATIVE_QUANTITY)


def _quantity(value: Any) -> int | str:
    """A non-negative int or quantity string (as the pods need), with one clear message if not."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and len(value) <= 64 and _QUANTITY_RE.match(value):
        try:
            amount(value)  # so that rules can compare it
        except ValueError as exc:
            raise PydanticCustomError("quantity", "{reason}", {"reason": str(exc)}) from None
        return value
    raise PydanticCustomError(
        "quantity", "must be a non-negative integer or quantity string such as 500m, 4Gi or 1.5"
    )


Quantity = Annotated[
    int | str,
    PlainValidator(_quantity),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "pattern": NON_NEGATIVE_QUANTITY,
            "maxLength": 64,
            "minimum": 0,  # applies to the int form; the pattern refuses a negative string
        }
    ),
]


STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")  # and hugepages-<size>
HUGEPAGES_PREFIX = "hugepages-"
# Resource names per requests/limits map. A container's are cpu, memory, ephemeral-storage,
# at most the two huge page sizes nodes offer (2Mi, 1Gi) and an extended resource or two
# (GPUs go in server.gpus): 7 holds all of those. It is also the most the two comparison
# rules afford on Kubernetes 1.30-1.33: each entry costs them ~1.26M of the 10M per-rule
# CEL budget there (see _cel_compare); 8 entries exceed it.
MAX_RESOURCE_NAMES = 7


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _cel_compare(key: str, op: str) -> str:
    """CEL: requests[key] `op` limits[key] by amount.

    Costed for Kubernetes before 1.34, whose CEL cost estimator sizes every
    int-or-string value at the 3 MB request limit (it ignores the field's maxLength): each
    string() or quantity() of one then costs ~315k of a rule's 10M budget. One comparison is
    four of those, so there is no room for isQuantity() guards; a value the field pattern
    refuses therefore also gets a CEL evaluation error next to the pattern's message.
    """
    request, limit = f"string(self.requests[{key}])", f"string(self.limits[{key}])"
    return f"quantity({request}).compareTo(quantity({limit})) {op} 0"


def _known_name(name: str) -> bool:
    return name in STANDARD_RESOURCES or name.startswith(HUGEPAGES_PREFIX) or "/" in name


def _exact(name: str) -> bool:
    """Whether pods must request exactly the limit: huge pages and extended resources."""
    extended = "/" in name and "kubernetes.io/" not in name
    return extended or name.startswith(HUGEPAGES_PREFIX)


def _unknown_names(quantities: dict[str, Any] | None) -> list[str]:
    return [name for name in quantities or {} if not _known_name(name)]


def _names_rule(part: str) -> Rule:
    return Rule(
        cel=f"!has(self.{part}) || self.{part}.all(r, r in {_cel_list(STANDARD_RESOURCES)}"
        f" || r.startsWith('{HUGEPAGES_PREFIX}') || r.contains('/'))",
        message="resource names must be " + ", ".join(STANDARD_RESOURCES) + ", "
        f"{HUGEPAGES_PREFIX}<size> or domain-qualified (example.com/name)",
        field=part,
        check=lambda r: not _unknown_names(getattr(r, part)),
        detail=lambda r: "not " + ", ".join(_unknown_names(getattr(r, part))),
    )


class ResourceRequirements(APIModel):
    """Compute resources of the tritonserver container (as in a Pod's container.resources).

    The rules are those a pod's own validation applies, so that a BatchedModel the API
    accepts never renders to a Deployment the API refuses.
    """

    limits: dict[str, Quantity] | None = Field(
        default=None,
        max_length=MAX_RESOURCE_NAMES,
        description="Resource limits, e.g. cpu, memory. Set GPUs with server.gpus instead.",
    )
    requests: dict[str, Quantity] | None = Field(
        default=None,
        max_length=MAX_RESOURCE_NAMES,
        description="Resource requests, e.g. cpu, memory. Set GPUs with server.gpus instead. "
        "Each at most its limit, if it has one; equal to it for huge pages and extended "
        "resources (example.com/name), which need a limit.",
    )

    __rules__ = (
        Rule(
            cel="!has(self.requests) || !has(self.limits) || self.requests.all(r, "
            f"!(r in self.limits) || {_cel_compare('r', '<=')})",
            message="each request must be <= its limit",
            field="requests",
            check=lambda r: not _requests_over_limits(r),
            detail=lambda r: ", ".join(_requests_over_limits(r)),
        ),
        Rule(
            cel="!has(self.requests) || self.requests.all(r, "
            f"!((r.contains('/') && !r.contains('kubernetes.io/')) || "
            f"r.startsWith('{HUGEPAGES_PREFIX}')) || "
            f"(has(self.limits) && r in self.limits && ({_cel_compare('r', '==')})))",
            message="a request for huge pages or an extended resource (example.com/name) "
            "needs a limit, and must equal it",
            field="requests",
            check=lambda r: not _requests_unlike_limits(r),
            detail=lambda r: ", ".join(_requests_unlike_limits(r)),
        ),
        _names_rule("limits"),
        _names_rule("requests"),
    )


def _requests_over_limits(resources: ResourceRequirements) -> list[str]:
    """`requests.cpu 1 > limits.cpu 100m` for each resource requested above its limit.

    Compared by amount, as the API server compares them when it validates the pods.
    """
    limits = resources.limits or {}
    return [
        f"requests.{name} {request} > limits.{name} {limits[name]}"
        for name, request in (resources.requests or {}).items()
        if name in limits and amount(request) > amount(limits[name])
    ]


def _requests_unlike_limits(resources: ResourceRequirements) -> list[str]:
    """What is wrong with each request that must equal its limit but does not."""
    limits = resources.limits or {}
    found = []
    for name, request in (resources.requests or {}).items():
        if not _exact(name):
            continue
        if name not in limits:
            found.append(f"requests.{name} {request} has no limit")
        elif amount(request) != amount(limits[name]):
            found.append(f"requests.{name} {request} != limits.{name} {limits[name]}")
    return found


class EnvVar(APIModel):
    """An environment variable of the tritonserver container (as in a Pod's container.env)."""

    name: str = Field(min_length=1, max_length=256, description="Variable name.")
    value: str | None = Field(default=None, max_length=32768, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="Source of the value (secretKeyRef, configMapKeyRef, fieldRef, ...), "
        "as in a Pod's env[].valueFrom.",
    )


class LocalObjectReference(APIModel):
    """A reference to an object in the same namespace, by name."""

    name: str = Field(
        min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN, description="Object name."
    )


class Volume(APIModel):
    """A pod volume (as in a Pod's spec.volumes): a name plus one volume source."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS1123_LABEL,
        description="Volume name, referred to by volumeMounts.",
    )


class VolumeMount(APIModel):
    """A volume mount of the tritonserver container (as in a container's volumeMounts)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=63, description="Name of the volume to mount.")
    mount_path: str = Field(
        min_length=1, max_length=4096, description="Where the volume appears in the container."
    )


def _uses_gpu_resource(resources: ResourceRequirements | None) -> bool:
    if resources is None:
        return False
    return any(GPU_RESOURCE in (part or {}) for part in (resources.limits, resources.requests))


def _is_managed_flag(arg: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for flag in MANAGED_FLAGS)


_MANAGED_FLAGS_CEL = _cel_list(MANAGED_FLAGS)


class ServerSpec(APIModel):
    """The Triton server pods: image, GPUs and the pod settings a user expects to control."""

    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=NO_SPACE,
        description="tritonserver container image. Defaults to the operator's default image "
        "(nvcr.io/nvidia/tritonserver:24.10-py3, Triton 2.51, unless the operator is "
        "configured otherwise).",
    )
    gpus: int = Field(
        default=1,
        ge=0,
        le=64,
        description="nvidia.com/gpu per replica (container limit); 0 runs on CPU.",
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="CPU/memory requests and limits of the tritonserver container."
    )
    env: list[EnvVar] | None = Field(
        default=None, max_length=128, description="Extra environment of the tritonserver container."
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        max_length=64,
        description="Extra tritonserver arguments, appended after the ones batchop sets "
        "(model repository, explicit model control, ports), which they must not repeat.",
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        default=None, max_length=64, description="Node labels the pods must match."
    )
    tolerations: list[dict[str, Any]] | None = Field(
        default=None, max_length=64, description="Pod tolerations, as in a Pod's spec."
    )
    affinity: dict[str, Any] | None = Field(
        default=None, description="Pod affinity/anti-affinity, as in a Pod's spec."
    )
    volumes: list[Volume] | None = Field(
        default=None,
        max_length=64,
        description="Extra pod volumes, as in a Pod's spec (the names "
        + " and ".join(RESERVED_VOLUMES)
        + " are reserved).",
    )
    volume_mounts: list[VolumeMount] | None = Field(
        default=None,
        max_length=64,
        description="Extra volume mounts of the tritonserver container (batchop mounts "
        + " and ".join(RESERVED_MOUNT_PATHS)
        + " itself).",
    )
    service_account_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Service account of the pods (e.g. for access to the model repository).",
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, max_length=16, description="Secrets for pulling the server image."
    )

    __rules__ = (
        Rule(
            cel=f"!has(self.resources) || ((!has(self.resources.limits) || "
            f"!('{GPU_RESOURCE}' in self.resources.limits)) && (!has(self.resources.requests)"
            f" || !('{GPU_RESOURCE}' in self.resources.requests)))",
            message=f"set {GPU_RESOURCE} with server.gpus, not in resources",
            field="resources",
            check=lambda s: not _uses_gpu_resource(s.resources),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel=f"!has(self.args) || self.args.all(a, !(a in {_MANAGED_FLAGS_CEL}) && "
            f"!{_MANAGED_FLAGS_CEL}.exists(f, a.startsWith(f + '=')))",
            message="args must not set flags batchop manages: " + ", ".join(MANAGED_FLAGS),
            field="args",
            check=lambda s: not any(_is_managed_flag(a) for a in s.args or ()),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!has(self.volumes) || "
            f"self.volumes.all(v, !(v.name in {_cel_list(RESERVED_VOLUMES)}))",
            message="volume names " + ", ".join(RESERVED_VOLUMES) + " are reserved by batchop",
            field="volumes",
            check=lambda s: all(v.name not in RESERVED_VOLUMES for v in s.volumes or ()),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="!has(self.volumeMounts) || "
            f"self.volumeMounts.all(m, !(m.mountPath in {_cel_list(RESERVED_MOUNT_PATHS)}))",
            message="mount paths " + ", ".join(RESERVED_MOUNT_PATHS) + " are batchop's",
            field="volumeMounts",
            check=lambda s: all(
                m.mount_path not in RESERVED_MOUNT_PATHS for m in s.volume_mounts or ()
            ),
            reason="FieldValueForbidden",
        ),
    )


class ScalingSpec(APIModel):
    """Replica count and the bounds the tuner keeps it within."""

    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Replicas to start with (and to keep, when autotune.replicas is false). "
        "The scale subresource's spec path, so HPA/KEDA can drive it.",
    )
    min_replicas: int = Field(
        default=1, ge=0, le=1000, description="Fewest replicas the tuner may run."
    )
    max_replicas: int = Field(
        default=8, ge=1, le=1000, description="Most replicas the tuner may run."
    )

    __rules__ = (
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="minReplicas must be <= maxReplicas",
            field="minReplicas",
            check=lambda s: s.min_replicas <= s.max_replicas,
        ),
        Rule(
            cel="self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
            message="replicas must be within minReplicas..maxReplicas",
            field="replicas",
            check=lambda s: s.min_replicas <= s.replicas <= s.max_replicas,
        ),
    )


DELAY_CEILING_US = 10_000_000  # 10 s: beyond any sensible latency SLO


class BatchingSpec(APIModel):
    """Triton dynamic batching: the queue delay and the bounds the tuner keeps it within."""

    max_queue_delay_microseconds: int = Field(
        default=500,
        ge=0,
        le=DELAY_CEILING_US,
        description="Triton dynamic_batching.max_queue_delay_microseconds to start with (and "
        "to keep, when autotune.queueDelay is false). Changed live, without restarting pods.",
    )
    min_queue_delay_microseconds: int = Field(
        default=0,
        ge=0,
        le=DELAY_CEILING_US,
        description="Smallest queue delay the tuner may set.",
    )
    max_queue_delay_limit_microseconds: int = Field(
        default=20_000,
        ge=0,
        le=DELAY_CEILING_US,
        description="Largest queue delay the tuner may set.",
    )

    __rules__ = (
        Rule(
            cel="self.minQueueDelayMicroseconds <= self.maxQueueDelayMicroseconds",
            message="minQueueDelayMicroseconds must be <= maxQueueDelayMicroseconds",
            field="minQueueDelayMicroseconds",
            check=lambda b: b.min_queue_delay_microseconds <= b.max_queue_delay_microseconds,
        ),
        Rule(
            cel="self.maxQueueDelayMicroseconds <= self.maxQueueDelayLimitMicroseconds",
            message="maxQueueDelayMicroseconds must be <= maxQueueDelayLimitMicroseconds",
            field="maxQueueDelayMicroseconds",
            check=lambda b: b.max_queue_delay_microseconds <= b.max_queue_delay_limit_microseconds,
        ),
    )


class SLOSpec(APIModel):
    """The latency objective the tuner holds."""

    p99_latency_milliseconds: float = Field(
        default=50.0,
        gt=0,
        le=600_000,
        description="Target server-side p99 latency (queue + compute) in milliseconds.",
    )


class OverloadSpec(APIModel):
    """Triton's queue policy: what happens to requests a burst beyond capacity leaves waiting."""

    policy: Literal["Reject", "Queue"] = Field(
        default="Reject",
        description="Reject: Triton refuses (HTTP 503 / gRPC UNAVAILABLE) a request that "
        "waited past the queue timeout (when the batcher next forms a batch) and, at once, "
        "one that arrives to a full queue, so served requests keep their latency and "
        "recovery is immediate. Queue: every request waits its turn (Triton's default), "
        "however long the backlog.",
    )
    max_queue_size: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Most requests waiting per replica with policy Reject; one more is "
        "refused on arrival. 0: unbounded (the timeout alone guards).",
    )
    queue_timeout_microseconds: int | None = Field(
        default=None,
        ge=0,
        le=DELAY_CEILING_US,
        description="Longest a request may wait in the queue with policy Reject (compute "
        "comes after). Absent or 0: derived from the SLO, as the SLO minus a full batch's "
        "time by model.latencyProfile, else half the SLO, and at least "
        "batching.maxQueueDelayLimitMicroseconds + 1 ms. If set: above "
        "maxQueueDelayLimitMicroseconds and below the SLO.",
    )

    __rules__ = (
        Rule(
            cel="self.policy == 'Reject' || (self.maxQueueSize == 0 && "
            "(!has(self.queueTimeoutMicroseconds) || self.queueTimeoutMicroseconds == 0))",
            message="maxQueueSize and queueTimeoutMicroseconds apply only with policy Reject "
            "(Queue never refuses a request)",
            field="policy",
            check=lambda o: (
                o.policy == "Reject" or (o.max_queue_size == 0 and not o.queue_timeout_microseconds)
            ),
        ),
    )


class AutotuneSpec(APIModel):
    """Which knobs batchop tunes, how often, and where it reads metrics."""

    queue_delay: bool = Field(
        default=True, description="Tune the queue delay within the batching bounds."
    )
    replicas: bool = Field(
        default=True,
        description="Tune replicas within the scaling bounds (false: leave them to spec, or "
        "to HPA/KEDA through the scale subresource).",
    )
    interval_seconds: int = Field(
        default=15,
        ge=5,
        le=3600,
        description="Seconds between tuning decisions. The default is Prometheus's scrape "
        "interval for the pods (what the PodMonitor asks): a decision sees each scrape once.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="Replicas fall only to the highest count recommended over this many "
        "seconds (as the HPA's scale-down stabilization window). Short by default: the "
        "sizing (coverage), not this window, holds replicas between bursts.",
    )
    coverage: float = Field(
        default=0.95,
        ge=0.5,
        le=0.999,
        description="The share of pod-start horizons whose busiest load the replicas are "
        "sized for, learned from this model's own traffic: higher holds more GPUs for "
        "rarer rises (0.99: all but 1 in 100 rises within a pod start are met by replicas "
        "already there), lower gives them back sooner. The one knob between GPUs and "
        "attainment (docs/policy.md).",
    )
    burst_memory_seconds: int = Field(
        default=600,
        ge=0,
        le=3600,
        description="Deprecated and ignored: the sizing learned at `coverage` replaced the "
        "remembered peak. Accepted so that manifests that set it still apply.",
    )
    forecast: bool = Field(
        default=False,
        description="Floor replicas by a linear trend of the last 10 minutes' rate, ahead "
        "by the replicas' startup time (off: on bursty traffic a trend mostly adds GPUs).",
    )
    prometheus_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=HTTP_URL,
        description="Prometheus to read Triton's metrics from. Defaults to the operator's setting.",
    )


class BatchedModelSpec(APIModel):
    """A Triton model served with dynamic batching, tuned against a p99 latency SLO."""

    model: ModelSpec = Field(description="The Triton model to serve.")
    server: ServerSpec = Field(
        default_factory=ServerSpec,
        json_schema_extra=_default_section(ServerSpec),
        description="The Triton server pods.",
    )
    scaling: ScalingSpec = Field(
        default_factory=ScalingSpec,
        json_schema_extra=_default_section(ScalingSpec),
        description="Replica count and its bounds.",
    )
    batching: BatchingSpec = Field(
        default_factory=BatchingSpec,
        json_schema_extra=_default_section(BatchingSpec),
        description="Dynamic batching queue delay and its bounds.",
    )
    slo: SLOSpec = Field(
        default_factory=SLOSpec,
        json_schema_extra=_default_section(SLOSpec),
        description="The latency objective.",
    )
    autotune: AutotuneSpec = Field(
        default_factory=AutotuneSpec,
        json_schema_extra=_default_section(AutotuneSpec),
        description="What batchop tunes, and how often.",
    )
    overload: OverloadSpec = Field(
        default_factory=OverloadSpec,
        json_schema_extra=_default_section(OverloadSpec),
        description="What Triton does with requests beyond capacity: refuse them fast "
        "(Reject, the default) or queue them (Queue).",
    )

    __rules__ = (
        Rule(
            cel="!self.autotune.replicas || self.scaling.minReplicas >= 1",
            message="minReplicas must be >= 1 when autotune.replicas is on (a model with no "
            "replica has no metrics to scale up on)",
            field="scaling.minReplicas",
            check=lambda s: not s.autotune.replicas or s.scaling.min_replicas >= 1,
        ),
        Rule(
            cel="double(self.batching.maxQueueDelayMicroseconds) < "
            "double(self.slo.p99LatencyMilliseconds) * 1000.0",
            message="the starting queue delay alone exceeds the p99 latency SLO",
            field="batching.maxQueueDelayMicroseconds",
            check=lambda s: (
                s.batching.max_queue_delay_microseconds < s.slo.p99_latency_milliseconds * 1000.0
            ),
        ),
        Rule(
            cel="!has(self.overload.queueTimeoutMicroseconds) || "
            "self.overload.queueTimeoutMicroseconds == 0 || "
            "self.overload.queueTimeoutMicroseconds > self.batching.maxQueueDelayLimitMicroseconds",
            message="the queue timeout must exceed batching.maxQueueDelayLimitMicroseconds (a "
            "request that waited out the delay would be refused)",
            field="overload.queueTimeoutMicroseconds",
            check=lambda s: (
                not s.overload.queue_timeout_microseconds
                or s.overload.queue_timeout_microseconds
                > s.batching.max_queue_delay_limit_microseconds
            ),
        ),
        Rule(
            cel="!has(self.overload.queueTimeoutMicroseconds) || "
            "double(self.overload.queueTimeoutMicroseconds) < "
            "double(self.slo.p99LatencyMilliseconds) * 1000.0",
            message="the queue timeout must be below the p99 latency SLO (it bounds queue time; "
            "compute comes after)",
            field="overload.queueTimeoutMicroseconds",
            check=lambda s: (
                (s.overload.queue_timeout_microseconds or 0)
                < s.slo.p99_latency_milliseconds * 1000.0
            ),
        ),
    )


# --- status ----------------------------------------------------------------------------------


class StatusModel(APIModel):
    """Base for status: tolerant of fields a newer operator may have written."""

    model_config = ConfigDict(extra="ignore")


class Metrics(StatusModel):
    """What Prometheus showed at the last tuning tick."""

    requests_per_second: float | None = Field(
        default=None, description="Successful inference requests per second, all replicas."
    )
    p99_latency_milliseconds: float | None = Field(
        default=None, description="Server-side p99 latency (queue + compute), worst replica."
    )
    average_batch_size: float | None = Field(
        default=None, description="Inferences per model execution (Triton's batch size)."
    )
    queue_milliseconds: float | None = Field(
        default=None, description="Mean time a request waited in Triton's queue."
    )
    rejected_per_second: float | None = Field(
        default=None,
        description="Requests Triton refused per second (queue timeout or full queue, "
        "spec.overload), all replicas.",
    )
    peak_requests_per_second: float | None = Field(
        default=None,
        description="The busiest scrape interval's arrivals (served + refused) per second "
        "since the last tick: the burst the rate window averages away.",
    )


class LastDecision(StatusModel):
    """The tuner's most recent change, and why it made it."""

    time: datetime | None = Field(default=None, description="When the decision was made.")
    replicas: int | None = Field(default=None, description="Replicas decided.")
    max_queue_delay_microseconds: int | None = Field(
        default=None, description="Queue delay decided."
    )
    kind: str | None = Field(
        default=None,
        max_length=32,
        description="What kind of change: scale-up, scale-down, delay-up, delay-down, bounds...",
    )
    predicted_p99_milliseconds: float | None = Field(
        default=None, ge=0, description="The p99 the tuner's model predicted for the decision."
    )
    reason: str | None = Field(
        default=None, max_length=4096, description="Why, in words, with the figures used."
    )


class Learned(StatusModel):
    """What the tuner has learned of this model, kept so an operator restart resumes it
    (batchop.tuning.persist). Written with the status writes that happen anyway."""

    curve: list[Annotated[list[float], Field(max_length=3)]] | None = Field(
        default=None,
        max_length=64,
        description="The learned batch-latency curve: [batch, compute ms, weight] buckets.",
    )
    p99_correction: float | None = Field(
        default=None, description="Observed / predicted p99 at the running configuration."
    )
    startup_seconds: float | None = Field(
        default=None, description="How long a new replica took to become ready."
    )
    growth: list[Annotated[list[float], Field(max_length=5)]] | None = Field(
        default=None,
        max_length=4000,
        description="The sizing's labels: [tick time (epoch s), load req/s, trend (log of "
        "the load over the load one horizon before), growth over one horizon, over two], "
        "the last hour of ticks.",
    )


class Condition(StatusModel):
    """A metav1.Condition: one aspect of the BatchedModel's state."""

    type: str = Field(
        max_length=316,
        pattern=CONDITION_TYPE,
        description="Ready, Progressing, Degraded, SLOMet, CapacityLimited or MetricsAvailable.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation this condition was set for."
    )
    last_transition_time: datetime = Field(description="When the status last changed.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON,
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field(max_length=32768, description="Human-readable details.")


class Handled(StatusModel):
    """The operator's own bookkeeping (kopf's persistence), kept in status so that it rides
    on the status write that happens anyway: one API call per model on create, not two."""

    configuration: str | None = Field(
        default=None,
        max_length=262144,
        description="The spec, labels and annotations last reconciled (JSON): what the next "
        "change is compared with, so an operator restart tells a change from a resume.",
    )
    progress: dict[str, Any] | None = Field(
        default=None,
        description="Handlers being retried after a failure: attempts, delay, last message.",
    )
    touch: str | None = Field(
        default=None, max_length=64, description="Written to wake the operator for a retry."
    )


class BatchedModelStatus(StatusModel):
    """What batchop observed and applied."""

    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation last reconciled."
    )
    replicas: int | None = Field(default=None, description="Pods of this model (all states).")
    ready_replicas: int | None = Field(default=None, description="Pods ready to serve.")
    selector: str | None = Field(
        default=None, description="Label selector of the pods (for the scale subresource)."
    )
    max_queue_delay_microseconds: int | None = Field(
        default=None, description="Queue delay applied on every ready replica."
    )
    reload_protocol: Literal["grpc", "http"] | None = Field(
        default=None,
        description="How the last live delay change reached Triton: grpc, or http (the "
        "fallback when gRPC is unreachable; it stalls requests on one HTTP worker while the "
        "model reloads).",
    )
    metrics: Metrics | None = Field(default=None, description="Latest observed metrics.")
    last_decision: LastDecision | None = Field(
        default=None, description="The tuner's latest change."
    )
    learned: Learned | None = Field(
        default=None, description="What the tuner has learned (survives a restart)."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        description="Ready, Progressing, Degraded, SLOMet, CapacityLimited, MetricsAvailable.",
    )
    handled: Handled | None = Field(
        default=None, description="The operator's bookkeeping: what it last reconciled."
    )


# --- the object ------------------------------------------------------------------------------


class ObjectMeta(BaseModel):
    """The parts of metadata batchop reads. Only `name` is constrained (in the CRD too)."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="allow"
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS1035_LABEL,
        description="Also the name of the Deployment, Service, PodDisruptionBudget and "
        "PodMonitor, and a label value: a DNS-1035 label of at most 63 characters.",
    )
    namespace: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=DNS1123_LABEL,
        description="The namespace, as Kubernetes requires it: a DNS-1123 label.",
    )
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class BatchedModel(BaseModel):
    """A BatchedModel object (apiVersion batchop.io/v1alpha1)."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    api_version: Literal["batchop.io/v1alpha1"] = API_VERSION
    kind: Literal["BatchedModel"] = KIND
    metadata: ObjectMeta
    spec: BatchedModelSpec
    status: BatchedModelStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace


def _location(error: dict[str, Any]) -> str:
    """`spec.model.latencyProfile[0].milliseconds`: list items as the API server names them."""
    path = ""
    for part in error["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def violations(exc: ValidationError) -> list[Violation]:
    """Flatten pydantic errors into (field path, rule) pairs using the camelCase names."""
    found: list[Violation] = []
    for error in exc.errors(include_url=False):
        base = _location(error)
        if error["type"] == "batchop_rule":
            for field, message in error["ctx"]["violations"]:
                path = f"{base}.{field}" if base else field
                found.append(Violation(path, message))
        else:
            message = error["msg"]
            if error["type"] == "extra_forbidden":
                message = "unknown field"
            elif error["type"] == "string_pattern_mismatch":
                pattern = error.get("ctx", {}).get("pattern", "")
                message = PATTERN_MEANINGS.get(pattern, message)
            found.append(Violation(base, message))
    return found


def parse_batched_model(manifest: dict[str, Any]) -> BatchedModel:
    """Validate a BatchedModel manifest (camelCase keys, as applied) against the API's rules.

    Raises `SpecError` naming each offending field path (e.g. `spec.scaling.minReplicas`)
    and the rule it breaks: the same rules the CRD makes the API server enforce.
    """
    if not isinstance(manifest, dict):
        raise SpecError([Violation("", f"a BatchedModel must be a mapping, got {manifest!r}")])
    meta = manifest.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    try:
        return BatchedModel.model_validate(manifest, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise SpecError(violations(exc), name=name if isinstance(name, str) else None) from None
