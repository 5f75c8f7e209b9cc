"""`batchop profile`: measure a Triton model's batch-latency curve into a profile.

For each batch size it sends one request of that many rows at a time (so Triton executes
exactly that batch, alone) and reads the execution's time from Triton's statistics
extension: the `compute_infer` time of batch-size-b executions, before and after. That is
the quantity a profile means (one batch's execution time; queueing, HTTP and serialisation
excluded) and the one batchop learns online (nv_inference_compute_infer_duration_us per
execution), so the prior and the learned curve are the same measure. An execution of the
same batch size by someone else between the two reads (a model under traffic) is seen in
the count and that sample is dropped, never averaged in.

Measured medians are noisy; a profile (and `spec.model.latencyProfile`) must never fall as
the batch grows, so the curve written is the medians made non-decreasing by
pool-adjacent-violators (the least-squares non-decreasing fit); the raw spread is reported
beside it.
"""

from __future__ import annotations

import math
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from batchop.cli.output import write_whole

# The API's latencyProfile holds at most 32 points; a profile may hold more, but one curve
# for both keeps `batchop profile -o yaml` and the profile file the same measurement.
MAX_POINTS = 32
STATS_SETTLE_S = 2.0  # Triton updates its statistics just after the response is sent
_FLOAT_TYPES = {"FP16", "FP32", "FP64"}


class ProfileFailed(RuntimeError):
    """Measuring failed; the message names the URL, model or field, and the rule."""


@dataclass(frozen=True)
class BatchTiming:
    """The timed executions of one batch size, in ms."""

    batch: int
    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.samples_ms))

    def quantile_ms(self, q: float) -> float:
        return float(np.quantile(np.asarray(self.samples_ms), q))

    @property
    def per_inference_ms(self) -> float:
        return self.median_ms / self.batch


@dataclass(frozen=True)
class Measurement:
    """What `measure` found: the endpoint, the raw timings and the curve to write."""

    url: str
    model: str
    version: str
    server_version: str
    max_batch_size: int
    repeats: int
    warmup: int
    timings: tuple[BatchTiming, ...]
    curve_ms: tuple[tuple[int, float], ...]  # non-decreasing fit of the medians
    dropped: int  # samples dropped because another execution of that size interleaved
    seconds: float
    measured_at: str = field(
        default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )

    def ratio(self, big: int, small: int = 1) -> float | None:
        """Median time per inference at batch `big` over batch `small` (None: not measured)."""
        by = {t.batch: t for t in self.timings}
        if big not in by or small not in by:
            return None
        return by[big].per_inference_ms / by[small].per_inference_ms


def batch_sizes(max_batch_size: int, limit: int = MAX_POINTS) -> list[int]:
    """Batch sizes to measure: every size 1..max when that is at most `limit`, else `limit`
    sizes spread geometrically from 1 to max (where a curve's shape changes most)."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    if max_batch_size <= limit:
        return list(range(1, max_batch_size + 1))
    sizes: set[int] = set()
    n = limit
    while len(sizes) < limit:
        grid = np.geomspace(1, max_batch_size, n)
        sizes = {int(round(float(v))) for v in grid} | {1, max_batch_size}
        n += 1
    ordered = sorted(sizes)
    while len(ordered) > limit:  # drop the interior point closest (in log) to a neighbour
        gaps = [math.log(ordered[i + 1] / ordered[i - 1]) for i in range(1, len(ordered) - 1)]
        del ordered[1 + gaps.index(min(gaps))]
    return ordered


def non_decreasing(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Pool-adjacent-violators: the least-squares non-decreasing fit of `points` (sorted by
    batch size), equal weights. Already non-decreasing points come back unchanged."""
    blocks: list[list[float]] = []  # [sum, count]
    for _, y in points:
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    fitted: list[float] = []
    for s, c in blocks:
        fitted += [s / c] * int(c)
    return [(b, y) for (b, _), y in zip(points, fitted, strict=True)]


def normalise_url(url: str) -> str:
    """host:port (what tritonclient.http takes) from `host:port` or `http://host:port`."""
    text = url.strip()
    if "://" in text:
        scheme, text = text.split("://", 1)
        if scheme != "http":
            raise ValueError(f"--url {url}: only http:// endpoints are supported, got {scheme}://")
    text = text.rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--url {url}: must be HOST:PORT of Triton's HTTP endpoint (e.g. :8000)")
    return text


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError | socket.timeout) or "timeout" in type(exc).__name__.lower()


