"""The handlers' decisions, against an in-memory stand-in for the API server (no I/O)."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from controller_fakes import NOW, World

from batchop.controller.handlers import UNSERVED_RECHECK_S, SpecRefused, slim_pod
from batchop.controller.kube import APIError
from batchop.controller.reconcile import child_key
from batchop.controller.settings import Settings


def test_reconcile_applies_every_child_and_writes_status() -> None:
    w = World()
    done = w.handlers.reconcile(w.bm)
    assert sorted(k for k, _ in w.cluster.objects) == [
        "Deployment",
        "PodDisruptionBudget",
        "PodMonitor",
        "Service",
    ]
    assert len(done) == 4 and all(d.startswith("applied ") for d in done)
    status = w.cluster.model["status"]
    assert status["observedGeneration"] == 1
    assert status["selector"] == "batchop.io/batchedmodel=cpu-demo"
    assert w.conditions()["Progressing"]["status"] == "True"


def test_reconcile_twice_creates_no_duplicates_and_no_status_write() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    before = dict(w.cluster.objects)
    writes = len(w.cluster.writes)
    w.handlers.reconcile(w.bm)
    assert w.cluster.objects.keys() == before.keys()
    assert "status" not in w.cluster.writes[writes:]


def test_stale_children_are_deleted_after_settings_change() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    w.cluster.model["spec"]["scaling"].update(maxReplicas=1, replicas=1)
    w.handlers.settings = Settings(pod_monitor=False)
    w.handlers.reconcile(w.bm)
    assert sorted(k for k, _ in w.cluster.objects) == ["Deployment", "Service"]
    assert [e[1] for e in w.events].count("Deleted") == 2


def test_missing_pod_monitor_crd_is_skipped_with_one_warning() -> None:
    w = World(serves_pod_monitor=False)
    w.handlers.reconcile(w.bm)
    w.handlers.reconcile(w.bm)
    assert ("PodMonitor", "cpu-demo") not in w.cluster.objects
    assert ("Deployment", "cpu-demo") in w.cluster.objects
    warnings = [e for e in w.events if e[1] == "PodMonitorSkipped"]
    assert len(warnings) == 1 and "--no-pod-monitor" in warnings[0][2]
    assert w.conditions()["Degraded"]["status"] == "False"


def test_an_unserved_kind_is_looked_for_once_not_per_reconcile() -> None:
    """--no-pod-monitor on a cluster without the PodMonitor CRD: whether a PodMonitor is left
    over is asked once (no CRD, no leftover), then again only after the recheck interval."""
    w = World(Settings(pod_monitor=False), serves_pod_monitor=False)
    for _ in range(3):
        w.handlers.reconcile(w.bm)
    assert w.cluster.writes.count("get PodMonitor") == 1
    assert w.cluster.writes.count("get PodDisruptionBudget") == 0  # desired: applied
    later = NOW + timedelta(seconds=UNSERVED_RECHECK_S)
    w.handlers.clock = lambda: later
    w.handlers.reconcile(w.bm)
    assert w.cluster.writes.count("get PodMonitor") == 2
    assert ("Deployment", "cpu-demo") in w.cluster.objects


def test_a_served_kind_is_looked_for_on_every_reconcile() -> None:
    """With the CRD served, a PodMonitor left over from before --no-pod-monitor is found
    and deleted, whenever it appears."""
    w = World(Settings(pod_monitor=False))
    w.handlers.reconcile(w.bm)
    w.handlers.reconcile(w.bm)
    assert w.cluster.writes.count("get PodMonitor") == 2


def test_invalid_spec_is_refused_and_reported() -> None:
    w = World()
    w.cluster.model["spec"]["scaling"].update(minReplicas=3, replicas=1)
    with pytest.raises(SpecRefused, match="minReplicas"):
        w.handlers.reconcile(w.bm)
    assert not w.cluster.objects
    degraded = w.conditions()["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == "InvalidSpec"
    assert ("Warning", "InvalidSpec") in [(e[0], e[1]) for e in w.events]


def test_apply_failure_is_degraded_until_it_succeeds() -> None:
    w = World()
    w.cluster.fail_apply = APIError(500, "etcd is sad")
    with pytest.raises(APIError):
        w.handlers.reconcile(w.bm)
    degraded = w.conditions()["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyFailed")
    assert "etcd is sad" in degraded["message"]
    w.cluster.fail_apply = None
    w.handlers.reconcile(w.bm)
    assert w.conditions()["Degraded"]["status"] == "False"


def test_deleted_or_edited_child_is_restored_and_told() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    service = w.cluster.objects.pop(("Service", "cpu-demo"))
    assert w.handlers.child_event("DELETED", service, w.bm) == "apply"
    assert ("Service", "cpu-demo") in w.cluster.objects
    edited = copy.deepcopy(w.deployment())
    assert edited is not None
    edited["spec"]["replicas"] = 5
    assert w.handlers.child_event("MODIFIED", edited, w.bm) == "apply"
    assert w.cluster.objects[("Deployment", "cpu-demo")]["spec"]["replicas"] == 1
    assert [e[1] for e in w.events] == ["DriftRestored", "DriftRestored"]
    assert "was deleted" in w.events[0][2] and "was changed" in w.events[1][2]


def test_child_events_ignored_when_owner_is_gone_or_going_or_someone_else() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    service = copy.deepcopy(w.cluster.objects[("Service", "cpu-demo")])
    assert w.handlers.child_event("DELETED", service, None) == "none"
    going = w.bm
    going["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    assert w.handlers.child_event("DELETED", service, going) == "none"
    service["metadata"]["ownerReferences"][0]["uid"] = "uid-of-an-older-model"
    assert w.handlers.child_event("DELETED", service, w.bm) == "none"
    assert not w.events


def test_a_child_is_judged_against_the_current_spec_not_an_earlier_rendering() -> None:
    """The desired children are rendered once per spec (child events are many): a spec
    change or a replica decision of the tuner is seen at once, by value, with or without a
    new generation."""
    w = World()
    w.handlers.reconcile(w.bm)
    dep = copy.deepcopy(w.deployment())
    assert dep is not None
    assert w.handlers.child_decision("MODIFIED", dep, w.bm)[0] == "none"
    bigger = copy.deepcopy(w.bm)
    bigger["spec"]["server"]["image"] = "nvcr.io/nvidia/tritonserver:24.01-py3"
    action, want = w.handlers.child_decision("MODIFIED", dep, bigger)
    assert action == "apply" and want is not None
    image = want["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "nvcr.io/nvidia/tritonserver:24.01-py3"
    assert w.handlers.child_decision("MODIFIED", dep, w.bm)[0] == "none"  # back again
    decided = copy.deepcopy(w.bm)
    decided["spec"]["scaling"].update(minReplicas=1, maxReplicas=8)
    decided["status"] = {"lastDecision": {"replicas": 7}}
    assert w.handlers.child_decision("MODIFIED", dep, decided)[1]["spec"]["replicas"] == 7


def test_a_deployment_event_before_the_first_reconcile_leaves_status_to_it() -> None:
    """The Deployment's ADDED event often comes back before the creation handler's status
    write: refreshing status on it made two writes per new model. It is left to the handler,
    which writes once; after that, Deployment events refresh status again."""
    w = World()
    desired = w.handlers._desired(w.bm)
    dep = copy.deepcopy(next(c for k, c in desired.items() if k[1] == "Deployment"))
    w.cluster.objects[("Deployment", "cpu-demo")] = dep
    dep["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
    assert not w.handlers.needs_handling("ADDED", copy.deepcopy(dep), w.bm)
    assert w.handlers.defer_to_reconcile(w.bm)
    assert "status" not in w.cluster.writes
    w.handlers.reconcile(w.bm)
    assert w.cluster.writes.count("status") == 1
    assert not w.handlers.defer_to_reconcile(w.bm)
    live = w.deployment()
    assert live is not None
    live["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
    live["metadata"]["generation"] = 1
    live["status"]["observedGeneration"] = 1
    assert w.handlers.needs_handling("MODIFIED", copy.deepcopy(live), w.bm)


def test_only_child_events_that_call_for_an_api_call_need_a_handler_thread() -> None:
    """kopf asks this in its event loop before queueing a child's event for a handler
    thread: the children just applied, unchanged, need nothing; a deleted or edited child,
    or a Deployment whose status changes the model's, does."""
    w = World()
    w.handlers.reconcile(w.bm)
    for kind in ("Deployment", "Service", "PodDisruptionBudget", "PodMonitor"):
        child = copy.deepcopy(w.cluster.objects[(kind, "cpu-demo")])
        assert not w.handlers.needs_handling("ADDED", child, w.bm), kind
        assert w.handlers.needs_handling("DELETED", child, w.bm), kind
    service = copy.deepcopy(w.cluster.objects[("Service", "cpu-demo")])
    service["spec"]["ports"] = []
    assert w.handlers.needs_handling("MODIFIED", service, w.bm)
    assert not w.handlers.needs_handling("MODIFIED", service, None)  # owner gone
    dep = w.deployment()
    assert dep is not None
    dep["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
    assert w.handlers.needs_handling("MODIFIED", copy.deepcopy(dep), w.bm)
    w.handlers.refresh_status(w.bm)
    assert not w.handlers.needs_handling("MODIFIED", copy.deepcopy(dep), w.bm)


def test_drift_under_an_invalid_spec_is_left_alone_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    service = w.cluster.objects.pop(("Service", "cpu-demo"))
    bad = w.bm
    bad["spec"]["scaling"].update(minReplicas=3, replicas=1)
    with caplog.at_level("INFO", logger="batchop.controller"):
        assert w.handlers.child_event("DELETED", service, bad) == "none"
    assert ("Service", "cpu-demo") not in w.cluster.objects
    assert any("spec is invalid" in r.getMessage() and "minReplicas" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_status_conflict_rereads_and_keeps_the_tuners_condition() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    stale = w.bm  # read before the tuner wrote
    slo = {
        "type": "SLOMet",
        "status": "True",
        "reason": "WithinSLO",
        "message": "p99 12ms <= 40ms",
        "lastTransitionTime": "2026-03-01T11:00:00Z",
    }
    w.cluster.model["status"]["conditions"].append(slo)
    w.cluster.model["metadata"]["resourceVersion"] = "999"
    dep = w.deployment()
    assert dep is not None
    dep["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
    dep["metadata"]["generation"] = 1
    dep["status"]["observedGeneration"] = 1
    written = w.handlers.refresh_status(stale)
    assert written is not None
    assert slo in w.cluster.model["status"]["conditions"]
    assert w.conditions()["Ready"]["status"] == "True"


def test_gpu_shortage_posts_a_warning_with_gpus_missing() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    pending = {
        "metadata": {"name": "cpu-demo-x"},
        "spec": {
            "containers": [
                {"name": "tritonserver", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    w.pods = [slim_pod(pending)]
    w.handlers.refresh_status(w.bm)
    cap = w.conditions()["CapacityLimited"]
    assert (cap["status"], cap["reason"]) == ("True", "InsufficientGPU")
    assert cap["message"].startswith("1 GPU missing")
    warning = [e for e in w.events if e[1] == "InsufficientGPU"]
    assert warning and warning[0][0] == "Warning" and "1 GPU missing" in warning[0][2]
    # GPUs free up: the pod runs, the condition clears with a Normal event.
    w.pods = []
    w.handlers.refresh_status(w.bm)
    assert w.conditions()["CapacityLimited"]["status"] == "False"
    assert w.events[-1][:2] == ("Normal", "Schedulable")


def test_slim_pod_keeps_what_status_reads() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "managedFields": [{}] * 3},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i", "args": ["x"] * 9}]},
        "status": {"phase": "Running", "podIP": "127.10.0.3", "hostIP": "h"},
    }
    slim = slim_pod(pod)
    assert slim["status"]["phase"] == "Running" and slim["spec"]["nodeName"] == "n"
    assert "managedFields" not in slim["metadata"] and "image" not in slim["spec"]["containers"][0]


def test_children_keys_match_what_was_applied() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    for (kind, name), obj in w.cluster.objects.items():
        assert child_key(obj)[1:] == (kind, name)


def test_kopf_wiring_adds_no_finalizer_and_names_the_indexes() -> None:
    from batchop.controller.app import operator_settings
    from batchop.controller.handlers import build_registry

    registry = build_registry(Settings(), cluster=None)  # type: ignore[arg-type]
    # No deletion handler, timer or daemon: kopf adds no finalizer, deletion never waits.
    assert not registry._spawning.get_all_handlers()
    assert not any(h.requires_finalizer for h in registry._changing.get_all_handlers())
    # Indexes reach the handlers as kwargs named by their ids.
    assert {h.id for h in registry._indexing.get_all_handlers()} == {
        "batchedmodels",
        "deployments",
        "pods",
    }
    ops = operator_settings(Settings(namespaces=("a",), all_namespaces=False))
    assert ops.peering.standalone and ops.scanning.disabled
    assert ops.persistence.finalizer.startswith("batchop.io/")


def test_status_write_exports_conditions_for_alerts() -> None:
    from batchop.metrics import METRICS

    w = World()
    w.handlers.reconcile(w.bm)
    ns, name = w.bm["metadata"]["namespace"], w.bm["metadata"]["name"]
    for ctype, cond in w.conditions().items():
        if cond["status"] in ("True", "False"):
            value = METRICS.registry.get_sample_value(
                "batchop_condition", {"namespace": ns, "batchedmodel": name, "type": ctype}
            )
            assert value == (1.0 if cond["status"] == "True" else 0.0), ctype


def _ready(w: World) -> None:
    dep = w.deployment()
    assert dep is not None
    dep["metadata"]["generation"] = 1
    dep["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
    dep["status"]["observedGeneration"] = 1


def test_status_from_a_lagging_copy_costs_no_conflict() -> None:
    """kopf's copy lags behind our own status write: compute from our write, not from it."""
    w = World()
    stale = w.bm  # what kopf's index still shows after the reconcile below wrote status
    w.handlers.reconcile(stale)
    reads: list[str] = []
    get_model = w.cluster.get_model
    w.cluster.get_model = lambda ns, name: reads.append(name) or get_model(ns, name)  # type: ignore[method-assign]
    writes = w.cluster.writes.count("status")
    _ready(w)
    assert w.handlers.refresh_status(stale) is not None
    assert w.conditions()["Ready"]["status"] == "True"
    assert reads == [] and w.cluster.writes.count("status") == writes + 1
    # The same lagging copy again (another pod event): nothing changed, nothing sent.
    assert w.handlers.refresh_status(stale) is None
    assert reads == [] and w.cluster.writes.count("status") == writes + 1


def test_a_copy_newer_than_our_write_wins() -> None:
    w = World()
    w.handlers.reconcile(w.bm)
    w.cluster.model["metadata"]["generation"] = 2  # an edit after our write
    w.cluster.model["metadata"]["resourceVersion"] = "500"
    _ready(w)
    w.handlers.refresh_status(w.bm)
    assert w.cluster.model["status"]["observedGeneration"] == 2


def test_new_model_status_from_the_applied_deployment_while_the_index_lacks_it() -> None:
    w = World()
    w.handlers.lookup = lambda ns, name: (None, [])  # the index has not seen the Deployment
    w.handlers.reconcile(w.bm)
    cond = w.conditions()
    assert cond["Ready"]["reason"] != "DeploymentMissing"
    assert cond["Progressing"]["reason"] != "Creating"
