"""The real compute model (an ONNX MLP run by onnxruntime) on the real tritonserver.

It answers what the network computes, for every request of a batch Triton formed from
concurrent requests (one forward pass per batch, each request its own rows), and it batches
for real: time per inference at batch 32 is at most a quarter of batch 1's. That ratio is
the one timed assertion; the effect is large (about 0.11 on a quiet machine) and it is
the median of interleaved repeats, best of up to three rounds, so a noisy 2-core machine
does not decide it.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from batchop_dev.local.triton import TritonProcess
from batchop_dev.local.triton.mlp import INPUTS, OUTPUTS, make_weights, write_mlp_repository
from batchop_dev.profiling import _Endpoint, _make_inputs, _time_one

pytestmark = pytest.mark.e2e

MODEL = "mlp"
DELAY_US = 20_000  # long enough for concurrent requests to meet in one batch
_ADDRESSES = itertools.count(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    tmp = tmp_path_factory.mktemp("mlp")
    write_mlp_repository(tmp / "repo", MODEL, max_batch_size=64, max_queue_delay_us=DELAY_US)
    with TritonProcess(
        tmp / "repo",
        address=f"127.0.79.{next(_ADDRESSES)}",
        load_models=[MODEL],
        log_path=tmp / "triton.log",
    ) as triton:
        yield triton


def _executions(client: object) -> dict[int, int]:
    stats = client.get_inference_statistics(MODEL)["model_stats"][0]  # type: ignore[attr-defined]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


def test_concurrent_requests_are_one_batch_each_answered_with_its_own_rows(
    server: TritonProcess,
) -> None:
    import tritonclient.http as httpclient

    weights = make_weights()
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1 + i % 3, INPUTS)).astype(np.float32) for i in range(24)]
    client = httpclient.InferenceServerClient(server.url, concurrency=len(xs))
    try:
        before = _executions(client)
        pending = []
        for x in xs:
            inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            pending.append(client.async_infer(MODEL, [inp]))
        answers = [p.get_result().as_numpy("OUTPUT0") for p in pending]
        after = _executions(client)
    finally:
        client.close()
    for x, y in zip(xs, answers, strict=True):
        assert y.shape == (x.shape[0], OUTPUTS)
        np.testing.assert_allclose(y, weights.forward(x), rtol=2e-3, atol=2e-3)
    # the answers differ per input: a mix-up of rows between requests would show
    assert not np.allclose(answers[0][0], answers[3][0])
    runs = {b: after.get(b, 0) - before.get(b, 0) for b in after}
    rows = sum(x.shape[0] for x in xs)
    assert sum(b * n for b, n in runs.items()) == rows  # every row computed exactly once
    assert sum(runs.values()) < len(xs), f"no batch formed of {len(xs)} requests: {runs}"
    assert max(b for b, n in runs.items() if n) > 3  # a batch of several requests' rows


def test_time_per_inference_at_batch_32_is_at_most_a_quarter_of_batch_1(
    server: TritonProcess,
) -> None:
    """Median of 15 interleaved pairs, in up to 3 rounds: the best round's ratio is judged.

    The machine's other work preempts a 7 ms execution more often than a 1.5 ms one, so a
    busy spell raises the ratio (0.11 quiet, 0.22 measured beside a bench using both
    cores); a model that does not batch fails every round (its ratio is about 1)."""
    endpoint = _Endpoint(server.url, MODEL, timeout_s=30.0)
    inputs = [("INPUT0", "FP32", [INPUTS])]
    requests = {b: _make_inputs(inputs, b, seed=b) for b in (1, 32)}
    rounds: list[tuple[float, float, float]] = []
    try:
        for _ in range(2):  # warm-up: first executions pay for allocations
            for b in requests:
                _time_one(endpoint, "1", b, requests[b])
        while len(rounds) < 3 and not (rounds and min(r[2] for r in rounds) <= 0.25):
            times: dict[int, list[float]] = {1: [], 32: []}
            for _ in range(15):  # interleaved, so a busy spell hits both sizes
                for b in times:
                    ms = _time_one(endpoint, "1", b, requests[b])
                    if ms is not None:
                        times[b].append(ms)
            assert len(times[1]) >= 10 and len(times[32]) >= 10, times
            one, many = statistics.median(times[1]), statistics.median(times[32])
            rounds.append((one, many, (many / 32) / one))
    finally:
        endpoint.close()
    shown = "; ".join(f"batch 1 {a:.3f} ms, batch 32 {b:.3f} ms: {r:.3f}" for a, b, r in rounds)
    print(f"mlp on {server.url}: {shown}")
    assert all(many > one for one, many, _ in rounds), f"is it computing? {shown}"
    assert min(r for _, _, r in rounds) <= 0.25, f"batch 32 per inference vs batch 1: {shown}"


def test_repository_holds_the_network_and_its_thread_setting(tmp_path: Path) -> None:
    model_dir = write_mlp_repository(tmp_path, "m", max_batch_size=16, threads=1, seed=5)
    config = (model_dir / "config.pbtxt").read_text()
    assert "max_batch_size: 16" in config and f"dims: [{INPUTS}]" in config
    assert 'key: "threads" value: { string_value: "1" }' in config
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"))
    x = np.random.default_rng(0).standard_normal((4, INPUTS)).astype(np.float32)
    (y,) = session.run(None, {"INPUT0": x})
    np.testing.assert_allclose(y, make_weights(5).forward(x), rtol=2e-3, atol=2e-3)
    assert not np.allclose(y, make_weights(6).forward(x), rtol=2e-3, atol=2e-3)
