"""The simulator against real Triton on the real compute model (issue 26, item 4).

Run: .venv/bin/python bench/calibration_real_model.py [--out FILE.md]  (default: bench/results/)

The ONNX MLP of batchop_dev.local.triton.mlp (max batch 32, one onnxruntime thread) is served
by a real tritonserver on loopback, profiled as `batchop profile` does (Triton's own compute
time per batch size, medians of 5 after 2 untimed), and then loaded open loop at fixed rates
and delays, 8 s a point (measured again while the machine is starved of CPU, as the e2e
calibration does). The simulator runs the same rate and delay on the measured profile. Per
point: p50, p99 and the average batch, real and simulated, with the error of each. The real
p50 and p99 are the clients' (they include HTTP and the generator's event loop), so the
simulator, which models Triton alone, runs short by a fixed overhead; the table says how much.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from batchop.provenance import Provenance
from batchop_dev.local.triton import TritonProcess
from batchop_dev.local.triton.calibrate import measure_quiet, measured_profile, starved
from batchop_dev.local.triton.mlp import mlp_payload, write_mlp_repository

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "calibration_real_model.md"
MODEL = "mlp"
MAX_BATCH = 32
# (req/s, delay us): no delay at a light load, a long delay at a moderate one, a short delay
# near the generator's own limit (500 req/s on two cores).
POINTS = ((50.0, 0), (150.0, 8000), (400.0, 2000), (400.0, 0))


def _row(p: dict[str, Any]) -> str:
    return (
        f"| {p['rps']:g} | {p['delay_us']:,} | {p['real_p50_ms']:.2f} | {p['sim_p50_ms']:.2f} | "
        f"{p['real_p50_ms'] - p['sim_p50_ms']:+.2f} | {p['real_p99_ms']:.2f} | "
        f"{p['sim_p99_ms']:.2f} | {p['real_avg_batch']:.2f} | {p['sim_avg_batch']:.2f} | "
        f"{p['real_avg_batch'] / p['sim_avg_batch']:.2f} | {p['real_compute_ms']:.2f} | "
        f"{p['send_lag_p99_ms']:.1f} | {p.get('starved') or ''} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    provenance = Provenance.start()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="batchop-calib-") as tmp:
        write_mlp_repository(Path(tmp) / "repo", MODEL, max_batch_size=MAX_BATCH)
        log = Path(tmp) / "triton.log"
        with TritonProcess(
            Path(tmp) / "repo", address="127.0.78.3", load_models=[MODEL], log_path=log
        ) as triton:
            print("profiling the model ...", flush=True)
            profile = measured_profile(triton.url, MODEL)
            points = []
            for i, (rps, delay) in enumerate(POINTS, 1):
                print(f"[{i}/{len(POINTS)}] {rps:g} req/s, delay {delay} us ...", flush=True)
                point = measure_quiet(triton, MODEL, profile, rps, delay, mlp_payload())
                points.append({**point.as_dict(), "starved": starved(point, profile)})
    wall = round(time.monotonic() - t0, 1)
    provenance.finish()
    curve = [[b, ms] for b, ms in profile.batch_latency_ms]
    provenance.write_json(args.out.with_suffix(".json"), wall, profile_ms=curve, points=points)
    usable = [p for p in points if not p["starved"]]
    gaps = [p["real_p50_ms"] - p["sim_p50_ms"] for p in usable]
    ratios = [p["real_avg_batch"] / p["sim_avg_batch"] for p in usable]
    one, top = profile.latency_ms(1), profile.latency_ms(MAX_BATCH)
    lines = [
        "# The simulator against real Triton on the real compute model",
        "",
        provenance.markdown().rstrip(),
        f"- wall time: {wall:g} s",
        "",
        f"The MLP's measured curve: {one:.2f} ms at batch 1, {top:.2f} ms at batch {MAX_BATCH} "
        f"(per inference {top / MAX_BATCH / one:.2f}x batch 1's). Every point below: real "
        "(the clients' latencies and Triton's batch counters) beside the simulator on that "
        "curve, same rate and delay, one replica.",
        "",
        "| req/s | delay us | real p50 ms | sim p50 ms | p50 real - sim | real p99 ms | "
        "sim p99 ms | real batch | sim batch | batch real / sim | real compute ms | "
        "send lag p99 ms | starved |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(p) for p in points),
        "",
    ]
    if usable:
        lines.append(
            f"Over the {len(usable)} usable points the clients' p50 is {min(gaps):+.2f} to "
            f"{max(gaps):+.2f} ms off the simulator's (the HTTP round trip, the generator and "
            "the python backend, which the simulator leaves out), and the average batch is "
            f"{min(ratios):.2f}-{max(ratios):.2f}x the simulated one."
        )
    else:
        lines.append("No point was usable: the machine stayed starved of CPU throughout.")
    args.out.write_text("\n".join(lines) + "\n")
    print(json.dumps(points, indent=1))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')} ({wall:g} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
