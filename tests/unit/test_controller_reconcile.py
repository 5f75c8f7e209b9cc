"""Desired children with owner references, stale children and drift (pure)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop.api.errors import SpecError
from batchop.controller.reconcile import (
    absent_kinds,
    child_action,
    child_key,
    controller_of,
    desired_children,
    drifted,
    model_of,
    owner_reference,
    resource_path,
    stale_children,
    tuned_replicas,
)
from batchop.controller.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpu-demo.yaml"
UID = "0b9d6a1e-1111-4222-8333-444455556666"


def stored_bm(**spec_changes: Any) -> dict[str, Any]:
    """The example BatchedModel as the API server returns it (uid, generation, namespace)."""
    bm = yaml.safe_load(EXAMPLE.read_text())
    bm["metadata"].update(uid=UID, generation=1, namespace="ml", resourceVersion="7")
    for section, values in spec_changes.items():
        bm["spec"][section].update(values)
    return bm


def kinds(children: list[dict[str, Any]]) -> list[str]:
    return [c["kind"] for c in children]


def test_every_child_is_owned_by_the_batchedmodel() -> None:
    children = desired_children(stored_bm(), Settings())
    assert kinds(children) == ["Deployment", "Service", "PodDisruptionBudget", "PodMonitor"]
    for child in children:
        meta = child["metadata"]
        assert meta["namespace"] == "ml"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "batchop.io/v1alpha1",
                "kind": "BatchedModel",
                "name": "cpu-demo",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert controller_of(child) == ("ml", "cpu-demo", UID)
        assert model_of(child) == ("ml", "cpu-demo")


def test_settings_shape_the_children() -> None:
    children = desired_children(stored_bm(), Settings(pod_monitor=False, default_image="t:1"))
    assert "PodMonitor" not in kinds(children)
    (container,) = children[0]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "t:1"


def test_single_replica_model_has_no_pdb() -> None:
    children = desired_children(stored_bm(scaling={"maxReplicas": 1, "replicas": 1}), Settings())
    assert "PodDisruptionBudget" not in kinds(children)


def test_rendering_does_not_touch_the_stored_object() -> None:
    bm = stored_bm()
    before = copy.deepcopy(bm)
    desired_children(bm, Settings())
    assert bm == before


def test_invalid_spec_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError, match="minReplicas"):
        desired_children(stored_bm(scaling={"minReplicas": 5, "replicas": 1}), Settings())


def test_owner_reference_needs_a_stored_object() -> None:
    bm = stored_bm()
    del bm["metadata"]["uid"]
    with pytest.raises(ValueError, match="uid"):
        owner_reference(bm)


@pytest.mark.parametrize(
    ("api_version", "kind", "name", "path"),
    [
        ("apps/v1", "Deployment", "m", "/apis/apps/v1/namespaces/ns/deployments/m"),
        ("v1", "Service", "m", "/api/v1/namespaces/ns/services/m"),
        ("policy/v1", "PodDisruptionBudget", None,
         "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"),
        ("monitoring.coreos.com/v1", "PodMonitor", "m",
         "/apis/monitoring.coreos.com/v1/namespaces/ns/podmonitors/m"),
    ],
)  # fmt: skip
def test_resource_paths(api_version: str, kind: str, name: str | None, path: str) -> None:
    assert resource_path(api_version, kind, "ns", name) == path


def test_unmanaged_kind_has_no_path() -> None:
    with pytest.raises(ValueError, match="ConfigMap"):
        resource_path("v1", "ConfigMap", "ns", "x")


def test_stale_children_are_only_our_undesired_ones() -> None:
    desired = desired_children(stored_bm(scaling={"maxReplicas": 1, "replicas": 1}), Settings())
    ours_pdb = desired_children(stored_bm(), Settings())[2]
    foreign = copy.deepcopy(ours_pdb)
    foreign["metadata"]["name"] = "someone-elses"
    foreign["metadata"]["ownerReferences"] = []
    old_owner = copy.deepcopy(ours_pdb)
    old_owner["metadata"]["name"] = "older"
    old_owner["metadata"]["ownerReferences"][0]["uid"] = "another-uid"
    live = [*desired, ours_pdb, foreign, old_owner]
    assert stale_children(live, desired, UID) == [child_key(ours_pdb)]


def live_copy(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server returns for an applied object: defaults and bookkeeping added."""
    live = copy.deepcopy(obj)
    live["metadata"].update(uid="u", resourceVersion="9", managedFields=[{"manager": "batchop"}])
    if obj["kind"] == "Deployment":
        spec = live["spec"]["template"]["spec"]
        spec["dnsPolicy"] = "ClusterFirst"
        for c in spec["containers"]:
            c["terminationMessagePath"] = "/dev/termination-log"
            c["resources"]["limits"] = {k: str(v) for k, v in c["resources"]["limits"].items()}
            for p in c["ports"]:
                p.setdefault("protocol", "TCP")
        live["status"] = {"replicas": 1}
    if obj["kind"] == "Service":
        live["spec"]["clusterIP"] = "10.0.0.7"
    return live


