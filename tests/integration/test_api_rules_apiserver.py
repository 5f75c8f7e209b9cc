"""The generated CRD on a real kube-apiserver agrees with `parse_batched_model`.

Every single-rule mutation from the unit tests is refused by the API server naming the
same field, and generated valid manifests are accepted and defaulted exactly as pydantic
defaults them. Server-side dry runs only: nothing is stored.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from bm_samples import MUTATIONS, minimal, mutated, valid_manifests  # noqa: E402

from batchop.api.errors import SpecError  # noqa: E402
from batchop.api.models import ResourceRequirements, parse_batched_model  # noqa: E402

pytestmark = pytest.mark.integration

CRD = Path(__file__).resolve().parents[2] / "crds" / "batchedmodel.yaml"


@pytest.fixture(scope="module")
def api(cluster: Any) -> Any:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    cluster.wait_established("batchedmodels.batchop.io")
    return cluster


def dry_run(cluster: Any, manifest: dict[str, Any]) -> Any:
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": "default"}}
    return cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(body), check=False
    )


@pytest.mark.parametrize(
    ("mutation", "path"), [(m, p) for _, m, p in MUTATIONS], ids=[i for i, _, _ in MUTATIONS]
)
def test_api_server_refuses_each_rule_naming_the_same_field(api: Any, mutation, path: str) -> None:
    base = parse_batched_model(minimal(server={"args": []}))
    broken = mutated(base.model_dump(by_alias=True, exclude_none=True, mode="json"), mutation)
    result = dry_run(api, broken)
    assert result.returncode != 0, f"accepted: {broken['spec']}"
    assert path in result.stderr, result.stderr
    with pytest.raises(SpecError) as caught:
        parse_batched_model(broken)
    assert path in [v.path for v in caught.value.violations]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(manifest=valid_manifests())
def test_api_server_accepts_valid_specs_and_defaults_them_like_pydantic(
    api: Any, manifest: dict[str, Any]
) -> None:
    result = dry_run(api, manifest)
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)["spec"]
    assert (
        stored
        == parse_batched_model(manifest).model_dump(by_alias=True, exclude_none=True, mode="json")[
            "spec"
        ]
    )


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(manifest=valid_manifests())
def test_api_server_accepts_the_rendered_children(api: Any, manifest: dict[str, Any]) -> None:
    """Beyond the OpenAPI schema: the API server's own semantic validation of each child."""
    from batchop.render import RenderOptions, render_children

    manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": "default"}}
    children = render_children(parse_batched_model(manifest), RenderOptions(pod_monitor=False))
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": children})
    result = api.kubectl("create", "--dry-run=server", "-f", "-", input=body, check=False)
    assert result.returncode == 0, result.stderr


def _pod_accepts(cluster: Any, requests: dict[str, Any], limits: dict[str, Any]) -> bool:
    container = {"name": "c", "image": "x", "resources": {"requests": requests, "limits": limits}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "limits-check", "namespace": "default"},
        "spec": {"containers": [container]},
    }
    result = cluster.kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(pod), check=False
    )
    return result.returncode == 0


def _verdicts(cluster: Any, requests: dict[str, Any], limits: dict[str, Any]) -> tuple[bool, bool]:
    """(the API server accepts, parse_batched_model accepts) a BatchedModel with these.

    A refusal must name the same fields and rules on both sides.
    """
    resources = {"requests": requests, "limits": limits}
    manifest = minimal("limits-check", server={"resources": resources})
    result = dry_run(cluster, manifest)
    try:
        parse_batched_model(manifest)
    except SpecError as error:
        python_accepts = False
        for violation in error.violations:
            assert violation.path.startswith("spec.server.resources."), error
            assert violation.path in result.stderr, result.stderr
            said = [r.message for r in RULES if violation.message.startswith(r.message)]
            assert said and said[0] in result.stderr, (violation, result.stderr)
    else:
        python_accepts = True
    return result.returncode == 0, python_accepts


RULES = ResourceRequirements.__rules__

