"""Per-BatchedModel memory the handlers and the tuning loop share: the lock, the newest
known copy of the object, and every status write.

Both write the same status subresource (the handlers the operator's fields and conditions,
the tuning loop the metrics, the decision and the delay), and both start from kopf's copies
of the object (an event's body, the index), which lag behind the API server by seconds to
minutes while many models start. One owner of the writes and of the newest copy means one
serialisation per model, one conflict rule and one answer to "which copy is current".
Neither `handlers` nor `tuning_loop` imports the other; both import this.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from batchop import metrics
from batchop.api.constants import ModelKey
from batchop.controller.kube import APIError
from batchop.controller.reconcile import slim_model

STATUS_ATTEMPTS = 4

Compute = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


class StatusAPI(Protocol):
    """The API calls a status write makes (kube.Cluster has them)."""

    def get_model(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]: ...


def model_key(bm: Mapping[str, Any]) -> ModelKey:
    return str(bm["metadata"]["namespace"]), str(bm["metadata"]["name"])


def resource_version(bm: Mapping[str, Any]) -> str:
    return str((bm.get("metadata") or {}).get("resourceVersion") or "")


def decision_time(bm: Mapping[str, Any]) -> str:
    """status.lastDecision.time ("" when none): RFC 3339 in UTC, so it sorts as text."""
    return str(((bm.get("status") or {}).get("lastDecision") or {}).get("time") or "")


class ModelStore:
    """Per BatchedModel: a lock, the newest copy a status write here returned, and the
    resourceVersions known to be older than that copy."""

    def __init__(self, cluster: StatusAPI) -> None:
        self.cluster = cluster
        self._guard = threading.Lock()
        self._locks: dict[ModelKey, threading.Lock] = {}
        # The BatchedModel as the last status write here left it (the API server's answer),
        # and the resourceVersions known to be older than it: see `newest`.
        self._written: dict[ModelKey, dict[str, Any]] = {}
        self._superseded: dict[ModelKey, frozenset[str]] = {}
        self._later: dict[ModelKey, Compute] = {}  # see write_later

    def lock(self, key: ModelKey) -> threading.Lock:
        """The lock every status write of this model holds."""
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def newest(self, bm: Mapping[str, Any]) -> Mapping[str, Any]:
        """`bm`, or the copy the last status write here returned when `bm` is older than it.

        Why: computed from a copy older than our own last write, a status looks changed, and
        each event or tick would cost a refused patch (409) and a GET, which adds load and lag
        (with 1,000 models the cost grew faster than N). `bm` is known to be older when its
        resourceVersion is one our write replaced, or when it carries an older
        status.lastDecision (only the tuner writes it, each one later than the last). A patch
        still carries the resourceVersion, so a copy that is not the newest after all costs a
        conflict and a re-read, never a lost update.
        """
        key = model_key(bm)
        ours = self._written.get(key)
        if ours is not None and self._older(key, bm, ours):
            return ours
        return bm

    def _older(self, key: ModelKey, bm: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
        return resource_version(bm) in self._superseded.get(key, frozenset()) or (
            decision_time(ours) > decision_time(bm)
        )

    def write_later(self, bm: Mapping[str, Any], compute: Compute) -> None:
        """Send `compute(current)` with this model's next status write, not on its own.

        Why: a new model's first status is written by its creation handler; the tuner's first
        pass, often before it, wrote its own fields in a second patch (2 status patches per
        model at a cold start, each also a watch event back). Fields that nothing acts on can
        ride along with the creation handler's write. A later `write_later` replaces an
        earlier one (it was computed from older figures).
        """
        key = model_key(bm)
        with self.lock(key):
            self._later[key] = compute

    def write_status(
        self, bm: Mapping[str, Any], compute: Compute
    ) -> tuple[Mapping[str, Any], dict[str, Any]] | None:
        """Patch the status with `compute(current)` if that changes it.

        Serialised per BatchedModel; a conflict (someone wrote the object since it was read)
        re-reads it and recomputes, so fields and conditions owned by another writer (the
        operator's or the tuner's) are never overwritten with a stale copy. Returns the
        object the patch was computed from and the patch, or None when nothing changed.
        Every write is mirrored in the operator's metrics.
        """
        from batchop.controller.status import status_differs

        key = model_key(bm)
        with self.lock(key):
            current: Mapping[str, Any] | None = self.newest(bm)
            seen = {resource_version(bm)}
            for _attempt in range(STATUS_ATTEMPTS):
                if current is None or current["metadata"].get("deletionTimestamp"):
                    return None
                seen.add(resource_version(current))
                status = self._with_later(key, current, compute(current))
                if status is None or not status_differs(current.get("status"), status):
                    return None
                try:
                    answer = self.cluster.patch_status(
                        key[0], key[1], status, current["metadata"].get("resourceVersion")
                    )
                except APIError as exc:
                    if exc.status != 409:
                        raise
                    current = self.cluster.get_model(*key)
                    continue
                self._later.pop(key, None)
                self._remember(key, bm, answer, seen)
                metrics.observe_model({**current, "status": {**(current.get("status") or {}),
                                                             **status}})  # fmt: skip
                return current, dict(status)
            raise APIError(409, f"status of {key[0]}/{key[1]} kept changing; will retry")

    def _with_later(
        self, key: ModelKey, current: Mapping[str, Any], status: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """`status` with the fields held by `write_later`, computed on top of it."""
        later = self._later.get(key)
        if later is None:
            return None if status is None else dict(status)
        first = dict(status or {})
        extra = later({**current, "status": {**(current.get("status") or {}), **first}})
        return {**first, **(extra or {})} if (first or extra) else None

    def _remember(
        self, key: ModelKey, bm: Mapping[str, Any], answer: Mapping[str, Any], seen: set[str]
    ) -> None:
        """Keep the API server's answer to a status patch as the newest copy of the model."""
        version = resource_version(answer) if isinstance(answer, Mapping) else ""
        if not version or version in seen:
            self._written.pop(key, None)  # no usable answer: fall back to kopf's copies
            self._superseded.pop(key, None)
            return
        older = set(seen)
        ours = self._written.get(key)
        if ours is not None and self._older(key, bm, ours):  # the caller's copy still lags
            older |= self._superseded.get(key, frozenset())
        self._written[key] = slim_model(answer)
        self._superseded[key] = frozenset(older - {""})

    def forget(self, key: ModelKey) -> None:
        """Drop the memory of a BatchedModel that is gone."""
        with self._guard:
            self._locks.pop(key, None)
            self._written.pop(key, None)
            self._superseded.pop(key, None)
            self._later.pop(key, None)