class _Endpoint:
    """A tritonclient.http client that turns failures into messages naming URL and model."""

    def __init__(self, url: str, model: str, timeout_s: float) -> None:
        import tritonclient.http as httpclient

        self.url, self.model, self.timeout_s = url, model, timeout_s
        self.client = httpclient.InferenceServerClient(
            url, connection_timeout=timeout_s, network_timeout=timeout_s
        )

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return fn()
        except InferenceServerException as exc:
            raise ProfileFailed(
                f"Triton at http://{self.url} refused {what} for model {self.model!r}: "
                f"{exc.message()}"
            ) from None
        except Exception as exc:  # geventhttpclient raises socket and gevent errors
            if _is_timeout(exc):
                raise ProfileFailed(
                    f"Triton at http://{self.url}, model {self.model!r}: {what} did not answer "
                    f"within --timeout {self.timeout_s:g} s (every call must answer within "
                    "it; raise --timeout for a slow model)"
                ) from None
            if isinstance(exc, OSError):
                raise ProfileFailed(
                    f"cannot reach Triton at http://{self.url} ({_reason(exc)}): is the "
                    "server running there, and is --url its HTTP port?"
                ) from None
            raise

    def close(self) -> None:
        self.client.close()


def _served_models(endpoint: _Endpoint) -> list[str]:
    try:
        index = endpoint.client.get_model_repository_index()
    except Exception:  # noqa: BLE001 - only to enrich the message
        return []
    return sorted(m.get("name", "") for m in index if m.get("state") == "READY")


def _input_shapes(
    metadata: dict[str, Any], shapes: dict[str, list[int]]
) -> list[tuple[str, str, list[int]]]:
    """(name, datatype, dims without the batch dimension) per input, variable dims filled
    from --shape; an input batchop cannot make random data for is refused here."""
    out = []
    for spec in metadata.get("inputs", []):
        name, dtype = spec["name"], spec["datatype"]
        dims = [int(d) for d in spec["shape"]][1:]  # the first is the batch dimension
        if name in shapes:
            given = shapes[name]
            if len(given) != len(dims) or any(
                d not in (-1, g) for d, g in zip(dims, given, strict=True)
            ):
                raise ProfileFailed(
                    f"--shape {name}={','.join(map(str, given))} does not fit input {name!r} "
                    f"of shape {dims} (without the batch dimension)"
                )
            dims = given
        if any(d < 0 for d in dims):
            raise ProfileFailed(
                f"input {name!r} has a variable dimension (shape {dims} without the batch "
                f"dimension); give its size with --shape {name}=D1,D2,..."
            )
        if dtype in ("BYTES", "BF16"):
            raise ProfileFailed(
                f"input {name!r} is {dtype}: batchop profile makes FP16/FP32/FP64, integer and "
                "BOOL inputs only"
            )
        out.append((name, dtype, dims))
    unknown = set(shapes) - {name for name, _, _ in out}
    if unknown:
        raise ProfileFailed(f"--shape names no input of the model: {', '.join(sorted(unknown))}")
    if not out:
        raise ProfileFailed("the model's metadata lists no inputs")
    return out


def _make_inputs(inputs: list[tuple[str, str, list[int]]], batch: int, seed: int) -> list[Any]:
    import tritonclient.http as httpclient
    from tritonclient.utils import triton_to_np_dtype

    rng = np.random.default_rng(seed)
    made = []
    for name, dtype, dims in inputs:
        shape = [batch, *dims]
        if dtype in _FLOAT_TYPES:
            x = rng.standard_normal(shape).astype(triton_to_np_dtype(dtype))
        else:  # integers and booleans: zeros, a valid index or mask for any model
            x = np.zeros(shape, dtype=triton_to_np_dtype(dtype))
        inp = httpclient.InferInput(name, shape, dtype)
        inp.set_data_from_numpy(x, binary_data=True)
        made.append(inp)
    return made


def _compute(stats: dict[str, Any], version: str, batch: int) -> tuple[int, int]:
    """(executions, compute_infer ns) of batch-size-`batch` executions so far."""
    for entry in stats.get("model_stats", []):
        if version and str(entry.get("version")) != version:
            continue
        for b in entry.get("batch_stats", []) or []:
            if int(b["batch_size"]) == batch:
                infer = b["compute_infer"]
                return int(infer.get("count", 0)), int(infer.get("ns", 0))
    return 0, 0


