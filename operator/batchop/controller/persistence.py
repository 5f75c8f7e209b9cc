"""Where kopf keeps what it needs between events: in `status.handled`, not in annotations.

kopf remembers, per BatchedModel, the configuration it last handled (its "diff base": a
later event is a change, a resume or nothing, by comparing with it) and the progress of a
handler being retried. batchop kept both in annotations, and every create cost a patch of
the object for them besides the operator's status write: two calls of the five per model.

Here both live in the status subresource (`status.handled`, declared in the CRD), and the
creation handler's own status write carries the configuration, so a create costs one status
write and no patch of kopf's own:

- `DiffBase.fetch` reads `status.handled.configuration` from the newest copy of the object
  the operator knows (`ModelStore.newest`: an event older than the operator's own write
  does not look unhandled), and falls back to the annotation an earlier batchop wrote, so an
  object handled before the upgrade is resumed, never created again.
- `DiffBase.store` (kopf's, after the handlers) writes nothing when the handler's status
  write already carried that configuration (`carried`), else puts it in kopf's patch, which
  kopf sends to the status subresource. It removes the old annotation when present (once
  per object handled before the upgrade, on its first change).
- `Progress` keeps retries in `status.handled.progress` and reads (and purges) the old
  annotations too, so a retry under way at the upgrade is not lost or repeated forever.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from batchop.api.constants import GROUP, KIND

# The annotations batchop kept kopf's state in before (read for objects handled then).
LEGACY_DIFFBASE_KEY = "last-handled-configuration"
CONFIGURATION = ("status", "handled", "configuration")
PROGRESS = "status.handled.progress"
TOUCH = "status.handled.touch"

Newest = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def encode(essence: Mapping[str, Any]) -> str:
    return json.dumps(essence, separators=(",", ":"))


class DiffBase(kopf.DiffBaseStorage):  # type: ignore[misc]
    """kopf's last-handled configuration in status.handled.configuration (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.legacy = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key=LEGACY_DIFFBASE_KEY)
        self.newest: Newest = lambda body: body
        self._carried: dict[str, str] = {}  # uid -> configuration a status write carried
        self._guard = threading.Lock()

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        """kopf's essence of a BatchedModel, without deep-copying what it drops.

        kopf builds an essence for every event of every kind it watches (children and pods
        too) by deep-copying the whole body, managedFields included, before deleting all but
        the spec, labels and annotations: a sixth of the operator's CPU at a cold start. Only
        BatchedModels have handlers that use it (kopf reads no diff for the watch handlers),
        so other kinds get an empty one, and a BatchedModel's is built by kopf's own code
        from the parts it keeps.
        """
        if body.get("kind") != KIND:
            return {}
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        kept = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        kept["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        return super().build(body=kopf.Body(kept))

    def fetch(self, *, body: Any) -> Any:
        if body.get("kind") != KIND:
            return None
        status = self.newest(body).get("status") or {}
        encoded = (status.get("handled") or {}).get("configuration")
        if encoded is None:  # not written in status yet: an object an earlier batchop handled
            return self.legacy.fetch(body=body)
        return json.loads(encoded)

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        encoded = encode(essence)
        uid = str((body.get("metadata") or {}).get("uid"))
        with self._guard:
            carried = self._carried.pop(uid, None) == encoded
        if not carried:
            dicts_ensure(patch, CONFIGURATION, encoded)
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        for key in self.legacy.make_keys(LEGACY_DIFFBASE_KEY, body=body):
            if key in annotations:
                patch.metadata.annotations[key] = None

    def essence(self, body: Any, progress: kopf.ProgressStorage) -> str:
        """The configuration kopf will store for `body` once its handlers succeed (kopf's
        own `build`, then the progress storage's `clear`, as kopf does it)."""
        return encode(progress.clear(essence=self.build(body=body)))

    def carried(self, body: Mapping[str, Any], encoded: str) -> None:
        """The status write of the handler for `body` carried `encoded`: kopf need not."""
        uid = str((body.get("metadata") or {}).get("uid"))
        with self._guard:
            self._carried[uid] = encoded

    def forget(self, uid: str) -> None:
        with self._guard:
            self._carried.pop(uid, None)


def dicts_ensure(patch: Any, path: tuple[str, ...], value: Any) -> None:
    node = patch
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


class Progress(kopf.MultiProgressStorage):  # type: ignore[misc]
    """Handler progress in status.handled.progress; the old annotations read and purged."""

    def __init__(self) -> None:
        self.status = kopf.StatusProgressStorage(field=PROGRESS, touch_field=TOUCH)
        super().__init__([self.status, kopf.AnnotationsProgressStorage(prefix=GROUP)])

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        self.status.store(key=key, record=record, body=body, patch=patch)

    def touch(self, *, body: Any, patch: Any, value: str | None) -> None:
        self.status.touch(body=body, patch=patch, value=value)


class Persistence:
    """The two storages kopf's settings take, and what the creation handler asks of them."""

    def __init__(self) -> None:
        self.diffbase = DiffBase()
        self.progress = Progress()

    def bind(self, newest: Newest) -> None:
        """Read the configuration from the newest copy known (the handlers' ModelStore)."""
        self.diffbase.newest = newest

    def configuration(self, body: Any) -> str:
        return self.diffbase.essence(body, self.progress)

    def carried(self, body: Mapping[str, Any], encoded: str) -> None:
        self.diffbase.carried(body, encoded)

    def forget(self, body: Mapping[str, Any]) -> None:
        self.diffbase.forget(str((body.get("metadata") or {}).get("uid")))
