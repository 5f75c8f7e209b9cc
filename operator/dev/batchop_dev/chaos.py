"""Faults under traffic on the real stack, each with what it cost (issue 27, item 1).

`bench/chaos.py` runs it (15 min) and writes the result file.

A local cluster of its own (probes readiness), the local stack (the Prometheus Operator and
the Prometheus it configures, a real tritonserver per pod), two `batchop run --leader-elect`,
and the cpu-demo BatchedModel as the demo runs it (kept at two replicas or more), replaying
azure-code for `--minutes`. At known times, one after the other:

- a Triton pod's server SIGKILLed (the pod runner restarts it, as a kubelet would);
- the leader operator SIGKILLed (a new standby is started, as its Deployment would);
- Prometheus restarted (the same address and data);
- kube-apiserver restarted (stopped and started with its own command line);
- a KWOK node deleted, and its pods force-deleted with it, as the controller manager's pod GC
  does once the node is gone (here only after a 40 s quarantine, long after the fault's known
  time); their servers stop, the Deployment replaces them on the other node;
- the Prometheus Operator restarted (Prometheus scrapes on; the operator writes its
  configuration again).

For each fault, over the time until the next: requests that failed
(not counting the overload guard's refusals, reported apart; for a killed pod, and the pods
of the deleted node, the ones in flight when their server went down apart from the rest),
the seconds until every 5 s window again has its p99 within the SLO and no failure, when
status and children were consistent again (Ready, not Degraded, the Deployment's count = its
ready pods = the last decision's), and, over the run, decisions against `Tuned` Events (an
Event more than decisions = a decision applied twice) and each operator's RSS from five
minutes after it took the role it ends the run in (a new leader first grows to a leader's
working set) to the end.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CLUSTER = "batchop-chaos"
WINDOW_S = 5.0  # the windows p99 is judged over after a fault
SAMPLE_S = 2.0  # how often status, children and the operators are read
# When each fault comes, as a share of the run (the first after the model has settled).
FAULTS = (
    (0.10, "triton-pod-killed"),
    (0.23, "leader-operator-killed"),
    (0.36, "prometheus-restarted"),
    (0.49, "apiserver-restarted"),
    (0.62, "node-deleted"),
    (0.75, "prometheus-operator-restarted"),
)
TRACE_START_S = 1060.0  # azure-code from the demo's slice on, at a rate the generator sustains
TRACE_SCALE = 0.01
# The demo's BatchedModel, kept at two replicas or more as a model that must survive a pod's
# death is run (with one, every request fails until it is back).
MIN_REPLICAS = 2
# Targets (issue 27).
RECONCILE_TARGET_S = 60.0
RSS_GROWTH_TARGET = 0.05


# --- the pure part: judging a run from what was recorded ------------------------------------


def window_breaks(
    send_s: np.ndarray, latency_ms: np.ndarray, ok: np.ndarray, failed: np.ndarray, slo_ms: float
) -> dict[int, bool]:
    """Per WINDOW_S window (by index) of requests sent: does it break (p99 of the served over
    the SLO, or any request failed that the guard did not refuse)? Pure."""
    out: dict[int, bool] = {}
    keys = np.floor(send_s / WINDOW_S).astype(np.int64)
    for k in np.unique(keys):
        sel = keys == k
        served = latency_ms[sel & ok]
        p99 = float(np.percentile(served, 99)) if len(served) else 0.0
        out[int(k)] = bool(p99 > slo_ms or failed[sel].any())
    return out


def recovery_s(breaks: dict[int, bool], start_s: float, end_s: float) -> float:
    """Seconds from `start_s` to the end of the last broken window that starts in
    [start_s, end_s): 0 when none broke. Pure."""
    last = None
    for k, broken in breaks.items():
        w0 = k * WINDOW_S
        if broken and start_s - WINDOW_S < w0 < end_s:
            last = w0 if last is None else max(last, w0)
    return 0.0 if last is None else max(0.0, last + WINDOW_S - start_s)


def consistent(sample: dict[str, Any]) -> bool:
    """Status and children agree: Ready, not Degraded, the Deployment's count is its ready
    pods' and the last decision's. Pure. A sample the API server did not answer is not."""
    if sample.get("error"):
        return False
    decided = sample.get("decided")
    return (
        sample.get("ready_condition") == "True"
        and sample.get("degraded") != "True"
        and sample.get("deployment") == sample.get("ready_pods")
        and (decided is None or decided == sample.get("deployment"))
    )


def reconciled_s(samples: list[dict[str, Any]], start_s: float, end_s: float) -> float | None:
    """Seconds from `start_s` until status and children are consistent for good (every sample
    from then to `end_s` is); None when the last sample before `end_s` is not. Pure."""
    inside = [s for s in samples if start_s <= s["t"] < end_s]
    if not inside or not consistent(inside[-1]):
        return None
    settled = inside[-1]["t"]
    for s in reversed(inside):
        if not consistent(s):
            break
        settled = s["t"]
    return settled - start_s


def failures(
    records: dict[str, Any],
    start_s: float,
    end_s: float,
    killed: str | list[str] | None = None,
    killed_at_s: float | None = None,
) -> dict[str, int]:
    """Requests sent in [start_s, end_s): how many, failed (the guard's refusals apart), and
    for killed pods (`killed`, their host:port) the failed ones in flight when their servers
    went down (`killed_at_s`, by default `start_s`). Pure."""
    send = np.asarray(records["send_s"], dtype=float)
    lat = np.asarray([math.nan if v is None else v for v in records["latency_ms"]], dtype=float)
    ok = np.asarray(records["ok"], dtype=bool)
    refused = np.asarray(records["rejected"], dtype=bool)
    target = np.asarray(records["target"], dtype=object)
    failed = ~ok & ~refused
    inside = (send >= start_s) & (send < end_s)
    out = {
        "requests": int(inside.sum()),
        "failed": int((inside & failed).sum()),
        "refused": int((inside & refused).sum()),
    }
    if killed is not None:
        at = start_s if killed_at_s is None else killed_at_s
        dead = np.isin(target, [killed] if isinstance(killed, str) else list(killed))
        # In flight at the kill: sent before it, failed when its connection went (at it).
        in_flight = (send < at) & dead & failed
        in_flight &= send + np.nan_to_num(lat, nan=0.0) / 1000.0 >= at - 1.0
        out["in_flight_failed"] = int(in_flight.sum())
        # Counted in `failed` already: those sent from the fault on, before the kill.
        out["in_flight_failed_inside"] = int((in_flight & inside).sum())
        out["failed_at_killed_pod"] = int((inside & failed & dead & ~in_flight).sum())
    return out


# RSS growth is judged from this long after an operator took the role it ends in (started
# as a standby, or became the leader): a new leader first grows to a leader's working set.
SETTLE_S = 300.0


def rss_growth(samples: list[dict[str, Any]], name: str, at_s: float) -> dict[str, Any]:
    """`name`'s RSS at `at_s` (the first sample from then) and at its last sample. Pure."""
    seen = [(s["t"], s["rss_kb"][name]) for s in samples if s.get("rss_kb", {}).get(name)]
    later = [x for x in seen if x[0] >= at_s]
    if not later:
        return {"operator": name, "at_s": None, "start_kb": None, "end_kb": None, "growth": None}
    (t0, r0), (_, r1) = later[0], seen[-1]
    return {"operator": name, "at_s": t0, "start_kb": r0, "end_kb": r1, "growth": r1 / r0 - 1}


def role_since(samples: list[dict[str, Any]], name: str) -> tuple[str, float | None]:
    """The role `name` ends the run in ("leader" or "standby") and since when it has held
    it (its first sample, for a standby). Pure."""
    seen = [s for s in samples if (s.get("rss_kb") or {}).get(name)]
    since: float | None = None
    for s in seen:
        leads = (s.get("leaders") or {}).get(name) == 1.0
        since = (since if since is not None else s["t"]) if leads else None
    if since is not None:
        return "leader", since
    return "standby", seen[0]["t"] if seen else None


def operators_rss(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every operator alive at the end: its RSS growth from SETTLE_S after it took the
    role it ends in (and not before minute 5 of the run) to its last sample. Pure."""
    last = next((s["rss_kb"] for s in reversed(samples) if s.get("rss_kb")), {})
    rows = []
    for name in sorted(k for k, v in last.items() if v):
        role, since = role_since(samples, name)
        at_s = max(SETTLE_S, (since or 0.0) + SETTLE_S)
        rows.append({**rss_growth(samples, name, at_s), "role": role, "since_s": since})
    return rows


def beyond_in_flight(row: dict[str, Any]) -> int:
    """A fault's failed requests less those in flight at a killed pod when it went down (those
    sent before the fault are not in `failed`). Pure."""
    return row["failed"] - row.get("in_flight_failed_inside", 0)


def judge(
    faults: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    records: dict[str, Any],
    slo_ms: float,
    end_s: float,
    decisions: int,
    tuned_events: int,
) -> dict[str, Any]:
    """Every figure of the report from what the run recorded (times from the load's start).
    Pure."""
    send = np.asarray(records["send_s"], dtype=float)
    lat = np.asarray([math.nan if v is None else v for v in records["latency_ms"]], dtype=float)
    ok = np.asarray(records["ok"], dtype=bool)
    failed = ~ok & ~np.asarray(records["rejected"], dtype=bool)
    breaks = window_breaks(send, np.nan_to_num(lat, nan=0.0), ok, failed, slo_ms)
    rows = []
    for i, f in enumerate(faults):
        until = faults[i + 1]["t"] if i + 1 < len(faults) else end_s
        got = failures(records, f["t"], until, f.get("killed"), f.get("killed_at"))
        rec = reconciled_s(samples, f["t"], until)
        rows.append(
            {
                **f,
                "until_s": until,
                **got,
                "recovered_s": recovery_s(breaks, f["t"], until),
                "reconciled_s": rec,
                "reconciled_met": rec is not None and rec <= RECONCILE_TARGET_S,
            }
        )
    rss = operators_rss(samples)
    return {
        "faults": rows,
        "decisions": decisions,
        "tuned_events": tuned_events,
        "applied_twice": max(0, tuned_events - decisions),
        "rss": rss,
        "targets": {
            "failed_beyond_in_flight": sum(beyond_in_flight(r) for r in rows),
            "applied_twice": max(0, tuned_events - decisions),
            "rss_growth_met": bool(rss)
            and all(r["growth"] is not None and r["growth"] <= RSS_GROWTH_TARGET for r in rss),
            "reconciled_within_60s": all(r["reconciled_met"] for r in rows),
        },
    }


def markdown(prov: str, result: dict[str, Any], setup: str) -> str:
    def sec(x: float | None) -> str:
        return "not reconciled" if x is None else f"{x:.0f}"

    lines = [
        "# Faults under traffic on the real stack (bench/chaos.py)",
        "",
        prov,
        "",
        setup,
        "",
        "| fault | at s | requests until the next | failed (at a kill: in flight; sent to "
        "the killed pod after it) | refused "
        "by the guard | s until every 5 s window is within the SLO, no failure | s until "
        "status and children are consistent |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["faults"]:
        in_flight = (
            f" ({r['in_flight_failed']}; {r['failed_at_killed_pod']})"
            if "in_flight_failed" in r
            else ""
        )
        lines.append(
            f"| {r['name']} | {r['t']:.0f} | {r['requests']:,} | {r['failed']}{in_flight} | "
            f"{r['refused']} | {r['recovered_s']:.0f} | {sec(r['reconciled_s'])} |"
        )
    t = result["targets"]

    def growth(r: dict[str, Any]) -> str:
        return "-" if r["growth"] is None else f"{r['growth']:+.1%}"

    def at(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    lines += [
        "",
        f"- decisions (status.lastDecision) {result['decisions']}, `Tuned` Events "
        f"{result['tuned_events']}: {result['applied_twice']} applied twice",
        *(
            f"- operator {r['operator']}'s RSS, {r['role']} since {at(r['since_s'])} s: "
            f"{r['start_kb']} kB at {at(r['at_s'])} s ({SETTLE_S / 60:g} min after), "
            f"{r['end_kb']} kB at the end ({growth(r)})"
            for r in result["rss"]
        ),
        "",
        "Targets (issue 27):",
        f"- failed requests beyond the killed pod's in-flight ones: "
        f"{t['failed_beyond_in_flight']} (target 0: "
        f"{'met' if t['failed_beyond_in_flight'] == 0 else 'not met'})",
        f"- decisions applied twice: {t['applied_twice']} (target 0: "
        f"{'met' if t['applied_twice'] == 0 else 'not met'})",
        f"- operator RSS growth from {SETTLE_S / 60:g} min in its role to the end: "
        f"{', '.join(growth(r) for r in result['rss']) or '-'} (target <= 5%: "
        f"{'met' if t['rss_growth_met'] else 'not met'})",
        f"- reconciled within 60 s of each fault: "
        f"{'met' if t['reconciled_within_60s'] else 'not met'}",
        "",
    ]
    return "\n".join(lines)


# --- the shell: the stack, the faults, the sampling ------------------------------------------


def _leader(metrics_url: str) -> float | None:
    try:
        with urllib.request.urlopen(metrics_url, timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("batchop_leader "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _triton_pid(address: str) -> int | None:
    """The tritonserver bound to `address` (a pod IP), from /proc."""
    from batchop_dev.local.processes import command_lines

    want = f"--http-address={address}".encode()
    return next(
        (
            pid
            for pid, argv in command_lines()
            if argv[0].endswith(b"tritonserver") and want in argv
        ),
        None,
    )


class Run:
    """One chaos run: the stack, two operators, the model, the load and the faults."""

    def __init__(
        self, minutes: float, say: Callable[[str], None], cluster_name: str = CLUSTER
    ) -> None:
        self.minutes, self.say, self.cluster_name = minutes, say, cluster_name
        self.workdir = Path(tempfile.mkdtemp(prefix="batchop-chaos-"))
        self.operators: dict[str, Any] = {}
        self.samples: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.decision_times: set[str] = set()
        self.cluster: Any = None
        self.stack: Any = None
        self.bm: Any = None
        self._api: Any = None

    # The operators: two `batchop run --leader-elect`, a third started when the leader dies.
    def _launch(self, name: str) -> None:
        ns = self.bm.namespace or "default"
        self.operators[name] = self.stack.launch_operator(
            self.workdir / f"operator-{name}.log",
            ["--leader-elect", "--lease-identity", f"chaos-{name}", "--lease-namespace", ns],
        )
        self.say(f"operator {name} up (log {self.workdir / f'operator-{name}.log'})")

    def _sample(self, t: float) -> None:
        from kubernetes import client

        from batchop.api.constants import GROUP, LABEL_MODEL, PLURAL, VERSION
        from batchop.controller.autotune import applied_delay

        ns, name = self.bm.namespace or "default", self.bm.name
        sample: dict[str, Any] = {
            "t": t,
            "leaders": {k: _leader(o.metrics_url) for k, o in self.operators.items()},
            "rss_kb": {
                k: _rss_kb(o.process.pid)
                for k, o in self.operators.items()
                if o.process.poll() is None
            },
        }
        try:
            bm = client.CustomObjectsApi(self._api).get_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name
            )
            dep = client.AppsV1Api(self._api).read_namespaced_deployment(name, ns)
            pods = client.CoreV1Api(self._api).list_namespaced_pod(
                ns, label_selector=f"{LABEL_MODEL}={name}"
            )
        except Exception as exc:  # noqa: BLE001 - the API server may be the fault
            sample["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            self.samples.append(sample)
            return
        status = bm.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        last = status.get("lastDecision") or {}
        if last.get("time"):
            self.decision_times.add(f"{last['time']}/{last.get('kind')}")
        ready = [
            p
            for p in pods.items
            if not p.metadata.deletion_timestamp
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        as_dicts = [self._api.sanitize_for_serialization(p) for p in ready]
        sample.update(
            deployment=dep.spec.replicas,
            ready_pods=len(ready),
            decided=last.get("replicas"),
            ready_condition=conditions.get("Ready"),
            degraded=conditions.get("Degraded"),
            delay=status.get("maxQueueDelayMicroseconds"),
            pods_delay=applied_delay(as_dicts),
        )
        self.samples.append(sample)

    # The faults.
    def _inject(self, name: str, t: float) -> dict[str, Any]:
        from batchop.api.constants import PORT_HTTP
        from batchop_dev.local.demo import model_pods, pod_ready

        fault: dict[str, Any] = {"name": name, "t": t}
        if name == "triton-pod-killed":
            pod = next(p for p in model_pods(self.cluster, self.bm) if pod_ready(p))
            ip = pod["status"]["podIP"]
            pid = _triton_pid(ip)
            if pid is None:
                raise RuntimeError(f"no tritonserver bound to {ip} (pod {pod['metadata']['name']})")
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            fault.update(pod=pod["metadata"]["name"], killed=f"{ip}:{PORT_HTTP}")
        elif name == "leader-operator-killed":
            leader = next(k for k, o in self.operators.items() if _leader(o.metrics_url) == 1.0)
            proc = self.operators.pop(leader).process
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            fault["operator"] = leader
            self._launch("c")  # the replacement a Deployment would start
        elif name == "prometheus-restarted":
            self.stack.prometheus.restart_server()
        elif name == "prometheus-operator-restarted":
            # Prometheus scrapes on through it; the operator, back, writes its config again.
            self.stack.prometheus.restart_operator()
        elif name == "apiserver-restarted":
            fault["down_s"] = round(self.cluster.restart_component("kube-apiserver"), 1)
        elif name == "node-deleted":
            pods = model_pods(self.cluster, self.bm)
            nodes = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")]
            node = max(set(nodes), key=nodes.count)
            gone = [p for p in pods if p["spec"].get("nodeName") == node]
            self.cluster.kubectl("delete", "node", node, "--wait=false")
            # The pod GC's part, at once: its pods force-deleted; their servers then stop.
            self.cluster.kubectl(
                "delete",
                "pod",
                "-n",
                self.bm.namespace or "default",
                *(p["metadata"]["name"] for p in gone),
                "--grace-period=0",
                "--force",
                "--wait=false",
            )
            ips = [p["status"]["podIP"] for p in gone if p["status"].get("podIP")]
            t_start = time.time()
            while any(_triton_pid(ip) for ip in ips) and time.time() - t_start < 15.0:
                time.sleep(0.2)
            fault.update(
                node=node,
                pods=[p["metadata"]["name"] for p in gone],
                killed=[f"{ip}:{PORT_HTTP}" for ip in ips],
                killed_at=t + time.time() - t_start,
            )
        self.say(f"fault at {t:.0f} s: {fault}")
        return fault

    def go(self) -> dict[str, Any]:
        from kubernetes import config

        from batchop.sim.trace import load_trace
        from batchop_dev.local import bursts
        from batchop_dev.local.cluster import LocalCluster
        from batchop_dev.local.demo import (
            EXAMPLES,
            TRACE_SPEC,
            LoadThread,
            prepare_model,
            wait_ready,
        )
        from batchop_dev.local.load import BatchedModelPods
        from batchop_dev.local.processes import stop_group
        from batchop_dev.local.stack import LocalStack

        seconds = self.minutes * 60.0
        trace = bursts.trace_slice(
            load_trace(bursts.find_trace("azure-code", EXAMPLES.parent)),
            TRACE_START_S,
            seconds,
            TRACE_SCALE,
        )
        self.cluster = LocalCluster(self.cluster_name, progress=self.say, readiness="probes")
        self.cluster.up(replace=True)
        try:
            self.stack = LocalStack(
                self.cluster.kubeconfig, workdir=self.workdir / "stack", say=self.say
            ).start()
            overrides = {
                **TRACE_SPEC,
                "scaling": {"replicas": MIN_REPLICAS, "minReplicas": MIN_REPLICAS},
            }
            manifest, self.bm = prepare_model(self.stack, overrides)
            self.cluster.install_crd()
            self._api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig))
            self._launch("a")
            self._launch("b")
            self.cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
            wait_ready(self.cluster, self.bm, timeout_s=240)
            ns = self.bm.namespace or "default"
            load = LoadThread(
                trace, BatchedModelPods(ns, self.bm.name, kubeconfig=str(self.cluster.kubeconfig))
            )
            self.say(
                f"load: azure-code [{TRACE_START_S:g} + {seconds:g} s] x{TRACE_SCALE:g}, "
                f"mean {trace.mean_rate(0, trace.end):.0f} req/s, faults at "
                + ", ".join(f"{share * seconds:.0f} s ({n})" for share, n in FAULTS)
            )
            load.start()
            t0 = time.time()
            pending = [(share * seconds, name) for share, name in FAULTS]
            while load.thread.is_alive():
                t = time.time() - t0
                if pending and t >= pending[0][0]:
                    self.faults.append(self._inject(pending.pop(0)[1], t))
                    t = time.time() - t0  # an injection may block (a restart, a stop)
                self._sample(t)
                time.sleep(max(0.0, SAMPLE_S - (time.time() - t0 - t)))
            load.thread.join()
            if load.error is not None:
                raise RuntimeError(f"the load generator failed: {load.error}")
            report = load.report
            # Fault and sample times count from when the generator started (its start_unix).
            shift = t0 - float(report["start_unix"])
            for item in (*self.faults, *self.samples):
                item["t"] = round(item["t"] + shift, 2)
                if "killed_at" in item:
                    item["killed_at"] = round(item["killed_at"] + shift, 2)
            events = self.cluster.kubectl_json(
                "get",
                "events",
                "-n",
                ns,
                "--field-selector",
                f"involvedObject.name={self.bm.name},reason=Tuned",
            )["items"]
            tuned = sum(int(e.get("count") or 1) for e in events)
            return {
                "report": report,
                "tuned_events": tuned,
                "slo_ms": float(self.bm.spec.slo.p99_latency_milliseconds),
                "end_s": float(trace.end),
                "mean_rps": trace.mean_rate(0, trace.end),
            }
        finally:
            for o in self.operators.values():
                stop_group(o.process)
            if self.stack is not None:
                self.stack.stop()
            self.cluster.down()


def plot(samples: list[dict[str, Any]], report: dict[str, Any], faults: list[dict], slo_ms: float,
         path: Path) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = report["timeline"]
    t = [s["t"] for s in timeline]
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    axes[0].plot(t, [s["ok"] for s in timeline], lw=0.8, label="served /s")
    axes[0].plot(t, [s["failed"] - s["rejected"] for s in timeline], lw=0.8, label="failed /s")
    axes[0].plot(t, [s["rejected"] for s in timeline], lw=0.8, label="refused by the guard /s")
    axes[0].set_ylabel("requests per second")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[1].plot(t, [s["p99_ms"] or 0.0 for s in timeline], lw=0.6, label="p99 of the second")
    axes[1].axhline(slo_ms, color="red", ls="--", lw=0.8, label="SLO")
    axes[1].set_ylabel("client p99 ms")
    axes[1].set_yscale("log")
    axes[1].legend(loc="upper right", fontsize=8)
    st = [s["t"] for s in samples if "deployment" in s]
    axes[2].step(st, [s["deployment"] for s in samples if "deployment" in s], where="post",
                 label="Deployment replicas")  # fmt: skip
    axes[2].step(st, [s["ready_pods"] for s in samples if "deployment" in s], where="post",
                 label="ready pods")  # fmt: skip
    axes[2].set_ylabel("replicas")
    axes[2].set_xlabel("seconds")
    axes[2].legend(loc="upper right", fontsize=8)
    for ax in axes:
        for f in faults:
            ax.axvline(f["t"], color="grey", ls=":", lw=0.8)
    for f in faults:
        axes[0].annotate(f["name"], (f["t"], 0), rotation=90, fontsize=7, va="bottom")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
