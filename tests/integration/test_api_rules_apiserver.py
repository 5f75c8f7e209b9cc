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
from batchop.api.models import parse_batched_model  # noqa: E402

pytestmark = pytest.mark.integration

CRD = Path(__file__).resolve().parents[2] / "crds" / "batchedmodel.yaml"


@pytest.fixture(scope="module")
def api(cluster: Any) -> Any:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/batchedmodels.batchop.io"
    )
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
