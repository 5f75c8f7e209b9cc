"""kopf's state in status.handled (controller/persistence.py), with kopf's own classes."""

from __future__ import annotations

import json
from typing import Any

import kopf

from batchop.controller.persistence import Persistence
from batchop.controller.status import status_differs

LEGACY = "batchop.io/last-handled-configuration"


def body(**extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
        "spec": {"scaling": {"replicas": 2}},
    }
    for key, value in extra.items():
        raw.setdefault(key, {}).update(value)
    return raw


def test_the_configuration_is_read_from_status_else_from_the_old_annotation() -> None:
    p = Persistence()
    essence = {"spec": {"scaling": {"replicas": 1}}}
    old = {"annotations": {LEGACY: json.dumps(essence), "batchop.io/kopf-managed": "yes"}}
    assert p.diffbase.fetch(body=kopf.Body(body())) is None  # never handled: a creation
    assert p.diffbase.fetch(body=kopf.Body(body(metadata=old))) == essence
    newer = {"handled": {"configuration": json.dumps({"spec": {"scaling": {"replicas": 3}}})}}
    both = kopf.Body(body(metadata=old, status=newer))
    assert p.diffbase.fetch(body=both) == {"spec": {"scaling": {"replicas": 3}}}


def test_the_configuration_comes_from_the_newest_copy_the_operator_knows() -> None:
    p = Persistence()
    ours = body(status={"handled": {"configuration": json.dumps({"spec": {}})}})
    p.bind(lambda b: ours if b["metadata"]["resourceVersion"] == "7" else b)
    # An event older than the operator's own status write is not taken for a creation.
    assert p.diffbase.fetch(body=kopf.Body(body())) == {"spec": {}}


def test_kopf_patches_nothing_when_the_status_write_carried_the_configuration() -> None:
    p = Persistence()
    b = kopf.Body(body())
    handled = p.configuration(b)
    # What kopf stores after the handlers: its own essence, cleared by the progress storage.
    kopfs = p.progress.clear(essence=p.diffbase.build(body=b))
    assert json.loads(handled) == kopfs == {"spec": {"scaling": {"replicas": 2}}}

    p.carried(b, handled)
    patch = kopf.Patch()
    p.diffbase.store(body=b, patch=patch, essence=kopfs)
    assert not patch  # no API call of kopf's own

    # Not carried (the handler failed for good, or another essence): kopf's patch has it.
    p.diffbase.store(body=b, patch=patch, essence=kopfs)
    assert patch == {"status": {"handled": {"configuration": handled}}}


def test_the_old_annotation_is_dropped_on_the_first_store() -> None:
    p = Persistence()
    old = {"annotations": {LEGACY: "{}", "batchop.io/kopf-managed": "yes"}}
    b = kopf.Body(body(metadata=old))
    patch = kopf.Patch()
    p.carried(b, p.configuration(b))
    p.diffbase.store(body=b, patch=patch, essence=json.loads(p.configuration(b)))
    assert patch == {"metadata": {"annotations": {LEGACY: None}}}


def test_progress_is_kept_in_status_and_the_old_record_purged() -> None:
    p = Persistence()
    record: Any = {"started": "2026-12-06T00:00:00", "retries": 1}
    patch = kopf.Patch()
    p.progress.store(key="reconcile", record=record, body=kopf.Body(body()), patch=patch)
    assert patch == {"status": {"handled": {"progress": {"reconcile": record}}}}
    # A one-shot success stores and purges in the same patch: nothing is left to send.
    p.progress.purge(key="reconcile", body=kopf.Body(body()), patch=patch)
    assert not patch

    # A retry the earlier batchop recorded in an annotation is read, then purged there.
    old = kopf.Body(body(metadata={"annotations": {"batchop.io/reconcile": json.dumps(record)}}))
    assert p.progress.fetch(key="reconcile", body=old) == record
    patch = kopf.Patch()
    p.progress.purge(key="reconcile", body=old, patch=patch)
    assert patch == {"metadata": {"annotations": {"batchop.io/reconcile": None}}}


def test_handled_is_compared_by_the_keys_written() -> None:
    stored = {"handled": {"configuration": "{}", "progress": {"reconcile": {"retries": 1}}}}
    assert not status_differs(stored, {"handled": {"configuration": "{}"}})
    assert status_differs(stored, {"handled": {"configuration": '{"spec":{}}'}})
    assert status_differs({}, {"handled": {"configuration": "{}"}})


def test_the_essence_is_kopfs_own_without_copying_what_kopf_drops() -> None:
    p = Persistence()
    raw = body(
        metadata={
            "labels": {"team": "vision"},
            "annotations": {"note": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "generation": 4,
        },
        status={"conditions": [{"type": "Ready"}], "handled": {"configuration": "{}"}},
    )
    kopfs = kopf.StatusDiffBaseStorage().build(body=kopf.Body(raw))
    assert p.diffbase.build(body=kopf.Body(raw)) == kopfs
    assert kopfs == {"spec": raw["spec"], "metadata": {"labels": {"team": "vision"},
                                                       "annotations": {"note": "x"}}}  # fmt: skip
    # Children and pods (kopf builds one for every event it sees): nothing to compare.
    deployment = {"kind": "Deployment", "metadata": {"name": "m", "namespace": "ns"}, "spec": {}}
    assert p.diffbase.build(body=kopf.Body(deployment)) == {}
    assert p.diffbase.fetch(body=kopf.Body(deployment)) is None
