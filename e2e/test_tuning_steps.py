"""The closed loop on the real stack: a step up in load, then a step down.

Real parts only: the operator (`batchop run`) tunes a BatchedModel on the local cluster, the
pod runner runs a real tritonserver per pod, the stack's Prometheus scrapes them, and
`batchop load` sends open-loop Poisson load at the model's Ready pods (~6.7 min in all).

Rates and SLO come from the cpu-demo profile (4 ms for a batch of 1, 4.3 ms for 2) with the
model capped at maxBatchSize 2: one replica then serves at most ~460 req/s with full batches,
~250 with none, and less here, where Python-backend overhead on two busy cores adds to every
execution. So 350 req/s needs a second replica (or, at the least, batching: a delay change),
and 40 req/s is served by one. The simulator with the same policy agrees (delay raised at
40 req/s, delay cut and 1 -> 2+ replicas at 350).

What is asserted is behaviour, not speed:
- the step up gets a decision that moves the right way: more replicas, or a shorter delay
  (near capacity the delay buys nothing and costs latency, so a longer one is wrong); a
  delay raised later, once replicas have room, must keep the settled p99 (or be undone);
- the step down gives replicas back within its 130 s (the step up's count is kept two
  horizons, a horizon being a pod start plus a tick, then the 30 s window); a hold is not
  judged when Triton's own p99 was over the SLO in the step down (the policy must then
  hold), when the sizing
  learned that this load grew to the step up's within two pod starts (read from
  status.learned: with one step up seen from this very load, it holds by design; the
  sizing's give-back is tested in the simulator), or when pods started so slowly that two
  horizons outlast the step;
- no request failed while the delay was reloaded live: every failed request, if any, went to
  a pod removed by the scale-down, after it was decided (and, on a machine that keeps the
  generator on schedule, none failed at all: removed pods drain for their preStop sleep);
- once settled (the last SETTLED_S of each step), p99 is within the SLO with TOLERANCE.
  Which p99: the clients' own when the generator kept its schedule (send-lag p99 within the
  tolerance, 10 ms: client latencies include that lag and the HTTP round trip); otherwise
  Triton's own p99 from the stack's Prometheus at the end of the step (queue + compute,
  server side, what the policy reads), which the generator's lag does not inflate. So the
  p99 is judged on a busy machine too. (Seen: send lag p99 40 ms, clients' p99 53 ms with
  Triton's at 37 ms.)
What cannot be judged on this run (no Prometheus series; a scaled-out pod not Ready yet,
once its Triton took 80 s to load the model; a starved generator for the no-failure check)
is reported as a skip with the reason, after everything else was asserted.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop.api.constants import LABEL_MODEL
from batchop.api.models import parse_batched_model
from batchop.sim.profile import load_profile
from batchop.tuning.policy import DEFAULT_STARTUP_S
from batchop_dev.local.load import REJECTION_MESSAGES
from batchop_dev.local.steps import client_p99
from batchop_dev.local.triton import write_model_repository

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "e2e-steps"
NAME = "stepper"
SLO_MS = 40.0
LOW, HIGH = 40.0, 350.0
INTERVAL_S = 10
COVERAGE = 0.95  # the API's default
# (start, end, rps): low, the step up, the step down. The step up lasts 270 s: Triton's p99
# is a summary over about its last minute, and on a busy machine the backlog of the first
# minute (one replica) took until 110 s after the step to drain (at 180 s Triton's p99 still
# showed it: 51.9 ms while status read 24.3 ms in the settled 30 s). And the policy raises the
# delay some 120 s after the scale-out (t ~ 182 s), once its recommendations agree: the step
# leaves room for Triton's p99 to show the raise (60 s) and, where it broke the target, for
# the delay to go back (seen: 0 -> 5,000 us, clients' p99 67.7 ms in a step that ended 29 s
# after the raise; another run: 0 -> 4,000 us, Triton's p99 15-22 -> 31-35 ms).
# The step down lasts 130 s: what the step up asked for is kept for two horizons (2 x (pod
# start + tick), the span over which a give-back undone would be a reversal), 60-80 s here,
# and then for the scale-down window.
SCALE_DOWN_WINDOW_S = 30
STEPS = ((0.0, 30.0, LOW), (30.0, 300.0, HIGH), (300.0, 430.0, LOW))
SETTLED_S = 30.0
TOLERANCE = 0.25
POLL_S = 3.0
STARVED_LAG_MS = 100.0


def manifest(repository: str) -> dict[str, Any]:
    bm = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "cpu-demo.yaml").read_text()))
    bm["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    spec = bm["spec"]
    spec["model"].update(name=NAME, repository=repository, maxBatchSize=2)
    spec["slo"]["p99LatencyMilliseconds"] = SLO_MS
    spec["autotune"].update(
        intervalSeconds=INTERVAL_S,
        scaleDownStabilizationSeconds=SCALE_DOWN_WINDOW_S,
        coverage=COVERAGE,
    )
    # The step to 350 req/s overloads the one replica until a second is Ready; the default
    # overload guard (Reject past a 20 ms queue wait) would refuse part of that burst, and
    # this test counts every failure as a failed reload. The guard has its own test
    # (e2e/test_overload.py); here the queue takes the burst, as before spec.overload.
    spec["overload"] = {"policy": "Queue"}
    parse_batched_model(bm)  # a bad manifest fails here, naming the field
    return bm


def test_step_up_scales_out_step_down_gives_back_and_reloads_are_hitless(
    cluster: Any, stack: Any, operator: Any, tmp_path: Path
) -> None:
    bm = manifest(str(stack.repository_dir))
    write_model_repository(
        stack.repository_dir, NAME, load_profile(ROOT / "examples" / "profiles" / "cpu-demo.yaml"),
        max_queue_delay_us=bm["spec"]["batching"]["maxQueueDelayMicroseconds"], max_batch_size=2,
    )  # fmt: skip
    cluster.kubectl("create", "namespace", NAMESPACE)
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(bm))
        deadline = time.monotonic() + 180
        while not (_get(cluster).get("status") or {}).get("readyReplicas"):
            assert time.monotonic() < deadline, "the model never got a Ready pod"
            time.sleep(1)
        trace = tmp_path / "trace.csv"
        trace.write_text(
            "second,rps\n"
            + "".join(f"{s:g},{r:g}\n" for s, _, r in STEPS)
            + f"{STEPS[-1][1]:g},{LOW:g}\n"
        )
        out = tmp_path / "load.json"
        load = subprocess.Popen(
            [sys.executable, "-m", "batchop", "load", "--trace", str(trace),
             "--bm", f"{NAMESPACE}/{NAME}", "--kubeconfig", str(cluster.kubeconfig),
             "--json", str(out), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        t_start = time.time()
        samples = _poll(cluster, load, t_start)
        _, stderr = load.communicate(timeout=120)
        assert load.returncode == 0, stderr
        report = json.loads(out.read_text())
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    _judge(report, samples, t_start, stack.prometheus.url)


def learned_horizon(sample: dict[str, Any]) -> float:
    """The sizing's horizon (pod start + tick) from the pod start status.learned holds."""
    from batchop.tuning.persist import restore

    state = restore(sample.get("learned"), sample["unix"])
    return (state.startup_s or DEFAULT_STARTUP_S) + INTERVAL_S


