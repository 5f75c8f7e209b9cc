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
- Prometheus queries per tick, counted at the endpoint.

SYNTHETIC PROMETHEUS, FOR THIS BENCHMARK ONLY: the operator's --prometheus-url points at a tiny
in-process HTTP server (FakePrometheus below) that answers every instant query with one series
per model (fixed, healthy figures well within the SLO). It exercises the observer's request and
parsing path at N series per query; it is not a Prometheus and nothing else uses it.

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
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from batchop.api.constants import PROM_LABEL_MODEL
from batchop.provenance import Provenance
from batchop_dev.local.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "crds" / "batchedmodel.yaml"
RESULTS = REPO / "bench" / "results" / "operator_scale.md"
TICK_METRIC = "batchop_tick_duration_seconds"
QUERY_METRIC = "batchop_prometheus_query_duration_seconds"

# Synthetic per-model values, picked by a fragment of the PromQL the observer sends.
SYNTHETIC = (
    ("nv_inference_request_summary_us", 20.0),  # p99 ms (SLO is 50 ms)
    ("timestamp(", 2.0),  # age of the freshest sample, s
    ("up{", 1.0),  # scraped pods
    ("pending_request_count", 0.0),
    ("queue_duration_us", 1.0),  # queue ms per request
    ("compute_infer_duration_us", 5.0),  # compute ms per request
    ("nv_inference_exec_count", 4.0),  # average batch
    ("nv_inference_request_success", 100.0),  # request rate
)


class FakePrometheus:
    """SYNTHETIC, benchmark only: answers /api/v1/query with one series per model; counts."""

    def __init__(self) -> None:
        self.models: list[tuple[str, str]] = []
        self.queries = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, query: str) -> None:
                with fake.lock:
                    fake.queries += 1
                    models = list(fake.models)
                value = next((v for frag, v in SYNTHETIC if frag in query), 1.0)
                now = time.time()
                result = [
                    {
                        "metric": {"namespace": ns, PROM_LABEL_MODEL: name},
                        "value": [now, str(value)],
                    }
                    for ns, name in models
                ]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": result}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                params = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                self._answer(params.get("query", [""])[0])

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                params = urllib.parse.parse_qs(self.rfile.read(length).decode())
                self._answer(params.get("query", [""])[0])

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self) -> int:
        with self.lock:
            return self.queries

    def stop(self) -> None:
        self.server.shutdown()


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


def tick_figures(metrics_url: str) -> tuple[int, float, float]:
    """(ticks, total tick wall s, total Prometheus query+parse wall s) from /metrics."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    count, total, queries = 0, 0.0, 0.0
    for line in text.splitlines():
        if line.startswith(f"{TICK_METRIC}_count"):
            count = int(float(line.split()[-1]))
        elif line.startswith(f"{TICK_METRIC}_sum"):
            total = float(line.split()[-1])
        elif line.startswith(f"{QUERY_METRIC}_sum"):
            queries += float(line.split()[-1])
    return count, total, queries


def model(name: str, ns: str) -> dict[str, Any]:
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
            "autotune": {"queueDelay": True, "replicas": False, "intervalSeconds": 5},
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


def run_one(
    cluster: LocalCluster,
    prom: FakePrometheus,
    n: int,
    window: float,
    stall: float,
    settle: float,
    tolerance: float = 0.25,
    max_windows: int = 6,
) -> dict[str, Any]:
    ns = f"scale-{n}"
    cluster.kubectl("create", "namespace", ns)
    names = [f"m{i:04d}" for i in range(n)]
    for start in range(0, n, 250):
        items = [model(name, ns) for name in names[start : start + 250]]
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )
    with prom.lock:
        prom.models = [(ns, name) for name in names]
    live, metrics = free_port(), free_port()
    log_path = Path(tempfile.gettempdir()) / f"batchop-operator-scale-{n}.log"
    command = [
        sys.executable, "-m", "batchop", "run",
        "--kubeconfig", str(cluster.kubeconfig), "--namespace", ns,
        "--liveness", f"http://127.0.0.1:{live}/healthz",
        "--metrics-address", f"127.0.0.1:{metrics}",
        "--prometheus-url", prom.url,
        "--no-pod-monitor", "--log-format", "plain",
    ]  # fmt: skip
    row: dict[str, Any] = {"n": n, "cold_s": None, "cold_99_s": None, "stuck": 0}
    calls0 = api_calls(cluster)
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=cluster.environ()
        )
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
        row["cold_cpu_s"], _, row["cold_peak_mib"] = proc_figures(proc.pid)
        cold_end = time.monotonic()
        row["cold_calls"] = per_model(api_calls(cluster) - calls0, n)
        row["reconcile_runs"] = log_path.read_text(errors="replace").count(RECONCILED) / n
        print(f"  N={n}: cold phase over: {row}", flush=True)
        time.sleep(settle)  # let the watch backlog of the cold start drain first
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        windows: list[dict[str, Any]] = []
        while len(windows) < max_windows:
            windows.append(measure_window(proc.pid, metrics_url, prom, window))
            windows[-1]["after_cold_s"] = time.monotonic() - cold_end
            print(f"  N={n}: window {len(windows)}: {json.dumps(windows[-1])}", flush=True)
            if len(windows) >= 2 and steady(windows[-2], windows[-1], tolerance):
                break
        _, rss, peak = proc_figures(proc.pid)
        row.update(windows[-1], rss_mib=rss, peak_mib=peak, windows=len(windows))
        row["steady"] = len(windows) >= 2 and steady(windows[-2], windows[-1], tolerance)
        row["first_cpu_per_tick_ms"] = windows[0]["cpu_per_tick_ms"]
        print(f"  N={n}: {json.dumps(row)}", flush=True)
        return row
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


# kopf logs this once per run of the BatchedModel handler (create, update or resume).
RECONCILED = "Handler 'reconcile' succeeded"
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


def api_calls(cluster: LocalCluster) -> Counter[tuple[str, str]]:
    """The API server's request counters for the operator's kinds of call: (what, code)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    found: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        what = CALL_KINDS.get((labels.get("resource", ""), labels.get("subresource", ""),
                               labels.get("verb", "")))  # fmt: skip
        if what is not None:
            found[(what, labels.get("code", ""))] += int(float(line.split()[-1]))
    return found


