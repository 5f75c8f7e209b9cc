"""What a BatchedModel's children should be, and what to do about the ones that exist. Pure.

The renderers say what objects a spec makes; this module makes them the BatchedModel's
children (a controller owner reference, so the garbage collector deletes them with it and
`kubectl` shows who made them), decides which live children are stale (a PDB after scaling
to one replica, a PodMonitor after it was turned off) and whether a live child has drifted
from what was applied (edited by hand) and so must be applied again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from batchop.api.constants import API_VERSION, GROUP, KIND, LABEL_MODEL

# The kinds of child batchop manages: (apiVersion, kind) -> plural resource name.
CHILD_RESOURCES: dict[tuple[str, str], str] = {
    ("apps/v1", "Deployment"): "deployments",
    ("v1", "Service"): "services",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
}

ChildKey = tuple[str, str, str]  # (apiVersion, kind, name); the namespace is the BM's


def child_key(obj: Mapping[str, Any]) -> ChildKey:
    return (str(obj["apiVersion"]), str(obj["kind"]), str(obj["metadata"]["name"]))


def describe(key: ChildKey) -> str:
    return f"{key[1]} {key[2]}"


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """The REST path of a child (or of its collection when `name` is None)."""
    try:
        plural = CHILD_RESOURCES[(api_version, kind)]
    except KeyError:
        raise ValueError(f"batchop does not manage {kind} ({api_version})") from None
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def owner_reference(bm: Mapping[str, Any]) -> dict[str, Any]:
    """The controller owner reference pointing at a BatchedModel.

    `blockOwnerDeletion` makes a foreground deletion of the BatchedModel wait for its
    children; `controller` marks batchop as the one controller of the child.
    """
    meta = bm["metadata"]
    if not meta.get("uid"):
        raise ValueError(f"BatchedModel {meta.get('name')!r} has no metadata.uid (not stored yet)")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned(obj: Mapping[str, Any], bm: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` in the BatchedModel's namespace, with its owner reference."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta["namespace"] = bm["metadata"]["namespace"]
    ref = owner_reference(bm)
    others = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != ref["uid"]]
    meta["ownerReferences"] = [*others, ref]
    out["metadata"] = meta
    return out


def controller_of(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of the BatchedModel that controls `obj`, or None."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        group = str(ref.get("apiVersion", "")).split("/")[0]
        if ref.get("controller") and ref.get("kind") == KIND and group == GROUP:
            return str(meta.get("namespace", "")), str(ref.get("name")), str(ref.get("uid"))
    return None


def model_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, BatchedModel name) named by the object's label, or None (e.g. for pods)."""
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(LABEL_MODEL)
    return (str(meta.get("namespace", "")), str(name)) if name else None


def desired_children(bm: Mapping[str, Any], settings: Any) -> list[dict[str, Any]]:
    """The children the BatchedModel should have, each with its owner reference.

    Raises batchop.api.SpecError for a spec the API server should have refused.
    """
    from batchop.api.models import parse_batched_model
    from batchop.render import render_children

    model = parse_batched_model(slim_model(bm, status=False))
    children = render_children(model, render_options(settings), tuned_replicas(bm))
    return [owned(child, bm) for child in children]


def tuned_replicas(bm: Mapping[str, Any]) -> int | None:
    """The replica count the tuner decided, when it decides replicas; None: the spec's count.

    With `autotune.replicas` on, the tuner records its decision in
    `status.lastDecision.replicas` first and the reconciler renders the Deployment from it
    (clamped to the spec's bounds), so a reconcile, a drift repair or an operator restart
    never undoes a scaling decision, and a decision recorded just before a crash is applied
    after it. With it off, `spec.scaling.replicas` (the scale subresource, HPA/KEDA) rules.
    """
    spec = bm.get("spec") or {}
    if not (spec.get("autotune") or {}).get("replicas", True):
        return None
    decided = ((bm.get("status") or {}).get("lastDecision") or {}).get("replicas")
    if not isinstance(decided, int) or isinstance(decided, bool):
        return None
    scaling = spec.get("scaling") or {}
    low = int(scaling.get("minReplicas", 1))
    high = int(scaling.get("maxReplicas", max(decided, low)))
    return max(low, min(high, decided))


