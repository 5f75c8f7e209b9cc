"""Open-loop load generator: Poisson arrivals at a trace's rate, onto real Triton servers.

Open loop means arrivals never wait for responses (a slow server gets a growing queue, as in
production), so the latencies measured are what users would see. Arrivals of a piecewise-
constant rate are drawn per segment: a Poisson count, then uniform times (exact for a Poisson
process). Requests go round-robin over the current targets through tritonclient's asyncio HTTP
client; in BatchedModel mode the targets are the model's Ready pods, re-listed every few
seconds from the API server. Everything stays on loopback: other addresses are refused.

A request whose connection is refused never reached a server, so it is sent once more to the
next target, as a mesh or ingress in front of Triton does by default (Envoy's and Istio's
connect-failure retry): a killed pod stays Ready, and listed, until its probe fails, and
without it every request sent to it meanwhile would fail. Counted apart (`resent`). A
request that reached a server and failed is never resent: it may have run.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

# What Triton 2.51 answers (HTTP 503) when its queue policy refuses a request: the overload
# guard's refusals, counted apart from other failures (checked in e2e/test_overload.py).
REJECTION_MESSAGES = ("Request timeout expired", "Exceeds maximum queue size")

# Highest offered rate at which the generator itself keeps up on two shared cores with
# client latencies within ~1 ms of the server's (measured; see docs/triton.md).
SUSTAINED_RPS = 500.0


class LoadError(ValueError):
    """Bad load-generator input (a target that is not loopback, an empty trace...)."""


@dataclass(frozen=True)
class Target:
    url: str  # host:port of Triton's HTTP endpoint
    model: str


class TargetSource(Protocol):
    """Where requests go; asked again every `refresh_s` seconds."""

    async def targets(self) -> list[Target]: ...


class RateTrace(Protocol):
    """What the generator needs of batchop.sim's Trace."""

    @property
    def end(self) -> float: ...

    def segments(self) -> list[tuple[float, float, float]]: ...


def require_loopback_url(url: str) -> str:
    """Validate `host:port` (scheme optional) with host in 127.0.0.0/8; return host:port."""
    bare = url.split("://", 1)[-1].rstrip("/")
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit():
        raise LoadError(f"target {url!r}: expected HOST:PORT, e.g. 127.0.0.1:8000")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise LoadError(
            f"target {url!r}: host must be a 127.x.y.z address (names are not resolved, so "
            "traffic cannot leave loopback)"
        ) from None
    if ip.version != 4 or not ip.is_loopback:
        raise LoadError(f"target {url!r}: only loopback (127.0.0.0/8) targets are allowed")
    return f"{host}:{port}"


class StaticTargets:
    """Fixed URLs (direct mode): `--url 127.0.0.5:8000 --model NAME`."""

    def __init__(self, urls: list[str], model: str) -> None:
        if not urls:
            raise LoadError("at least one --url is needed")
        self._targets = [Target(require_loopback_url(u), model) for u in urls]

    async def targets(self) -> list[Target]:
        return list(self._targets)


class BatchedModelPods:
    """The Ready pods of a BatchedModel, from the API server (the local cluster)."""

    def __init__(self, namespace: str, name: str, kubeconfig: str | None = None) -> None:
        self.namespace = namespace
        self.name = name
        self.kubeconfig = kubeconfig
        self._api: Any = None

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import config

            api = config.new_client_from_config(config_file=self.kubeconfig)
            host = api.configuration.host.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                raise LoadError(
                    f"kubeconfig {self.kubeconfig or '(default)'} points at {host}; only a "
                    "local cluster on loopback is allowed"
                )
            self._api = api
        return self._api

    def _list(self) -> list[Target]:
        from kubernetes import client

        from batchop.api.constants import GROUP, LABEL_MODEL, PLURAL, PORT_HTTP, VERSION

        api = self._client()
        bm = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )
        model = bm["spec"]["model"]["name"]
        pods = client.CoreV1Api(api).list_namespaced_pod(
            self.namespace, label_selector=f"{LABEL_MODEL}={self.name}"
        )
        out = []
        for pod in pods.items:
            status = pod.status
            ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
            if not ready or not status.pod_ip or pod.metadata.deletion_timestamp:
                continue
            out.append(Target(require_loopback_url(f"{status.pod_ip}:{PORT_HTTP}"), model))
        return sorted(out, key=lambda t: t.url)

    async def targets(self) -> list[Target]:
        return await asyncio.to_thread(self._list)


