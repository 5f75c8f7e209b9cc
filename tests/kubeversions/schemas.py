"""JSON schemas for kubeconform: per-minor Kubernetes kinds and the monitoring CRD kinds.

kubernetes-validate bundles each minor's strict schemas, but with `$ref`s to a virtual
"/api/_definitions.json" that only its own resolver understands; kubeconform needs each
kind's file self-contained, so the definitions are inlined under `$defs`. The monitoring
kinds get strict schemas converted from the Prometheus Operator's CRDs the way kubeconform's
openapi2jsonschema does (unknown fields refused unless x-kubernetes-preserve-unknown-fields).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

BUNDLED = Path(kubernetes_validate.__file__).resolve().parent / "kubernetes-json-schema"
_VIRTUAL_REF = '"/api/_definitions.json#'


def bundled_minors() -> list[int]:
    """Minors kubernetes-validate has strict schemas for."""
    return sorted(int(p.name.split(".")[1]) for p in BUNDLED.glob("v1.*.0-local-strict"))


def schema_file_name(api_version: str, kind: str) -> str:
    """The file kubeconform looks for: `{kind}{-group-first-label}-{version}.json`."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def write_kubernetes_schemas(minor: int, kinds: set[tuple[str, str]], out: Path) -> None:
    """Self-contained strict schemas of `kinds` ((apiVersion, kind)) for Kubernetes 1.minor."""
    source = BUNDLED / f"v1.{minor}.0-local-strict"
    defs = json.loads((source / "_definitions.json").read_text().replace(_VIRTUAL_REF, '"#'))
    out.mkdir(parents=True, exist_ok=True)
    for api_version, kind in kinds:
        name = schema_file_name(api_version, kind)
        path = source / name
        if not path.is_file():  # e.g. a kind this minor does not serve: kubeconform says so
            continue
        schema = json.loads(path.read_text().replace(_VIRTUAL_REF, '"#'))
        schema["$defs"] = defs["$defs"]
        (out / name).write_text(json.dumps(schema))


def strict_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural OpenAPI v3 schema as a JSON schema that refuses unknown fields."""
    out = {
        k: v
        for k, v in node.items()
        if not k.startswith("x-kubernetes-")
        and k not in ("nullable", "properties", "items", "additionalProperties")
    }
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in node:
        out["properties"] = {k: strict_schema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = strict_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = strict_schema(node["items"])
    return out


def write_crd_schemas(crd_files: list[Path], out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """kubeconform files for every served version of the CRDs; returns them by (apiVersion,
    kind)."""
    out.mkdir(parents=True, exist_ok=True)
    written: dict[tuple[str, str], dict[str, Any]] = {}
    for path in crd_files:
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            api_version = f"{group}/{version['name']}"
            schema = strict_schema(version["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}
            (out / schema_file_name(api_version, kind)).write_text(json.dumps(schema))
            written[(api_version, kind)] = schema
    return written