def learned_hold(sample: dict[str, Any]) -> float:
    """The load the operator's sizing keeps replicas for at LOW, from the status.learned it
    wrote last (0 when there is none)."""
    from batchop.tuning.persist import restore
    from batchop.tuning.sizing import size

    state = restore(sample.get("learned"), sample["unix"])
    if not state.sizing.labels:
        return 0.0
    horizon = (state.startup_s or DEFAULT_STARTUP_S) + INTERVAL_S
    return size(state.sizing, LOW, horizon, COVERAGE).hold_rps


def _get(cluster: Any) -> dict[str, Any]:
    got = cluster.kubectl("get", "bm", "-n", NAMESPACE, NAME, "-o", "json", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else {}


def _poll(cluster: Any, load: subprocess.Popen[str], t_start: float) -> list[dict[str, Any]]:
    """The BatchedModel every POLL_S while the load runs: t, replicas, decision, metrics."""
    samples = []
    while load.poll() is None:
        status = _get(cluster).get("status") or {}
        pods = cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", f"{LABEL_MODEL}={NAME}")[
            "items"
        ]
        samples.append(
            {
                "t": round(time.time() - t_start, 1),
                "replicas": int(status.get("replicas") or 0),
                "ready": int(status.get("readyReplicas") or 0),
                "delay_us": status.get("maxQueueDelayMicroseconds"),
                "decision": status.get("lastDecision") or {},
                "p99_ms": (status.get("metrics") or {}).get("p99LatencyMilliseconds"),
                "pod_ips": sorted(p["status"].get("podIP") or "" for p in pods),
                "learned": status.get("learned"),
                "unix": time.time(),
            }
        )
        time.sleep(POLL_S)
    return samples


