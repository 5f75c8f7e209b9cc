"""Generate the BatchedModel CustomResourceDefinition from the pydantic models.

The way controller-gen does it for Go types: the models' JSON schema is turned into a
Kubernetes *structural* OpenAPI v3 schema (every `$ref` inlined, `Optional` unions collapsed,
`type` on every node, free-form embedded Kubernetes types marked
`x-kubernetes-preserve-unknown-fields`, int-or-string marked `x-kubernetes-int-or-string`),
keeping descriptions, defaults, bounds and the classes' CEL rules. crds/batchedmodel.yaml is
this module's output, byte for byte (a unit test checks).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from batchop.api import constants as c
from batchop.api.models import BatchedModelSpec, BatchedModelStatus, ObjectMeta

# JSON Schema keywords Kubernetes' JSONSchemaProps accepts and we pass through unchanged.
_KEPT = {
    "type",
    "description",
    "default",
    "enum",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "nullable",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a `$ref`, letting the referring node's siblings (description...) win."""
    if "$ref" not in node:
        return node
    target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    target.update(siblings)
    return target


def _collapse_union(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`X | None` becomes X (absence is how an API field says None); int|str is int-or-string."""
    branches = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if rest.get("default", "unset") is None:
        del rest["default"]
    if len(branches) == 1:
        merged = _resolve(branches[0], defs)
        merged = {**merged, **rest}
        return merged
    types = {b.get("type") for b in branches}
    if types == {"integer", "string"}:
        return {**rest, "x-kubernetes-int-or-string": True}
    raise ValueError(f"unsupported union in API schema: {node}")


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a Kubernetes structural schema node."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        node = _collapse_union(node, defs)
        node = _resolve(node, defs)
    if "const" in node:
        node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
    if "exclusiveMinimum" in node:
        # OpenAPI v3.0 (what Kubernetes speaks) spells it as a boolean next to minimum.
        node = {**node, "minimum": node["exclusiveMinimum"], "exclusiveMinimum": True}
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _KEPT}
    if node.get("exclusiveMinimum") is True:
        out["exclusiveMinimum"] = True
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        out["type"] = "object"
        if "properties" in node:
            out["properties"] = {
                name: structural(sub, defs) for name, sub in node["properties"].items()
            }
        extra = node.get("additionalProperties")
        if extra is True or ("properties" not in node and extra is None):
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, dict):
            out["additionalProperties"] = structural(extra, defs)
    elif kind == "array":
        out["items"] = structural(node["items"], defs)
    elif kind is None and not out.get("x-kubernetes-int-or-string"):
        raise ValueError(f"API schema node without a type: {node}")
    return _ordered(out)


# Key order in the emitted YAML: what a reader looks for first, nested schemas last.
_ORDER = ["type", "description", "format", "enum", "default", "minimum", "exclusiveMinimum"]
_LAST = ["required", "x-kubernetes-validations", "properties", "additionalProperties", "items"]


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    def rank(key: str) -> tuple[int, int, str]:
        if key in _ORDER:
            return (0, _ORDER.index(key), key)
        if key in _LAST:
            return (2, _LAST.index(key), key)
        return (1, 0, key)

    return {key: node[key] for key in sorted(node, key=rank)}


def _schema_of(model: type, description: str | None = None) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    defs = raw.pop("$defs", {})
    node = structural(raw, defs)
    if description:
        node["description"] = description
    return node


def _metadata_schema() -> dict[str, Any]:
    # The API server allows a CRD to constrain only metadata.name (and generateName).
    name = _schema_of(ObjectMeta)["properties"]["name"]
    return {"type": "object", "properties": {"name": name}}


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the v1alpha1 version."""
    return {
        "type": "object",
        "description": "A Triton model served with dynamic batching; batchop tunes its queue "
        "delay and replica count to keep p99 latency within the SLO with the fewest GPUs.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "Versioned schema of this object: batchop.io/v1alpha1.",
            },
            "kind": {"type": "string", "description": "BatchedModel."},
            "metadata": _metadata_schema(),
            "spec": _schema_of(
                BatchedModelSpec, "What to serve, and the bounds batchop tunes within."
            ),
            "status": _schema_of(BatchedModelStatus, "What batchop observed and applied."),
        },
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Ready",
        "type": "integer",
        "jsonPath": ".status.readyReplicas",
        "description": "Pods ready to serve.",
    },
    {
        "name": "Replicas",
        "type": "integer",
        "jsonPath": ".status.replicas",
        "description": "Pods of this model.",
    },
    {
        "name": "Delay(us)",
        "type": "integer",
        "jsonPath": ".status.maxQueueDelayMicroseconds",
        "description": "Queue delay applied on the ready replicas.",
    },
    {
        "name": "P99(ms)",
        "type": "number",
        "jsonPath": ".status.metrics.p99LatencyMilliseconds",
        "description": "Observed server-side p99 latency.",
    },
    {
        "name": "SLO(ms)",
        "type": "number",
        "jsonPath": ".spec.slo.p99LatencyMilliseconds",
        "description": "Target p99 latency.",
    },
    {
        "name": "RPS",
        "type": "number",
        "jsonPath": ".status.metrics.requestsPerSecond",
        "description": "Requests per second.",
    },
    {
        "name": "Batch",
        "type": "number",
        "jsonPath": ".status.metrics.averageBatchSize",
        "description": "Average batch size.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def generate_crd() -> dict[str, Any]:
    """The BatchedModel CustomResourceDefinition (apiextensions.k8s.io/v1) as a dict."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {c.LABEL_NAME: "batchop", c.LABEL_MANAGED_BY: "batchop-crd-generator"},
        },
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": c.LIST_KIND,
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": [c.SHORT_NAME],
                "categories": list(c.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.scaling.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# Generated by `batchop crd` from batchop.api.models. Do not edit by hand.\n"


def crd_yaml() -> str:
    """The CRD as YAML text: exactly what crds/batchedmodel.yaml holds."""
    body = yaml.safe_dump(generate_crd(), sort_keys=False, width=100, allow_unicode=True)
    return HEADER + "---\n" + body
