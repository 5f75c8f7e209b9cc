"""Faults under traffic on the real stack: the 15-minute run and its result file (issue 27).

Run: .venv/bin/python bench/chaos.py [--minutes 15] [--out bench/results/chaos.md]

What runs and what is judged: batchop_dev.chaos. Writes chaos.md, chaos.json and
plots/chaos.png next to each other.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from batchop.provenance import Provenance
from batchop_dev.chaos import (
    MIN_REPLICAS,
    SAMPLE_S,
    TRACE_SCALE,
    TRACE_START_S,
    WINDOW_S,
    Run,
    judge,
    markdown,
    plot,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "chaos.md"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    args = ap.parse_args(argv)
    provenance = Provenance.start()
    started = time.monotonic()

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    run = Run(args.minutes, say)
    got = run.go()
    records = got["report"]["records"]
    result = judge(
        run.faults,
        run.samples,
        records,
        got["slo_ms"],
        got["end_s"],
        len(run.decision_times),
        got["tuned_events"],
    )
    setup = (
        f"{args.minutes:g} min of azure-code from second {TRACE_START_S:g} at x{TRACE_SCALE:g} "
        f"(mean {got['mean_rps']:.0f} req/s) on the cpu-demo model (SLO {got['slo_ms']:g} ms, "
        f"at least {MIN_REPLICAS} replicas), "
        "a real tritonserver per pod, two `batchop run --leader-elect` (a third started when "
        f"the leader is killed); {got['report']['requests']:,} requests, "
        f"{got['report']['failed_other']} failed and {got['report']['rejected']} refused by the "
        "overload guard in all. Status and children read every "
        f"{SAMPLE_S:g} s; p99 judged per {WINDOW_S:g} s window of sent requests."
    )
    text = markdown(provenance.finish().markdown(), result, setup)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    plot(
        run.samples,
        got["report"],
        run.faults,
        got["slo_ms"],
        args.out.parent / "plots" / "chaos.png",
    )
    provenance.write_json(
        args.out.with_suffix(".json"),
        time.monotonic() - started,
        result=result,
        samples=run.samples,
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
