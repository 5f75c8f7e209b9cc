"""The operator's handlers: what happens when a BatchedModel, a child or a pod changes.

`Handlers` holds the logic and talks to the API server only through a `ClusterAPI` (the
real one is `kube.Cluster`) and an event poster, so its decisions are testable without a
cluster. `build_registry` wires it into kopf:

- BatchedModel create/update/resume: server-side apply every child, delete stale ones,
  write status. kopf retries a failed reconcile with backoff.
- Deployment/Service/PDB/PodMonitor events (label `batchop.io/batchedmodel`): restore a
  child that was edited or deleted; Deployment changes also refresh status.
- Pod events (same label): refresh status (readiness, Pending for lack of GPUs, crashes).
- Deletion: nothing. Children carry a controller owner reference, so the garbage collector
  removes them. With no deletion handler and no kopf timer or daemon, kopf adds no
  finalizer, so deleting a BatchedModel never waits for the operator to be running.

Deployments, pods and BatchedModels are kept in kopf indexes (in memory, fed by the watch
streams), so refreshing status costs no GETs. Status is written through `state.ModelStore`,
which the tuning loop shares: one lock, one newest copy and one conflict rule per model.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from batchop import metrics
from batchop.api.constants import (
    ANNOTATION_DELAY,
    ANNOTATION_QUEUE_POLICY,
    LABEL_MODEL,
    PLURAL,
    VERSION,
    ModelKey,
)
from batchop.api.constants import GROUP as API_GROUP
from batchop.api.errors import SpecError
from batchop.api.models import parse_batched_model
from batchop.controller.kube import APIError, NotServed
from batchop.controller.login import bounded_login
from batchop.controller.reconcile import (
    ChildKey,
    absent_kinds,
    child_action,
    child_key,
    controller_of,
    describe,
    desired_children,
    model_of,
    slim_model,
    stale_children,
    tuned_replicas,
)
from batchop.controller.settings import Settings
from batchop.controller.state import ModelStore, model_key
from batchop.controller.status import OWNED_CONDITIONS, compute_status, status_differs
from batchop.controller.tuning_loop import TuningLoop
from batchop.observe.prometheus import PrometheusObserver
from batchop.render import selector_labels

if TYPE_CHECKING:
    from batchop.controller.persistence import Persistence

log = logging.getLogger("batchop.controller")

# How long a kind the API server did not serve is taken as still not served (a CRD
# installed later is then looked at again).
UNSERVED_RECHECK_S = 300.0

Poster = Callable[[Mapping[str, Any], str, str, str], None]  # (bm, type, reason, message)
Lookup = Callable[[str, str], tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]]


class ClusterAPI(Protocol):
    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...

    def get_child(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """None when absent; raises NotServed when the kind is not served."""
        ...

    def get_model(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...

    def post_event(self, bm: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


class SpecRefused(Exception):
    """The BatchedModel's spec breaks a rule (the CRD should have refused it): no retry."""


def slim_deployment(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {
        "metadata": {
            k: meta.get(k) for k in ("name", "namespace", "generation", "ownerReferences")
        },
        "spec": {
            "replicas": (body.get("spec") or {}).get("replicas"),
            "selector": (body.get("spec") or {}).get("selector"),
        },
        "status": dict(body.get("status") or {}),
    }


def slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return {
        "metadata": {
            **{k: meta.get(k) for k in ("name", "namespace", "deletionTimestamp")},
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k in (ANNOTATION_DELAY, ANNOTATION_QUEUE_POLICY)
            },
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [
                {"name": c.get("name"), "resources": c.get("resources") or {}}
                for c in spec.get("containers") or []
            ],
        },
        "status": {
            k: (body.get("status") or {}).get(k)
            for k in ("phase", "conditions", "containerStatuses", "initContainerStatuses", "podIP")
        },
    }


