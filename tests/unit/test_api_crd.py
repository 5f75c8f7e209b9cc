"""The generated CRD: committed copy up to date, structural, documented, with every rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from batchop.api import constants as c
from batchop.api.crd import crd_yaml, generate_crd
from batchop.api.models import APIModel
from batchop.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
JUNCTORS = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "const"}


def schema() -> dict[str, Any]:
    return generate_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its dotted path (`[]` for list items, `{}` for map values)."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from nodes(node["additionalProperties"], f"{path}{{}}")


def at(path: str) -> dict[str, Any]:
    node = schema()
    for part in path.strip(".").split("."):
        node = node["properties"][part]
    return node


def test_committed_crd_is_the_generator_output() -> None:
    committed = (ROOT / "crds" / "batchedmodel.yaml").read_text()
    assert committed == crd_yaml(), "crds/ is stale: run `make crd` (batchop crd > crds/...)"


def test_batchop_crd_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == crd_yaml()


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(generate_crd(), "1.34.0", strict=True)


def test_names_scope_and_subresources() -> None:
    crd = generate_crd()
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == "batchedmodels.batchop.io"
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        "BatchedModel",
        "batchedmodels",
        ["bm"],
    )
    assert "batchop" in names["categories"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == c.VERSION and version["served"] and version["storage"]
    scale = version["subresources"]["scale"]
    assert version["subresources"]["status"] == {}
    assert at(scale["specReplicasPath"])["type"] == "integer"
    assert at(scale["statusReplicasPath"])["type"] == "integer"
    assert at(scale["labelSelectorPath"])["type"] == "string"


def test_printer_columns_point_at_fields_of_their_type() -> None:
    columns = generate_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    wanted = ["Ready", "Replicas", "Delay(us)", "P99(ms)", "SLO(ms)", "RPS", "Batch", "Age"]
    assert [col["name"] for col in columns] == wanted
    for col in columns:
        if col["jsonPath"] == ".metadata.creationTimestamp":
            continue
        assert at(col["jsonPath"])["type"] == col["type"], col


def test_schema_is_structural() -> None:
    for path, node in nodes(schema()):
        assert not JUNCTORS & set(node), f"{path}: {sorted(JUNCTORS & set(node))}"
        if not node.get("x-kubernetes-int-or-string"):
            assert node.get("type") in {
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            }, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        assert "uniqueItems" not in node, path  # forbidden in structural schemas


def test_every_field_has_a_description() -> None:
    missing = [
        path
        for path, node in nodes(schema())
        if path
        and not path.endswith(("[]", "{}"))
        and path != ".metadata"
        and not node.get("description")
    ]
    assert missing == []


def test_lists_and_strings_are_bounded_for_cel_cost() -> None:
    for path, node in nodes(schema()):
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path
        if path.startswith(".spec") and node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path


def test_defaults_are_valid_as_written() -> None:
    """The API server checks each default against its node's schema and CEL rules as written,
    without filling in nested defaults (a bare `default: {}` made it refuse the CRD)."""
    from bm_samples import cel_holds

    found = 0
    for path, node in nodes(schema()):
        if "default" in node:
            found += 1
            jsonschema.Draft4Validator(node).validate(node["default"])
            for rule in node.get("x-kubernetes-validations", ()):
                assert cel_holds(rule["rule"], node["default"]), (path, rule["rule"])
            if node.get("type") == "object":
                assert set(node["default"]) == {
                    key for key, sub in node["properties"].items() if "default" in sub
                }, path
    assert found >= 10


def test_every_rule_is_in_the_crd_once() -> None:
    def subclasses(cls: type) -> set[type]:
        return {c for s in cls.__subclasses__() for c in {s, *subclasses(s)}}

    declared = sorted(r.cel for cls in subclasses(APIModel) for r in cls.__rules__)
    emitted = sorted(
        rule["rule"]
        for _, node in nodes(schema())
        for rule in node.get("x-kubernetes-validations", ())
    )
    assert emitted == declared
    assert len(declared) >= 10


def test_rule_field_paths_exist() -> None:
    for path, node in nodes(schema()):
        for rule in node.get("x-kubernetes-validations", ()):
            target = node
            for part in rule["fieldPath"].strip(".").split("."):
                target = target["properties"][part]
            assert rule["message"], (path, rule)
            assert rule["reason"] in {
                "FieldValueInvalid",
                "FieldValueForbidden",
                "FieldValueDuplicate",
            }


def test_embedded_kubernetes_types_preserve_unknown_fields() -> None:
    server = at("spec.server")["properties"]
    assert server["affinity"]["x-kubernetes-preserve-unknown-fields"] is True
    assert server["tolerations"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    assert server["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    limits = server["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True


def test_conditions_are_a_map_keyed_by_type() -> None:
    conditions = at("status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert {"type", "status", "reason", "message", "lastTransitionTime"} <= set(item["required"])
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert "observedGeneration" in item["properties"]
