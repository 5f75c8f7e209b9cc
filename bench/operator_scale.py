"""One operator, N BatchedModels: cold reconcile time, CPU per tuning tick, RSS, queries per tick.

Run: .venv/bin/python bench/operator_scale.py [--models 100 1000] [--window 60]

Brings up its own local cluster (--name, default batchop-scale; taken down at the end), installs
the CRD, and for each N creates N BatchedModels at 0 replicas (KWOK; no Triton, no pods) with
queue-delay tuning on every 5 s, then starts one `batchop run` and measures:

- time from starting the operator until 99% and until all models have Ready=True at their
  generation (models still late after --stall s without progress are reported as stuck);
- operator CPU (utime+stime from /proc) per tuning tick over windows of --window s, ticks
  counted by the operator's own batchop_tick_duration_seconds histogram. The cold start leaves
  a backlog of watch events that takes minutes to drain at N=1000, and its CPU would be
  counted as the ticks': windows repeat until two in a row agree within --tolerance (at most
  --max-windows); the last one is reported, the first one too, to show the drain;
- peak RSS (VmHWM);
- Prometheus queries per tick, counted by Prometheus itself (prometheus_http_requests_total).

Prometheus, its PromQL and the operator are real: for each N the local stack's Prometheus
(batchop_dev.local.prometheus, Debian's build) scrapes every --scrape-interval s, and the operator's
observer sends it its own queries. THE ONE STAND-IN IS THE SCRAPE TARGETS: there are no Triton
pods at N=1000 (KWOK), so one synthetic exporter (bench/synthetic_triton.py) stands in for N
Triton pods, scraped as N targets labelled as the pod relabeling labels a Triton pod, each
answering Triton-format nv_inference_* series at fixed healthy figures (p99 20 ms, SLO 50 ms).
Before the operator starts, the benchmark checks with the observer's own queries that every
model has every part; the operator then finds data for all N from its first tick.

--profile DIR records the operator's cold phase with py-spy (raw collapsed stacks, every
thread, idle samples included, so waiting on the API server shows) and prints the top frames.

Writes the table, with the command, commit and machine load, to bench/results/operator_scale.md
after each N (a partial run keeps its rows; --out to write elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synthetic_triton import SyntheticTritonExporter

from batchop.observe.prometheus import PrometheusObserver
from batchop.provenance import Provenance
from batchop_dev.local.cluster import LocalCluster
from batchop_dev.local.processes import command_lines, stop_group
from batchop_dev.local.prometheus import PrometheusServer

REPO = Path(__file__).resolve().parents[1]
PROFILE_IDLE = True  # --profile-cpu sets it False
# --operator-source: the operator's code from another tree (an earlier commit's `operator/`,
# e.g. from `git archive`), to measure before and after a change with the same benchmark.
OPERATOR_SOURCE: Path | None = None
OPERATOR_LABEL = ""


def operator_environ(cluster: LocalCluster) -> dict[str, str]:
    """The operator's environment: the cluster's, and --operator-source first on its path."""
    env = cluster.environ()
    if OPERATOR_SOURCE is not None:
        source = OPERATOR_SOURCE / "operator"
        env["PYTHONPATH"] = os.pathsep.join([str(source), str(source / "dev")])
    return env


RESULTS = REPO / "bench" / "results" / "operator_scale.md"
TICK_METRIC = "batchop_tick_duration_seconds"
RATE_WINDOW_S = 60.0  # the operator's default --rate-window (1m)
QUERY_METRIC = "batchop_prometheus_query_duration_seconds"


def start_profile(pid: int, out: Path, idle: bool = True) -> subprocess.Popen[bytes]:
    """py-spy recording `pid` until stopped: raw collapsed stacks, per thread, idle samples
    included unless `idle` is False (then only samples of threads on a CPU: where the CPU
    goes, not where the threads wait)."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.is_file():
        raise SystemExit(f"--profile needs py-spy at {spy} (make install puts it there)")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(spy), "record", "--pid", str(pid), "--format", "raw", "--output", str(out),
         "--threads", *(["--idle"] if idle else []), "--rate", "50", "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def stop_profile(spy: subprocess.Popen[bytes], out: Path) -> None:
    """Stop py-spy (it writes on SIGINT) and print where the samples are."""
    spy.send_signal(signal.SIGINT)
    _, err = spy.communicate(timeout=60)
    if not out.is_file():
        print(f"  py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        return
    print(f"  profile of the cold phase: {out}")
    for line in profile_summary(out):
        print(f"    {line}")


def profile_summary(path: Path, top: int = 25) -> list[str]:
    """Share of samples per thread, and the frames most often on the stack (self and total)."""
    threads: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        threads[frames[0]] += count
        for frame in set(frames[1:]):
            inclusive[frame] += count
        own[frames[-1]] += count
    if not total:
        return ["no samples"]
    out = [f"{total} samples"]
    out += [f"thread {k}: {100 * v / total:.1f}%" for k, v in threads.most_common(12)]
    out += [f"on stack {100 * v / total:5.1f}%: {k}" for k, v in inclusive.most_common(top)]
    out += [f"self     {100 * v / total:5.1f}%: {k}" for k, v in own.most_common(top)]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_figures(pid: int) -> tuple[float, float, float]:
    """(CPU seconds, RSS MiB, peak RSS MiB) of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    mem = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            mem[key] = int(rest.split()[0]) / 1024
    return cpu, mem.get("VmRSS", 0.0), mem.get("VmHWM", 0.0)


# The local cluster's own processes (kwokctl's binary runtime), whose CPU the cold phase is
# also measured in: they share the machine's cores with the operator.
COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager", "kwok-controller")


def component_pids(cluster: LocalCluster) -> dict[str, int]:
    """The cluster's control-plane processes, by program name (absent ones left out)."""
    found: dict[str, int] = {}
    where = str(cluster.workdir)
    for pid, argv in command_lines():
        program = Path(argv[0].decode(errors="replace")).name
        if program in COMPONENTS and where in b" ".join(argv).decode(errors="replace"):
            found[program] = pid
    return found


def tick_figures(metrics_url: str) -> tuple[int, float, float]:
    """(ticks, total tick wall s, total Prometheus query+parse wall s) from /metrics.

    Only these two families are asked for (`name[]`): the whole page carries ~16 series per
    model and costs the operator ~0.1 s CPU to render at N=1000, and the windows poll this
    every 0.2 s to find a tick boundary, which counted that rendering as tick CPU.
    """
    wanted = (f"{TICK_METRIC}_count", f"{TICK_METRIC}_sum", f"{QUERY_METRIC}_sum")
    names = "&".join(f"name[]={name}" for name in wanted)
    text = urllib.request.urlopen(f"{metrics_url}?{names}", timeout=10).read().decode()
    count, total, queries = 0, 0.0, 0.0
    for line in text.splitlines():
        if line.startswith(f"{TICK_METRIC}_count"):
            count = int(float(line.split()[-1]))
        elif line.startswith(f"{TICK_METRIC}_sum"):
            total = float(line.split()[-1])
        elif line.startswith(f"{QUERY_METRIC}_sum"):
            queries += float(line.split()[-1])
    return count, total, queries


def model(name: str, ns: str, interval_s: int = 5) -> dict[str, Any]:
    return {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "model": {"name": "resnet50", "repository": "s3://models/zoo", "maxBatchSize": 32},
            "server": {"gpus": 1},
            "scaling": {"replicas": 0, "minReplicas": 0, "maxReplicas": 2},
            "batching": {"maxQueueDelayMicroseconds": 500},
            "slo": {"p99LatencyMilliseconds": 50},
            "autotune": {"queueDelay": True, "replicas": False, "intervalSeconds": interval_s},
        },
    }


