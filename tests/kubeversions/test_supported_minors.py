"""Every Kubernetes minor the chart claims accepts what batchop installs and renders.

Per minor in the range (charts/batchop/Chart.yaml kubeVersion up to the newest pinned):
- the BatchedModel CRD passes that minor's own CRD create validation (kubecheck: strict
  decoding, structural schema, CEL compilation and cost estimation);
- every object `batchop render` makes of the examples and `helm template` makes of the chart
  passes that minor's strict schemas, twice: kubernetes-validate and kubeconform -strict
  (monitoring kinds against the Prometheus Operator's own CRDs).
Negative controls show each check refuses what it must: the CRD as it was (8.1x over the CEL
budget on 1.30), a field the oldest minor does not know, and the minor below the range.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import checkers
import jsonschema
import kubernetes_validate
import pytest
import schemas
import yaml
from supported import CHART, ROOT, chart_floor, supported_minors

CRD = ROOT / "crds" / "batchedmodel.yaml"
MONITORING_GROUP = "monitoring.coreos.com/"


def kubecheck(minor: int, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checkers.checker_path(minor)), str(path)], capture_output=True, text=True, timeout=120
    )


def kubeconform(minor: int, schema_root: Path, path: Path) -> subprocess.CompletedProcess[str]:
    location = (
        f"{schema_root}/{{{{ .NormalizedKubernetesVersion }}}}-standalone"
        "{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    )
    return subprocess.run(
        [
            str(checkers.kubeconform_path()),
            "-strict",
            "-summary",
            "-output",
            "text",
            "-kubernetes-version",
            f"1.{minor}.0",
            "-schema-location",
            location,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _crd_doc() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(CRD.read_text()) if d]
    return doc


# --- the range itself -----------------------------------------------------------------------


def test_the_range_is_pinned_without_gaps_and_stated_where_users_read() -> None:
    floor = chart_floor()
    minors = supported_minors()
    assert minors[0] == floor and len(minors) >= 2
    assert set(minors) <= set(checkers.APIEXTENSIONS), "a minor in the range has no checker"
    assert set(minors) <= set(schemas.bundled_minors()), "kubernetes-validate lacks a minor"
    readme = (ROOT / "README.md").read_text()
    assert f"Kubernetes 1.{floor} or newer" in readme, "README must state the floor"
    helm_doc = (ROOT / "docs" / "helm.md").read_text()
    assert f"1.{floor}" in helm_doc


# --- the CRD through each minor's API server code ---------------------------------------------


@pytest.mark.parametrize("minor", supported_minors())
def test_crd_passes_the_api_servers_create_validation(built: None, minor: int) -> None:
    got = kubecheck(minor, CRD)
    assert got.returncode == 0, f"Kubernetes 1.{minor} refuses the CRD:\n{got.stdout}{got.stderr}"
    assert got.stdout.strip() == "ok batchedmodels.batchop.io"


def test_the_minor_below_the_range_refuses_the_crd(built: None) -> None:
    """1.28's CRD validation has no CEL quantity library: the floor is where it is for that."""
    below = chart_floor() - 1
    assert below in checkers.APIEXTENSIONS, "keep a checker for the minor below the floor"
    got = kubecheck(below, CRD)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "undeclared reference to 'quantity'" in got.stdout


def test_checker_estimates_cel_cost_the_resource_bound_is_what_fits(
    built: None, tmp_path: Path
) -> None:
    """Negative control, and why the bound is 7: one more resource name per map puts the two
    comparison rules over the per-rule CEL budget of some minor in the range (its API server
    would refuse the CRD), as 32 did (8.1x on 1.30)."""
    crd = _crd_doc()
    resources = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["server"]["properties"]["resources"]
    for part in ("requests", "limits"):
        resources["properties"][part]["maxProperties"] += 1
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    refused = [
        m
        for m in supported_minors()
        if "estimated rule cost exceeds budget" in kubecheck(m, path).stdout
    ]
    assert refused, "8 names fit every minor: the bound could be raised"
    assert set(refused) < set(supported_minors())  # newer estimators read maxLength


