"""Leader election on a coordination.k8s.io Lease: of several `batchop run`, exactly one acts.

Why a Lease and not kopf's peering (docs/high-availability.md has the long form): kopf's
peering is priority-based, not an election. Replicas of one Deployment share a priority, and
kopf pauses *every* operator of equal priority ("Possibly conflicting operators with the same
priority"), leaving the cluster unserved; a dead peer is noticed only after its 60 s
lifetime; pausing stops the watch streams, timers and daemons but not startup handlers nor
threads of our own (the tuning loop would keep reloading Triton and scaling in the paused
replica); and it needs its own CRD. A Lease is what controller-runtime and client-go use,
needs only RBAC on one object, and gives a stated takeover time.

The algorithm is client-go's (tools/leaderelection):
- A candidate reads the Lease every `retry_period`. It takes it when it is absent, released
  (no holder) or expired: unchanged for `leaseDurationSeconds` as measured on the
  candidate's own monotonic clock since it last saw the record change (no trust in the
  holder's wall clock; a change is a new resourceVersion). Writes carry the resourceVersion,
  so two candidates cannot both win.
- Only the holder runs kopf and the tuning loop. A standby has no handler, no watch and no
  thread that writes: it cannot act, by construction, rather than by a check on each write.
- The holder renews every `retry_period`. If it has not renewed for `renew_deadline`
  (< lease duration), or sees another holder, it exits at once (as controller-runtime's
  manager does): by then it cannot know it is alone, and a process that exits writes nothing.
  The Deployment restarts it, as a standby. A watchdog outside the GIL (faulthandler's)
  backs this up one second later, should the renew thread itself be stuck (`exit_watchdog`).
- On a graceful stop (SIGTERM, e.g. a rolling update) the holder releases the Lease, so the
  standby takes over after one retry period instead of a lease duration.

Takeover after the holder dies: at most lease duration + retry period (x1.2 jitter) until
the standby holds the Lease, then kopf's start (list every BatchedModel, resume handlers).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

log = logging.getLogger("batchop.leader")

JITTER = 1.2  # client-go's JitterFactor: a candidate waits retry_period x [1, 1.2)
_MICRO = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's three durations (controller-runtime's defaults: 15 s, 10 s, 2 s)."""

    duration_s: int = 15  # a standby waits this long after the last renewal it saw
    renew_deadline_s: float = 10.0  # the holder gives up (exits) after this long unrenewed
    retry_period_s: float = 2.0  # how often candidates try and the holder renews

    def problems(self) -> list[str]:
        """The rules client-go enforces, broken: the holder must give up before a standby
        may take over, and must get several renewals into its deadline."""
        out = []
        if self.duration_s <= self.renew_deadline_s:
            out.append(
                f"lease duration ({self.duration_s}s) must be greater than the renew deadline "
                f"({self.renew_deadline_s:g}s)"
            )
        if self.renew_deadline_s <= JITTER * self.retry_period_s:
            out.append(
                f"renew deadline ({self.renew_deadline_s:g}s) must be greater than "
                f"{JITTER} x the retry period ({self.retry_period_s:g}s)"
            )
        return out

    @property
    def takeover_bound_s(self) -> float:
        """The longest a standby waits to hold the Lease after the holder died."""
        return self.duration_s + JITTER * self.retry_period_s


@dataclass(frozen=True)
class Record:
    """The fields of a Lease's spec that the election reads and writes."""

    holder: str
    duration_s: int
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder or None,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Record:
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


def may_take(record: Record, identity: str, observed_at: float, now: float) -> bool:
    """Whether `identity` may write itself into the Lease: it holds it already, or nobody
    does, or the record has not changed for its lease duration (by our clock)."""
    if record.holder in ("", identity):
        return True
    return now >= observed_at + record.duration_s


class LeaseStore(Protocol):
    """One Lease object: read it (None when absent), create it, replace it (False on a
    conflict: someone wrote it since it was read)."""

    def get(self) -> tuple[Record, str] | None: ...

    def create(self, record: Record) -> bool: ...

    def replace(self, record: Record, resource_version: str) -> bool: ...


class KubeLeaseStore:
    """A Lease on the API server, through the official client."""

    def __init__(self, api_client: Any, namespace: str, name: str, timeout_s: float) -> None:
        import kubernetes

        self.api = kubernetes.client.CoordinationV1Api(api_client)
        self.ApiException = kubernetes.client.ApiException
        self.namespace = namespace
        self.name = name
        self.timeout = timeout_s  # a hung call must not outlive the renew deadline

    def _body(self, record: Record, resource_version: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": record.spec(),
        }

    def get(self) -> tuple[Record, str] | None:
        try:
            raw = self.api.api_client.sanitize_for_serialization(
                self.api.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=self.timeout
                )
            )
        except self.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return Record.from_spec(raw.get("spec") or {}), str(raw["metadata"]["resourceVersion"])

    def create(self, record: Record) -> bool:
        try:
            self.api.create_namespaced_lease(
                self.namespace, self._body(record), _request_timeout=self.timeout
            )
        except self.ApiException as exc:
            if exc.status == 409:  # another candidate created it first
                return False
            raise
        return True

    def replace(self, record: Record, resource_version: str) -> bool:
        try:
            self.api.replace_namespaced_lease(
                self.name,
                self.namespace,
                self._body(record, resource_version),
                _request_timeout=self.timeout,
            )
        except self.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


