"""High availability against the real API server: two `batchop run --leader-elect`, one acts.

Each operator authenticates as its own ServiceAccount, and the API server's audit log
(the session cluster logs every ServiceAccount write, see conftest.py) is the witness of
who wrote what and when: not the operators' own logs. The scenario:

1. operator A takes the Lease; operator B starts and stands by;
2. models are created (some with the tuning loop ticking every 5 s against an absent
   Prometheus) while a thread keeps changing their replica counts;
3. A is SIGKILLed; during the failover a model is created and another one changed;
4. B takes the Lease, within the stated bound (lease duration + 1.2 x retry period) plus a
   generous margin for this busy machine, and every model converges, the ones created or
   changed during the failover included (no lost decision);
5. the audit log shows no write by B before it held the Lease (the standby never acts) and
   none by A after it died, while both wrote (A before, B after);
6. a graceful stop (SIGTERM) of the leader releases the Lease: a new standby takes over
   within a retry period or so, not a lease duration.

Takeover times are printed, not asserted tightly (this machine is shared and noisy).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import (
    Operator,
    apply,
    bm_manifest,
    delete_namespace,
    free_port,
    get,
    keep_env,
    new_namespace,
    wait_for,
)

pytestmark = pytest.mark.integration

LEASE = "batchop-ha"
DURATION_S, RENEW_S, RETRY_S = 15, 10, 2
BOUND_S = DURATION_S + 1.2 * RETRY_S  # the stated takeover bound (leader.LeaseTiming)
MARGIN_S = 45  # a loaded two-core machine: generous, this is not a speed test
MODELS = 6


@dataclass
class AsServiceAccount:
    """The cluster as one operator sees it: the same server, its own ServiceAccount token."""

    cluster: Any
    kubeconfig: Path

    def environ(self) -> dict[str, str]:
        return {**self.cluster.environ(), "KUBECONFIG": str(self.kubeconfig)}


def _service_account(cluster: Any, namespace: str, name: str, path: Path) -> AsServiceAccount:
    """A ServiceAccount with every right in `namespace` only, and a kubeconfig for it."""
    cluster.kubectl("create", "serviceaccount", name, "-n", namespace)
    cluster.kubectl(
        "create", "rolebinding", name, "-n", namespace, "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{name}",
    )  # fmt: skip
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration=2h").stdout
    admin = cluster.kubectl_json("config", "view", "--raw", "--minify", "--flatten")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": name, "user": {"token": token.strip()}}],
        "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return AsServiceAccount(cluster, path)


class ElectingOperator(Operator):
    """`batchop run --leader-elect`, serving its /metrics on a port of its own."""

    metrics_port: int

    def leader_gauge(self) -> float | None:
        """`batchop_leader` from the operator's /metrics (None while not served)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("batchop_leader "):
                return float(line.split()[1])
        return None


def _operator(
    cluster: Any, namespace: str, identity: str, tmp_path: Path, prometheus: str
) -> ElectingOperator:
    seen_as = _service_account(cluster, namespace, identity, tmp_path / f"{identity}.kubeconfig")
    port = free_port()
    op = ElectingOperator(
        seen_as, [namespace], tmp_path / f"{identity}.log",
        "--metrics-address", f"127.0.0.1:{port}",  # the harness's "off" comes first
        "--leader-elect", "--lease-identity", identity, "--lease-namespace", namespace,
        "--lease-name", LEASE, "--lease-duration", str(DURATION_S),
        "--lease-renew-deadline", str(RENEW_S), "--lease-retry-period", str(RETRY_S),
        "--prometheus-url", prometheus,
    )  # fmt: skip
    op.metrics_port = port
    return op