def laggards(cluster: LocalCluster, ns: str) -> list[str]:
    """Models not yet Ready=True at their generation, each with its Ready reason."""
    out = []
    for bm in cluster.kubectl_json("get", "bm", "-n", ns)["items"]:
        status = bm.get("status") or {}
        ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"] or [{}]
        current = status.get("observedGeneration") == bm["metadata"]["generation"]
        if not (current and ready[0].get("status") == "True"):
            out.append(f"{bm['metadata']['name']}({ready[0].get('reason')})")
    return out


def prometheus_queries(url: str) -> int:
    """Instant and range queries Prometheus has answered, from its own /metrics."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and (
            'handler="/api/v1/query"' in line or 'handler="/api/v1/query_range"' in line
        ):
            total += float(line.split()[-1])
    return int(total)


def wait_for_series(url: str, models: list[tuple[str, str]], timeout_s: float) -> float:
    """Wait until the observer's own queries give every part for every model; seconds taken.

    Rates need two scrapes, so this takes one to two scrape intervals after the targets appear.
    """
    t0 = time.monotonic()
    observer = PrometheusObserver(url)
    want = set(models)
    incomplete: list[str] = []
    while time.monotonic() - t0 < timeout_s:
        parts = observer.observe(history_s=300.0)
        incomplete = [
            f"{k[1]}: missing {', '.join(parts[k].missing) or 'rate history'}"
            if k in parts
            else f"{k[1]}: absent"
            for k in sorted(want)
            if k not in parts or parts[k].missing or not parts[k].rate_history
        ]
        if not incomplete:
            return time.monotonic() - t0
        time.sleep(2)
    raise RuntimeError(
        f"Prometheus at {url} lacks series for {len(incomplete)} models after {timeout_s:.0f} s:"
        f" {incomplete[:3]}"
    )


def run_one(
    cluster: LocalCluster,
    n: int,
    scrape_interval: float,
    profile: Path | None,
    workers: int,
    window: float,
    stall: float,
    settle: float,
    tolerance: float = 0.25,
    max_windows: int = 6,
    interval_s: int = 5,
) -> dict[str, Any]:
    ns = f"scale-{n}"
    cluster.kubectl("create", "namespace", ns)
    names = [f"m{i:04d}" for i in range(n)]
    for start in range(0, n, 250):
        items = [model(name, ns, interval_s) for name in names[start : start + 250]]
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )
    models = [(ns, name) for name in names]
    exporter = SyntheticTritonExporter()
    prom = PrometheusServer(
        scrape_interval_s=scrape_interval, static_targets=exporter.targets(models)
    )
    try:
        prom.start()
        started = time.monotonic()
        waited = wait_for_series(prom.url, models, timeout_s=120 + 10 * scrape_interval)
        print(f"  N={n}: Prometheus has every part for all {n} models ({waited:.0f} s)")
        # The figures are fixed, but a rate over a window that is not full yet reads low
        # (88 req/s of 100 at the first tick, 100 at the next): a status write per model
        # that tells a window filling, not the cold start. The operator starts once every
        # model's rate window is full.
        full = RATE_WINDOW_S + 2 * scrape_interval - (time.monotonic() - started)
        if full > 0:
            time.sleep(full)
        limits = (window, stall, settle, tolerance, max_windows)
        row = measure_operator(cluster, ns, n, prom, exporter, profile, workers, *limits)
        return {**row, "interval_s": interval_s}
    finally:
        prom.stop()
        exporter.stop()


def operator_command(
    cluster: LocalCluster, ns: str, prom_url: str, workers: int, live: int, metrics: int
) -> list[str]:
    return [
        sys.executable, "-m", "batchop", "run",
        "--kubeconfig", str(cluster.kubeconfig), "--namespace", ns,
        "--liveness", f"http://127.0.0.1:{live}/healthz",
        "--metrics-address", f"127.0.0.1:{metrics}",
        "--prometheus-url", prom_url,
        "--no-pod-monitor", "--log-format", "plain", "--workers", str(workers),
    ]  # fmt: skip


def startup_cpu(
    cluster: LocalCluster, n: int, prom_url: str, workers: int, ticks: int = 2
) -> float:
    """The operator's CPU from its start until `ticks` tuning ticks have run, in a namespace
    with no BatchedModel: what a cold phase's CPU includes whatever N is (imports, kopf's
    start, the watches' first lists, the idle ticks), subtracted to give CPU per model."""
    ns = f"scale-idle-{n}"
    cluster.kubectl("create", "namespace", ns)
    live, metrics = free_port(), free_port()
    command = operator_command(cluster, ns, prom_url, workers, live, metrics)
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=REPO,
        env=operator_environ(cluster), start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"idle operator exited {proc.returncode}")
            try:
                if tick_figures(f"http://127.0.0.1:{metrics}/metrics")[0] >= ticks:
                    return proc_figures(proc.pid)[0]
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("idle operator: no tuning tick within 120 s")
    finally:
        stop_group(proc, timeout_s=30)