def scale_trace(trace: Any, time_scale: float = 1.0, rate_scale: float = 1.0) -> Any:
    """The trace played faster/slower (seconds x time_scale) at rates x rate_scale.

    The shared traces peak at 1,200-1,800 req/s, beyond what two cores can offer and serve;
    scaled down they keep their shape.
    """
    from batchop.sim.trace import Trace

    if time_scale <= 0 or rate_scale <= 0:
        raise LoadError(f"time scale ({time_scale:g}) and rate scale ({rate_scale:g}) must be > 0")
    return Trace(
        seconds=tuple(s * time_scale for s in trace.seconds),
        rps=tuple(r * rate_scale for r in trace.rps),
        name=trace.name,
    )


def arrival_times(trace: RateTrace, seed: int = 0) -> np.ndarray:
    """Sorted send times (trace seconds) of a Poisson process following the trace's rate."""
    rng = np.random.default_rng(seed)
    chunks = []
    for start, end, rps in trace.segments():
        if rps > 0 and end > start:
            n = rng.poisson(rps * (end - start))
            chunks.append(np.sort(rng.uniform(start, end, n)))
    return np.concatenate(chunks) if chunks else np.zeros(0)


def is_rejection(error: str) -> bool:
    """Whether a failed request's error is Triton's queue policy refusing it (overload guard)."""
    return any(m in error for m in REJECTION_MESSAGES)


