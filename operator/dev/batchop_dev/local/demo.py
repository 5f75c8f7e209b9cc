"""`batchop demo`: the whole local stack, one BatchedModel, a load that steps up and down.

Brings up the local cluster, Prometheus, the pod runner and the operator (`batchop run`);
installs the CRD; applies examples/cpu-demo.yaml with its repository pointed at a synthetic
model generated from the cpu-demo latency profile; drives an open-loop load that steps up and
back down; prints a live table every few seconds (from Prometheus and the BatchedModel's
status); writes DIR/report.json and DIR/report.png; tears everything down on exit (Ctrl-C and
SIGTERM included).

The operator tunes the model: the decisions shown and reported are the operator's own, read
from the BatchedModel's status.lastDecision at each sample (two decisions within one sample
period show as the later one). The report's `summary` counts the delay and replica changes and
judges p99 against the SLO on each load step once it has settled (batchop_dev.local.steps).

With a trace (`batchop demo --trace`), the load replays a slice of a trace CSV, scaled down
(default: 7 minutes of ../shared/traces/azure-code.csv, a real bursty production pattern, at
x0.02), and the report's `summary.bursty` cuts the run in 30 s windows and judges it
(batchop_dev.local.bursts): served p99 within 2x the SLO in every settled window, rejected
requests counted, replicas held between bursts.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
BM_FILE = EXAMPLES / "cpu-demo.yaml"
PROFILE_FILE = EXAMPLES / "profiles" / "cpu-demo.yaml"
CLUSTER_NAME = "batchop-demo"
# The load's shape as (fraction of the duration, req/s): low, a step up, part way down, low.
STEPS = ((0.0, 40.0), (0.2, 320.0), (0.6, 120.0), (0.8, 40.0))
# What the demo changes in examples/cpu-demo.yaml. With at most 2 requests a batch, one
# replica serves ~460 req/s on paper (the profile) and ~360 for real (the python backend adds
# about 1 ms an execution), so the 320 req/s step needs a second replica to keep p99 within the
# SLO, while the low steps leave room for a longer delay. Ticks every 10 s, a 30 s
# scale-down window and no peak memory (the default 600 s holds replicas between bursts;
# `demo --trace` shows it) let a 3.5-minute demo give the GPU back.
DEMO_SPEC = {
    "model": {"maxBatchSize": 2},
    "autotune": {
        "intervalSeconds": 10,
        "scaleDownStabilizationSeconds": 30,
        "burstMemorySeconds": 0,
    },
}
SETTLE_INTERVALS = 3
# `--model mlp`: the real compute model (batchop_dev.local.triton.mlp, an ONNX MLP run by
# onnxruntime on one thread) in place of the sleep model, with batches of up to 32. One
# replica of it serves the steps with room to spare (about 1.6 ms at batch 1 and 7 ms at 32
# here), so what moves is the delay, and with it the batch and the compute per inference: on
# two cores a second replica is needed only past one core of compute, which would starve the
# load generator and the control plane beside it.
MODELS = ("sleep", "mlp")
MLP_NAME = "mlp"
MLP_MODEL = {"name": MLP_NAME, "maxBatchSize": 32}  # replaces the sleep model's spec.model
# With a trace (its default slice and scale: batchop_dev.local.bursts): a 60 s scale-down
# stabilization, so that the default slice's short gaps (6-39 s) must be held through and
# its one long gap (65 s) may give a replica back within the demo.
TRACE_SPEC = {
    "model": {"maxBatchSize": 2},
    "autotune": {"intervalSeconds": 10, "scaleDownStabilizationSeconds": 60},
}


@dataclass
class Sample:
    """One row of the timeline (the report's contract: these names)."""

    t: float
    rps: float | None
    p99_ms: float | None
    slo_ms: float
    delay_us: int | None
    replicas: int
    ready: int
    avg_batch: float | None
    offered_rps: float = 0.0
    # Triton's compute time per request, which each request of a batch is charged whole:
    # the time of one execution (over avg_batch: the time per inference).
    compute_ms: float | None = None


@dataclass
class DemoResult:
    timeline: list[Sample] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "timeline": [asdict(s) for s in self.timeline],
            "decisions": self.decisions,
            "summary": self.summary,
            "notes": self.notes,
            "load": self.load,
        }