def measure_operator(
    cluster: LocalCluster,
    ns: str,
    n: int,
    prom: PrometheusServer,
    exporter: SyntheticTritonExporter,
    profile: Path | None,
    workers: int,
    window: float,
    stall: float,
    settle: float,
    tolerance: float,
    max_windows: int,
) -> dict[str, Any]:
    """Start one operator on namespace `ns` (N models, Prometheus ready) and measure it."""
    live, metrics = free_port(), free_port()
    log_path = Path(tempfile.gettempdir()) / f"batchop-operator-scale-{n}.log"
    command = operator_command(cluster, ns, prom.url, workers, live, metrics)
    row: dict[str, Any] = {"n": n, "cold_s": None, "cold_99_s": None, "stuck": 0}
    row["startup_cpu_s"] = startup_cpu(cluster, n, prom.url, workers)
    print(f"  N={n}: an idle operator's start: {row['startup_cpu_s']:.2f} s CPU", flush=True)
    calls0 = api_calls(cluster)
    components = component_pids(cluster)
    component_cpu0 = {k: proc_figures(pid)[0] for k, pid in components.items()}
    row["load_start"] = os.getloadavg()[0]
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            env=operator_environ(cluster), start_new_session=True,
        )  # fmt: skip
    spy = start_profile(proc.pid, profile / f"cold-{n}.txt", PROFILE_IDLE) if profile else None
    try:
        late: list[str] = [""] * n
        progress = time.monotonic()
        while late:
            if proc.poll() is not None:
                raise RuntimeError(f"operator exited {proc.returncode}; log {log_path}")
            if time.monotonic() - progress > stall:
                print(f"  N={n}: no progress for {stall:.0f}s; {len(late)} late: {late[:5]}...")
                row["stuck"] = len(late)
                break
            time.sleep(2)
            try:
                now_late = laggards(cluster, ns)
            except Exception as exc:  # a transient API error is one more try
                print(f"  (poll failed: {exc})", flush=True)
                continue
            if now_late != late:  # fewer late, or a late one's reason moved on
                progress = time.monotonic()
            if row["cold_99_s"] is None and len(now_late) <= n // 100:
                row["cold_99_s"] = time.monotonic() - t0
                print(f"  N={n}: 99% in {row['cold_99_s']:.1f} s; late: {now_late}", flush=True)
            late = now_late
        else:
            row["cold_s"] = time.monotonic() - t0
        # The last models turn Ready with their creation handlers' status writes; what the
        # handler does after it (kopf's log line, its Event) is still in flight: counted in.
        drain = time.monotonic() + 15
        while time.monotonic() < drain and reconcile_runs(log_path) < n:
            time.sleep(0.5)
        row["cold_cpu_s"], _, row["cold_peak_mib"] = proc_figures(proc.pid)
        cold_end = time.monotonic()
        row["cold_component_cpu_s"] = {
            k: proc_figures(pid)[0] - component_cpu0[k] for k, pid in components.items()
        }
        if spy is not None and profile is not None:
            stop_profile(spy, profile / f"cold-{n}.txt")
            spy = None
        row["cold_calls"] = per_model(api_calls(cluster) - calls0, n)
        # Events cannot be told apart by their sender at the API server (the controller
        # manager posts one per new Deployment's ReplicaSet): the operator's are the ones
        # about BatchedModels, counted from the Events themselves.
        row["cold_calls"]["Events"] = model_events(cluster, ns) / n
        row["cold_calls"]["all"] += row["cold_calls"]["Events"]
        row["reconcile_runs"] = reconcile_runs(log_path) / n
        print(f"  N={n}: cold phase over: {row}", flush=True)
        time.sleep(settle)  # let the watch backlog of the cold start drain first
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        windows: list[dict[str, Any]] = []
        while len(windows) < max_windows:
            windows.append(measure_window(cluster, proc.pid, metrics_url, prom, exporter, window))
            windows[-1]["after_cold_s"] = time.monotonic() - cold_end
            print(f"  N={n}: window {len(windows)}: {json.dumps(windows[-1])}", flush=True)
            if len(windows) >= 2 and steady(windows[-2], windows[-1], tolerance):
                break
        _, rss, peak = proc_figures(proc.pid)
        row["load_end"] = os.getloadavg()[0]
        row.update(windows[-1], rss_mib=rss, peak_mib=peak, windows=len(windows))
        row["steady"] = len(windows) >= 2 and steady(windows[-2], windows[-1], tolerance)
        row["window_log"] = windows
        print(f"  N={n}: {json.dumps(row)}", flush=True)
        return row
    finally:
        if spy is not None:
            spy.kill()
            spy.wait()
        stop_group(proc, timeout_s=30)