def inspect_model(
    url: str, model: str, timeout_s: float = 10.0
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(config, metadata, server version) of a ready model; ProfileFailed saying what is wrong
    (unreachable, not served, not ready, no batching)."""
    endpoint = _Endpoint(url, model, timeout_s)
    try:
        return _inspect(endpoint)
    finally:
        endpoint.close()


def _inspect(endpoint: _Endpoint) -> tuple[dict[str, Any], dict[str, Any], str]:
    client, model = endpoint.client, endpoint.model
    server = endpoint.call("the server metadata", client.get_server_metadata)
    if not endpoint.call("the readiness check", lambda: client.is_model_ready(model)):
        served = _served_models(endpoint)
        raise ProfileFailed(
            f"model {model!r} is not ready on Triton at http://{endpoint.url} (ready models: "
            f"{', '.join(served) or 'none'}); --model must name a loaded model"
        )
    config = endpoint.call("the model config", lambda: client.get_model_config(model))
    metadata = endpoint.call("the model metadata", lambda: client.get_model_metadata(model))
    mbs = int(config.get("max_batch_size", 0))
    if mbs < 1:
        raise ProfileFailed(
            f"model {model!r} on Triton at http://{endpoint.url} does not batch: its config has "
            f"max_batch_size {mbs}; batchop profile measures batch sizes 1..max_batch_size, so "
            "the model's max_batch_size must be >= 1 (and a BatchedModel's "
            "spec.model.maxBatchSize is at most it)"
        )
    return config, metadata, str(server.get("version", "?"))


def measure(
    url: str,
    model: str,
    repeats: int = 10,
    warmup: int = 2,
    timeout_s: float = 10.0,
    max_batch_size: int | None = None,
    sizes: Sequence[int] | None = None,
    shapes: dict[str, list[int]] | None = None,
    progress: Callable[[float], None] | None = None,
) -> Measurement:
    """Time `repeats` executions of each batch size (after `warmup` untimed ones) of
    `model` at `url`; see the module docstring for what is timed and why."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    t0 = time.monotonic()
    endpoint = _Endpoint(url, model, timeout_s)
    try:
        config, metadata, server_version = _inspect(endpoint)
        model_mbs = int(config["max_batch_size"])
        top = model_mbs if max_batch_size is None else max_batch_size
        if not 1 <= top <= model_mbs:
            raise ProfileFailed(
                f"--max-batch-size {top} is outside 1..{model_mbs}, the max_batch_size of model "
                f"{model!r} on Triton at http://{url}"
            )
        todo = sorted(set(sizes)) if sizes else batch_sizes(top)
        if todo[0] != 1 or todo[-1] > top:
            raise ProfileFailed(f"batch sizes must start at 1 and stay within 1..{top}: {todo}")
        version = str(metadata.get("versions", [""])[-1]) if metadata.get("versions") else ""
        inputs = _input_shapes(metadata, shapes or {})
        timings, dropped = [], 0
        for i, batch in enumerate(todo):
            request = _make_inputs(inputs, batch, seed=batch)
            samples: list[float] = []
            attempts = 0
            while len(samples) < repeats:
                attempts += 1
                if attempts > 3 * (repeats + warmup):
                    raise ProfileFailed(
                        f"model {model!r} on Triton at http://{url} is busy: {dropped} of the "
                        f"executions of batch {batch} timed so far were interleaved with other "
                        "traffic of the same batch size; profile it without load"
                    )
                ms = _time_one(endpoint, version, batch, request)
                if ms is None:
                    dropped += 1
                elif attempts > warmup:
                    samples.append(ms)
            timings.append(BatchTiming(batch, tuple(samples)))
            if progress is not None:
                progress((i + 1) / len(todo))
    finally:
        endpoint.close()
    medians = [(t.batch, t.median_ms) for t in timings]
    curve = tuple((b, max(round(ms, 3), 0.001)) for b, ms in non_decreasing(medians))
    return Measurement(
        url=url,
        model=model,
        version=version,
        server_version=server_version,
        max_batch_size=top,
        repeats=repeats,
        warmup=warmup,
        timings=tuple(timings),
        curve_ms=curve,
        dropped=dropped,
        seconds=time.monotonic() - t0,
    )


def _time_one(endpoint: _Endpoint, version: str, batch: int, request: list[Any]) -> float | None:
    """ms of one execution of `request` (None: another one of that size interleaved)."""
    client, model = endpoint.client, endpoint.model

    def stats() -> dict[str, Any]:
        return endpoint.call(
            "the statistics request", lambda: client.get_inference_statistics(model)
        )

    count0, ns0 = _compute(stats(), version, batch)
    endpoint.call(f"an inference of batch {batch}", lambda: client.infer(model, request))
    deadline = time.monotonic() + STATS_SETTLE_S
    while True:
        count, ns = _compute(stats(), version, batch)
        if count > count0:
            break
        if time.monotonic() > deadline:
            raise ProfileFailed(
                f"Triton at http://{endpoint.url} answered a batch-{batch} request to model "
                f"{model!r} but its statistics counted no batch-{batch} execution within "
                f"{STATS_SETTLE_S:g} s; the model must report batch statistics"
            )
        time.sleep(0.001)
    if count != count0 + 1:
        return None
    return (ns - ns0) / 1e6


def profile_document(
    m: Measurement, name: str | None = None, startup_seconds: float | None = None
) -> str:
    """The profile YAML `batchop plan`/`simulate` read, with the raw spread as comments."""
    lines = [
        f"# Measured by `batchop profile` at {m.measured_at}: model {m.model!r}"
        + (f" (version {m.version})" if m.version else ""),
        f"# on Triton {m.server_version} at http://{m.url}, {m.repeats} timed executions per",
        f"# batch size after {m.warmup} untimed. An execution's time is Triton's compute_infer",
        "# (what batchop learns online); batch_latency_ms holds the medians made non-decreasing",
        "# (pool-adjacent-violators). Measured spread (ms):",
        "#  batch    median      p10      p90      min      max",
    ]
    for t in m.timings:
        lines.append(
            f"# {t.batch:6d} {t.median_ms:9.3f} {t.quantile_ms(0.1):8.3f} "
            f"{t.quantile_ms(0.9):8.3f} {min(t.samples_ms):8.3f} {max(t.samples_ms):8.3f}"
        )
    if m.dropped:
        lines.append(f"# {m.dropped} samples dropped: other traffic of the same batch size")
    lines += [
        f"name: {_yaml_str(name or m.model)}",
        f"max_batch_size: {m.max_batch_size}",
    ]
    if startup_seconds is not None:
        lines.append(f"startup_seconds: {startup_seconds:g}")
    lines.append("batch_latency_ms:")
    lines += [f"  {b}: {ms:g}" for b, ms in m.curve_ms]
    return "\n".join(lines) + "\n"


def _yaml_str(text: str) -> str:
    import yaml

    return yaml.safe_dump(text, default_style=None).strip().removesuffix("\n...").strip()


def manifest_fields(m: Measurement) -> dict[str, Any]:
    """The BatchedModel spec fields the measurement gives, to paste into a manifest."""
    return {
        "spec": {
            "model": {
                "name": m.model,
                "maxBatchSize": m.max_batch_size,
                "latencyProfile": [{"batchSize": b, "milliseconds": ms} for b, ms in m.curve_ms],
            }
        }
    }


def write_profile(path: str | Path, document: str) -> None:
    """Write the profile, whole, once it is known that `batchop plan`/`simulate` read it."""
    from batchop.sim.profile import ProfileError, load_profile

    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "profile.yaml"
        probe.write_text(document)
        try:
            load_profile(probe)
        except ProfileError as exc:  # a bug here, never the user's input
            raise RuntimeError(f"the measured profile does not read back: {exc}") from None
    write_whole(str(path), document)


def local_endpoint(namespace: str, name: str, kubeconfig: str | None) -> tuple[str, str]:
    """(url, model) of a Ready pod of BatchedModel namespace/name in the local cluster."""
    import asyncio

    from batchop_dev.local.load import BatchedModelPods, LoadError

    try:
        targets = asyncio.run(BatchedModelPods(namespace, name, kubeconfig).targets())
    except LoadError as exc:
        raise ProfileFailed(str(exc)) from None
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status == 404:
            raise ProfileFailed(f"BatchedModel {namespace}/{name} not found") from None
        raise ProfileFailed(
            f"cannot read BatchedModel {namespace}/{name} from the cluster "
            f"(kubeconfig {kubeconfig or '$KUBECONFIG or ~/.kube/config'}): {_reason(exc)}"
        ) from None
    if not targets:
        raise ProfileFailed(f"BatchedModel {namespace}/{name} has no Ready pod to measure")
    return targets[0].url, targets[0].model