def demo_trace(duration_s: float) -> Any:
    """The step-up-then-down load, scaled to `duration_s`. Pure."""
    from batchop.sim.trace import Trace

    seconds = tuple(round(f * duration_s, 3) for f, _ in STEPS) + (float(duration_s),)
    rates = tuple(r for _, r in STEPS) + (STEPS[-1][1],)
    return Trace(seconds=seconds, rps=rates, name="demo-steps")


def _fmt(value: float | None, spec: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (format(value, spec))
    )


TABLE_HEADER = (
    f"{'t(s)':>6} {'load':>6} {'RPS':>7} {'p99(ms)':>8} {'SLO':>5} "
    f"{'delay(us)':>9} {'replicas':>8} {'ready':>5} {'batch':>6}"
)


def table_row(s: Sample) -> str:
    """One live-table line. Pure."""
    return (
        f"{s.t:6.0f} {s.offered_rps:6.0f} {_fmt(s.rps, '7.1f')} {_fmt(s.p99_ms, '8.1f')} "
        f"{s.slo_ms:5.0f} {_fmt(s.delay_us, '9d')} {s.replicas:8d} {s.ready:5d} "
        f"{_fmt(s.avg_batch, '6.2f')}"
    )


def new_decisions(status: dict[str, Any], seen: set[str]) -> list[dict[str, Any]]:
    """status.lastDecision as a new decision, unless already recorded. Pure but for `seen`."""
    last = status.get("lastDecision")
    if not isinstance(last, dict) or not last:
        return []
    key = json.dumps(last, sort_keys=True)
    if key in seen:
        return []
    seen.add(key)
    return [dict(last)]