def test_defaults_added_by_the_server_are_not_drift() -> None:
    for child in desired_children(stored_bm(), Settings()):
        assert not drifted(child, live_copy(child)), child["kind"]


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["spec"].update(replicas=7),
        lambda d: d["metadata"]["labels"].pop("batchop.io/batchedmodel"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image="evil:1"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"].pop(),
        lambda d: d["metadata"].update(ownerReferences=[]),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
            {"nvidia.com/gpu": "2"}
        ),
    ],
)
def test_edits_to_what_batchop_set_are_drift(edit: Any) -> None:
    deployment = desired_children(stored_bm(), Settings())[0]
    live = live_copy(deployment)
    edit(live)
    assert drifted(deployment, live)


def test_booleans_are_not_strings() -> None:
    assert drifted({"a": True}, {"a": "True"})
    assert not drifted({"a": 1}, {"a": "1"})


def test_child_actions() -> None:
    desired = {child_key(c): c for c in desired_children(stored_bm(), Settings(pod_monitor=False))}
    dep = next(c for c in desired.values() if c["kind"] == "Deployment")
    live = live_copy(dep)
    assert child_action("MODIFIED", live, desired, UID) == "none"
    assert child_action(None, live, desired, UID) == "none"
    assert child_action("DELETED", live, desired, UID) == "apply"
    edited = copy.deepcopy(live)
    edited["spec"]["replicas"] = 9
    assert child_action("MODIFIED", edited, desired, UID) == "apply"
    # Somebody else's object that happens to carry the label: never ours to touch.
    foreign = copy.deepcopy(edited)
    foreign["metadata"]["ownerReferences"][0]["uid"] = "other"
    assert child_action("MODIFIED", foreign, desired, UID) == "none"
    # A child that is no longer wanted (PodMonitor switched off) is deleted, once.
    monitor = desired_children(stored_bm(), Settings())[3]
    assert child_action("ADDED", live_copy(monitor), desired, UID) == "delete"
    assert child_action("DELETED", live_copy(monitor), desired, UID) == "none"


def test_tuned_replicas_come_from_the_last_decision_within_bounds() -> None:
    bm = stored_bm(scaling={"replicas": 1, "minReplicas": 1, "maxReplicas": 4})
    deployment = desired_children(bm, Settings())[0]
    assert deployment["spec"]["replicas"] == 1
    bm["status"] = {"lastDecision": {"replicas": 3, "reason": "p99 over SLO"}}
    assert tuned_replicas(bm) == 3
    assert desired_children(bm, Settings())[0]["spec"]["replicas"] == 3
    bm["status"]["lastDecision"]["replicas"] = 9
    assert tuned_replicas(bm) == 4
    bm["spec"]["autotune"]["replicas"] = False  # HPA/KEDA or the user own the count
    assert tuned_replicas(bm) is None
    assert desired_children(bm, Settings())[0]["spec"]["replicas"] == 1


def test_absent_kinds_are_the_only_stale_candidates() -> None:
    full = desired_children(stored_bm(), Settings())
    assert absent_kinds(full, "cpu-demo") == []
    lean = desired_children(
        stored_bm(scaling={"maxReplicas": 1, "replicas": 1}), Settings(pod_monitor=False)
    )
    assert absent_kinds(lean, "cpu-demo") == [
        ("policy/v1", "PodDisruptionBudget", "cpu-demo"),
        ("monitoring.coreos.com/v1", "PodMonitor", "cpu-demo"),
    ]