# kopf logs this once per run of the BatchedModel handler (create, update or resume).
RECONCILED = "Handler 'reconcile' succeeded"


def reconcile_runs(log_path: Path) -> int:
    return log_path.read_text(errors="replace").count(RECONCILED)


# The operator's calls, counted at the API server (apiserver_request_total); the benchmark
# itself only LISTs BatchedModels (polling) and created them before the operator started.
CALL_KINDS = {
    ("batchedmodels", "", "PATCH"): "kopf annotation patches",
    ("batchedmodels", "status", "PATCH"): "status patches",
    ("batchedmodels", "", "GET"): "BatchedModel GETs",
    ("deployments", "", "APPLY"): "child applies",  # server-side apply's own verb
    ("services", "", "APPLY"): "child applies",
    ("poddisruptionbudgets", "", "APPLY"): "child applies",
    ("deployments", "", "PATCH"): "child patches",
    ("services", "", "PATCH"): "child patches",
    ("poddisruptionbudgets", "", "GET"): "child GETs",
    ("podmonitors", "", "GET"): "child GETs",
}
# Not the operator's: the controller manager's Deployment status writes, whose watch events
# reach the operator (each may change a model's status), counted per window beside its calls.
CONTROLLER_KINDS = {
    ("deployments", "status", "PUT"): "Deployment status writes",
    ("deployments", "status", "PATCH"): "Deployment status writes",
}