def write_plot(result: DemoResult, path: Path) -> None:
    """report.png: load, p99 (Triton's and the clients') vs SLO, delay, replicas over time,
    and the batches forming: the average batch and the compute time per inference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = result.timeline
    t = [s.t for s in tl]

    def series(values: list[float | None]) -> list[float]:
        return [math.nan if v is None else float(v) for v in values]

    fig, axes = plt.subplots(5, 1, sharex=True, figsize=(9, 11))
    per_second = result.load.get("timeline") or []
    if "bursty" in result.summary and per_second:  # bursts are seconds long: per second
        xs = [x["t"] for x in per_second]
        axes[0].plot(
            xs, [x["sent"] for x in per_second], label="sent", drawstyle="steps-post", linewidth=0.8
        )
        axes[0].plot(
            xs,
            [x.get("rejected", 0) for x in per_second],
            label="rejected",
            drawstyle="steps-post",
            linewidth=0.8,
            color="tab:red",
        )
    else:
        axes[0].plot(t, [s.offered_rps for s in tl], label="offered", drawstyle="steps-post")
    axes[0].plot(t, series([s.rps for s in tl]), label="served (Prometheus)")
    axes[0].set_ylabel("req/s")
    axes[0].legend(loc="upper right")
    axes[1].plot(
        t, series([s.p99_ms for s in tl]), label="Triton p99, worst pod (a summary over ~1 min)"
    )
    if per_second:  # what clients saw, second by second: no summary lag
        axes[1].plot(
            [x["t"] + 0.5 for x in per_second],
            series([x.get("p99_ms") for x in per_second]),
            label="clients' p99, per second",
            alpha=0.7,
            linewidth=0.8,
        )
    axes[1].plot(t, [s.slo_ms for s in tl], "--", label="SLO")
    bursty = result.summary.get("bursty")
    if bursty:
        for w in bursty["windows"]:
            if w["within"] is not None:
                axes[1].hlines(
                    w["served_p99_ms"],
                    w["start_s"],
                    w["end_s"],
                    colors="tab:green" if w["within"] else "tab:red",
                    linewidth=2,
                )
        axes[1].plot(
            t,
            [bursty["p99_factor"] * s.slo_ms for s in tl],
            ":",
            color="tab:red",
            label=f"{bursty['p99_factor']:g}x SLO (settled 30 s windows: bars)",
        )
    axes[1].set_ylabel("ms")
    axes[1].legend(loc="upper right")
    axes[2].plot(t, series([s.delay_us for s in tl]), drawstyle="steps-post")
    axes[2].set_ylabel("queue delay (us)")
    axes[3].plot(t, [s.replicas for s in tl], label="replicas", drawstyle="steps-post")
    axes[3].plot(t, [s.ready for s in tl], label="ready", drawstyle="steps-post")
    axes[3].set_ylabel("pods")
    axes[3].legend(loc="upper right")
    # What the delay buys: bigger batches, and less compute per inference.
    axes[4].plot(t, series([s.avg_batch for s in tl]), label="average batch", color="tab:purple")
    axes[4].set_ylabel("requests / batch")
    axes[4].set_ylim(bottom=0)
    per_inference = axes[4].twinx()
    per_inference.plot(
        t,
        series([s.compute_ms / s.avg_batch if s.compute_ms and s.avg_batch else None for s in tl]),
        label="compute ms per inference",
        color="tab:brown",
    )
    per_inference.set_ylabel("compute ms / inference")
    per_inference.set_ylim(bottom=0)
    handles = [*axes[4].get_lines(), *per_inference.get_lines()]
    axes[4].legend(handles, [h.get_label() for h in handles], loc="upper right")
    axes[4].set_xlabel("seconds")
    axes[2].set_ylim(bottom=0)
    axes[3].set_ylim(0, max([s.replicas for s in tl] + [1]) + 1)
    axes[3].yaxis.get_major_locator().set_params(integer=True)
    for d in result.decisions:
        if isinstance(d.get("t"), int | float):
            for ax in axes:
                ax.axvline(d["t"], color="grey", alpha=0.3)
    replay = f", trace {result.summary['trace']}" if "trace" in result.summary else ""
    served = (result.summary.get("model") or {}).get("batchedModel", "cpu-demo")
    fig.suptitle(
        f"batchop demo: {served} on the local stack{replay} (real Triton, real Prometheus)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class LoadThread:
    """Runs the async load generator in a thread so the main thread can sample and print."""

    def __init__(self, trace: Any, source: Any, payload: Any = None) -> None:
        self.trace, self.source, self.payload = trace, source, payload
        self.report: dict[str, Any] = {}
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[dict[str, Any]] | None = None
        self.thread = threading.Thread(target=self._run, name="demo-load", daemon=True)

    def _run(self) -> None:
        from batchop_dev.local.load import run_load

        async def main() -> dict[str, Any]:
            self._task = asyncio.current_task()  # type: ignore[assignment]
            return await run_load(self.trace, self.source, keep_records=True, payload=self.payload)

        try:
            self._loop = asyncio.new_event_loop()
            self.report = self._loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            if self._loop is not None:
                self._loop.close()

    def start(self) -> None:
        self.thread.start()

    def cancel(self) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        self.thread.join(timeout=40)


def _raise_interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def run_demo(
    duration_s: float = 210.0,
    report_dir: Path = Path("reports/demo"),
    sample_s: float = 5.0,
    cluster_name: str = CLUSTER_NAME,
    say: Callable[[str], None] | None = None,
    keep_cluster: bool = False,
    cluster: Any = None,
    stack: Any = None,
    trace: Any = None,
    model: str = "sleep",
) -> DemoResult:
    """The demo; returns what it wrote to `report_dir`. Tears everything down, always.

    `model`: "sleep" (the cpu-demo profile slept, capped at 2 a batch so that the steps need
    more replicas) or "mlp" (real compute: see MLP_MODEL).

    With `cluster` and `stack` given (the e2e fixtures), they are used as they are and only
    what the demo added (its operator, its BatchedModel) is removed at the end. With `trace`
    (a batchop.sim.trace.Trace, already sliced and scaled), the load replays it instead of
    the steps (`duration_s` is then the trace's end) and the run is judged for bursts.
    """
    from batchop_dev.local.cluster import LocalCluster
    from batchop_dev.local.stack import LocalStack, StackError

    out = say or (lambda m: print(m, flush=True))
    report_dir.mkdir(parents=True, exist_ok=True)
    result = DemoResult()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    workdir = Path(tempfile.mkdtemp(prefix="batchop-demo-"))
    own = cluster is None
    if own:
        cluster = LocalCluster(
            cluster_name, nodes=2, gpus_per_node=4, progress=out, readiness="probes"
        )
    bm: Any = None
    try:
        if own:
            out(
                "== batchop demo: bringing up the local stack (the first run builds Kubernetes "
                "from Go modules: minutes) =="
            )
            cluster.up(replace=True)
            stack = LocalStack(cluster.kubeconfig, workdir=workdir, say=out).start()
        overrides = TRACE_SPEC if trace is not None else DEMO_SPEC
        if model == "mlp":  # the steps' or the trace's autotune settings, the MLP's model
            overrides = {**overrides, "model": MLP_MODEL}
        manifest, bm = prepare_model(stack, overrides, model=model)
        cluster.install_crd()
        try:
            stack.start_operator()
            cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
            out(f"applied BatchedModel {bm.namespace}/{bm.name} (operator reconciles it)")
        except StackError as exc:
            note = (
                f"the operator did not start ({exc}); applying the rendered Deployment "
                "directly: fixed delay and replicas, no tuning"
            )
            result.notes.append(note)
            out(f"NOTE: {note}")
            _apply_rendered(cluster, bm)
        t_applied = time.monotonic()
        ready = wait_ready(cluster, bm, timeout_s=240)
        out(
            f"{ready} pod(s) Ready with a real tritonserver each "
            f"{time.monotonic() - t_applied:.1f}s after the apply; starting the load"
        )
        result.notes.extend(
            _run_load(
                cluster, stack, bm, duration_s, sample_s, result, out, trace=trace, model=model
            )
        )
    except KeyboardInterrupt:
        result.notes.append("interrupted")
        out("interrupted: tearing down")
    finally:
        if stack is not None and stack.operator_log.exists():
            shutil.copy(stack.operator_log, report_dir / "operator.log")
        if own and stack is not None:
            stack.stop()
        elif stack is not None:
            stack.stop_operator()
            if bm is not None:
                for kind in ("batchedmodel", "deployment"):
                    cluster.kubectl(
                        "delete",
                        kind,
                        "-n",
                        bm.namespace or "default",
                        bm.name,
                        "--ignore-not-found",
                        "--wait=false",
                        check=False,
                    )
        if own and not keep_cluster:
            try:
                cluster.down()
            except Exception as exc:  # teardown must go on; say what is left
                out(f"could not delete cluster {cluster_name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
        _write_report(result, report_dir, out)
    return result


def prepare_model(
    stack: Any, overrides: dict[str, dict[str, Any]], model: str = "sleep"
) -> tuple[dict[str, Any], Any]:
    """examples/cpu-demo.yaml with `overrides` merged into its spec, and the model its pods
    serve written into the stack's repository: the sleep model of the cpu-demo profile, or
    the MLP (named `mlp-demo`, the BatchedModel then)."""
    from batchop.api.models import parse_batched_model
    from batchop.sim.profile import load_profile
    from batchop_dev.local.triton import write_model_repository
    from batchop_dev.local.triton.mlp import write_mlp_repository

    if model not in MODELS:
        raise ValueError(f"model {model!r}: one of {', '.join(MODELS)}")
    manifest = yaml.safe_load(BM_FILE.read_text())
    for part, values in overrides.items():
        manifest["spec"].setdefault(part, {}).update(values)
    manifest["spec"]["model"]["repository"] = str(stack.repository_dir)
    if model == "mlp":
        manifest["metadata"]["name"] = f"{MLP_NAME}-demo"
    bm = parse_batched_model(manifest)
    spec = bm.spec
    if model == "mlp":
        write_mlp_repository(
            stack.repository_dir,
            spec.model.name,
            max_batch_size=spec.model.max_batch_size,
            max_queue_delay_us=spec.batching.max_queue_delay_microseconds,
        )
    else:
        write_model_repository(
            stack.repository_dir,
            spec.model.name,
            load_profile(PROFILE_FILE),
            max_queue_delay_us=spec.batching.max_queue_delay_microseconds,
            max_batch_size=spec.model.max_batch_size,
        )
    return manifest, bm


def _apply_rendered(cluster: Any, bm: Any) -> None:
    from batchop.render import RenderOptions, render_children

    children = render_children(bm, RenderOptions(pod_monitor=False))
    for child in children:
        child.setdefault("metadata", {}).setdefault("namespace", bm.namespace or "default")
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": children}),
    )


def model_pods(cluster: Any, bm: Any) -> list[dict[str, Any]]:
    from batchop.api.constants import LABEL_MODEL

    return cluster.kubectl_json(
        "get", "pods", "-n", bm.namespace or "default", "-l", f"{LABEL_MODEL}={bm.name}"
    )["items"]


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def wait_ready(cluster: Any, bm: Any, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = sum(pod_ready(p) for p in model_pods(cluster, bm))
        if ready:
            return ready
        time.sleep(1.0)
    raise RuntimeError(f"no Ready pod of {bm.namespace}/{bm.name} after {timeout_s:g}s")


def model_status(cluster: Any, bm: Any) -> dict[str, Any]:
    got = cluster.kubectl(
        "get", "batchedmodel", "-n", bm.namespace or "default", bm.name, "-o", "json", check=False
    )
    if got.returncode != 0:
        return {}
    return dict(json.loads(got.stdout).get("status") or {})


def _run_load(
    cluster: Any,
    stack: Any,
    bm: Any,
    duration_s: float,
    sample_s: float,
    result: DemoResult,
    out: Callable[[str], None],
    trace: Any = None,
    model: str = "sleep",
) -> list[str]:
    from batchop.observe.prometheus import PrometheusUnavailable
    from batchop_dev.local.load import BatchedModelPods, capacity_warning
    from batchop_dev.local.triton.mlp import mlp_payload

    bursty = trace is not None
    if trace is None:
        trace = demo_trace(duration_s)
    load = LoadThread(
        trace,
        BatchedModelPods(bm.namespace or "default", bm.name, kubeconfig=str(cluster.kubeconfig)),
        payload=mlp_payload() if model == "mlp" else None,
    )
    observer = stack.observer(window="15s")
    slo = float(bm.spec.slo.p99_latency_milliseconds)
    key = (bm.namespace or "default", bm.name)
    seen: set[str] = set()
    if bursty:
        peak = max(trace.rps[:-1])
        out(
            f"load (open loop, Poisson): trace {trace.name}, {trace.end:g} s, mean "
            f"{trace.mean_rate(0, trace.end):.0f} req/s, peak {peak:g} req/s"
        )
        warning = capacity_warning(trace)
        if warning:
            out(f"NOTE: {warning} (the send lag is measured; see the windows' lag99)")
    else:
        steps = zip(trace.seconds[:-1], trace.rps[:-1], strict=True)
        out(
            "load (open loop, Poisson): "
            + ", ".join(f"{r:g} req/s from t={s:g}s" for s, r in steps)
        )
    out(TABLE_HEADER)
    t0 = time.monotonic()
    load.start()
    try:
        while load.thread.is_alive():
            time.sleep(max(0.0, sample_s - ((time.monotonic() - t0) % sample_s)))
            t = time.monotonic() - t0
            try:
                parts = observer.observe().get(key)
            except PrometheusUnavailable:
                parts = None
            status = model_status(cluster, bm)
            pods = model_pods(cluster, bm)
            delay = status.get(
                "maxQueueDelayMicroseconds", bm.spec.batching.max_queue_delay_microseconds
            )
            sample = Sample(
                t=round(t, 1),
                rps=None if parts is None else parts.rps,
                p99_ms=None if parts is None else parts.p99_ms,
                slo_ms=slo,
                delay_us=int(delay) if delay is not None else None,
                replicas=int(status.get("replicas", len(pods))),
                ready=int(status.get("readyReplicas", sum(pod_ready(p) for p in pods))),
                avg_batch=None if parts is None else parts.avg_batch,
                offered_rps=trace.rate_at(min(t, trace.end - 1e-6)),
                compute_ms=None if parts is None else parts.compute_ms,
            )
            result.timeline.append(sample)
            for d in new_decisions(status, seen):
                d["t"] = sample.t
                result.decisions.append(d)
                out(f"  decision: {d}")
            out(table_row(sample))
    finally:
        load.cancel()
    result.load = {k: v for k, v in load.report.items() if k != "records"}
    if load.error is not None:
        raise RuntimeError(f"the load generator failed: {load.error}") from load.error
    curves = batch_curves(cluster, bm, out)
    if bursty:
        result.summary = _summarize_bursty(result, trace, bm, load.report.get("records"), sample_s)
        result.summary["bursty"]["triton_rejected"] = _triton_rejected(
            stack.prometheus.url, bm, trace.end
        )
        from batchop_dev.local.bursts import verdict_lines, window_table

        for line in window_table(result.summary["bursty"]):
            out(line)
        out(
            f"operator decisions: {result.summary['changes']['delay']} delay change(s), "
            f"{result.summary['changes']['replicas']} replica change(s)"
        )
        for line in verdict_lines(result.summary["bursty"]):
            out(line)
    else:
        result.summary = _summarize(result, trace, bm, load.report.get("records"))
        for line in summary_lines(result.summary):
            out(line)
    result.summary["curves"] = curves
    result.summary["model"] = {"batchedModel": bm.name, "kind": model}
    if curves.get("measured") and result.summary.get("steps"):
        from batchop.api.tuning_spec import tuning_spec

        rows = plan_check(
            result.summary["steps"],
            [asdict(x) for x in result.timeline],
            curves["measured"],
            tuning_spec(bm),
        )
        result.summary["plan"] = rows
        out("batchop plan on the measured curve, against each settled step:")
        for line in plan_lines(rows):
            out(line)
    notes = []
    if not result.decisions:
        notes.append(
            "no tuning decisions were made: the operator held at the BatchedModel's start "
            f"values (delay {bm.spec.batching.max_queue_delay_microseconds} us, "
            f"{bm.spec.scaling.replicas} replica(s)) for the whole run; its log "
            "(operator.log next to this report) says why each tick held"
        )
        out(f"NOTE: {notes[-1]}")
    return notes


def _summarize(
    result: DemoResult, trace: Any, bm: Any, records: dict[str, Any] | None
) -> dict[str, Any]:
    """Knob changes and per-step p99 verdicts (the clients' p99 when there are records); a
    step settles after SETTLE_INTERVALS tuning intervals: a tick to see it, one to act, one
    for new pods to load the model."""
    from batchop_dev.local.steps import summary

    interval = float(bm.spec.autotune.interval_seconds)
    return summary(
        [asdict(s) for s in result.timeline],
        result.decisions,
        trace.segments(),
        slo_ms=float(bm.spec.slo.p99_latency_milliseconds),
        settle_s=SETTLE_INTERVALS * interval,
        start_delay_us=int(bm.spec.batching.max_queue_delay_microseconds),
        start_replicas=int(bm.spec.scaling.replicas),
        records=records,
    )


def _summarize_bursty(
    result: DemoResult, trace: Any, bm: Any, records: dict[str, Any] | None, sample_s: float
) -> dict[str, Any]:
    """Knob changes and the bursty-trace judgement (batchop_dev.local.bursts)."""
    from batchop_dev.local.bursts import judge
    from batchop_dev.local.steps import knob_changes

    if not records:
        raise RuntimeError("the load generator kept no per-request records to judge")
    return {
        "changes": knob_changes(
            result.decisions,
            int(bm.spec.batching.max_queue_delay_microseconds),
            int(bm.spec.scaling.replicas),
        ),
        "trace": trace.name,
        "bursty": judge(
            records,
            [asdict(s) for s in result.timeline],
            trace,
            slo_ms=float(bm.spec.slo.p99_latency_milliseconds),
            stabilization_s=float(bm.spec.autotune.scale_down_stabilization_seconds),
            sample_s=sample_s,
        ),
    }


def batch_curves(cluster: Any, bm: Any, out: Callable[[str], None]) -> dict[str, Any]:
    """The batch curve measured on one of the model's pods once the load is over (as
    `batchop profile` measures it) next to the one the operator learned under the load
    (status.learned.curve), in ms per execution by batch size. Either may be missing: no
    pod Ready, or nothing learned; the reason is kept."""
    from batchop.api.constants import PORT_HTTP
    from batchop_dev import profiling

    curves: dict[str, Any] = {"measured": None, "learned": None}
    learned = (model_status(cluster, bm).get("learned") or {}).get("curve")
    if learned:
        curves["learned"] = [[float(b), float(ms)] for b, ms, *_ in learned]
    else:
        curves["learned_missing"] = "status.learned.curve is empty: nothing learned"
    ready = [p for p in model_pods(cluster, bm) if pod_ready(p) and p["status"].get("podIP")]
    if not ready:
        curves["measured_missing"] = "no pod Ready after the load"
    else:
        url = f"{ready[0]['status']['podIP']}:{PORT_HTTP}"
        try:
            m = profiling.measure(url, bm.spec.model.name, repeats=5)
        except Exception as exc:  # noqa: BLE001 - the report says why, the demo goes on
            curves["measured_missing"] = f"measuring {url} failed: {exc}"
        else:
            curves["measured"] = [[float(b), float(ms)] for b, ms in m.curve_ms]
    for line in curve_lines(curves):
        out(line)
    return curves


def curve_lines(curves: dict[str, Any]) -> list[str]:
    """The two curves as the demo prints them, and how far apart they are. Pure."""

    def fmt(points: list[list[float]] | None, why: str | None) -> str:
        if not points:
            return f"none ({why})"
        return ", ".join(f"{ms:.2f} ms at {b:g}" for b, ms in points)

    lines = [
        "batch curve, measured after the load (batchop profile's way): "
        + fmt(curves.get("measured"), curves.get("measured_missing")),
        "batch curve, learned by the operator under the load: "
        + fmt(curves.get("learned"), curves.get("learned_missing")),
    ]
    gaps = curve_gaps(curves)
    if gaps:
        lines.append(
            "learned vs measured: " + ", ".join(f"{gap:+.0%} at batch {b:g}" for b, gap in gaps)
        )
    return lines


def curve_gaps(curves: dict[str, Any]) -> list[tuple[float, float]]:
    """(batch, learned / measured - 1) at each batch size the operator learned, the measured
    curve interpolated there; none unless both curves exist. Pure."""
    import numpy as np

    measured, learned = curves.get("measured"), curves.get("learned")
    if not measured or not learned:
        return []
    xs = [b for b, _ in measured]
    ys = [ms for _, ms in measured]
    return [(b, ms / float(np.interp(b, xs, ys)) - 1.0) for b, ms in learned]


# Issue 26's bounds for `batchop plan` against a settled step of the demo.
PLAN_REPLICAS_WITHIN = 1
PLAN_P99_WITHIN = 0.25


def plan_check(
    steps: list[dict[str, Any]],
    timeline: list[dict[str, Any]],
    curve: list[list[float]],
    spec: Any,
) -> list[dict[str, Any]]:
    """`batchop plan` on the measured curve, at each settled step's rate, against what the
    demo settled on: its replicas at the step's end and the clients' p99 over the step's
    settled part. Pure (`spec`: the demo's TuningSpec)."""
    from batchop.tuning.curve import prior_curve
    from batchop.tuning.policy import recommend

    out = []
    for step in steps:
        if step.get("within_slo") is None or step.get("client_p99_ms") is None:
            continue
        plan = recommend(prior_curve([(b, ms) for b, ms in curve]), step["offered_rps"], spec)
        inside = [x for x in timeline if step["start_s"] <= float(x["t"]) <= step["end_s"]]
        p99 = float(step["client_p99_ms"])
        replicas_off = abs(plan.replicas - int(step["last_replicas"]))
        p99_off = plan.predicted_p99_ms / p99 - 1.0
        out.append(
            {
                "start_s": step["start_s"],
                "rps": step["offered_rps"],
                "plan_replicas": plan.replicas,
                "plan_delay_us": plan.delay_us,
                "plan_p99_ms": round(plan.predicted_p99_ms, 2),
                "demo_replicas": int(step["last_replicas"]),
                "demo_delay_us": inside[-1].get("delay_us") if inside else None,
                "demo_p99_ms": p99,
                "demo_triton_p99_ms": step.get("p99_max_ms"),  # its worst pod's, not judged
                "replicas_met": replicas_off <= PLAN_REPLICAS_WITHIN,
                "p99_difference": round(p99_off, 4),
                "p99_met": abs(p99_off) <= PLAN_P99_WITHIN,
            }
        )
    return out


def plan_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The plan check as the demo prints it. Pure."""
    return [
        f"  plan at {r['rps']:g} req/s: {r['plan_replicas']} replica(s), delay "
        f"{r['plan_delay_us']} us, p99 {r['plan_p99_ms']:.1f} ms; the demo settled on "
        f"{r['demo_replicas']}, delay {r['demo_delay_us']} us, clients' p99 "
        f"{r['demo_p99_ms']:.1f} ms, Triton's {_fmt(r['demo_triton_p99_ms'], '.1f')} ms "
        f"(replicas {'within' if r['replicas_met'] else 'beyond'} {PLAN_REPLICAS_WITHIN}; "
        f"p99 {r['p99_difference']:+.0%}, "
        f"{'within' if r['p99_met'] else 'beyond'} {PLAN_P99_WITHIN:.0%})"
        for r in rows
    ]


def _triton_rejected(prometheus_url: str, bm: Any, seconds: float) -> float | None:
    """What Triton itself counted as refused by the queue policy over the run (its
    REJECTED failures, every pod that existed, from the stack's Prometheus), after a scrape
    interval for the last ones; None when Prometheus has no such series or cannot answer.
    An estimate: increase() extrapolates at the range's ends and misses what a new pod
    refused before its first scrape."""
    import urllib.parse
    import urllib.request

    from batchop.api.constants import PROM_LABEL_MODEL

    time.sleep(6.0)
    series = (
        f'nv_inference_request_failure{{reason="REJECTED",{PROM_LABEL_MODEL}='
        f'"{bm.name}",namespace="{bm.namespace or "default"}"}}'
    )
    query = urllib.parse.urlencode(
        {"query": f"sum(increase({series}[{math.ceil(seconds) + 10}s]))"}
    )
    try:
        with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?{query}", timeout=10) as resp:
            got = json.load(resp)["data"]["result"]
    except (OSError, ValueError, KeyError):
        return None
    if not got:
        return None
    value = float(got[0]["value"][1])
    return None if math.isnan(value) else round(value, 1)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary as the demo prints it. Pure."""
    changes = summary.get("changes") or {}
    lines = [
        f"operator decisions: {changes.get('delay', 0)} delay change(s), "
        f"{changes.get('replicas', 0)} replica change(s)"
    ]
    for step in summary.get("steps") or []:
        if step["within_slo"] is None:
            verdict = f"not judged (shorter than the {summary['settle_s']:g}s settling time)"
        elif summary.get("p99_judged") == "client":
            verdict = (
                f"clients' p99 {step['client_p99_ms']:.1f} ms "
                f"{'<=' if step['within_slo'] else '>'} SLO {step['slo_ms']:g} ms "
                f"over {step['client_requests']} settled request(s) (Triton's worst pod "
                f"p99 {_fmt(step['p99_max_ms'], '.1f')} ms), "
                f"{step['last_replicas']} replica(s) at the end"
            )
        else:
            verdict = (
                f"p99 max {step['p99_max_ms']:.1f} ms "
                f"{'<=' if step['within_slo'] else '>'} SLO {step['slo_ms']:g} ms "
                f"over {step['samples']} settled sample(s), "
                f"{step['last_replicas']} replica(s) at the end"
            )
        lines.append(
            f"  step {step['start_s']:g}-{step['end_s']:g}s at "
            f"{step['offered_rps']:g} req/s: {verdict}"
        )
    return lines


def write_curve_plot(curves: dict[str, Any], path: Path) -> None:
    """curves.png: ms per execution by batch size, measured after the load and learned under
    it, with the time per inference it gives (the batching gain) beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, per) = plt.subplots(1, 2, figsize=(9, 3.6))
    for key, style in (("measured", "o-"), ("learned", "s--")):
        points = curves.get(key) or []
        if points:
            xs, ys = [b for b, _ in points], [ms for _, ms in points]
            ax.plot(xs, ys, style, label=key)
            per.plot(xs, [ms / b for b, ms in points], style, label=key)
    ax.set_xlabel("batch size")
    ax.set_ylabel("ms per execution")
    per.set_xlabel("batch size")
    per.set_ylabel("ms per inference")
    for a in (ax, per):
        a.set_ylim(bottom=0)
        a.legend(loc="best")
    fig.suptitle("batch curve: measured on a pod after the load, learned by the operator")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write_report(result: DemoResult, report_dir: Path, out: Callable[[str], None]) -> None:
    (report_dir / "report.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
    if result.timeline:
        write_plot(result, report_dir / "report.png")
    curves = result.summary.get("curves") or {}
    if curves.get("measured") or curves.get("learned"):
        write_curve_plot(curves, report_dir / "curves.png")
    served = [s.rps for s in result.timeline if s.rps]
    out(
        f"report: {report_dir / 'report.json'}"
        + (f", {report_dir / 'report.png'}" if result.timeline else "")
        + f" ({len(result.timeline)} samples, {len(result.decisions)} decisions"
        + (f", peak {max(served):.0f} req/s served" if served else "")
        + ")"
    )


def demo_report(args: list[str], report_dir: Path, finished: str) -> dict[str, Any]:
    """`batchop demo ARGS --report DIR` in a subprocess, as the bench scripts run it: its
    report.json. The demo's verdicts decide its exit code, so only a missing report, or one
    without `summary[finished]` (the run did not get that far), raises RuntimeError."""
    import subprocess

    cmd = [sys.executable, "-m", "batchop", "demo", *args, "--report", str(report_dir)]
    subprocess.run(cmd, check=False)
    report_file = report_dir / "report.json"
    if not report_file.exists():
        raise RuntimeError(f"the demo wrote no {report_file}")
    report = json.loads(report_file.read_text())
    if finished not in report.get("summary", {}):
        raise RuntimeError(f"the demo did not finish its run: {report.get('notes')}")
    return report


def main_exit_code(result: DemoResult) -> int:
    """0 when the report holds real samples (requests served and a p99 measured) and, for a
    trace replay, no verdict failed (one that could not be judged does not fail)."""
    real = any((s.rps or 0) > 0 and (s.p99_ms or 0) > 0 for s in result.timeline)
    verdicts = (result.summary.get("bursty") or {}).get("verdicts") or {}
    failed = any(v is False for v in verdicts.values())
    return 0 if real and "interrupted" not in result.notes and not failed else 1


if __name__ == "__main__":  # pragma: no cover - `batchop demo` is the entry point
    sys.exit(main_exit_code(run_demo()))