def _decisions(samples: list[dict[str, Any]], load_start: float) -> list[dict[str, Any]]:
    """Each distinct status.lastDecision seen, `t` = its recorded time on the load's clock."""
    seen: dict[str, dict[str, Any]] = {}
    for s in samples:
        d = s["decision"]
        if d and d.get("time") not in seen:
            when = datetime.strptime(d["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            seen[d["time"]] = {**d, "t": round(when.timestamp() - load_start, 1)}
    return sorted(seen.values(), key=lambda d: d["t"])


def _judge(
    report: dict[str, Any], samples: list[dict[str, Any]], t_start: float, prometheus_url: str
) -> None:
    # The load's clock (send_s, STEPS) starts when the generator does, after its imports.
    skew = report["start_unix"] - t_start
    samples = [{**s, "t": round(s["t"] - skew, 1)} for s in samples]
    decisions = _decisions(samples, report["start_unix"])
    (_, up_at, _), (_, down_at, _) = STEPS[0], STEPS[1]
    story = "\n".join(
        f"t={d['t']:6.1f}s replicas={d['replicas']} delay={d['maxQueueDelayMicroseconds']} "
        f"{d['reason'][:110]}"
        for d in decisions
    )
    figures = [(s["t"], s["replicas"], s["ready"], s["delay_us"], s["p99_ms"]) for s in samples]
    print(f"\n[steps] decisions:\n{story}\n[steps] (t, replicas, ready, delay, p99): {figures}")
    print(
        f"[steps] load: {report['requests']} requests, {report['failed']} failed, "
        f"send lag p99 {report['send_lag_p99_ms']} ms, errors {report['errors']}"
    )

    before_up = [d for d in decisions if d["t"] < up_at]
    start = before_up[-1] if before_up else {"replicas": 1, "maxQueueDelayMicroseconds": 500}
    in_high = [d for d in decisions if up_at <= d["t"] < down_at + 2 * POLL_S]
    assert any(
        d["replicas"] > start["replicas"]
        or d["maxQueueDelayMicroseconds"] < start["maxQueueDelayMicroseconds"]
        for d in in_high
    ), f"no decision answered the step up to {HIGH:g} req/s (more replicas or less delay):\n{story}"
    wrong = [d for d in in_high if d["replicas"] < start["replicas"]]
    assert not wrong, f"replicas given back during the step up to {HIGH:g} req/s:\n{story}"

    # Hitless: a failure is only allowed on a pod removed by the scale-down, after it.
    rec = report["records"]
    scale_down = [d["t"] for prev, d in pairwise(decisions) if d["replicas"] < prev["replicas"]]
    final_ips = set(samples[-1]["pod_ips"])
    bad = [
        (round(s, 1), tgt)
        for s, ok, tgt in zip(rec["send_s"], rec["ok"], rec["target"], strict=True)
        if not ok and (tgt.split(":")[0] in final_ips or not scale_down or s < scale_down[0] - 1)
    ]
    unjudged: list[str] = []
    lag = report["send_lag_p99_ms"]
    # A generator that sends seconds late times its own requests out: on a starved machine a
    # client timeout says nothing about the reload (seen at load 11-14, send lag 12-157 s,
    # none within 40 s of a reload). Any other failure is judged whatever the lag.
    # (the error's key is "ExceptionType: message"; Triton's queue-policy refusal "Request
    # timeout expired" is the server's answer, not a client timeout)
    timeouts_only = all(
        ("timeout" in error.lower() or "timed out" in error.lower())
        and not any(m in error for m in REJECTION_MESSAGES)
        for error in report["errors"]
    )
    if bad and lag >= STARVED_LAG_MS and timeouts_only:
        unjudged.append(
            f"hitless not judged: {len(bad)} client timeouts with send lag p99 "
            f"{lag} ms >= {STARVED_LAG_MS:g} ms (a starved machine)"
        )
    else:
        assert not bad, (
            f"{len(bad)} failed requests not explained by a scale-down: "
            f"{bad[:10]}; errors {report['errors']}"
        )
    if lag < STARVED_LAG_MS:
        # Removed pods drain (preStop sleep, honoured by the pod runner) longer than the load
        # generator takes to drop them: on a machine that keeps its schedule none fails.
        assert report["failed"] == 0, f"{report['failed']} failed requests: {report['errors']}"
    elif report["failed"]:
        unjudged.append(
            f"{report['failed']} failures on removed pods not judged (send lag "
            f"p99 {lag} ms >= {STARVED_LAG_MS:g} ms: a starved machine)"
        )

    start_unix = report["start_unix"]
    peak = max(s["replicas"] for s in samples if up_at <= s["t"] <= down_at + 30)
    end = samples[-1]["replicas"]
    low_end = STEPS[2][1]
    low_p99 = triton_p99(prometheus_url, low_end, start_unix, worst_of_s=low_end - down_at - 30)
    print(
        f"[steps] Triton's worst p99 in the step down after 30 s: {low_p99} ms; replicas "
        f"{peak} -> {end}"
    )
    held_for = learned_hold(samples[-1])
    no_give_back = ""
    if peak == 1:
        assert end == 1
    elif end >= peak and held_for >= 0.8 * HIGH:
        # The sizing learned this load: the first LOW step rose to HIGH within a pod start,
        # every time it was seen (once), so it keeps what HIGH needs, by design
        # (docs/policy.md). Whether it then gives back is for the simulator's tests.
        unjudged.append(
            f"give-back not judged: the sizing learned that {LOW:g} req/s grew to "
            f"{held_for:.0f} req/s within two pod starts (status.learned), so it holds"
        )
    elif end >= peak and low_p99 is not None and low_p99 > SLO_MS:
        # The policy never scales down while the p99 it reads breaks the SLO: holding is right.
        # (A give-back is judged whatever that p99: seen 2 -> 1 at 50.7 ms, the step up's.)
        unjudged.append(
            f"give-back not judged: Triton's p99 {low_p99:.1f} ms > SLO in the "
            "step down (the machine was too slow to serve it)"
        )
    elif (
        end >= peak
        and down_at + 2 * learned_horizon(samples[-1]) + SCALE_DOWN_WINDOW_S + 2 * INTERVAL_S
        > low_end
    ):
        # The step up's count is kept two horizons and the window by design: pods that
        # started this slowly (a starved machine) keep it past the end of the step down.
        unjudged.append(
            f"give-back not judged: a horizon of {learned_horizon(samples[-1]):.0f} s "
            f"(status.learned) and the {SCALE_DOWN_WINDOW_S} s window keep the step up's "
            f"replicas past the {low_end - down_at:.0f} s step down"
        )
    elif end >= peak:
        # Judged after every other check, so that a failure here still reports the rest.
        no_give_back = (
            f"the step down gave no replica back within {low_end - down_at:.0f} s ({peak} -> "
            f"{end}; horizon {learned_horizon(samples[-1]):.0f} s):\n{story}"
        )

    for _, end_s, rps in (STEPS[1], STEPS[2]):
        settled = [s for s in samples if end_s - SETTLED_S <= s["t"] <= end_s]
        shape = sorted({(s["replicas"], s["ready"]) for s in settled})
        if rps == HIGH and any(s["ready"] < s["replicas"] for s in settled):
            # The scaled-out pods' Triton had not loaded the model yet (seen once: 80 s on a
            # saturated machine); the machine, not the loop, would be measured.
            unjudged.append(f"p99 at {rps:g} req/s not judged: replicas not all Ready {shape}")
            continue
        p99, n = client_p99(report["records"], end_s - SETTLED_S, end_s)
        server = triton_p99(prometheus_url, end_s, start_unix)
        print(
            f"[steps] settled p99 at {rps:g} req/s: clients {p99} ms over {n} requests, "
            f"Triton {server} ms; (replicas, ready): {shape}"
        )
        assert n > 0 and p99 is not None
        moved = [
            d
            for prev, d in pairwise(decisions)
            if end_s - 60 <= d["t"] <= end_s and d["replicas"] != prev["replicas"]
        ]
        if lag <= SLO_MS * TOLERANCE:
            which, value = "clients'", p99
        elif moved and server is not None and p99 <= SLO_MS * (1 + TOLERANCE):
            # Triton's p99 is a worst-pod summary over about a minute: a replica added in it
            # shows its first requests' wait (seen: 158 ms while the clients' p99 was 34 ms).
            unjudged.append(
                f"p99 at {rps:g} req/s not judged: replicas moved in Triton's "
                f"last minute, Triton {server} ms, clients {p99:.1f} ms"
            )
            continue
        elif server is not None:
            which, value = "Triton's", server  # the generator's lag is not in it
        else:
            unjudged.append(
                f"p99 at {rps:g} req/s not judged: send lag p99 {lag} ms and no "
                "Triton p99 series in Prometheus"
            )
            continue
        assert value <= SLO_MS * (1 + TOLERANCE), (
            f"{which} p99 {value:.1f} ms over SLO {SLO_MS:g} ms (+{TOLERANCE:.0%}) in the last "
            f"{SETTLED_S:g} s of the {rps:g} req/s step (send lag p99 {lag} ms):\n{story}"
        )
    assert not no_give_back, no_give_back
    if unjudged:
        pytest.skip("; ".join(unjudged))


def triton_p99(
    prometheus_url: str, t: float, start_unix: float, worst_of_s: float = 0.0
) -> float | None:
    """The worst pod's p99 (ms) from Triton's own summary (the policy's p99 query) at the
    load's time `t`, or the highest it showed in the `worst_of_s` before. The summary covers
    about the last minute of requests, so at a step's end it shows the settled step. None
    when no pod reported one (a summary with no request in its window reports NaN)."""
    series = (
        f'nv_inference_request_summary_us{{quantile="0.99",batchedmodel="{NAME}",'
        f'namespace="{NAMESPACE}"}}'
    )
    if worst_of_s:
        series = f"max_over_time({series}[{worst_of_s:.0f}s])"
    query = urllib.parse.urlencode({"query": f"max({series}) / 1000", "time": start_unix + t})
    with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?{query}", timeout=10) as resp:
        result = json.load(resp)["data"]["result"]
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if value != value else round(value, 2)  # NaN: nothing observed