def model_events(cluster: LocalCluster, ns: str) -> int:
    """Events posted about BatchedModels in `ns` (each repeat of an aggregated one counted)."""
    found = cluster.kubectl_json(
        "get", "events", "-n", ns, "--field-selector", "involvedObject.kind=BatchedModel"
    )
    return sum(int(e.get("count") or 1) for e in found["items"])


def request_totals(cluster: LocalCluster) -> Counter[tuple[str, str, str, str]]:
    """The API server's request counters: (resource, subresource, verb, code) -> count."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    found: Counter[tuple[str, str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        key = (labels.get("resource", ""), labels.get("subresource", ""),
               labels.get("verb", ""), labels.get("code", ""))  # fmt: skip
        found[key] += int(float(line.split()[-1]))
    return found


def classify(
    totals: Counter[tuple[str, str, str, str]],
    kinds: Mapping[tuple[str, str, str], str] = CALL_KINDS,
) -> Counter[tuple[str, str]]:
    """The given kinds of call (by default the operator's) among the totals: (what, code)."""
    found: Counter[tuple[str, str]] = Counter()
    for (resource, subresource, verb, code), count in totals.items():
        what = kinds.get((resource, subresource, verb))
        if what is not None:
            found[(what, code)] += count
    return found


def api_calls(cluster: LocalCluster) -> Counter[tuple[str, str]]:
    """The operator's kinds of call, counted at the API server: (what, code)."""
    return classify(request_totals(cluster))


def per_model(calls: Counter[tuple[str, str]], n: int) -> dict[str, float]:
    """Calls per model by kind ("status patches 409" for refused ones), and all of them."""
    out: dict[str, float] = {}
    for (what, code), count in sorted(calls.items()):
        label = what if code.startswith("2") else f"{what} {code}"
        out[label] = out.get(label, 0.0) + count / n
    out["all"] = sum(calls.values()) / n
    return out


def measure_window(
    cluster: LocalCluster,
    pid: int,
    metrics_url: str,
    prom: PrometheusServer,
    exporter: SyntheticTritonExporter,
    window: float,
) -> dict[str, Any]:
    """Operator CPU, tick wall time and Prometheus queries per tick over about `window` s,
    starting and ending on a tick boundary; Prometheus's own CPU and scrapes per second."""
    assert prom.process is not None
    ticks0, _, _ = tick_figures(metrics_url)
    while True:  # start the window on a tick boundary
        time.sleep(0.2)
        ticks1, wall1, query1 = tick_figures(metrics_url)
        if ticks1 > ticks0:
            break
    cpu1, _, _ = proc_figures(pid)
    prom_cpu1, _, _ = proc_figures(prom.process.pid)
    q1, scrapes1, t1 = prometheus_queries(prom.url), exporter.count(), time.monotonic()
    totals1 = request_totals(cluster)
    time.sleep(window)
    ticks_end, _, _ = tick_figures(metrics_url)
    ticks2, wall2, query2 = ticks_end, 0.0, 0.0
    while ticks2 <= max(ticks_end, ticks1):  # end the window on a tick boundary too
        time.sleep(0.2)
        ticks2, wall2, query2 = tick_figures(metrics_url)
    cpu2, _, _ = proc_figures(pid)
    prom_cpu2, _, _ = proc_figures(prom.process.pid)
    q2, scrapes2, t2 = prometheus_queries(prom.url), exporter.count(), time.monotonic()
    totals = request_totals(cluster) - totals1
    calls, controller = classify(totals), classify(totals, CONTROLLER_KINDS)
    ticks = ticks2 - ticks1
    return {
        "ticks": ticks,
        "cpu_per_tick_ms": 1000 * (cpu2 - cpu1) / ticks,
        "tick_wall_s": (wall2 - wall1) / ticks,
        "observe_wall_s": (query2 - query1) / ticks,
        "queries_per_tick": (q2 - q1) / ticks,
        "tick_s": (t2 - t1) / ticks,
        "prometheus_cpu_per_s": (prom_cpu2 - prom_cpu1) / (t2 - t1),
        "scrapes_per_s": (scrapes2 - scrapes1) / (t2 - t1),
        "api_calls_per_tick": sum(calls.values()) / ticks,
        # by kind, to tell a drain (e.g. status patches after Deployment status events) from
        # calls the tuning itself makes every tick
        "api_calls_by_kind": {k: v / ticks for k, v in per_model(calls, 1).items() if k != "all"},
        "deployment_status_writes_per_tick": sum(controller.values()) / ticks,
    }


def steady(before: Mapping[str, Any], after: Mapping[str, Any], tolerance: float) -> bool:
    """Two windows in a row whose CPU per tick agree within `tolerance` (relative)."""
    a, b = before["cpu_per_tick_ms"], after["cpu_per_tick_ms"]
    return abs(a - b) <= tolerance * max(a, b)


def _seconds(value: float | None) -> str:
    return f"{value:.1f} s" if value is not None else "not reached"


def _settled(row: Mapping[str, Any]) -> str:
    where = f"window {row['windows']}, ended {row['after_cold_s']:.0f} s after cold"
    return where if row["steady"] else f"NOT steady ({where})"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| N models | tuning interval | load avg (1 min) at start / end | cold: 99% Ready | "
        "cold: all Ready | "
        "operator CPU (cold) | CPU per tuning tick, steady | operator CPU per 30 s, steady | "
        "tick period | tick wall time | of which Prometheus query+parse | "
        "CPU per tick, first window | steady window | Prometheus queries per tick | "
        "Prometheus CPU per s (scrapes/s) | operator API calls per tick | RSS after | peak RSS |",
        "|---" * 18 + "|",
    ]
    for r in rows:
        cold = f"{r['cold_s']:.1f} s" if r["cold_s"] is not None else f"{r['stuck']} stuck"
        per_30s = r["cpu_per_tick_ms"] / 1000 * 30 / r["tick_s"]
        lines.append(
            f"| {r['n']} | {r.get('interval_s', 5)} s | "
            f"{r['load_start']:.2f} / {r['load_end']:.2f} | "
            f"{_seconds(r['cold_99_s'])} | {cold} | {r['cold_cpu_s']:.1f} s | "
            f"{r['cpu_per_tick_ms']:.0f} ms ({1000 * r['cpu_per_tick_ms'] / r['n']:.0f} us/model)"
            f" | {per_30s:.2f} s | {r['tick_s']:.1f} s | {r['tick_wall_s']:.2f} s | "
            f"{r['observe_wall_s']:.2f} s | {r['window_log'][0]['cpu_per_tick_ms']:.0f} ms | "
            f"{_settled(r)} | {r['queries_per_tick']:.1f} | "
            f"{r['prometheus_cpu_per_s']:.2f} s ({r['scrapes_per_s']:.0f}) | "
            f"{r['api_calls_per_tick']:.1f} | "
            f"{r['rss_mib']:.0f} MiB | {r['peak_mib']:.0f} MiB |"
        )
    return "\n".join(lines)


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """CPU seconds each process used in the cold phase, and its share of the phase's wall time
    (1.00 = one core busy throughout; the machine has os.cpu_count() cores in all)."""
    lines = [
        "| N models | cold phase | operator | " + " | ".join(COMPONENTS) + " | operator's idle "
        "start | operator per model, its idle start left out | control plane per model |",
        "|---" * (len(COMPONENTS) + 6) + "|",
    ]
    for r in rows:
        wall = r["cold_s"] or r["cold_99_s"]
        if not wall:
            continue
        used = {"operator": r["cold_cpu_s"], **r.get("cold_component_cpu_s", {})}
        cells = [
            f"{used[k]:.1f} s ({used[k] / wall:.2f})" if k in used else "not found"
            for k in ("operator", *COMPONENTS)
        ]
        start = r.get("startup_cpu_s")
        plane = sum(r.get("cold_component_cpu_s", {}).values())
        cells += [
            f"{start:.2f} s" if start is not None else "not measured",
            f"{1000 * (r['cold_cpu_s'] - start) / r['n']:.1f} ms" if start is not None else "-",
            f"{1000 * plane / r['n']:.1f} ms",
        ]
        lines.append(f"| {r['n']} | {wall:.1f} s | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calls_table(rows: list[dict[str, Any]]) -> str:
    """API calls per model in the cold phase, by kind (counted at the API server)."""
    kinds = sorted({k for r in rows for k in r.get("cold_calls", {}) if k != "all"})
    lines = [
        "| N models | creation handler runs | " + " | ".join(kinds) + " | all |",
        "|---" * (len(kinds) + 3) + "|",
    ]
    for r in rows:
        calls = r.get("cold_calls", {})
        cells = " | ".join(f"{calls.get(k, 0.0):.2f}" for k in kinds)
        lines.append(
            f"| {r['n']} | {r.get('reconcile_runs', 0.0):.2f} | {cells} | "
            f"{calls.get('all', 0.0):.1f} |"
        )
    return "\n".join(lines)


def windows_table(rows: list[dict[str, Any]]) -> str:
    """Every window after the cold phase: how the operator's CPU and calls per tick settle."""
    lines = [
        "| N models | window | ended (s after cold) | CPU per tick | operator API calls per tick "
        "(by kind) | controller manager's Deployment status writes per tick |",
        "|---" * 6 + "|",
    ]
    for r in rows:
        for i, w in enumerate(r.get("window_log", []), 1):
            kinds = ", ".join(f"{k} {v:.1f}" for k, v in sorted(w["api_calls_by_kind"].items()))
            lines.append(
                f"| {r['n']} | {i} | {w['after_cold_s']:.0f} | {w['cpu_per_tick_ms']:.0f} ms | "
                f"{w['api_calls_per_tick']:.1f}{f' ({kinds})' if kinds else ''} | "
                f"{w['deployment_status_writes_per_tick']:.1f} |"
            )
    return "\n".join(lines)


def write_results(
    out: Path,
    provenance: Provenance,
    rows: list[dict[str, Any]],
    window: float,
    settle: float,
    tolerance: float,
    scrape_interval: float,
    workers: int,
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    source = (
        f"- operator code: {OPERATOR_LABEL} (`--operator-source`), not this tree's\n\n"
        if OPERATOR_SOURCE is not None
        else ""
    )
    out.write_text(
        "# Operator scale (bench/operator_scale.py)\n\n"
        f"{provenance.finish().markdown()}\n"
        f"{source}"
        f"One `batchop run`, {workers} handler threads (`--workers`); models at 0 replicas "
        "with queue-delay tuning every `tuning interval` s (spec.autotune.intervalSeconds; the "
        "tuning loop polls every 5 s). Prometheus is real (the local stack's, Debian's build), "
        "scraping every "
        f"{scrape_interval:g} s, and answers the observer's real PromQL; its N scrape targets "
        "are one synthetic exporter standing in for N Triton pods (bench/synthetic_triton.py: "
        "Triton-format series, labelled as the pod relabeling labels them, healthy fixed "
        "figures). Queries per tick are counted by Prometheus (`prometheus_http_requests_total`)."
        " Load average: the machine's (shared with other work), read at the operator's start and "
        "at the end of the last window. CPU per tick is "
        f"all operator CPU over a {window:.0f} s window divided by the ticks in it (includes "
        "the status patches and watch events the tuning causes, and whatever the cold start "
        f"left to drain). Windows start {settle:.0f} s after the cold phase and repeat until two "
        f"in a row agree within {tolerance:.0%}; the steady figure is the last window's, the "
        "first window's is shown beside it.\n\n"
        f"{table(rows)}\n\n"
        "Each window (API calls counted at the API server):\n\n"
        f"{windows_table(rows)}\n\n"
        "API calls per model in the cold phase (operator start to the last model Ready), "
        "counted at the API server (`apiserver_request_total`; a code after the kind: refused), "
        "and runs of the creation handler per model (kopf's log):\n\n"
        f"{calls_table(rows)}\n\n"
        "CPU used in the cold phase by the operator and the local cluster's processes (from "
        "/proc; in brackets, the share of the phase's wall time: 1.00 is one core busy "
        f"throughout, of the machine's {os.cpu_count()}). The operator's idle start is the CPU "
        "of an operator started on a namespace with no BatchedModel, until its second tuning "
        "tick (imports, kopf's start, the first lists): the cold phase's operator CPU less it, "
        "over N, is its CPU per model on create; the control plane's is the four processes' "
        "sum over N:\n\n"
        f"{cpu_table(rows)}\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--window", type=float, default=60.0, help="steady-state window, s")
    ap.add_argument(
        "--stall",
        type=float,
        default=300.0,
        help="give up waiting for the last models after "
        "this many seconds without progress (they are reported as stuck)",
    )
    ap.add_argument(
        "--settle", type=float, default=30.0, help="pause between the cold phase and the window"
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=0.25,
        help="steady when two windows in a row agree on CPU per tick within this fraction",
    )
    ap.add_argument("--max-windows", type=int, default=6, help="give up on steady after this")
    ap.add_argument(
        "--scrape-interval", type=float, default=15.0, help="Prometheus scrape interval, s "
        "(the chart's PodMonitor: 15 s)",
    )  # fmt: skip
    ap.add_argument(
        "--profile", type=Path, default=None, help="record the cold phase with py-spy into "
        "this directory (cold-N.txt, collapsed stacks)",
    )  # fmt: skip
    ap.add_argument(
        "--profile-cpu", action="store_true", help="with --profile: only samples of threads "
        "on a CPU (py-spy without --idle), to see where the operator's CPU goes",
    )  # fmt: skip
    ap.add_argument(
        "--operator-source", type=Path, default=None, help="run the operator from this tree "
        "(its operator/ first on the operator's PYTHONPATH; e.g. `git archive COMMIT operator` "
        "unpacked), to measure an earlier commit with this benchmark",
    )  # fmt: skip
    ap.add_argument(
        "--operator-label", default="", help="what --operator-source is, for the result file"
    )
    ap.add_argument("--workers", type=int, default=8, help="the operator's --workers")
    ap.add_argument(
        "--interval", type=int, default=5, help="the models' spec.autotune.intervalSeconds "
        "(5, the least the API allows, is the most work per tick; the API's default is 30)",
    )  # fmt: skip
    ap.add_argument("--name", default="batchop-scale", help="local cluster name")
    ap.add_argument("--keep-cluster", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    args = ap.parse_args()
    global PROFILE_IDLE, OPERATOR_SOURCE, OPERATOR_LABEL
    PROFILE_IDLE = not args.profile_cpu
    if args.operator_source is not None:
        OPERATOR_SOURCE = args.operator_source.resolve()
        OPERATOR_LABEL = args.operator_label or str(OPERATOR_SOURCE)
    provenance = Provenance.start()
    cluster = LocalCluster(args.name).up(replace=True)
    rows: list[dict[str, Any]] = []
    try:
        cluster.install_crd()
        for n in args.models:
            limits = (args.window, args.stall, args.settle, args.tolerance, args.max_windows)
            options = (args.scrape_interval, args.profile, args.workers)
            rows.append(run_one(cluster, n, *options, *limits, interval_s=args.interval))
            write_results(
                args.out, provenance, rows, args.window, args.settle, args.tolerance,
                args.scrape_interval, args.workers,
            )  # fmt: skip
    finally:
        if not args.keep_cluster:
            cluster.down()
    print(table(rows))
    print(windows_table(rows))
    print(calls_table(rows))
    print(cpu_table(rows))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
