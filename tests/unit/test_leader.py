"""Leader election's rules (controller/leader.py), on a Lease kept in memory with the API
server's optimistic concurrency (a write carrying an old resourceVersion is refused), and a
clock the test moves. The real API server is exercised by
tests/integration/test_operator_failover.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime

import pytest

from batchop.cli.main import build_parser
from batchop.controller.leader import (
    LeaderElector,
    Leadership,
    LeaseTiming,
    Record,
    StandbyHealth,
    lease_namespace,
    may_take,
)
from batchop.controller.settings import SettingsError, parse_settings

TIMING = LeaseTiming(duration_s=15, renew_deadline_s=10, retry_period_s=2)


class MemoryLease:
    """One Lease: get/create/replace with resourceVersion checks, like the API server."""

    def __init__(self) -> None:
        self.record: Record | None = None
        self.version = 0
        self.lock = threading.Lock()
        self.down = False

    def get(self) -> tuple[Record, str] | None:
        if self.down:
            raise ConnectionError("API server unreachable")
        with self.lock:
            return None if self.record is None else (self.record, str(self.version))

    def create(self, record: Record) -> bool:
        with self.lock:
            if self.record is not None:
                return False
            self.record, self.version = record, self.version + 1
            return True

    def replace(self, record: Record, resource_version: str) -> bool:
        if self.down:
            raise ConnectionError("API server unreachable")
        with self.lock:
            if resource_version != str(self.version):
                return False
            self.record, self.version = record, self.version + 1
            return True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLease, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(store, identity, TIMING, clock=clock,
                         wall=lambda: datetime(2026, 12, 2, tzinfo=UTC))  # fmt: skip


def test_first_candidate_creates_the_lease_and_the_second_waits() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and b.holder == "a"
    assert store.record is not None and store.record.holder == "a"
    assert store.record.transitions == 0 and store.record.duration_s == 15


def test_a_renewed_lease_never_expires_and_a_silent_one_does_after_its_duration() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    for _ in range(20):  # a renews every 2 s: b sees the record change, never takes it
        clock.now += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a dies. b's clock starts at the last change it saw, not at a's renewTime.
    clock.now += 14.9
    assert not b.try_acquire_or_renew()
    clock.now += 0.2
    assert b.try_acquire_or_renew()
    assert store.record is not None and store.record.holder == "b"
    assert store.record.transitions == 1


def test_expiry_is_measured_from_when_the_candidate_saw_the_record() -> None:
    """A candidate that starts late waits a full duration: it cannot know how old it is."""
    store, clock = MemoryLease(), Clock()
    elector(store, "a", clock).try_acquire_or_renew()
    clock.now += 100  # a died long ago
    late = elector(store, "late", clock)
    assert not late.try_acquire_or_renew()
    clock.now += 15
    assert late.try_acquire_or_renew()


def test_two_candidates_racing_for_an_expired_lease_cannot_both_win() -> None:
    store, clock = MemoryLease(), Clock()
    elector(store, "a", clock).try_acquire_or_renew()
    b, c = elector(store, "b", clock), elector(store, "c", clock)
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.now += 16
    read_by_c = store.get()  # c read the expired lease; b writes first
    assert read_by_c is not None
    assert b.try_acquire_or_renew()
    assert not store.replace(Record("c", 15), read_by_c[1])  # c's write: an old version
    assert not c.try_acquire_or_renew()  # and c now sees b's fresh record
    assert store.record is not None and store.record.holder == "b"


def test_holder_gives_up_after_the_renew_deadline_not_before() -> None:
    store, clock = MemoryLease(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    store.down = True
    clock.now += 8
    assert a.renew_once() is None  # a failure within the deadline: retry
    clock.now += 2.5
    why = a.renew_once()
    assert why is not None and "renew deadline" in why


def test_holder_gives_up_at_once_when_another_holds_the_lease() -> None:
    store, clock = MemoryLease(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    got = store.get()
    assert got is not None
    store.replace(Record("intruder", 15), got[1])
    why = a.renew_once()
    assert why is not None and "intruder" in why


def test_release_lets_a_standby_take_over_without_waiting() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert b.try_acquire_or_renew()  # no time has passed
    assert not a.release()  # no longer the holder: touches nothing
    assert store.record is not None and store.record.holder == "b"


def test_may_take_rules() -> None:
    held = Record("a", 15)
    assert may_take(held, "a", observed_at=0, now=1)
    assert not may_take(held, "b", observed_at=0, now=14)
    assert may_take(held, "b", observed_at=0, now=15)
    assert may_take(Record("", 1), "b", observed_at=0, now=0)


def test_timing_rules_and_bound() -> None:
    assert TIMING.problems() == []
    assert TIMING.takeover_bound_s == pytest.approx(17.4)
    assert LeaseTiming(10, 10, 2).problems()  # the holder must give up before expiry
    assert LeaseTiming(15, 2, 2).problems()  # several renewals must fit the deadline


def test_lease_namespace_prefers_what_is_configured_then_the_watched_one() -> None:
    assert lease_namespace("ops", ("a",)) == "ops"
    assert lease_namespace(None, ("a", "b")) in ("a", _pod_namespace_or("a"))


def _pod_namespace_or(default: str) -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip()
    except OSError:
        return default


def test_standby_answers_the_liveness_path_and_frees_the_port() -> None:
    health = StandbyHealth("http://127.0.0.1:0/healthz")
    port = health.server.server_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        assert response.status == 200 and response.read() == b"standby\n"
    health.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


def flags(*argv: str) -> dict[str, object]:
    return vars(build_parser().parse_args(["run", *argv]))


def test_leader_election_settings_from_flags_and_environment() -> None:
    s = parse_settings(flags(), {})
    assert not s.leader_elect and s.lease_name == "batchop"
    assert (s.lease_duration, s.lease_renew_deadline, s.lease_retry_period) == (15, 10.0, 2.0)
    s = parse_settings(
        flags("--leader-elect", "--lease-identity", "op-a", "--lease-duration", "30"),
        {"BATCHOP_LEASE_NAMESPACE": "ops", "BATCHOP_LEASE_NAME": "bo",
         "BATCHOP_LEASE_RENEW_DEADLINE": "20", "BATCHOP_LEASE_RETRY_PERIOD": "2.5"},
    )  # fmt: skip
    assert s.leader_elect and s.lease_identity == "op-a"
    assert (s.lease_namespace, s.lease_name) == ("ops", "bo")
    assert (s.lease_duration, s.lease_renew_deadline, s.lease_retry_period) == (30, 20.0, 2.5)
    s = parse_settings(flags("--no-leader-elect"), {"BATCHOP_LEADER_ELECT": "true"})
    assert not s.leader_elect


@pytest.mark.parametrize(
    ("argv", "env", "names"),
    [
        (["--lease-duration", "7.5"], {}, ["--lease-duration", "whole number"]),
        ([], {"BATCHOP_LEASE_RETRY_PERIOD": "0"}, ["BATCHOP_LEASE_RETRY_PERIOD", "seconds"]),
        (["--lease-renew-deadline", "soon"], {}, ["--lease-renew-deadline"]),
        (["--lease-duration", "10"], {}, ["renew deadline", "--lease-duration"]),
        ([], {"BATCHOP_LEASE_RETRY_PERIOD": "9"}, ["retry period", "--lease-retry-period"]),
        (["--lease-name", "Bad_Name"], {}, ["--lease-name"]),
        ([], {"BATCHOP_LEASE_NAMESPACE": "-x"}, ["BATCHOP_LEASE_NAMESPACE"]),
        (["--lease-identity", "a b"], {}, ["--lease-identity", "spaces"]),
        ([], {"BATCHOP_LEADER_ELECT": "perhaps"}, ["BATCHOP_LEADER_ELECT", "boolean"]),
    ],
)
def test_bad_leader_election_settings_name_their_source(
    argv: list[str], env: dict[str, str], names: list[str]
) -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(flags(*argv), env)
    for name in names:
        assert name in str(info.value)


def test_frozen_holder_is_overdue_by_its_clock_alone() -> None:
    store, clock = MemoryLease(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    clock.now += 9.9
    assert a.overdue() is None
    clock.now += 0.2
    assert "renew deadline" in (a.overdue() or "")
    assert a.watchdog_s() == pytest.approx(0.9)  # one second past the deadline, then _exit


def test_watchdog_is_rearmed_after_each_renewal_and_disarmed_on_release() -> None:
    timing = LeaseTiming(duration_s=2, renew_deadline_s=1.0, retry_period_s=0.05)
    store = MemoryLease()
    a = LeaderElector(store, "a", timing)
    assert a.try_acquire_or_renew()
    armed: list[float | None] = []
    lost: list[str] = []
    leadership = Leadership(a, lost.append, watchdog=armed.append)
    deadline = time.monotonic() + 30
    while len(armed) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    leadership.release()
    assert not lost
    assert len(armed) >= 4 and armed[-1] is None
    assert all(s is not None and 0 < s <= 2.0 for s in armed[:-1])
    assert store.record is not None and store.record.holder == ""  # released


WATCHED_CHILD = """
import sys, time
from batchop.controller.leader import exit_watchdog
exit_watchdog(float(sys.argv[1]))
print("armed", flush=True)
time.sleep(float(sys.argv[2]))
print("still alive", flush=True)
"""


def _child(arm_s: float, sleep_s: float) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", WATCHED_CHILD, str(arm_s), str(sleep_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline() == "armed\n"
    return child


def test_exit_watchdog_ends_a_process_that_stops_rearming_it() -> None:
    child = _child(0.5, 30)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1 and "still alive" not in out
    assert "Timeout" in err  # faulthandler's stack dump says why