def per_model(calls: Counter[tuple[str, str]], n: int) -> dict[str, float]:
    """Calls per model by kind ("status patches 409" for refused ones), and all of them."""
    out: dict[str, float] = {}
    for (what, code), count in sorted(calls.items()):
        label = what if code.startswith("2") else f"{what} {code}"
        out[label] = out.get(label, 0.0) + count / n
    out["all"] = sum(calls.values()) / n
    return out


def measure_window(
    pid: int, metrics_url: str, prom: FakePrometheus, window: float
) -> dict[str, Any]:
    """Operator CPU, tick wall time and Prometheus queries per tick over about `window` s,
    starting and ending on a tick boundary."""
    ticks0, _, _ = tick_figures(metrics_url)
    while True:  # start the window on a tick boundary
        time.sleep(0.2)
        ticks1, wall1, query1 = tick_figures(metrics_url)
        if ticks1 > ticks0:
            break
    cpu1, _, _ = proc_figures(pid)
    q1 = prom.count()
    time.sleep(window)
    ticks_end, _, _ = tick_figures(metrics_url)
    ticks2, wall2, query2 = ticks_end, 0.0, 0.0
    while ticks2 <= max(ticks_end, ticks1):  # end the window on a tick boundary too
        time.sleep(0.2)
        ticks2, wall2, query2 = tick_figures(metrics_url)
    cpu2, _, _ = proc_figures(pid)
    ticks = ticks2 - ticks1
    return {
        "ticks": ticks,
        "cpu_per_tick_ms": 1000 * (cpu2 - cpu1) / ticks,
        "tick_wall_s": (wall2 - wall1) / ticks,
        "observe_wall_s": (query2 - query1) / ticks,
        "queries_per_tick": (prom.count() - q1) / ticks,
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
        "| N models | cold: 99% Ready | cold: all Ready | operator CPU (cold) | "
        "CPU per tuning tick, steady | tick wall time | of which Prometheus query+parse | "
        "CPU per tick, first window | steady window | "
        "Prometheus queries per tick | series per query | RSS after | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cold = f"{r['cold_s']:.1f} s" if r["cold_s"] is not None else f"{r['stuck']} stuck"
        lines.append(
            f"| {r['n']} | {_seconds(r['cold_99_s'])} | {cold} | {r['cold_cpu_s']:.1f} s | "
            f"{r['cpu_per_tick_ms']:.0f} ms ({1000 * r['cpu_per_tick_ms'] / r['n']:.0f} us/model)"
            f" | {r['tick_wall_s']:.2f} s | {r['observe_wall_s']:.2f} s | "
            f"{r['first_cpu_per_tick_ms']:.0f} ms | {_settled(r)} | "
            f"{r['queries_per_tick']:.1f} | {r['n']} | {r['rss_mib']:.0f} MiB | "
            f"{r['peak_mib']:.0f} MiB |"
        )
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


def write_results(
    out: Path,
    provenance: Provenance,
    rows: list[dict[str, Any]],
    window: float,
    settle: float,
    tolerance: float,
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "# Operator scale (bench/operator_scale.py)\n\n"
        f"{provenance.finish().markdown()}\n"
        "One `batchop run`, 8 handler threads; models at 0 replicas with queue-delay tuning "
        "every 5 s. Prometheus is SYNTHETIC: an in-process stand-in answering each query with "
        "one healthy series per model (this benchmark only), so the tick's query cost is its "
        "HTTP and parsing at N series, not a real Prometheus's. CPU per tick is "
        f"all operator CPU over a {window:.0f} s window divided by the ticks in it (includes "
        "the status patches and watch events the tuning causes, and whatever the cold start "
        f"left to drain). Windows start {settle:.0f} s after the cold phase and repeat until two "
        f"in a row agree within {tolerance:.0%}; the steady figure is the last window's, the "
        "first window's is shown beside it.\n\n"
        f"{table(rows)}\n\n"
        "API calls per model in the cold phase (operator start to the last model Ready), "
        "counted at the API server (`apiserver_request_total`; a code after the kind: refused), "
        "and runs of the creation handler per model (kopf's log):\n\n"
        f"{calls_table(rows)}\n"
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
    ap.add_argument("--name", default="batchop-scale", help="local cluster name")
    ap.add_argument("--keep-cluster", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    args = ap.parse_args()
    provenance = Provenance.start()
    prom = FakePrometheus()
    cluster = LocalCluster(args.name).up(replace=True)
    rows: list[dict[str, Any]] = []
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/batchedmodels.batchop.io"
        )
        for n in args.models:
            limits = (args.window, args.stall, args.settle, args.tolerance, args.max_windows)
            rows.append(run_one(cluster, prom, n, *limits))
            write_results(args.out, provenance, rows, args.window, args.settle, args.tolerance)
    finally:
        prom.stop()
        if not args.keep_cluster:
            cluster.down()
    print(table(rows))
    print(calls_table(rows))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