def render_options(settings: Any) -> Any:
    """The renderer options the operator's settings imply."""
    from batchop.render import RenderOptions

    image = getattr(settings, "default_image", None)
    chosen: dict[str, Any] = {"pod_monitor": bool(getattr(settings, "pod_monitor", True))}
    if image:
        chosen["default_image"] = image
    interval = getattr(settings, "scrape_interval", None)
    if interval:
        chosen["scrape_interval"] = interval
    return RenderOptions(**chosen)


# What the operator keeps of a BatchedModel's metadata. Not the annotations: an earlier
# batchop kept kopf's last-handled configuration there (a copy of the whole spec). It is now
# status.handled.configuration, kept with the status: controller/persistence reads it from
# the newest copy the operator knows (the one its own status write returned).
MODEL_METADATA = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "labels",
    "deletionTimestamp",
)


def slim_model(body: Mapping[str, Any], *, status: bool = True) -> dict[str, Any]:
    """What the operator reads of a stored BatchedModel (kept in memory for every one).

    No managedFields, no annotations; `status=False` leaves the status out too, for the API
    models (status is the API server's record, not input to rendering).
    """
    meta = body.get("metadata") or {}
    out: dict[str, Any] = {
        "apiVersion": body.get("apiVersion", API_VERSION),
        "kind": body.get("kind", KIND),
        "metadata": {k: meta[k] for k in MODEL_METADATA if meta.get(k) is not None},
        "spec": dict(body.get("spec") or {}),
    }
    if status:
        out["status"] = dict(body.get("status") or {})
    return out


def absent_kinds(desired: Iterable[Mapping[str, Any]], name: str) -> list[ChildKey]:
    """Children of managed kinds the desired set lacks, under the BatchedModel's child name.

    Every child is named after its BatchedModel (render.child_names), so these are the only
    objects that can be stale: checking them by name costs a GET per absent kind (usually
    none or one) instead of a labelled LIST per kind.
    """
    present = {(d["apiVersion"], d["kind"]) for d in desired}
    return [(av, kind, name) for (av, kind) in CHILD_RESOURCES if (av, kind) not in present]


def stale_children(
    live: Iterable[Mapping[str, Any]], desired: Iterable[Mapping[str, Any]], bm_uid: str
) -> list[ChildKey]:
    """Live children this BatchedModel controls that are no longer desired: to delete.

    Objects that merely carry the label but are controlled by something else (or nothing)
    are never touched.
    """
    want = {child_key(d) for d in desired}
    out = []
    for obj in live:
        owner = controller_of(obj)
        if owner is not None and owner[2] == bm_uid and child_key(obj) not in want:
            out.append(child_key(obj))
    return sorted(out)


def _same_scalar(want: Any, have: Any) -> bool:
    if want == have:
        return True
    # Quantities and int-or-string fields come back as strings ("1" for 1); booleans don't.
    if isinstance(want, bool) or isinstance(have, bool):
        return False
    return str(want) == str(have)


def drifted(desired: Any, live: Any) -> bool:
    """Whether `live` lost anything `desired` sets: True means apply again.

    Every field in `desired` must be present in `live` with the same value; fields the API
    server or other controllers added are ignored. Lists must keep their length (a removed
    container or port is drift). A false positive costs one no-op apply, never a loop: a
    server-side apply that changes nothing does not write, so raises no watch event.
    """
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return True
        return any(k not in live or drifted(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return True
        return any(drifted(d, h) for d, h in zip(desired, live, strict=True))
    return not _same_scalar(desired, live)


def child_action(
    event_type: str | None,
    live: Mapping[str, Any],
    desired: Mapping[ChildKey, Mapping[str, Any]],
    bm_uid: str,
) -> str:
    """What a watch event on a child calls for: "apply", "delete" or "none".

    - deleted (or being deleted) and still desired: apply it again;
    - edited so that it lost what batchop applied: apply again;
    - controlled by this BatchedModel but no longer desired: delete;
    - anything else (status updates, objects of another owner): nothing.
    """
    key = child_key(live)
    owner = controller_of(live)
    ours = owner is None or owner[2] == bm_uid
    want = desired.get(key)
    gone = event_type == "DELETED" or bool((live.get("metadata") or {}).get("deletionTimestamp"))
    if want is None:
        return "delete" if owner is not None and owner[2] == bm_uid and not gone else "none"
    if gone:
        return "apply" if ours else "none"
    return "apply" if ours and drifted(want, live) else "none"