# (requests, limits, whether a pod accepts them): the pod's own validation is the oracle.
RESOURCE_PAIRS = [
    ({"cpu": "1"}, {"cpu": "100m"}, False),  # the CI failure this rule was written for
    ({"cpu": "500m"}, {"cpu": "0.5"}, True),
    ({"cpu": 1}, {"cpu": "1000m"}, True),
    ({"cpu": 2}, {"cpu": "1999m"}, False),
    ({"cpu": "1001m"}, {"cpu": 1}, False),
    ({"memory": "1Gi"}, {"memory": "1000Mi"}, False),
    ({"memory": "1Gi"}, {"memory": "1024Mi"}, True),
    ({"memory": "1e3"}, {"memory": "1k"}, True),
    ({"memory": "1001"}, {"memory": "1k"}, False),
    ({"memory": "2G"}, {"memory": "2Gi"}, True),
    ({"cpu": "100m", "memory": "2Gi"}, {"cpu": "1", "memory": "1Gi"}, False),
    ({"cpu": "2", "memory": "1Gi"}, {"memory": "1Gi"}, True),  # cpu has no limit
    ({"ephemeral-storage": "2Gi"}, {"ephemeral-storage": "1Gi"}, False),
    # extended resources and huge pages cannot be overcommitted: request == limit
    ({"example.com/fpga": 1}, {}, False),
    ({}, {"example.com/fpga": 2}, True),
    ({"example.com/fpga": 1}, {"example.com/fpga": 2}, False),
    ({"example.com/fpga": "1"}, {"example.com/fpga": "1000m"}, True),
    ({"example.com/fpga": 3}, {"example.com/fpga": 2}, False),
    ({"memory": "1Gi", "hugepages-2Mi": "2Mi"}, {"memory": "1Gi", "hugepages-2Mi": "4Mi"}, False),
    ({"memory": "1Gi", "hugepages-2Mi": "4Mi"}, {"memory": "1Gi", "hugepages-2Mi": "4Mi"}, True),
    # names a container cannot have
    ({"gpu": 1}, {}, False),
    ({}, {"storage": "1Gi"}, False),
]


@pytest.mark.parametrize(("requests", "limits", "pod_accepts"), RESOURCE_PAIRS)
def test_requests_above_limits_are_refused_as_the_pods_would_refuse_them(
    api: Any, requests: dict[str, Any], limits: dict[str, Any], pod_accepts: bool
) -> None:
    assert _pod_accepts(api, requests, limits) == pod_accepts
    assert _verdicts(api, requests, limits) == (pod_accepts, pod_accepts)


# Pods round quantities up to the milli before comparing, CEL's quantity() only to the nano:
# below the milli the rule is stricter than the pods, and the CRD and Python must agree.
PRECISION_PAIRS = [
    ({"cpu": "0.0000000011"}, {"cpu": "0.000000001"}),  # 2n > 1n once rounded to the nano
    ({"cpu": "0.0000000011"}, {"cpu": "0.000000002"}),
    ({"cpu": "1.0002"}, {"cpu": "1.0001"}),
]


@pytest.mark.parametrize(("requests", "limits"), PRECISION_PAIRS)
def test_below_the_milli_the_crd_and_python_agree_and_are_never_laxer_than_pods(
    api: Any, requests: dict[str, Any], limits: dict[str, Any]
) -> None:
    server_accepts, python_accepts = _verdicts(api, requests, limits)
    assert server_accepts == python_accepts
    assert not server_accepts or _pod_accepts(api, requests, limits)


def test_scale_subresource_moves_spec_replicas_within_the_bounds(api: Any) -> None:
    manifest = minimal("scale-check", scaling={"replicas": 1, "minReplicas": 1, "maxReplicas": 3})
    manifest["metadata"]["namespace"] = "default"
    api.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    try:
        api.kubectl("scale", "bm", "scale-check", "-n", "default", "--replicas=3")
        stored = api.kubectl_json("get", "bm", "scale-check", "-n", "default")
        assert stored["spec"]["scaling"]["replicas"] == 3
        refused = api.kubectl(
            "scale", "bm", "scale-check", "-n", "default", "--replicas=4", check=False
        )
        assert refused.returncode != 0
        assert "spec.scaling.replicas" in refused.stderr
    finally:
        api.kubectl("delete", "bm", "scale-check", "-n", "default", "--wait=false")


def test_a_misspelt_quantity_is_refused_by_its_pattern_naming_the_field(api: Any) -> None:
    """The resource rules have no isQuantity guard (CEL cost on Kubernetes 1.30-1.33): a
    value the pattern refuses is still refused with the pattern's message on its own field,
    whatever the comparison rule then says."""
    manifest = minimal(server={"resources": {"requests": {"cpu": "1x"}, "limits": {"cpu": "2"}}})
    result = dry_run(api, manifest)
    assert result.returncode != 0
    assert 'spec.server.resources.requests.cpu: Invalid value: "1x"' in result.stderr, result.stderr
