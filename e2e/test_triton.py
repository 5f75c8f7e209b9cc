"""Real tritonserver from the nvidia-pytriton wheel, serving the synthetic model.

Each test talks to a real server on its own 127.0.77.x address: correct outputs, live delay
reload that is hitless under open-loop load and keeps Triton's counters, and a rejected config
that leaves the old one serving.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from batchop.act.triton_reload import (
    ConfigRejected,
    apply_config,
    get_model_config,
    live_delay,
    set_queue_delay,
    set_queue_delay_sync,
)
from batchop.sim.profile import load_profile
from batchop.sim.trace import constant_trace
from batchop_dev.local.load import StaticTargets, run_load
from batchop_dev.local.triton import TritonProcess, write_model_repository
from batchop_dev.local.triton.metrics import scrape
from batchop_dev.local.triton.process import session_pids

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "examples" / "profiles" / "cpu-demo.yaml"
MODEL = "synth"
_ADDRESSES = itertools.count(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TritonProcess]:
    """A fresh server per test (reloads change its state), on an address of its own."""
    write_model_repository(tmp_path / "repo", MODEL, load_profile(PROFILE), max_queue_delay_us=0)
    address = f"127.0.77.{next(_ADDRESSES)}"
    with TritonProcess(
        tmp_path / "repo", address=address, load_models=[MODEL], log_path=tmp_path / "triton.log"
    ) as triton:
        yield triton


def _infer(url: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    try:
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer(MODEL, [inp]).as_numpy("OUTPUT0")
    finally:
        client.close()


def test_serves_synthetic_model_with_correct_outputs(server: TritonProcess) -> None:
    profile = load_profile(PROFILE)
    config = asyncio.run(get_model_config(server.url, MODEL))
    assert config["max_batch_size"] == profile.max_batch_size
    assert config["backend"] == "python"
    assert live_delay(config) == 0
    rng = np.random.default_rng(7)
    for batch in (1, 3, profile.max_batch_size):
        x = rng.normal(size=(batch, 4)).astype(np.float32)
        assert np.array_equal(_infer(server.url, x), x * 2)
    counters = scrape(server.metrics_url, MODEL)
    assert counters.get("nv_inference_request_success") == 3
    assert counters.get("nv_inference_count") == 1 + 3 + profile.max_batch_size
    assert server.rss_bytes() > 0


def test_reload_is_hitless_under_load_and_keeps_counters(server: TritonProcess) -> None:
    _infer(server.url, np.zeros((1, 4), np.float32))
    before = scrape(server.metrics_url, MODEL)
    delays = [4000, 1000, 8000]
    results = []

    async def scenario() -> dict:
        load = asyncio.create_task(
            run_load(constant_trace(150.0, 10.0), StaticTargets([server.url], MODEL), seed=11)
        )
        for delay in delays:
            await asyncio.sleep(2.0)
            results.append(await set_queue_delay(server.url, MODEL, delay))
        return await load

    report = asyncio.run(scenario())
    assert report["requests"] > 1000
    assert report["failed"] == 0, report["errors"]
    assert all(r.changed for r in results)
    assert {r.via for r in results} == {"grpc"}
    assert [r.delay_us for r in results] == delays
    assert live_delay(asyncio.run(get_model_config(server.url, MODEL))) == delays[-1]
    after = scrape(server.metrics_url, MODEL)
    # counters were not reset by the reloads: they grew by every request the load sent
    gained = after - before
    assert gained.get("nv_inference_request_success") == report["ok"]
    assert gained.get("nv_inference_request_failure") == 0
    # Over gRPC no request waits for the reload (over HTTP, 10-15 per reload waited the
    # whole 1.6-2.3 s, in Triton's HTTP frontend, where its own latency counters do not see
    # it: only the clients' latency shows it). A generator that cannot keep its own schedule
    # (send-lag p99 >= 100 ms) inflates every client latency, so the wait is not judged then.
    latencies = report["records"]["latency_ms"]
    slow = sum(1 for lat in latencies if lat is not None and lat > 1000)
    if report["send_lag_p99_ms"] >= 100:
        pytest.skip(
            f"reload wait not judged: load generator's send lag p99 "
            f"{report['send_lag_p99_ms']} ms >= 100 ms ({slow} requests took > 1 s)"
        )
    assert slow <= 0.005 * len(latencies), f"{slow} requests took > 1 s"


def test_load_resends_a_refused_connection_to_another_target(server: TritonProcess) -> None:
    """A killed pod stays listed until its probe fails: what is sent to it is refused at
    connect, never reaches a server, and is resent to the next target (a mesh's
    connect-failure retry). Here one of two targets has nothing listening."""
    dead = f"127.0.78.{next(_ADDRESSES)}:8000"
    report = asyncio.run(
        run_load(constant_trace(40.0, 3.0), StaticTargets([server.url, dead], MODEL), seed=3)
    )
    assert report["requests"] > 60
    assert report["failed"] == 0, report["errors"]
    # Round robin sends every other request to the dead address; each was resent.
    assert report["resent"] >= report["requests"] // 2 - 1
    assert set(report["records"]["target"]) == {server.url}


def test_rejected_config_keeps_old_one_serving(server: TritonProcess) -> None:
    set_queue_delay_sync(server.url, MODEL, 2000)
    config = asyncio.run(get_model_config(server.url, MODEL))
    bad = json.loads(json.dumps(config))
    bad["dynamic_batching"]["max_queue_delay_microseconds"] = 9000
    bad["dynamic_batching"]["preferred_batch_size"] = [config["max_batch_size"] * 2]
    with pytest.raises(ConfigRejected, match="failed to load"):
        asyncio.run(apply_config(server.url, MODEL, bad))
    with pytest.raises(ConfigRejected, match="failed to load"):
        asyncio.run(apply_config(server.url, MODEL, bad, via="grpc"))
    assert server.is_ready()
    assert live_delay(asyncio.run(get_model_config(server.url, MODEL))) == 2000
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert np.array_equal(_infer(server.url, x), x * 2)
    assert "preferred size must be <= max batch size" in server.log_path.read_text()


def test_reload_falls_back_to_http_where_grpc_cannot_be_reached(server: TritonProcess) -> None:
    """gRPC not listening (disabled, not exposed): the load goes over HTTP, and says so."""
    with socket.socket() as s:  # a port on the server's address that nobody listens on
        s.bind((server.url.rsplit(":", 1)[0], 0))
        closed = s.getsockname()[1]
    fallback = set_queue_delay_sync(server.url, MODEL, 3000, grpc_port=closed)
    assert fallback.changed and fallback.via == "http" and fallback.delay_us == 3000
    http_only = set_queue_delay_sync(server.url, MODEL, 1500, grpc_port=None)
    assert http_only.changed and http_only.via == "http" and http_only.previous_delay_us == 3000
    assert live_delay(asyncio.run(get_model_config(server.url, MODEL))) == 1500
    x = np.ones((1, 4), np.float32)
    assert np.array_equal(_infer(server.url, x), x * 2)


def test_cli_load_direct_mode(server: TritonProcess, tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    trace = tmp_path / "trace.csv"  # 20 s at 30/s, then 10 s at 120/s; played 10x faster, x2
    trace.write_text("second,rps\n0,30\n20,120\n30,0\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchop",
            "load",
            "--trace",
            str(trace),
            "--time-scale",
            "0.1",
            "--rate-scale",
            "2",
            "--url",
            server.url,
            "--model",
            MODEL,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["failed"] == 0 and report["ok"] == report["requests"] > 0
    assert len(report["timeline"]) == 3
    first, last = report["timeline"][0]["sent"], report["timeline"][2]["sent"]
    assert last > 2 * first  # the step up: 60/s, then 240/s
    assert len(report["records"]["send_s"]) == report["requests"]
    assert report["targets"] == [server.url]
    assert report["p99_ms"] >= report["p50_ms"] > 0


def test_stop_ends_the_server_and_its_python_stub(tmp_path: Path) -> None:
    write_model_repository(tmp_path / "repo", MODEL, load_profile(PROFILE))
    triton = TritonProcess(
        tmp_path / "repo", address=f"127.0.77.{next(_ADDRESSES)}", load_models=[MODEL]
    )
    with triton:
        pid = triton.proc.pid
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in session_pids(pid)}
        assert "tritonserver" in names
        assert any(n.startswith("triton_python") for n in names)  # the stub (comm is cut)
    assert triton.proc.returncode is not None
    assert session_pids(pid) == []
    assert not triton.is_ready()
