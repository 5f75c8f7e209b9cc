"""The tuning loop: one operator-wide thread, ticking over every BatchedModel.

Why one loop and not a kopf timer per object: a per-object timer would make kopf add a
finalizer (deletion would wait for the operator), and would query Prometheus once per model.
Here each tick runs one query per metric per Prometheus for ALL due models (`observe`),
the pure policy (`tuning.decide`) per model, then acts:

1. The decision is recorded first, in `status.lastDecision` (with metrics and the conditions
   SLOMet and MetricsAvailable), with an Event and the operator's metrics.
2. Replicas: the BatchedModel is reconciled again; the Deployment is rendered from the
   recorded decision (reconcile.tuned_replicas).
3. Delay: level-triggered per pod, every tick: each ready pod whose annotation
   `batchop.io/max-queue-delay-us` differs from the recorded delay, or whose
   `batchop.io/queue-policy` differs from spec.overload's queue policy, is reloaded live
   (act.triton_reload) and then annotated. New pods are brought to the values when ready.
   An unreachable pod is retried with exponential backoff; the others go on.

Killed between 1 and 2/3, the next operator finds the decision in status and finishes it.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from batchop import metrics
from batchop.act.triton_reload import ReloadError, ReloadResult, set_queue_delay
from batchop.api.constants import ANNOTATION_DELAY, ANNOTATION_QUEUE_POLICY, ModelKey
from batchop.api.tuning_spec import manifest_tuning_spec
from batchop.controller.autotune import (
    applied_delay,
    desired_delay,
    interval_s,
    pods_to_reload,
    triton_url,
    tuner_status,
    tunes,
)
from batchop.controller.kube import APIError
from batchop.controller.state import ModelStore, model_key
from batchop.observe.prometheus import (
    PrometheusObserver,
    PrometheusUnavailable,
    build_observation,
    why_no_metrics,
)
from batchop.tuning import decide as policy_decide
from batchop.tuning.forecast import HISTORY_S as FORECAST_HISTORY_S
from batchop.tuning.overload import QueuePolicy, queue_policy
from batchop.tuning.persist import restore
from batchop.tuning.policy import stale_after_s
from batchop.tuning.types import TuningSpec, TuningState

log = logging.getLogger("batchop.tuning")

BACKOFF_S = (5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0)


@dataclass
class _Retry:
    failures: int
    next_try_s: float
    reason: str


class Operator(Protocol):
    """What the loop asks of the operator's handlers (controller.handlers.Handlers): passed
    in, so that neither module imports the other."""

    store: ModelStore

    def lookup(
        self, namespace: str, name: str
    ) -> tuple[Mapping[str, Any] | None, Sequence[Mapping[str, Any]]]: ...

    def post(self, bm: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...

    def reconcile(self, bm: Mapping[str, Any]) -> list[str]: ...

    def set_laggards(
        self, bm: Mapping[str, Any], delay_us: int, pods: Mapping[str, str]
    ) -> None: ...


class TuningLoop:
    """Ticks every `poll_s`; each model is tuned every `spec.autotune.intervalSeconds`."""

    def __init__(
        self,
        handlers: Operator,
        cluster: Any,
        models: Callable[[], Iterable[Mapping[str, Any]]],
        prometheus_url: str,
        *,
        observer_factory: Callable[[str], Any] | None = None,
        reload: Callable[[str, str, int, QueuePolicy], ReloadResult] | None = None,
        decide: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.time,
        poll_s: float = 5.0,
    ) -> None:
        self.handlers = handlers
        self.store = handlers.store
        self.cluster = cluster
        self.models = models
        self.prometheus_url = prometheus_url
        self.observer_factory = observer_factory or PrometheusObserver
        self.reload = reload or _reload
        self.decide = decide or policy_decide
        self.clock = clock
        self.poll_s = poll_s
        self.states: dict[ModelKey, TuningState] = {}
        self.last_tuned: dict[ModelKey, float] = {}
        self.retries: dict[tuple[ModelKey, str], _Retry] = {}
        self._observers: dict[str, Any] = {}
        self.hold_kind: dict[ModelKey, str] = {}  # what the last logged hold was about
        # Each model's spec as last parsed, and what it parsed to: see `_spec`.
        self._specs: dict[ModelKey, tuple[Any, TuningSpec]] = {}
        self._published: dict[ModelKey, tuple[Any, ...]] = {}  # gauges as last set, per model
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="batchop-tuning", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.tick()
            except Exception:  # one bad tick must not end tuning for good
                log.exception("tuning tick failed")

    # --- one tick ------------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock()
        live = [
            bm for bm in self.models() if tunes(bm) and not bm["metadata"].get("deletionTimestamp")
        ]
        keys = {model_key(bm) for bm in live}
        remembered = set(self.states) | set(self.last_tuned) | {k[0] for k in self.retries}
        for gone in (remembered | set(self._specs)) - keys:  # deleted or not tuned: forget
            self.states.pop(gone, None)
            self._specs.pop(gone, None)
            self._published.pop(gone, None)
            self.last_tuned.pop(gone, None)
            self.hold_kind.pop(gone, None)
            for stale in [k for k in self.retries if k[0] == gone]:
                self.retries.pop(stale)
        due: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for bm in live:
            if now - self.last_tuned.get(model_key(bm), -1e18) >= interval_s(bm):
                url = ((bm.get("spec") or {}).get("autotune") or {}).get("prometheusUrl")
                due[url or self.prometheus_url].append(bm)
        with metrics.time_tick():
            for url, models in due.items():
                history_s = FORECAST_HISTORY_S if any(_forecast(bm) for bm in models) else 0.0
                parts, missing = self._observe(url, history_s)
                for bm in models:
                    key = model_key(bm)
                    self.last_tuned[key] = now
                    try:
                        self._tune(bm, parts, missing, now)
                    except APIError as exc:  # the next interval tries again
                        metrics.record_reconcile_error(*key, "tune")
                        log.warning("tuning %s/%s failed: %s", *key, exc)
                    except Exception:  # a bug: logged with its trace; the other models go on
                        metrics.record_reconcile_error(*key, "tune")
                        log.exception("tuning %s/%s failed", *key)
        for bm in live:
            key = model_key(bm)
            try:
                self._converge_delay(bm, now)
            except APIError as exc:  # recording the laggards failed: the next tick retries
                metrics.record_reconcile_error(*key, "reload")
                log.warning("delay of %s/%s not converged: %s", *key, exc)
            except Exception:  # a bug: logged with its trace; the other models go on
                metrics.record_reconcile_error(*key, "reload")
                log.exception("delay of %s/%s not converged", *key)

    def _observe(self, url: str, history_s: float = 0.0) -> tuple[dict[ModelKey, Any], str | None]:
        observer = self._observers.get(url)
        if observer is None:
            observer = self._observers[url] = self.observer_factory(url)
        try:
            if history_s > 0:
                return dict(observer.observe(history_s)), None
            return dict(observer.observe()), None
        except PrometheusUnavailable as exc:
            return {}, f"Prometheus unavailable: {exc}"

    def _tune(
        self,
        indexed: Mapping[str, Any],
        parts: Mapping[ModelKey, Any],
        missing: str | None,
        now: float,
    ) -> None:
        """Observe, decide and record one model (`indexed`: the index's copy of it)."""
        key = model_key(indexed)
        bm = self.store.newest(indexed)
        spec = self._spec(bm)
        deployment, pods = self.handlers.lookup(*key)
        dep_spec = (deployment or {}).get("spec") or {}
        dep_status = (deployment or {}).get("status") or {}
        capacity = next(
            (c for c in (bm.get("status") or {}).get("conditions") or []
             if c.get("type") == "CapacityLimited"),
            {},
        )  # fmt: skip
        obs = build_observation(
            parts.get(key),
            time_s=now,
            replicas=int(dep_spec.get("replicas") or spec.start_replicas),
            ready_replicas=int(dep_status.get("readyReplicas") or 0),
            delay_us=desired_delay(bm),
            max_age_s=stale_after_s(spec),
            schedulable_headroom=0 if capacity.get("status") == "True" else None,
        )
        if missing is None:
            missing = why_no_metrics(parts.get(key))
        state = self.states.get(key)
        if state is None:  # a new model, or this process is new: resume what status kept
            state = restore((bm.get("status") or {}).get("learned"), now)
        decision = self.decide(obs, spec, state)
        self.states[key] = decision.state
        when = datetime.fromtimestamp(now, UTC)
        applied = applied_delay(pods)

        def compute(current: Mapping[str, Any]) -> dict[str, Any]:
            return tuner_status(current, obs, spec, decision, when, missing, applied)

        written: tuple[Mapping[str, Any], dict[str, Any]] | None = None
        if "observedGeneration" not in (bm.get("status") or {}) and not decision.changes(obs):
            # A new model its creation handler has not written yet: nothing acts on these
            # figures, so they go with that handler's first status write (one patch, not two).
            self.store.write_later(indexed, compute)
        else:
            # The index's copy goes in: the store then knows its resourceVersion is older.
            written = self.store.write_status(indexed, compute)
        # The gauges are set again only when a figure moved (or a status write just set them
        # from status): five labelled gauges per model were 15% of a steady tick. The uid is
        # part of the record, so a model deleted (its series dropped) and created again under
        # the same name is published afresh.
        gauges = (
            str(indexed["metadata"].get("uid")),
            applied, decision.delay_us, decision.replicas, obs.ready_replicas, spec.slo_ms,
        )  # fmt: skip
        if written is not None or self._published.get(key) != gauges:
            metrics.set_state(
                *key,
                applied_delay_us=applied,
                desired_delay_us=decision.delay_us,
                desired_replicas=decision.replicas,
                ready_replicas=obs.ready_replicas,
                slo_ms=spec.slo_ms,
            )
            self._published[key] = gauges
        if not decision.changes(obs):
            # A hold is logged when its kind changes (the figures in it change every tick):
            # "steady", or which hold ("holding: metrics stale", "holding: no batch-latency
            # data yet", ...), so that a model held for one reason after another says so.
            reason = decision.reason
            about = reason.split("(")[0] if reason.startswith("holding") else reason.split(":")[0]
            level = logging.INFO if self.hold_kind.get(key) != about else logging.DEBUG
            self.hold_kind[key] = about
            log.log(level, "%s/%s: %s", *key, decision.reason)
            return
        self.hold_kind.pop(key, None)
        log.info("%s/%s: %s", *key, decision.reason)
        self.handlers.post(bm, "Normal", "Tuned", f"{decision.kind}: {decision.reason}")
        metrics.record_decision(*key, decision.kind, decision.reason, now)
        if decision.reversal:
            metrics.record_reversal(*key)
            self.handlers.post(bm, "Warning", "ScaleReversed", decision.reason)
        if decision.replicas != obs.replicas and written is not None:
            base, patch = written  # the Deployment is rendered from the recorded decision
            self.handlers.reconcile({**base, "status": {**(base.get("status") or {}), **patch}})

    def _spec(self, bm: Mapping[str, Any]) -> TuningSpec:
        """The model's TuningSpec, parsed again only when its spec changed.

        Why: the full parse (pydantic and the API's rules) ran twice per model per tick and
        was 40% of a steady tick's CPU in process; a spec changes rarely. Compared by value,
        not by generation, so a copy whose spec moved is never tuned by the old one.
        """
        key = model_key(bm)
        raw = bm.get("spec")
        cached = self._specs.get(key)
        if cached is not None and cached[0] == raw:
            return cached[1]
        spec = manifest_tuning_spec(bm)  # a spec the API would refuse raises: not kept
        self._specs[key] = (copy.deepcopy(raw), spec)
        return spec

    def _converge_delay(self, indexed: Mapping[str, Any], now: float) -> None:
        """Reload every ready pod that does not run the recorded delay and the spec's
        queue policy yet; record the protocol the reloads went over."""
        bm = self.store.newest(indexed)
        key = model_key(bm)
        delay = desired_delay(bm)
        policy = queue_policy(self._spec(bm))
        model = str(((bm.get("spec") or {}).get("model") or {}).get("name"))
        _, pods = self.handlers.lookup(*key)
        lagging = [str(p["metadata"]["name"]) for p in pods_to_reload(pods, delay, policy)]
        by_name = {str(p["metadata"]["name"]): p for p in pods}
        protocols: set[str] = set()
        for name in lagging:
            retry = self.retries.get((key, name))
            if retry is not None and now < retry.next_try_s:
                continue
            try:
                result = self.reload(triton_url(by_name[name]), model, delay, policy)
                self.cluster.annotate_pod(
                    key[0],
                    name,
                    {ANNOTATION_DELAY: str(delay), ANNOTATION_QUEUE_POLICY: policy.annotation()},
                )
            except (ReloadError, APIError, OSError) as exc:  # Triton's or the API's refusal
                failures = 1 if retry is None else retry.failures + 1
                wait = BACKOFF_S[min(failures, len(BACKOFF_S)) - 1]
                self.retries[(key, name)] = _Retry(failures, now + wait, str(exc))
                message = (
                    f"pod {name}: delay {delay} us not applied (queue policy "
                    f"{policy.annotation()}): {exc}; retrying"
                )
                if failures == 1:
                    self.handlers.post(bm, "Warning", "ReloadFailed", message)
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "%s/%s: %s (attempt %d)", *key, message, failures)  # fmt: skip
                metrics.record_reconcile_error(*key, "reload")
                continue
            self.retries.pop((key, name), None)
            protocols.add(result.via)
            metrics.record_reload(*key, result.via)
        if protocols:
            # "http" when any pod needed the fallback: that one stalls requests (see act).
            used = "http" if "http" in protocols else "grpc"
            self.store.write_status(indexed, lambda _current: {"reloadProtocol": used})
        # Pods that caught up or went away are no longer retried; the rest are the laggards.
        for stale in [k for k in self.retries if k[0] == key and k[1] not in lagging]:
            self.retries.pop(stale)
        failing = {k[1]: r.reason for k, r in self.retries.items() if k[0] == key}
        self.handlers.set_laggards(indexed, delay, failing)


def _forecast(bm: Mapping[str, Any]) -> bool:
    """spec.autotune.forecast, read without a full parse (the tick checks every due model)."""
    return ((bm.get("spec") or {}).get("autotune") or {}).get("forecast") is True


def _reload(url: str, model: str, delay_us: int, policy: QueuePolicy) -> ReloadResult:
    return asyncio.run(set_queue_delay(url, model, delay_us, queue_policy=policy))