def _holder(cluster: Any, namespace: str) -> str:
    lease = get(cluster, namespace, "lease", LEASE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _converged(cluster: Any, namespace: str, name: str) -> bool:
    """The operator has acted on the model's newest spec: status observed its generation and
    the Deployment has the replica count the spec asks for."""
    bm = get(cluster, namespace, "batchedmodel", name)
    dep = get(cluster, namespace, "deployment", name)
    if bm is None or dep is None:
        return False
    observed = (bm.get("status") or {}).get("observedGeneration")
    return bool(
        observed == bm["metadata"]["generation"]
        and dep["spec"]["replicas"] == bm["spec"]["scaling"]["replicas"]
    )


def _set_replicas(cluster: Any, namespace: str, name: str, replicas: int) -> None:
    patch = {"spec": {"scaling": {"replicas": replicas}}}
    cluster.kubectl(
        "patch", "batchedmodel", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )


class Churn(threading.Thread):
    """Keeps changing the models' replica counts (as admin, not audited) until stopped."""

    def __init__(self, cluster: Any, namespace: str, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.names = cluster, namespace, names
        self.stop = threading.Event()
        self.changes = 0
        self.errors: list[str] = []

    def run(self) -> None:
        step = 0
        while not self.stop.wait(1.0):
            name = self.names[step % len(self.names)]
            try:
                _set_replicas(self.cluster, self.namespace, name, 1 + step % 3)
                self.changes += 1
            except Exception as exc:  # an API hiccup: the next change comes in a second
                self.errors.append(str(exc))
            step += 1


def _audit(cluster: Any, namespace: str) -> list[dict[str, Any]]:
    """Completed write requests made by this namespace's ServiceAccounts, oldest first."""
    prefix = f"system:serviceaccount:{namespace}:"
    out = []
    for line in cluster.audit_log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        user = (event.get("user") or {}).get("username", "")
        if event.get("stage") == "ResponseComplete" and user.startswith(prefix):
            event["_who"] = user.removeprefix(prefix)
            event["_at"] = datetime.fromisoformat(event["requestReceivedTimestamp"])
            out.append(event)
    return sorted(out, key=lambda e: e["_at"])


def _what(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
    code = (event.get("responseStatus") or {}).get("code")
    return f"{event['verb']} {ref.get('resource')}{sub} {ref.get('name', '')} -> {code}"


def _is_lease(event: dict[str, Any]) -> bool:
    return (event.get("objectRef") or {}).get("resource") == "leases"


def _succeeded(event: dict[str, Any]) -> bool:
    return 200 <= int((event.get("responseStatus") or {}).get("code") or 0) < 300


def test_standby_takes_over_after_the_leader_is_killed(cluster: Any, tmp_path: Path) -> None:
    if not getattr(cluster, "audit", False):
        pytest.skip("the session cluster has no audit log: who wrote what cannot be judged")
    cluster.install_crd()
    ns = new_namespace(cluster, "bm-ha")
    prometheus = f"http://127.0.0.1:{free_port()}"  # absent: the tuner holds, and says so
    a = _operator(cluster, ns, "op-a", tmp_path, prometheus)
    b = _operator(cluster, ns, "op-b", tmp_path, prometheus)
    c = _operator(cluster, ns, "op-c", tmp_path, prometheus)
    churn: Churn | None = None
    try:
        a.start()
        wait_for(lambda: _holder(cluster, ns) == "op-a", "op-a to hold the lease", operator=a)
        b.start()  # its liveness endpoint answers while it stands by

        names = [f"m{i}" for i in range(MODELS)]
        for i, name in enumerate(names):
            bm = bm_manifest(name, ns, replicas=1)
            if i % 2:  # the tuning loop ticks on these (Prometheus is absent: it holds)
                bm["spec"]["autotune"] = {"queueDelay": True, "replicas": False,
                                          "intervalSeconds": 5}  # fmt: skip
            apply(cluster, bm)
        for name in names:
            wait_for(lambda n=name: _converged(cluster, ns, n), f"{name} reconciled", operator=a)
        assert _holder(cluster, ns) == "op-a" and b.alive()
        assert (a.leader_gauge(), b.leader_gauge()) == (1.0, 0.0)

        churn = Churn(cluster, ns, names)
        churn.start()
        time.sleep(8)  # the leader works under churn for a while

        killed_at = datetime.now(UTC)
        started = time.monotonic()
        a.kill()
        # Decisions asked for while nobody leads: a new model, and a change to an old one.
        apply(cluster, bm_manifest("born-in-failover", ns, replicas=2))
        _set_replicas(cluster, ns, names[0], 4)  # churn moves it on again later; fine
        wait_for(lambda: _holder(cluster, ns) == "op-b", "op-b to take the lease",
                 timeout=BOUND_S + MARGIN_S, operator=b)  # fmt: skip
        takeover_s = time.monotonic() - started
        wait_for(lambda: _converged(cluster, ns, "born-in-failover"),
                 "the model created during the failover to be reconciled",
                 timeout=BOUND_S + MARGIN_S, operator=b)  # fmt: skip
        first_action_s = time.monotonic() - started
        churn.stop.set()
        churn.join(timeout=30)
        assert b.leader_gauge() == 1.0
        # kopf's Events name the replica that posted them (reportingInstance).
        posted = {
            e.get("reportingInstance")
            for e in cluster.kubectl_json("get", "events", "-n", ns)["items"]
            if e.get("reportingComponent") == "kopf"
        }
        assert {"op-a", "op-b"} <= posted, posted
        for name in names:
            wait_for(lambda n=name: _converged(cluster, ns, n), f"{name} converged after the "
                     "failover", operator=b)  # fmt: skip
        print(
            f"\nfailover: lease taken {takeover_s:.1f}s after SIGKILL (bound {BOUND_S:.1f}s: "
            f"duration {DURATION_S}s + 1.2 x retry {RETRY_S}s); model created during the "
            f"failover reconciled after {first_action_s:.1f}s; {churn.changes} spec changes "
            f"by the churn thread ({len(churn.errors)} failed)"
        )
        assert takeover_s <= BOUND_S + MARGIN_S

        # Graceful stop (a rolling update): the leader releases the Lease on SIGTERM.
        c.start()
        started = time.monotonic()
        b.stop()
        wait_for(lambda: _holder(cluster, ns) == "op-c", "op-c to take the released lease",
                 timeout=RETRY_S * 1.2 + MARGIN_S, operator=c)  # fmt: skip
        handover_s = time.monotonic() - started
        print(f"handover after SIGTERM (lease released): {handover_s:.1f}s "
              f"(retry period {RETRY_S}s, plus the old leader's shutdown)")  # fmt: skip
        _set_replicas(cluster, ns, names[1], 3)
        wait_for(lambda: _converged(cluster, ns, names[1]), "op-c to act", operator=c)
    finally:
        if churn is not None:
            churn.stop.set()
        for op in (a, b, c):
            op.stop()
        if not keep_env():
            delete_namespace(cluster, ns)

    time.sleep(1)  # the audit backend writes synchronously; this is only for the file buffer
    writes = _audit(cluster, ns)
    by = {who: [e for e in writes if e["_who"] == who] for who in ("op-a", "op-b", "op-c")}
    assert [e for e in by["op-a"] if not _is_lease(e) and _succeeded(e)], "op-a never acted"
    late = [_what(e) for e in by["op-a"] if e["_at"] > killed_at]
    assert not late, f"op-a wrote after it was killed: {late}"
    for who in ("op-b", "op-c"):
        taken = [e["_at"] for e in by[who] if _is_lease(e) and _succeeded(e)]
        assert taken, f"{who} never wrote the lease"
        # A candidate's refused try at the Lease is no action; anything else would be.
        early = [_what(e) for e in by[who] if e["_at"] < taken[0] and not _is_lease(e)]
        assert not early, f"{who} wrote while standing by: {early}"
        acted = [e for e in by[who] if not _is_lease(e) and _succeeded(e)]
        assert acted, f"{who} held the lease but never acted"
    b_took = min(e["_at"] for e in by["op-b"] if _is_lease(e) and _succeeded(e))
    print(f"audit: op-a {len(by['op-a'])} writes, op-b {len(by['op-b'])}, "
          f"op-c {len(by['op-c'])}; op-b took the lease "
          f"{(b_took - killed_at).total_seconds():.1f}s after the kill")  # fmt: skip