def default_identity() -> str:
    """Host (the pod's name in a cluster) plus a random suffix, as client-go does: a restarted
    process is a new candidate, never mistaken for the holder it replaces."""
    return f"{socket.gethostname()[:100]}_{uuid.uuid4().hex[:8]}"


def _stamp(now: datetime) -> str:
    return now.strftime(_MICRO)


class LeaderElector:
    """Acquires, renews and releases one Lease for one identity."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        timing: LeaseTiming,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.identity = identity
        self.timing = timing
        self.clock = clock
        self.wall = wall
        self._observed: tuple[Record, str] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # last successful write as holder
        self.holder = ""  # the holder last seen (for logs)

    def _observe(self, record: Record, version: str, now: float) -> None:
        """Start the expiry clock when the Lease changed (any write changes its version)."""
        if (record, version) != self._observed:
            self._observed, self._observed_at = (record, version), now
        self.holder = record.holder

    def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this identity holds the Lease afterwards."""
        now, stamp = self.clock(), _stamp(self.wall())
        got = self.store.get()
        if got is None:
            mine = Record(self.identity, self.timing.duration_s, stamp, stamp, 0)
            if not self.store.create(mine):
                return False
            self._observe(mine, "", now)
            self._renewed_at = now
            return True
        record, version = got
        self._observe(record, version, now)
        if not may_take(record, self.identity, self._observed_at, now):
            return False
        ours = record.holder == self.identity
        mine = Record(
            self.identity,
            self.timing.duration_s,
            record.acquire_time if ours else stamp,
            stamp,
            record.transitions if ours else record.transitions + 1,
        )
        if not self.store.replace(mine, version):
            return False
        self._observe(mine, "", now)
        self._renewed_at = now
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this identity holds the Lease (True) or `stop` is set (False)."""
        waiting_for = None
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    log.info("became the leader (lease held by %s)", self.identity)
                    return True
            except Exception as exc:  # the API server is down or refuses: keep trying
                log.warning("cannot read or take the lease: %s", exc)
            if self.holder != waiting_for:
                waiting_for = self.holder
                log.info("standing by: lease held by %s", waiting_for or "nobody")
            stop.wait(self.timing.retry_period_s * random.uniform(1.0, JITTER))
        return False

    def renew_once(self) -> str | None:
        """One renewal as the holder. Returns why leadership is lost, or None while held."""
        try:
            if self.try_acquire_or_renew():
                return None
            if self.holder and self.holder != self.identity:
                return f"the lease is now held by {self.holder}"
            why = "the renewal was refused (conflict)"
        except Exception as exc:
            why = f"the renewal failed: {exc}"
        since = self.clock() - (self._renewed_at if self._renewed_at is not None else 0.0)
        if since >= self.timing.renew_deadline_s:
            deadline = self.timing.renew_deadline_s
            return f"not renewed for {since:.1f}s (renew deadline {deadline:g}s); last: {why}"
        log.warning("lease not renewed (%s); retrying", why)
        return None

    def overdue(self) -> str | None:
        """Why the renew deadline has passed since the last renewal (by the clock alone, no
        API call: after a freeze the process must stop before it does anything else)."""
        since = self.clock() - (self._renewed_at if self._renewed_at is not None else 0.0)
        if since < self.timing.renew_deadline_s:
            return None
        return f"last renewed {since:.1f}s ago (renew deadline {self.timing.renew_deadline_s:g}s)"

    def watchdog_s(self) -> float:
        """How long from now the watchdog may wait: the renew deadline after the last
        renewal, plus one second so the logged exit (`on_lost`) normally comes first."""
        renewed = self._renewed_at if self._renewed_at is not None else self.clock()
        return max(self.timing.renew_deadline_s + 1.0 - (self.clock() - renewed), 0.001)

    def hold(
        self,
        on_lost: Callable[[str], None],
        stop: threading.Event,
        watchdog: Callable[[float | None], None] = lambda _s: None,
    ) -> threading.Thread:
        """Renew in a daemon thread until `stop`; call `on_lost(why)` once if renewal fails.

        `watchdog(seconds)` is re-armed after each renewal (None disarms it): a timer that
        ends the process by itself if this thread does not re-arm it in time.
        """

        def renew() -> None:
            watchdog(self.watchdog_s())
            while not stop.wait(self.timing.retry_period_s):
                why = self.overdue() or self.renew_once()
                if why is not None:
                    on_lost(why)
                    return
                watchdog(self.watchdog_s())
            watchdog(None)

        thread = threading.Thread(target=renew, name="batchop-lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> bool:
        """Give the Lease up (graceful stop): the standby need not wait for it to expire."""
        try:
            got = self.store.get()
            if got is None or got[0].holder != self.identity:
                return False
            record, version = got
            released = replace(record, holder="", duration_s=1, renew_time=_stamp(self.wall()))
            done = self.store.replace(released, version)
        except Exception as exc:  # the standby will wait the lease out instead
            log.warning("could not release the lease: %s", exc)
            return False
        if done:
            log.info("released the lease")
        return done


def exit_now(why: str) -> None:
    """Leadership lost: stop this process at once, before a standby may act (client-go's
    renew deadline is shorter than the lease duration for this). Nothing is flushed but the
    logs; kopf's progress in status.handled lets the next leader resume any handler cut short."""
    log.critical("leadership lost, exiting so that only one operator acts: %s", why)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(1)