def _pct(values: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if len(values) else None


def summarize(
    send_s: np.ndarray,
    latency_ms: np.ndarray,
    ok: np.ndarray,
    duration_s: float,
    rejected: np.ndarray | None = None,
) -> dict[str, Any]:
    """Totals, latency percentiles (successful requests) and a per-second timeline.

    `failed` counts every request not served; `rejected` the part of those the server's
    overload guard refused (its queue policy), `failed_other` the rest. The timeline bins
    requests by the second they were sent in.
    """
    ok = ok.astype(bool)
    rej = np.zeros(len(ok), dtype=bool) if rejected is None else rejected.astype(bool) & ~ok
    good = latency_ms[ok]
    report: dict[str, Any] = {
        "requests": int(len(send_s)),
        "ok": int(ok.sum()),
        "failed": int((~ok).sum()),
        "rejected": int(rej.sum()),
        "failed_other": int((~ok & ~rej).sum()),
        "p50_ms": _pct(good, 50),
        "p99_ms": _pct(good, 99),
        "mean_ms": round(float(good.mean()), 3) if len(good) else None,
        "max_ms": round(float(good.max()), 3) if len(good) else None,
        "duration_s": round(duration_s, 3),
        "achieved_rps": round(int(ok.sum()) / duration_s, 2) if duration_s > 0 else 0.0,
    }
    timeline = []
    seconds = np.floor(send_s).astype(int)
    for s in range(int(math.ceil(duration_s))):
        sel = seconds == s
        lat = latency_ms[sel & ok]
        timeline.append(
            {
                "t": s,
                "sent": int(sel.sum()),
                "ok": int((sel & ok).sum()),
                "failed": int((sel & ~ok).sum()),
                "rejected": int((sel & rej).sum()),
                "p50_ms": _pct(lat, 50),
                "p99_ms": _pct(lat, 99),
            }
        )
    report["timeline"] = timeline
    return report


@dataclass
class _Records:
    scheduled: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    rejected: list[bool] = field(default_factory=list)
    target: list[str] = field(default_factory=list)
    done: int = 0
    good: int = 0
    resent: int = 0
    errors: Counter[str] = field(default_factory=Counter)


_POOL = 16  # distinct inputs, each answer checked


@dataclass(frozen=True)
class Payload:
    """What each request sends and what its answer must be: a pool of single-row inputs of
    one FP32 tensor, with the output each must produce.

    Why a pool checked one by one: a server that batches must still give each request its
    own rows' answer; a mixed-up batch shows as "wrong result", not as a fast success.
    """

    input_name: str
    output_name: str
    inputs: tuple[np.ndarray, ...]  # each of shape (1, n)
    expected: tuple[np.ndarray, ...]
    tolerance: float = 0.0  # 0: exact; else rtol and atol of np.allclose

    def matches(self, got: np.ndarray | None, which: int) -> bool:
        want = self.expected[which]
        if got is None or got.shape != want.shape:
            return False
        if self.tolerance == 0.0:
            return bool(np.array_equal(got, want))
        return bool(np.allclose(got, want, rtol=self.tolerance, atol=self.tolerance))


def sleep_payload() -> Payload:
    """The sleep model's (OUTPUT0 = INPUT0 * 2, exactly)."""
    from batchop_dev.local.triton.model_repo import ELEMENTS, INPUT_NAME, OUTPUT_NAME

    xs = tuple(
        (np.arange(ELEMENTS, dtype=np.float32) + i * ELEMENTS).reshape(1, ELEMENTS)
        for i in range(_POOL)
    )
    return Payload(INPUT_NAME, OUTPUT_NAME, xs, tuple(x * 2 for x in xs))


def _requests(payload: Payload) -> list[Any]:
    import tritonclient.http as httpclient

    pool = []
    for x in payload.inputs:
        inp = httpclient.InferInput(payload.input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        pool.append(inp)
    return pool


async def run_load(
    trace: RateTrace,
    source: TargetSource,
    seed: int = 0,
    timeout_s: float = 30.0,
    refresh_s: float = 3.0,
    progress: Callable[[str], None] | None = None,
    keep_records: bool = True,
    payload: Payload | None = None,
) -> dict[str, Any]:
    """Drive `trace` onto `source`'s targets; return the report (see summarize). Requests
    carry `payload` (by default the sleep model's)."""
    import aiohttp
    import tritonclient.http.aio as aioclient

    payload = payload or sleep_payload()
    schedule = arrival_times(trace, seed)
    pool = _requests(payload)
    rec = _Records()
    clients: dict[str, Any] = {}
    current: list[Target] = []
    pending: set[asyncio.Task[None]] = set()
    cpu0 = time.process_time()
    start_unix = time.time()
    rr = 0
    loop_t0 = time.perf_counter()

    def now() -> float:
        return time.perf_counter() - loop_t0

    async def refresh() -> None:
        nonlocal current
        while True:
            try:
                found = await source.targets()
            except LoadError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the last list, say why
                rec.errors[f"target refresh: {type(exc).__name__}: {exc}"] += 1
            else:
                for t in found:
                    if t.url not in clients:
                        clients[t.url] = aioclient.InferenceServerClient(
                            t.url, conn_limit=0, conn_timeout=timeout_s
                        )
                current = found
            await asyncio.sleep(refresh_s)

    async def send(scheduled: float, target: Target | None, which: int) -> None:
        inp = pool[which]
        t_send = now()
        idx = len(rec.sent)
        rec.scheduled.append(scheduled)
        rec.sent.append(t_send)
        rec.latency_ms.append(math.nan)
        rec.ok.append(False)
        rec.rejected.append(False)
        rec.target.append(target.url if target else "")
        if target is None:
            rec.errors["no ready target"] += 1
            rec.done += 1
            return
        try:
            try:
                result = await clients[target.url].infer(target.model, [inp])
            except aiohttp.ClientConnectorError:
                others = [t for t in current if t.url != target.url]
                if not others:
                    raise
                target = others[idx % len(others)]
                rec.target[idx] = target.url
                rec.resent += 1
                result = await clients[target.url].infer(target.model, [inp])
            good = payload.matches(result.as_numpy(payload.output_name), which)
            if not good:
                rec.errors["wrong result"] += 1
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome to record
            good = False
            rec.rejected[idx] = is_rejection(str(exc))
            rec.errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
        rec.latency_ms[idx] = (now() - t_send) * 1000.0
        rec.ok[idx] = good
        rec.done += 1
        rec.good += good

    async def report_progress() -> None:
        last = 0
        while progress is not None:
            await asyncio.sleep(5.0)
            n = len(rec.sent)
            done = [lat for lat in rec.latency_ms[last:n] if not math.isnan(lat)]
            p99 = f"{np.percentile(done, 99):.1f}" if done else "-"
            progress(
                f"load t={now():6.1f}s sent={n} ok={rec.good} "
                f"failed={rec.done - rec.good} (rejected={sum(rec.rejected)}) "
                f"in-flight={n - rec.done} "
                f"rate={(n - last) / 5.0:.0f}/s p99(last 5s)={p99}ms targets={len(current)}"
            )
            last = n

    refresher = asyncio.create_task(refresh())
    reporter = asyncio.create_task(report_progress())
    try:
        # first target list before the clock starts
        for _ in range(int(10 / 0.1)):
            if current or refresher.done():
                break
            await asyncio.sleep(0.1)
        if refresher.done():
            refresher.result()
        loop_t0 = time.perf_counter()
        start_unix = time.time()
        cpu0 = time.process_time()
        for i, at in enumerate(schedule):
            delay = at - now()
            if delay > 0.0005:
                await asyncio.sleep(delay)
            if refresher.done():  # a LoadError (non-loopback pod) ends the run
                refresher.result()
            target = current[rr % len(current)] if current else None
            rr += 1
            task = asyncio.create_task(send(float(at), target, i % len(pool)))
            pending.add(task)
            task.add_done_callback(pending.discard)
        end_wait = max(0.0, trace.end - now())
        await asyncio.sleep(end_wait)
        if pending:
            await asyncio.wait(set(pending), timeout=timeout_s + 1)
    finally:
        refresher.cancel()
        reporter.cancel()
        for task in list(pending):
            task.cancel()
        for c in clients.values():
            await c.close()

    sent = np.array(rec.sent)
    latency = np.array(rec.latency_ms)
    ok = np.array(rec.ok, dtype=bool) & ~np.isnan(latency)
    rejected = np.array(rec.rejected, dtype=bool) & ~ok
    report = summarize(sent, latency, ok, float(trace.end), rejected)
    lag = sent - np.array(rec.scheduled) if len(sent) else np.zeros(1)
    report["start_unix"] = round(start_unix, 6)  # send_s and timeline t count from here
    report["offered_rps"] = round(len(schedule) / trace.end, 2) if trace.end > 0 else 0.0
    report["send_lag_p99_ms"] = round(float(np.percentile(lag, 99)) * 1000, 3)
    report["send_lag_max_ms"] = round(float(lag.max()) * 1000, 3)
    # the generator's own CPU per request: its capacity on a free core is 1 / this
    cpu = time.process_time() - cpu0
    report["client_cpu_ms_per_request"] = round(1000 * cpu / len(sent), 3) if len(sent) else None
    report["errors"] = dict(rec.errors.most_common(20))
    report["resent"] = rec.resent  # refused at connect, sent again to another target
    report["targets"] = sorted(set(rec.target) - {""})
    if keep_records:
        report["records"] = {
            "send_s": [round(s, 6) for s in rec.sent],
            "latency_ms": [None if math.isnan(v) else round(v, 3) for v in rec.latency_ms],
            "ok": [bool(v) for v in ok],
            "rejected": [bool(v) for v in rejected],
            "lag_ms": [round(float(v) * 1000, 3) for v in lag[: len(sent)]],
            "target": rec.target,
        }
    return report


def capacity_warning(trace: RateTrace) -> str | None:
    """A warning when the trace asks for more than the generator sustains accurately."""
    peak = max((rps for _, _, rps in trace.segments()), default=0.0)
    if peak > SUSTAINED_RPS:
        return (
            f"warning: the trace peaks at {peak:.0f} req/s; this generator sustains about "
            f"{SUSTAINED_RPS:.0f} req/s with accurate latencies on two cores, so above that "
            "send times lag and client latencies overstate the server's"
        )
    return None


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
