"""`batchop run` against the real API server: children, status, scale, capacity, drift, GC,
and a restart of the operator mid-way.

KWOK plays the kubelets: pods bound to the fake GPU nodes turn Running and Ready, so
Deployments report ready replicas as on a real cluster; the scheduler really counts
`nvidia.com/gpu`; the controller-manager's garbage collector really deletes children.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import (
    Operator,
    apply,
    bm_manifest,
    condition,
    delete_namespace,
    events,
    get,
    items,
    new_namespace,
    wait_for,
)

pytestmark = pytest.mark.integration

LABEL = "batchop.io/batchedmodel"
CHILD_KINDS = "deployments,services,poddisruptionbudgets,replicasets,pods"


@pytest.fixture(scope="module")
def ns(cluster: Any) -> Iterator[str]:
    cluster.install_crd()
    name = new_namespace(cluster, "bm-op")
    yield name
    delete_namespace(cluster, name)


@pytest.fixture(scope="module")
def operator(cluster: Any, ns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    op = Operator(cluster, [ns], log).start()
    yield op
    op.stop()


def ready(cluster: Any, ns: str, name: str, replicas: int) -> dict[str, Any] | None:
    bm = get(cluster, ns, "bm", name)
    if (
        bm
        and condition(bm, "Ready").get("status") == "True"
        and bm["status"].get("readyReplicas") == replicas
        and bm["status"].get("observedGeneration") == bm["metadata"]["generation"]
    ):
        return bm
    return None


def running_pods(cluster: Any, ns: str, name: str) -> list[Any]:
    pods = items(cluster, ns, "pods", f"{LABEL}={name}")
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def children(cluster: Any, ns: str, name: str) -> list[Any]:
    return items(cluster, ns, CHILD_KINDS, f"{LABEL}={name}")


def delete_model(cluster: Any, ns: str, name: str) -> None:
    """Delete a BatchedModel and wait for the garbage collector, so its GPUs are free."""
    cluster.kubectl("delete", "-n", ns, f"bm/{name}", "--wait=true", "--timeout=60s")
    wait_for(lambda: not children(cluster, ns, name), f"{name}'s children deleted", 180)


def gpus_at_rest(cluster: Any) -> bool:
    """No pod anywhere is on its way out, so the free GPUs counted now stay free.

    A pod goes away with a deletion timestamp, but also before it has one: while the garbage
    collector works down from a deleted model (Deployment, ReplicaSet, pod), while a namespace
    is being emptied, and while a scale-down goes from Deployment to ReplicaSet to pod. A GPU
    count taken then grows later, and a test that sized a shortage on it finds none (CI,
    stop 21: a model deleted a few seconds earlier freed its GPUs under the test). A rollout
    stuck on a Pending pod is at rest: its old pods stay.
    """
    everything = cluster.kubectl_json(
        "get", "pods,replicasets,deployments,namespaces,batchedmodels", "--all-namespaces"
    )["items"]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for item in everything:
        by_kind.setdefault(item["kind"], []).append(item)

    def status(obj: dict[str, Any], key: str) -> int:
        return int((obj.get("status") or {}).get(key, 0))

    leaving = {n["metadata"]["name"] for n in by_kind.get("Namespace", [])
               if n["metadata"].get("deletionTimestamp")}  # fmt: skip
    models = {(m["metadata"]["namespace"], m["metadata"]["name"])
              for m in by_kind.get("BatchedModel", [])}  # fmt: skip
    for pod in by_kind.get("Pod", []):
        meta = pod["metadata"]
        model = (meta.get("labels") or {}).get(LABEL)
        if meta.get("deletionTimestamp") or meta["namespace"] in leaving:
            return False
        if model is not None and (meta["namespace"], model) not in models:
            return False
    for deployment in by_kind.get("Deployment", []):
        if status(deployment, "observedGeneration") < deployment["metadata"]["generation"]:
            return False  # a change its controller has not acted on yet
    for replicaset in by_kind.get("ReplicaSet", []):
        if status(replicaset, "replicas") > replicaset["spec"].get("replicas", 1):
            return False  # pods it is about to delete
    return True


def test_model_gets_owned_children_and_becomes_ready(
    cluster: Any, ns: str, operator: Operator
) -> None:
    apply(cluster, bm_manifest("alpha", ns, replicas=2))
    bm = wait_for(lambda: ready(cluster, ns, "alpha", 2), "alpha Ready 2/2", operator=operator)
    uid = bm["metadata"]["uid"]
    for kind in ("deployment", "service", "poddisruptionbudget"):
        child = get(cluster, ns, kind, "alpha")
        assert child is not None, kind
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "batchop.io/v1alpha1",
            "kind": "BatchedModel",
            "name": "alpha",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        fields = get(cluster, ns, kind, "alpha", "--show-managed-fields")["metadata"]
        managers = {m["manager"] for m in fields["managedFields"]}
        assert "batchop" in managers
    pods = running_pods(cluster, ns, "alpha")
    assert len(pods) == 2
    gpu_nodes = {
        n["metadata"]["name"]
        for n in cluster.kubectl_json("get", "nodes")["items"]
        if int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) > 0
    }
    assert all(p["spec"]["nodeName"] in gpu_nodes for p in pods)
    status = bm["status"]
    assert status["replicas"] == 2 and status["selector"] == f"{LABEL}=alpha"
    assert {c["type"] for c in status["conditions"]} >= {
        "Ready",
        "Progressing",
        "Degraded",
        "CapacityLimited",
    }
    # No finalizer: deleting a BatchedModel never waits for the operator.
    assert not bm["metadata"].get("finalizers")
    # kopf's bookkeeping lives in the declared status.handled (written with the status, so
    # a create costs no patch of the object), not in annotations nor in kopf's status.kopf.
    assert "kopf" not in status
    handled = json.loads(status["handled"]["configuration"])
    assert handled["spec"]["scaling"]["replicas"] == 2
    assert not status["handled"].get("progress")  # nothing being retried
    assert not any(k.startswith("batchop.io/") for k in bm["metadata"].get("annotations", {}))
    # The kind cluster has no PodMonitor CRD: skipped with a Warning, the operator lives on.
    reasons = {(e["type"], e["reason"]) for e in events(cluster, ns, "alpha")}
    assert ("Warning", "PodMonitorSkipped") in reasons
    assert ("Normal", "Reconciled") in reasons
    assert operator.alive() and operator.healthy()


def test_kubectl_scale_reaches_the_deployment(cluster: Any, ns: str, operator: Operator) -> None:
    apply(cluster, bm_manifest("scaled", ns, replicas=1))
    wait_for(lambda: ready(cluster, ns, "scaled", 1), "scaled Ready 1/1", operator=operator)
    cluster.kubectl("scale", "-n", ns, "bm/scaled", "--replicas=3")
    assert get(cluster, ns, "bm", "scaled")["spec"]["scaling"]["replicas"] == 3
    wait_for(lambda: ready(cluster, ns, "scaled", 3), "scaled Ready 3/3", operator=operator)
    assert get(cluster, ns, "deployment", "scaled")["spec"]["replicas"] == 3
    assert len(running_pods(cluster, ns, "scaled")) == 3
    # The scale subresource reports what runs, with the selector HPA would use.
    path = f"/apis/batchop.io/v1alpha1/namespaces/{ns}/batchedmodels/scaled/scale"
    scale = json.loads(cluster.kubectl("get", "--raw", path).stdout)
    assert scale["status"]["replicas"] == 3 and scale["status"]["selector"] == f"{LABEL}=scaled"
    refused = cluster.kubectl("scale", "-n", ns, "bm/scaled", "--replicas=9", check=False)
    assert refused.returncode != 0 and "spec.scaling.replicas" in refused.stderr
    delete_model(cluster, ns, "scaled")


def test_edited_and_deleted_children_are_restored(
    cluster: Any, ns: str, operator: Operator
) -> None:
    apply(cluster, bm_manifest("drift", ns, replicas=2))
    wait_for(lambda: ready(cluster, ns, "drift", 2), "drift Ready 2/2", operator=operator)
    cluster.kubectl("scale", "-n", ns, "deployment/drift", "--replicas=1")
    wait_for(
        lambda: get(cluster, ns, "deployment", "drift")["spec"]["replicas"] == 2,
        "the Deployment's replicas restored to 2",
        operator=operator,
    )
    old = get(cluster, ns, "service", "drift")
    cluster.kubectl("delete", "-n", ns, "service/drift")
    restored = wait_for(
        lambda: (
            (s := get(cluster, ns, "service", "drift"))
            and s["metadata"]["uid"] != old["metadata"]["uid"]
            and s
        ),
        "the deleted Service re-created",
        operator=operator,
    )
    assert restored["metadata"]["ownerReferences"][0]["name"] == "drift"
    pdb = get(cluster, ns, "pdb", "drift")["spec"]["maxUnavailable"]
    cluster.kubectl(
        "patch", "-n", ns, "pdb/drift", "--type=merge", "-p", '{"spec":{"maxUnavailable":3}}'
    )
    wait_for(
        lambda: get(cluster, ns, "pdb", "drift")["spec"].get("maxUnavailable") == pdb,
        "the PodDisruptionBudget's edit undone",
        operator=operator,
    )
    reasons = [e["reason"] for e in events(cluster, ns, "drift")]
    assert reasons.count("DriftRestored") >= 3
    delete_model(cluster, ns, "drift")


def test_gpu_shortage_is_capacity_limited_then_recovers(
    cluster: Any, ns: str, operator: Operator
) -> None:
    wait_for(lambda: gpus_at_rest(cluster), "no GPU on its way to free", 180)
    free = cluster.status().gpus_free
    assert free >= 2, f"the test cluster needs at least 2 free GPUs, has {free}"
    # A hog leaves one GPU free; a model needing 2 GPUs per replica cannot start.
    apply(cluster, bm_manifest("hog", ns, replicas=free - 1, max_replicas=free))
    wait_for(lambda: ready(cluster, ns, "hog", free - 1), "hog Ready", operator=operator)
    apply(cluster, bm_manifest("big", ns, gpus=2, replicas=1, max_replicas=2))

    def limited() -> dict[str, Any] | None:
        bm = get(cluster, ns, "bm", "big")
        cond = condition(bm, "CapacityLimited")
        return cond if cond.get("status") == "True" else None

    cond = wait_for(limited, "big CapacityLimited=True", operator=operator)
    assert cond["reason"] == "InsufficientGPU"
    assert cond["message"].startswith("2 GPUs missing: 1 pod Pending"), cond["message"]
    (pending,) = items(cluster, ns, "pods", f"{LABEL}=big")
    assert pending["status"]["phase"] == "Pending"
    bm = get(cluster, ns, "bm", "big")
    assert condition(bm, "Ready")["status"] == "False"
    warnings = [e for e in events(cluster, ns, "big") if e["reason"] == "InsufficientGPU"]
    assert warnings and warnings[0]["type"] == "Warning"

    cluster.kubectl("delete", "-n", ns, "bm/hog")  # GPUs free up
    bm = wait_for(lambda: ready(cluster, ns, "big", 1), "big Ready after the hog left", 180,
                  operator=operator)  # fmt: skip
    assert condition(bm, "CapacityLimited")["status"] == "False"
    delete_model(cluster, ns, "big")


def test_deleting_the_model_removes_every_child(cluster: Any, ns: str, operator: Operator) -> None:
    apply(cluster, bm_manifest("gone", ns, replicas=2))
    wait_for(lambda: ready(cluster, ns, "gone", 2), "gone Ready 2/2", operator=operator)
    kinds = {c["kind"] for c in children(cluster, ns, "gone")}
    assert kinds == {"Deployment", "Service", "PodDisruptionBudget", "ReplicaSet", "Pod"}
    cluster.kubectl("delete", "-n", ns, "bm/gone", "--wait=true", "--timeout=60s")
    wait_for(
        lambda: not children(cluster, ns, "gone"),
        "the garbage collector to delete every child",
        180,
        operator=operator,
    )


def test_operator_logs_are_json(operator: Operator) -> None:
    lines = [line for line in operator.log_path.read_text().splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(records) >= len(lines) * 0.9
    assert all("message" in r for r in records)


def test_operator_killed_and_restarted_mid_way(cluster: Any, tmp_path: Path) -> None:
    cluster.install_crd()
    ns2 = new_namespace(cluster, "bm-restart")
    op = Operator(cluster, [ns2], tmp_path / "operator.log").start()
    try:
        # CPU models (gpus: 0): what is checked here must not depend on free GPUs.
        apply(cluster, bm_manifest("phoenix", ns2, replicas=2, gpus=0))
        before = wait_for(lambda: ready(cluster, ns2, "phoenix", 2), "phoenix Ready", operator=op)
        deployment_uid = get(cluster, ns2, "deployment", "phoenix")["metadata"]["uid"]
        stable = {
            c["type"]: c["lastTransitionTime"]
            for c in before["status"]["conditions"]
            if c["type"] in ("Degraded", "CapacityLimited")
        }

        # Mid-way: a new model is created and the operator dies at once; while it is down
        # the first model is scaled, one of its children deleted, and a third model deleted.
        apply(cluster, bm_manifest("midway", ns2, replicas=2, gpus=0))
        op.kill()
        cluster.kubectl("scale", "-n", ns2, "bm/phoenix", "--replicas=3")
        cluster.kubectl("delete", "-n", ns2, "service/phoenix")

        op.start()
        after = wait_for(
            lambda: ready(cluster, ns2, "phoenix", 3), "phoenix Ready 3/3", operator=op
        )
        wait_for(lambda: ready(cluster, ns2, "midway", 2), "midway Ready 2/2", operator=op)
        wait_for(lambda: get(cluster, ns2, "service", "phoenix"), "Service re-created", operator=op)
        for name, replicas in (("phoenix", 3), ("midway", 2)):
            kinds = [c["kind"] for c in children(cluster, ns2, name) if c["kind"] != "Pod"]
            assert sorted(kinds) == [
                "Deployment",
                "PodDisruptionBudget",
                "ReplicaSet",
                "Service",
            ], (name, kinds)
            assert len(running_pods(cluster, ns2, name)) == replicas
        # The same Deployment was scaled, not replaced; status history survived the restart.
        assert get(cluster, ns2, "deployment", "phoenix")["metadata"]["uid"] == deployment_uid
        kept = {c["type"]: c["lastTransitionTime"] for c in after["status"]["conditions"]}
        assert {t: kept[t] for t in stable} == stable
        assert after["status"]["observedGeneration"] == after["metadata"]["generation"]

        # Deleting while the operator is down is not blocked (no finalizer) and still GCs.
        op.kill()
        cluster.kubectl("delete", "-n", ns2, "bm/midway", "--wait=true", "--timeout=60s")
        wait_for(lambda: not children(cluster, ns2, "midway"), "midway's children GC'd", 180)
    finally:
        op.stop()
        delete_namespace(cluster, ns2)


def test_a_model_an_earlier_batchop_handled_is_resumed_not_created_again(
    cluster: Any, tmp_path: Path
) -> None:
    """Before status.handled, kopf kept the configuration it had handled in an annotation. A
    model handled then is resumed after the upgrade (no creation, no Reconciled Event); its
    first change moves the configuration into status and drops the annotation; a restart
    after that resumes it from status."""
    import kopf

    cluster.install_crd()
    ns2 = new_namespace(cluster, "bm-upgrade")
    op = Operator(cluster, [ns2], tmp_path / "operator.log")
    legacy_key = "batchop.io/last-handled-configuration"
    try:
        apply(cluster, bm_manifest("elder", ns2, replicas=1, gpus=0))
        # What the earlier batchop's kopf wrote once it had handled the model (its storage,
        # kopf.AnnotationsDiffBaseStorage under batchop.io, and kopf's marker).
        old = kopf.AnnotationsDiffBaseStorage(prefix="batchop.io", key="last-handled-configuration")
        essence = old.build(body=kopf.Body(get(cluster, ns2, "bm", "elder")))
        cluster.kubectl(
            "annotate", "-n", ns2, "bm/elder", "batchop.io/kopf-managed=yes",
            f"{legacy_key}={json.dumps(essence, separators=(',', ':'))}",
        )  # fmt: skip

        op.start()
        wait_for(lambda: ready(cluster, ns2, "elder", 1), "elder Ready 1/1", operator=op)
        wait_for(lambda: "Resuming is processed" in op.log_path.read_text(), "resumed", operator=op)
        log = op.log_path.read_text()
        assert "Creation is processed" not in log and "Updating is processed" not in log
        assert "Reconciled" not in {e["reason"] for e in events(cluster, ns2, "elder")}

        cluster.kubectl("scale", "-n", ns2, "bm/elder", "--replicas=2")
        wait_for(lambda: ready(cluster, ns2, "elder", 2), "elder Ready 2/2", operator=op)

        def moved() -> dict[str, Any] | None:
            bm = get(cluster, ns2, "bm", "elder")
            handled = ((bm.get("status") or {}).get("handled") or {}).get("configuration")
            spec = json.loads(handled or "{}").get("spec") or {}
            gone = legacy_key not in (bm["metadata"].get("annotations") or {})
            return bm if gone and spec.get("scaling", {}).get("replicas") == 2 else None

        wait_for(moved, "the configuration moved to status.handled", operator=op)
        assert "Reconciled" in {e["reason"] for e in events(cluster, ns2, "elder")}

        op.stop()
        mark = len(op.log_path.read_text())
        op.start()
        wait_for(
            lambda: "Resuming is processed" in op.log_path.read_text()[mark:],
            "resumed from status",
            operator=op,
        )
        after = op.log_path.read_text()[mark:]
        assert "Creation is processed" not in after and "Updating is processed" not in after
    finally:
        op.stop()
        delete_namespace(cluster, ns2)


def test_the_client_tells_an_unserved_kind_from_an_absent_object(cluster: Any, ns: str) -> None:
    """The operator asks once per operator, not per model, whether a PodMonitor is left over
    when the API server does not serve PodMonitors at all (no prometheus-operator CRD): that
    rests on the API server's 404 saying which of the two it is."""
    from batchop.controller.kube import Cluster, NotServed, make_api_client

    api = Cluster(make_api_client(str(cluster.kubeconfig)))
    assert api.get_child("v1", "Service", ns, "no-such-service") is None
    served = cluster.kubectl("get", "crd", "podmonitors.monitoring.coreos.com", check=False)
    if served.returncode == 0:
        pytest.skip("this cluster serves PodMonitors (prometheus-operator's CRD is installed)")
    with pytest.raises(NotServed, match="PodMonitor"):
        api.get_child("monitoring.coreos.com/v1", "PodMonitor", ns, "no-such-monitor")