class StandbyHealth:
    """Answers the liveness URL while standing by (kopf serves it once leading): a standby
    is healthy, and the kubelet must not restart it in a loop."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        path = parts.path

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                code = 200 if self.path.split("?")[0] == path else 404
                body = b"standby\n" if code == 200 else b""
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:  # one line per probe is noise
                pass

        self.server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port or 80), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="batchop-standby-health", daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        """Free the port for kopf's own liveness endpoint."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def lease_namespace(configured: str | None, watched: tuple[str, ...]) -> str:
    """Where the Lease lives: as configured (the chart passes the pod's namespace), else the
    pod's own (in a cluster), else the first watched namespace, else `default`."""
    if configured:
        return configured
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            own = f.read().strip()
    except OSError:
        own = ""
    return own or (watched[0] if watched else "default")


def exit_watchdog(seconds: float | None) -> None:
    """Arm (None: disarm) faulthandler's watchdog: a C thread that needs no GIL, dumps every
    thread's stack to stderr and `_exit`s when it runs out.

    Why: the renew thread can itself be stuck (a hung call past its timeout, a deadlock, a
    thread starved of the GIL); the watchdog does not depend on it. It also fires at once in
    a leader thawed after a freeze longer than the lease (SIGSTOP, a VM pause), but that is a
    race, not a fence: threads ready to run when thawed may act first (a unit experiment: a
    thawed child printed one line before the watchdog ended it). See docs/high-availability.md.
    """
    if seconds is None:
        faulthandler.cancel_dump_traceback_later()
    else:
        faulthandler.dump_traceback_later(seconds, exit=True)


class Leadership:
    """This process holds the Lease: renewing in the background until `release`."""

    def __init__(
        self,
        elector: LeaderElector,
        on_lost: Callable[[str], None],
        watchdog: Callable[[float | None], None] = exit_watchdog,
    ) -> None:
        self.elector = elector
        self._stop = threading.Event()
        self._thread = elector.hold(on_lost, self._stop, watchdog)

    def release(self) -> None:
        """Stop renewing, then give the Lease up (after kopf has stopped acting)."""
        self._stop.set()
        self._thread.join(timeout=self.elector.timing.renew_deadline_s)
        self.elector.release()


def become_leader(
    store: LeaseStore,
    identity: str,
    timing: LeaseTiming,
    liveness: str | None,
    on_lost: Callable[[str], None] = exit_now,
) -> Leadership:
    """Stand by (answering the liveness probe, writing nothing) until this process holds the
    Lease; then renew it in the background. SIGTERM while standing by ends the process."""
    elector = LeaderElector(store, identity, timing)
    leading = _leader_gauge()
    leading.set(0)
    health = StandbyHealth(liveness) if liveness else None
    log.info(
        "leader election on: %s waits for the lease (duration %ds, renew deadline %gs, retry %gs)",
        identity,
        timing.duration_s,
        timing.renew_deadline_s,
        timing.retry_period_s,
    )
    try:
        elector.acquire(threading.Event())
    finally:
        if health is not None:
            health.close()
    leading.set(1)
    return Leadership(elector, on_lost)


def _leader_gauge() -> Any:
    """`batchop_leader` (1 on the replica holding the Lease, 0 on a standby), on the
    operator's /metrics: `max(batchop_leader) < 1` for a while means nobody acts. Kept here
    rather than in batchop.metrics: only a leader-electing process has it."""
    global _GAUGE
    if _GAUGE is None:
        from prometheus_client import Gauge

        from batchop.metrics import METRICS

        _GAUGE = Gauge(
            "batchop_leader",
            "1 while this replica holds the leader-election Lease and acts, 0 standing by.",
            registry=METRICS.registry,
        )
    return _GAUGE


_GAUGE: Any = None