def test_checker_refuses_a_crd_field_the_oldest_minor_does_not_know(
    built: None, tmp_path: Path
) -> None:
    crd = _crd_doc()
    crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.model.name"}]  # 1.30
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    got = kubecheck(chart_floor(), path)
    assert got.returncode == 1
    assert 'unknown field "selectableFields"' in got.stdout, got.stdout


# --- rendered objects through each minor's schemas --------------------------------------------


def _schema_errors(doc: dict[str, Any], minor: int, monitoring: dict[Any, Any]) -> str | None:
    key = (doc["apiVersion"], doc["kind"])
    try:
        if doc["apiVersion"].startswith(MONITORING_GROUP):
            jsonschema.Draft4Validator(monitoring[key]).validate(doc)
        else:
            kubernetes_validate.validate(doc, f"1.{minor}.0", strict=True)
    except jsonschema.ValidationError as exc:
        return f"{exc.message} at {list(exc.absolute_path)}"
    except kubernetes_validate.ValidationError as exc:
        return f"{exc.message} at {list(exc.path)}"
    return None


@pytest.mark.parametrize("minor", supported_minors())
def test_rendered_objects_pass_strict_schemas(
    minor: int,
    rendered: dict[str, list[dict[str, Any]]],
    monitoring_schemas: dict[Any, Any],
    schema_root: Path,
    tmp_path: Path,
) -> None:
    kinds = {d["kind"] for docs in rendered.values() for d in docs}
    assert {
        "Deployment",
        "CustomResourceDefinition",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
    } <= kinds, kinds
    failures = []
    for source, docs in rendered.items():
        for doc in docs:
            error = _schema_errors(doc, minor, monitoring_schemas)
            if error:
                failures.append(f"{source}: {doc['kind']}/{doc['metadata']['name']}: {error}")
        path = tmp_path / f"{source.replace(' ', '-')}.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        got = kubeconform(minor, schema_root, path)
        if got.returncode != 0 or "Skipped: 0" not in got.stdout:
            failures.append(f"{source}: kubeconform:\n{got.stdout}{got.stderr}")
    assert not failures, f"Kubernetes 1.{minor}:\n" + "\n".join(failures)


def test_a_field_unknown_to_the_oldest_minor_is_refused_by_both_validators(
    rendered: dict[str, list[dict[str, Any]]], schema_root: Path, tmp_path: Path
) -> None:
    """Negative control: a Triton Deployment with a container field added in 1.33
    (lifecycle.stopSignal) fails on the oldest minor in both validators, passes on 1.33."""
    deployment = next(d for docs in rendered.values() for d in docs if d["kind"] == "Deployment")
    newer = copy.deepcopy(deployment)
    newer["spec"]["template"]["spec"]["containers"][0].setdefault("lifecycle", {})["stopSignal"] = (
        "SIGTERM"
    )
    path = tmp_path / "newer.yaml"
    path.write_text(json.dumps(newer))
    floor = chart_floor()
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(newer, f"1.{floor}.0", strict=True)
    got = kubeconform(floor, schema_root, path)
    assert got.returncode != 0 and "stopSignal" in got.stdout, got.stdout
    if 33 in supported_minors():
        kubernetes_validate.validate(newer, "1.33.0", strict=True)
        assert kubeconform(33, schema_root, path).returncode == 0


def test_monitoring_schemas_refuse_unknown_fields(monitoring_schemas: dict[Any, Any]) -> None:
    """Negative control for the converted Prometheus Operator schemas."""
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "endpoints": [{"port": "m", "honourLabels": True}]},
    }
    with pytest.raises(jsonschema.ValidationError, match="honourLabels"):
        jsonschema.Draft4Validator(
            monitoring_schemas[("monitoring.coreos.com/v1", "ServiceMonitor")]
        ).validate(monitor)


def test_chart_and_docs_name_the_same_floor() -> None:
    assert (CHART / "Chart.yaml").read_text().count(f'">=1.{chart_floor()}.0-0"') == 1
