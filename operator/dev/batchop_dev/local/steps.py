"""Judge a stepped-load run (the demo's, the e2e step test's): what the operator changed, and
whether p99 was within the SLO once each step had settled. Pure.

Which p99: with the load generator's records, the clients' own p99 over every request sent
in the settled part of the step (what users of the model see, HTTP round trip included).
Triton's p99 (the timeline's samples) is a summary over roughly its last minute, so for a
minute after a step it still mixes in the step before; it is reported, and judged only when
there are no records.

Why "settled": right after a step up, p99 is over the SLO until the tuner has seen a tick or
two and new pods are Ready; that transient is what the tuner answers, not a failure. So each
step is judged on its samples from `settle_s` after the step began to its end, and a step
shorter than that is not judged at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class StepVerdict:
    """One step of the load: its rate, and p99 over its settled samples against the SLO."""

    start_s: float
    end_s: float
    offered_rps: float
    samples: int  # settled samples with a p99
    p99_max_ms: float | None
    slo_ms: float
    within_slo: bool | None  # None: no settled sample to judge
    max_replicas: int | None
    last_replicas: int | None
    client_p99_ms: float | None = None  # the clients' p99 over requests sent while settled
    client_requests: int = 0


def knob_changes(
    decisions: Sequence[Mapping[str, Any]], start_delay_us: int, start_replicas: int
) -> dict[str, int]:
    """How many decisions changed the delay and how many changed replicas, each compared with
    the decision before it (the spec's start values before the first)."""
    delay, replicas = start_delay_us, start_replicas
    out = {"delay": 0, "replicas": 0}
    for d in decisions:
        new_delay = d.get("maxQueueDelayMicroseconds", delay)
        new_replicas = d.get("replicas", replicas)
        out["delay"] += new_delay != delay
        out["replicas"] += new_replicas != replicas
        delay, replicas = new_delay, new_replicas
    return out


def client_p99(
    records: Mapping[str, Sequence[Any]], t0: float, t1: float
) -> tuple[float | None, int]:
    """p99 (ms) of the successful requests sent in [t0, t1) of the load, and their count.

    `records` is the load generator's (send_s, latency_ms, ok lists, one entry a request).
    """
    import numpy as np

    latencies = [
        float(lat)
        for sent, lat, ok in zip(
            records["send_s"], records["latency_ms"], records["ok"], strict=True
        )
        if ok and lat is not None and t0 <= sent < t1
    ]
    if not latencies:
        return None, 0
    return float(np.percentile(latencies, 99)), len(latencies)


def judge_steps(
    timeline: Sequence[Mapping[str, Any]],
    segments: Sequence[tuple[float, float, float]],
    slo_ms: float,
    settle_s: float,
    tolerance: float = 0.0,
    records: Mapping[str, Sequence[Any]] | None = None,
) -> list[StepVerdict]:
    """Per (start, end, rps) segment: p99 over [start + settle_s, end].

    A sample is a mapping with `t`, `p99_ms` and `replicas` (the demo's Sample as a dict).
    Within the SLO means the clients' p99 (with `records`), else every settled Triton p99,
    is <= slo_ms * (1 + tolerance).
    """
    verdicts = []
    for start, end, rps in segments:
        inside = [s for s in timeline if start + settle_s <= float(s["t"]) <= end]
        p99s = [float(s["p99_ms"]) for s in inside if s.get("p99_ms") is not None]
        replicas = [int(s["replicas"]) for s in inside if s.get("replicas") is not None]
        worst = max(p99s) if p99s else None
        client, count = (None, 0) if records is None else client_p99(records, start + settle_s, end)
        judged = client if records is not None else worst
        verdicts.append(
            StepVerdict(
                start_s=start,
                end_s=end,
                offered_rps=rps,
                samples=len(p99s),
                p99_max_ms=None if worst is None else round(worst, 2),
                slo_ms=slo_ms,
                within_slo=None if judged is None else judged <= slo_ms * (1 + tolerance),
                max_replicas=max(replicas) if replicas else None,
                last_replicas=replicas[-1] if replicas else None,
                client_p99_ms=None if client is None else round(client, 2),
                client_requests=count,
            )
        )
    return verdicts


def summary(
    timeline: Sequence[Mapping[str, Any]],
    decisions: Sequence[Mapping[str, Any]],
    segments: Sequence[tuple[float, float, float]],
    *,
    slo_ms: float,
    settle_s: float,
    start_delay_us: int,
    start_replicas: int,
    records: Mapping[str, Sequence[Any]] | None = None,
) -> dict[str, Any]:
    """The report's `summary`: knob changes and the per-step verdicts, as JSON-ready data."""
    return {
        "changes": knob_changes(decisions, start_delay_us, start_replicas),
        "settle_s": settle_s,
        "p99_judged": "client" if records is not None else "triton",
        "steps": [
            asdict(v) for v in judge_steps(timeline, segments, slo_ms, settle_s, records=records)
        ],
    }
