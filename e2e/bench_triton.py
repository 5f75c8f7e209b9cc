"""Benchmark (prints figures, asserts nothing): tritonserver start time and RSS, N at once,
and what the load generator sustains with accurate latencies.

    .venv/bin/python e2e/bench_triton.py [--servers 6] [--rates 100,200,400,600,800]

Client-vs-server: the generator's mean latency minus Triton's mean request duration (queue +
compute, from its counters) is what the client path adds; send lag is how late arrivals left.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from batchop.sim.profile import load_profile
from batchop.sim.trace import constant_trace
from batchop_dev.local.load import StaticTargets, run_load
from batchop_dev.local.triton import TritonProcess, write_model_repository
from batchop_dev.local.triton.metrics import scrape

PROFILE = Path(__file__).resolve().parents[1] / "examples" / "profiles" / "cpu-demo.yaml"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_start(repo: Path, n: int) -> None:
    servers = [
        TritonProcess(repo, address=f"127.0.79.{i + 1}", load_models=["synth"]) for i in range(n)
    ]
    t0 = time.monotonic()
    for s in servers:
        s.start()
    try:
        for s in servers:
            s.wait_ready(120)
        total = time.monotonic() - t0
        time.sleep(2)
        rss = [s.rss_bytes() / 2**20 for s in servers]
        print(
            f"{n} servers started together: all ready after {total:.1f} s; RSS per server "
            f"(with its python stub) {np.mean(rss):.0f} MiB (min {min(rss):.0f}, "
            f"max {max(rss):.0f})"
        )
    finally:
        for s in servers:
            s.stop()
    with TritonProcess(repo, address="127.0.79.100", load_models=["synth"]) as one:
        pass
    t0 = time.monotonic()
    with TritonProcess(repo, address="127.0.79.100", load_models=["synth"]) as one:
        alone = time.monotonic() - t0
        print(f"one server alone: ready in {alone:.1f} s, RSS {one.rss_bytes() / 2**20:.0f} MiB")


def bench_load(repo: Path, rates: list[float], seconds: float) -> None:
    with TritonProcess(repo, address="127.0.79.200", load_models=["synth"]) as t:
        asyncio.run(
            run_load(constant_trace(20, 1), StaticTargets([t.url], "synth"), keep_records=False)
        )
        print(
            "rate  achieved  lag_p99  client_mean  server_mean  added  client_cpu/req  "
            "server_cpu/req  p50  p99  batch"
        )
        for rps in rates:
            c0 = scrape(t.metrics_url, "synth")
            cpu0 = _cpu_s(t.proc.pid)
            r = asyncio.run(
                run_load(
                    constant_trace(rps, seconds),
                    StaticTargets([t.url], "synth"),
                    keep_records=False,
                )
            )
            d = scrape(t.metrics_url, "synth") - c0
            server_cpu = (_cpu_s(t.proc.pid) - cpu0) / max(r["ok"], 1) * 1000
            server = d.per_request_ms("nv_inference_request_duration_us")
            print(
                f"{rps:5.0f} {r['achieved_rps']:8.1f} {r['send_lag_p99_ms']:8.1f} "
                f"{r['mean_ms']:11.2f} {server:12.2f} {r['mean_ms'] - server:6.2f} "
                f"{r['client_cpu_ms_per_request']:15.3f} {server_cpu:15.3f} "
                f"{r['p50_ms']:5.1f} {r['p99_ms']:5.1f} {d.avg_batch:5.2f}  "
                f"failed={r['failed']}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--servers", type=int, default=6)
    ap.add_argument("--rates", default="100,200,400,600,800")
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write_model_repository(repo, "synth", load_profile(PROFILE))
        bench_start(repo, args.servers)
        bench_load(repo, [float(x) for x in args.rates.split(",")], args.seconds)


if __name__ == "__main__":
    main()