class Handlers:
    """The operator's reactions, independent of kopf and of the transport."""

    def __init__(
        self,
        settings: Settings,
        cluster: ClusterAPI,
        post: Poster,
        lookup: Lookup,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        store: ModelStore | None = None,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.post = post
        self.lookup = lookup
        self.clock = clock
        # The lock, newest copy and status writes of each model, shared with the tuning loop.
        self.store = store if store is not None else ModelStore(cluster)
        self._unserved: set[tuple[ModelKey, str]] = set()
        self._unserved_kinds: dict[tuple[str, str], datetime] = {}  # see _absent_child
        self._failures: dict[ModelKey, tuple[str, str]] = {}
        self._laggards: dict[ModelKey, tuple[str, str]] = {}
        # uid -> (what the children were rendered from, the desired children): see _desired
        self._deferred: set[ModelKey] = set()  # see defer_to_reconcile
        self._rendered: dict[str, tuple[Any, Mapping[ChildKey, Mapping[str, Any]]]] = {}

    # --- BatchedModel ------------------------------------------------------------------------

    def reconcile(self, bm: Mapping[str, Any], handled: str | None = None) -> list[str]:
        """Apply every desired child, delete stale ones, refresh status. Returns what it did.

        `handled`: the configuration kopf stores once this succeeds (controller/persistence),
        written with the status (status.handled.configuration), so kopf need not patch it.
        Raises SpecRefused for a spec that breaks a rule, kube.APIError for a failed call
        (after recording it in the Degraded condition).
        """
        key = model_key(bm)
        try:
            desired = desired_children(bm, self.settings)
        except SpecError as exc:
            message = f"invalid spec: {exc}"
            self._fail(bm, "InvalidSpec", message)
            raise SpecRefused(message) from None
        done: list[str] = []
        applied: dict[str, Any] | None = None
        try:
            for child in desired:
                try:
                    live = self.cluster.apply(child)
                    if child["kind"] == "Deployment" and isinstance(live, Mapping):
                        applied = slim_deployment(live)
                    done.append(f"applied {describe(child_key(child))}")
                    self._unserved.discard((key, child["kind"]))
                except NotServed as exc:
                    self._skip_unserved(bm, child, str(exc))
            candidates = [
                self._absent_child(av, kind, key[0], name)
                for av, kind, name in absent_kinds(desired, key[1])
            ]
            live = [c for c in candidates if c is not None]
            for api_version, kind, name in stale_children(live, desired, bm["metadata"]["uid"]):
                self.cluster.delete(api_version, kind, key[0], name)
                done.append(f"deleted {kind} {name}")
                self.post(bm, "Normal", "Deleted", f"deleted {kind} {name}: no longer needed")
        except APIError as exc:
            self._fail(bm, "ApplyFailed", f"reconcile failed: {exc}")
            raise
        self._failures.pop(key, None)
        self.refresh_status(bm, applied, handled)
        if key in self._deferred:  # a Deployment event came meanwhile: look at it now
            self._deferred.discard(key)
            self.refresh_status(bm)
        return done

    def _absent_child(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """A child of a kind the desired set lacks, if one is left over (None: none is).

        A kind the API server does not serve (PodMonitor without its CRD, with
        --no-pod-monitor) cannot have a leftover: learnt once, it is not asked about again
        for UNSERVED_RECHECK_S, instead of one GET per model (1,000 at a cold start).
        """
        learnt = self._unserved_kinds.get((api_version, kind))
        now = self.clock()
        if learnt is not None and (now - learnt).total_seconds() < UNSERVED_RECHECK_S:
            return None
        try:
            found = self.cluster.get_child(api_version, kind, namespace, name)
        except NotServed:
            self._unserved_kinds[(api_version, kind)] = now
            return None
        self._unserved_kinds.pop((api_version, kind), None)
        return found

    def _skip_unserved(self, bm: Mapping[str, Any], child: Mapping[str, Any], why: str) -> None:
        """A kind the cluster lacks (PodMonitor without prometheus-operator): warn once, go on."""
        marker = (model_key(bm), str(child["kind"]))
        if marker in self._unserved:
            return
        self._unserved.add(marker)
        message = (
            f"skipped {describe(child_key(child))}: {why}; install its CRD or run with "
            "--no-pod-monitor"
        )
        log.warning(message, extra={"namespace": marker[0][0], "batchedmodel": marker[0][1]})
        self.post(bm, "Warning", f"{child['kind']}Skipped", message)

    def _fail(self, bm: Mapping[str, Any], reason: str, message: str) -> None:
        self._failures[model_key(bm)] = (reason, message)
        self.post(bm, "Warning", reason, message)
        try:
            self.refresh_status(bm)
        except APIError as exc:  # the original failure matters more than this one
            log.warning("could not record %s in status: %s", reason, exc)

    def set_laggards(self, bm: Mapping[str, Any], delay_us: int, pods: Mapping[str, str]) -> None:
        """Pods the tuner could not bring to `delay_us` (name -> why): Degraded names them."""
        key = model_key(bm)
        entry: tuple[str, str] | None = None
        if pods:
            listed = "; ".join(f"{name} ({why})" for name, why in sorted(pods.items()))
            entry = (
                "DelayNotApplied",
                f"delay {delay_us} us not applied on {len(pods)} pod(s), retrying: {listed}",
            )
        if self._laggards.get(key) == entry:
            return
        if entry is None:
            self._laggards.pop(key, None)
        else:
            self._laggards[key] = entry
        self.refresh_status(bm)

    def forget(self, bm: Mapping[str, Any]) -> None:
        """Drop per-model memory when a BatchedModel is gone."""
        key = model_key(bm)
        self._failures.pop(key, None)
        self._laggards.pop(key, None)
        self._unserved = {m for m in self._unserved if m[0] != key}
        self._rendered.pop(str(bm["metadata"].get("uid")), None)
        self._deferred.discard(key)
        self.store.forget(key)

    # --- children ----------------------------------------------------------------------------

    def child_decision(
        self, event_type: str | None, child: Mapping[str, Any], bm: Mapping[str, Any] | None
    ) -> tuple[str, Mapping[str, Any] | None]:
        """What a child's event calls for ("apply", "delete", "none"), and the desired child.
        No I/O: also run in kopf's event loop (see `needs_handling`)."""
        if bm is None or bm["metadata"].get("deletionTimestamp"):
            return "none", None  # the owner is gone or going: the garbage collector finishes
        owner = controller_of(child)
        if owner is not None and owner[2] != bm["metadata"].get("uid"):
            return "none", None  # a leftover of an earlier BatchedModel of the same name
        try:
            desired = self._desired(bm)
        except SpecError as exc:  # reconcile reports it in status; nothing to restore from
            log.info(
                "not restoring %s: the BatchedModel's spec is invalid: %s",
                describe(child_key(child)), exc,
                extra={"namespace": model_key(bm)[0], "batchedmodel": model_key(bm)[1]},
            )  # fmt: skip
            return "none", None
        action = child_action(event_type, child, desired, str(bm["metadata"].get("uid")))
        return action, desired.get(child_key(child))

    def _desired(self, bm: Mapping[str, Any]) -> Mapping[ChildKey, Mapping[str, Any]]:
        """The desired children by key, rendered again only when what they are rendered
        from changed (the spec, the labels, the tuner's replicas, the settings).

        Why: every watch event of a child asks (in kopf's `when` filter, then the handler),
        and rendering (the API models' parse, then the render) was a tenth of the operator's
        CPU at a cold start, several times per model for the same spec.
        """
        uid = str(bm["metadata"].get("uid"))
        basis = (bm.get("spec"), bm["metadata"].get("labels"), tuned_replicas(bm), self.settings)
        cached = self._rendered.get(uid)
        if cached is not None and cached[0] == basis:
            return cached[1]
        desired = {child_key(c): c for c in desired_children(bm, self.settings)}
        self._rendered[uid] = (copy.deepcopy(basis), desired)  # a copy: callers' dicts may move
        return desired

    def needs_handling(
        self, event_type: str | None, child: Mapping[str, Any], bm: Mapping[str, Any] | None
    ) -> bool:
        """Whether a child's event calls for an API call: a repair, or (a Deployment's) a
        status write. No I/O, so kopf can ask it in its event loop before queueing the event
        for a handler thread.

        Why: at a cold start every reconcile's applies come back as child events, queued in
        kopf's executor behind the remaining reconciles; each waiting event held its kopf
        worker and the child's whole body (managedFields included) for most of the cold
        phase, and at 1,000 models that transient memory set the operator's peak RSS. Most
        of those events (the children just applied, unchanged) need nothing.
        """
        if self.child_decision(event_type, child, bm)[0] != "none":
            return True
        return (
            bm is not None
            and child.get("kind") == "Deployment"
            and not self.defer_to_reconcile(bm)
            and self.status_changes(bm)
        )

    def defer_to_reconcile(self, bm: Mapping[str, Any]) -> bool:
        """Whether a Deployment event's status refresh is left to the creation handler: the
        model was never reconciled, and that handler writes its first status after applying
        the children. Noted, so the handler looks again after its write (it may have computed
        from an older copy of the Deployment). No I/O.

        Why: the Deployment's ADDED event often comes back before the creation handler's
        status write; its refresh wrote the status first, and the handler wrote again.
        """
        if "observedGeneration" in (self.store.newest(bm).get("status") or {}):
            return False
        self._deferred.add(model_key(bm))
        return True

    def child_event(
        self, event_type: str | None, child: Mapping[str, Any], bm: Mapping[str, Any] | None
    ) -> str:
        """Restore a drifted or deleted child. Returns the action taken ("none" mostly)."""
        action, want = self.child_decision(event_type, child, bm)
        if bm is None:
            return "none"
        key = child_key(child)
        if action == "apply" and want is not None:
            try:
                self.cluster.apply(want)
            except NotServed as exc:  # reconcile warned about the missing kind once
                log.debug("not restoring %s: %s", describe(key), exc)
                return "none"
            what = "deleted" if event_type == "DELETED" else "changed"
            self.post(
                bm, "Normal", "DriftRestored", f"{describe(key)} was {what}; applied it again"
            )
        elif action == "delete":
            self.cluster.delete(key[0], key[1], model_key(bm)[0], key[2])
            self.post(bm, "Normal", "Deleted", f"deleted {describe(key)}: no longer needed")
        return action

    # --- status ------------------------------------------------------------------------------

    def refresh_status(
        self,
        bm: Mapping[str, Any],
        applied: Mapping[str, Any] | None = None,
        handled: str | None = None,
    ) -> dict[str, Any] | None:
        """Write the operator's status fields if they changed. Returns the patch written.

        `applied`: the Deployment as reconcile just applied it, for when the index has not
        seen it yet (a new model): status then says what is, not "Deployment missing".
        `handled`: status.handled.configuration to write with them (see `reconcile`).
        """

        def compute(current: Mapping[str, Any]) -> dict[str, Any]:
            status = self._status(current, applied)
            if handled is not None:
                status["handled"] = {"configuration": handled}
            return status

        written = self.store.write_status(bm, compute)
        if written is not None:
            self._announce(written[0], written[0].get("status") or {}, written[1])
            return written[1]
        return None

    def status_changes(self, bm: Mapping[str, Any]) -> bool:
        """Whether `refresh_status` would write (from the newest copy known). No I/O."""
        current = self.store.newest(bm)
        return status_differs(current.get("status"), self._status(current))

    def _status(
        self, current: Mapping[str, Any], applied: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The operator's status fields for `current`, from the indexed Deployment and pods."""
        key = model_key(current)
        deployment, pods = self.lookup(*key)
        if deployment is None:
            deployment = applied
        return compute_status(
            current,
            self._selector(current, deployment),
            deployment,
            pods,
            self.clock(),
            self._failures.get(key) or self._laggards.get(key),
        )

    def _selector(
        self, bm: Mapping[str, Any], deployment: Mapping[str, Any] | None
    ) -> Mapping[str, str]:
        labels = ((deployment or {}).get("spec") or {}).get("selector") or {}
        if labels.get("matchLabels"):
            return dict(labels["matchLabels"])
        try:
            return dict(selector_labels(parse_batched_model(slim_model(bm, status=False))))
        except SpecError as exc:  # reconcile reports it; the label every child carries will do
            log.debug("selector of %s/%s from its label: %s", *model_key(bm), exc)
            return {LABEL_MODEL: model_key(bm)[1]}

    def _announce(
        self, bm: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> None:
        """An Event for each owned condition that flipped, so `kubectl describe` tells the story."""
        before = {c.get("type"): c.get("status") for c in old.get("conditions") or []}
        for cond in new.get("conditions") or []:
            ctype = cond["type"]
            if ctype not in OWNED_CONDITIONS or before.get(ctype) == cond["status"]:
                continue
            # Ready=False is often a scale-up under way: Normal; these two need a human.
            bad = ctype in ("Degraded", "CapacityLimited") and cond["status"] == "True"
            first = ctype not in before
            if ctype == "Progressing" or (first and not bad):
                continue  # routine: a rollout, a new model not ready yet, a first "all fine"
            self.post(
                bm,
                "Warning" if bad else "Normal",
                cond["reason"],
                f"{ctype}={cond['status']}: {cond['message']}",
            )


# --- kopf wiring ---------------------------------------------------------------------------------

CHILD_WATCHES = (
    ("apps", "v1", "deployments"),
    ("", "v1", "services"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("monitoring.coreos.com", "v1", "podmonitors"),
)


def _first(index: Any, key: Any) -> Any:
    try:
        store = index[key]
    except KeyError:
        return None
    return next(iter(store), None)


def _all(index: Any, key: Any) -> list[Any]:
    try:
        return list(index[key])
    except KeyError:
        return []


def build_registry(
    settings: Settings, cluster: ClusterAPI, persistence: Persistence | None = None
) -> Any:
    """A kopf registry with every handler, bound to these settings and this cluster.

    `persistence`: the storages kopf's settings are given (app.operator_settings); the
    creation handler writes their configuration with its status write.
    """
    import kopf

    from batchop.controller.persistence import Persistence

    persistence = persistence if persistence is not None else Persistence()

    registry = kopf.OperatorRegistry()
    # Log in as the official client does (in-cluster service account, else $KUBECONFIG), with
    # a bounded connection pool: see controller/login.py.
    watched_kinds = len(CHILD_WATCHES) + 2  # and BatchedModels, pods
    kopf.on.login(registry=registry)(bounded_login(settings, watched_kinds))
    present = {LABEL_MODEL: kopf.PRESENT}
    indexes: dict[str, Any] = {}

    def post(bm: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            kopf.event(dict(bm), type=type_, reason=reason, message=message[:1024])
            return
        except LookupError:  # outside kopf's handlers (the tuning thread): post it directly
            pass
        try:
            cluster.post_event(bm, type_, reason, message)
        except APIError as exc:
            log.warning("event %s %s not posted (%s): %s", type_, reason, exc, message)

    def lookup(namespace: str, name: str) -> tuple[Any, list[Any]]:
        deployments, pods = indexes.get("deployments"), indexes.get("pods")
        deployment = _first(deployments, (namespace, name)) if deployments is not None else None
        return deployment, (_all(pods, (namespace, name)) if pods is not None else [])

    logic = Handlers(settings, cluster, post, lookup)
    persistence.bind(logic.store.newest)

    # Index ids are the kwarg names kopf passes the indexes to every handler under.
    # Handlers that do no blocking I/O are async: kopf runs every sync handler in its
    # executor (settings.workers threads), and with hundreds of models starting, the creation
    # handlers fill it; an indexer or `model-gone` queued behind them delays the index and
    # kopf's view of its own annotation patches past its consistency timeout, and kopf then
    # runs the creation handler again for an older event (2.6 times per model at N=1000).
    @kopf.index(API_GROUP, VERSION, PLURAL, registry=registry, id="batchedmodels")
    async def batchedmodels(body: Any, namespace: str, name: str, **_: Any) -> Any:
        return {(namespace, name): slim_model(body)}

    @kopf.index("apps", "v1", "deployments", labels=present, registry=registry, id="deployments")
    async def deployments(body: Any, **_: Any) -> Any:
        owner = controller_of(body)
        return {owner[:2]: slim_deployment(body)} if owner else None

    @kopf.index("", "v1", "pods", labels=present, registry=registry, id="pods")
    async def pods(body: Any, **_: Any) -> Any:
        found = model_of(body)
        return {found: slim_pod(body)} if found else None

    def remember(**kwargs: Any) -> None:
        for name in ("batchedmodels", "deployments", "pods"):
            indexes[name] = kwargs[name]

    tuning: list[Any] = []

    @kopf.on.startup(registry=registry)
    def start_tuning(**kwargs: Any) -> None:
        """One operator-wide tuning thread (no per-object timers: they add finalizers)."""
        remember(**kwargs)
        loop = TuningLoop(
            logic,
            cluster,
            lambda: list(models_in(indexes["batchedmodels"])),
            settings.prometheus_url,
            observer_factory=lambda url: PrometheusObserver(url, window=settings.rate_window),
        )
        loop.start()
        tuning.append(loop)

    @kopf.on.cleanup(registry=registry)
    def stop_tuning(**_: Any) -> None:
        for loop in tuning:
            loop.stop()

    @kopf.on.create(API_GROUP, VERSION, PLURAL, registry=registry, id="reconcile")
    @kopf.on.update(API_GROUP, VERSION, PLURAL, registry=registry, id="reconcile")
    @kopf.on.resume(API_GROUP, VERSION, PLURAL, registry=registry, id="reconcile")
    def reconcile(body: Any, reason: str, **kwargs: Any) -> None:
        remember(**kwargs)
        bm = slim_model(body)
        handled = persistence.configuration(body)
        try:
            done = logic.reconcile(bm, handled)
        except SpecRefused as exc:
            raise kopf.PermanentError(str(exc)) from None
        except APIError as exc:
            metrics.record_reconcile_error(*model_key(bm), "apply")
            if exc.retryable:
                raise kopf.TemporaryError(str(exc), delay=5) from None
            raise kopf.TemporaryError(str(exc), delay=30) from None
        persistence.carried(body, handled)  # the status write took it: kopf need not patch
        if reason != "resume":
            post(bm, "Normal", "Reconciled", "; ".join(done) or "nothing to do")
        # Nothing returned: kopf would store a result in status, which is the API's.

    @kopf.on.event(API_GROUP, VERSION, PLURAL, registry=registry, id="model-gone")
    async def model_gone(type: str, body: Any, **_: Any) -> None:  # noqa: A002 - kopf's kwarg
        if type == "DELETED":
            persistence.forget(body)
            logic.forget(slim_model(body))
            metrics.forget(*model_key(body))

    def on_child(type: str, body: Any, **kwargs: Any) -> None:  # noqa: A002
        remember(**kwargs)
        owner = controller_of(body) or model_of(body)
        if owner is None:
            return
        bm = _first(kwargs["batchedmodels"], owner[:2])
        try:
            logic.child_event(type, dict(body), bm)
            if (
                bm is not None
                and body.get("kind") == "Deployment"
                and not logic.defer_to_reconcile(bm)
            ):
                logic.refresh_status(bm)
        except APIError as exc:
            metrics.record_reconcile_error(*owner[:2], "child")
            log.warning(
                "handling %s %s failed: %s", body.get("kind"), body["metadata"]["name"], exc
            )

    def child_needs_handling(type: str, body: Any, **kwargs: Any) -> bool:  # noqa: A002
        """kopf's `when` filter of the child watches, run in its event loop: only events that
        call for an API call wait for a handler thread (see Handlers.needs_handling)."""
        owner = controller_of(body) or model_of(body)
        if owner is None:
            return False
        bm = _first(kwargs["batchedmodels"], owner[:2])
        try:
            return logic.needs_handling(type, body, bm)
        except Exception:  # a filter must not raise (kopf would stop): let the handler judge
            log.debug("child event of %s/%s: handled to be sure", *owner[:2], exc_info=True)
            return True

    for group, version, plural in CHILD_WATCHES:
        kopf.on.event(
            group, version, plural, labels=present, registry=registry, id=f"watch-{plural}",
            when=child_needs_handling,
        )(on_child)  # fmt: skip

    @kopf.on.event("", "v1", "pods", labels=present, registry=registry, id="watch-pods")
    def on_pod(body: Any, **kwargs: Any) -> None:
        remember(**kwargs)
        found = model_of(body)
        bm = _first(kwargs["batchedmodels"], found) if found else None
        if bm is None:
            return
        try:
            logic.refresh_status(bm)
        except APIError as exc:
            metrics.record_reconcile_error(*found, "status")
            log.warning("status of %s/%s not written: %s", found[0], found[1], exc)

    return registry


def models_in(index: Any) -> Iterable[Mapping[str, Any]]:
    """Every BatchedModel in the kopf index (for operator-wide loops such as tuning)."""
    for key in list(index):
        found = _first(index, key)
        if found is not None:
            yield found
