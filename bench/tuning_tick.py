"""The tuning tick in process: CPU per model and API calls per tick, N models, no cluster.

Run: .venv/bin/python bench/tuning_tick.py [--models 100 1000] [--ticks 5] [--profile]
Writes the table, with the command, commit and machine load, to bench/results/tuning_tick.md.

Builds N BatchedModels (the scale benchmark's spec) behind the real `Handlers` and
`TuningLoop` with the real tuning policy; the API server is an in-memory stand-in that
counts status patches, refused patches (409) and GETs, and Prometheus is a fixed, healthy
observation per model. Two index modes:

- fresh: the loop sees every model as the API server has it (a caught-up kopf index);
- lagging: the loop keeps seeing the models as they were before its first write (the kopf
  index at 1,000 models, watch events queued behind the cold start).

A steady tick should cost the same per model at any N and make no API call in either mode.
`--profile` prints the top of a cProfile of the measured ticks at each N (where the time goes).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchop.api.constants import ModelKey
from batchop.controller.handlers import Handlers
from batchop.controller.kube import APIError
from batchop.controller.reconcile import slim_model
from batchop.controller.settings import Settings
from batchop.controller.tuning_loop import TuningLoop
from batchop.observe.prometheus import ObservationParts
from batchop.provenance import Provenance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from operator_scale import model  # noqa: E402 (the scale benchmark's BatchedModel)

RESULTS = Path(__file__).resolve().parent / "results" / "tuning_tick.md"
HEALTHY = ObservationParts(
    rps=100.0, avg_batch=4.0, queue_ms=1.0, compute_ms=5.0, p99_ms=20.0, pending=0.0,
    age_s=2.0, scraped_pods=1,
)  # fmt: skip


class MemoryAPI:
    """N BatchedModels in memory; counts the calls the loop makes."""

    def __init__(self, models: list[dict[str, Any]]) -> None:
        self.models = {(m["metadata"]["namespace"], m["metadata"]["name"]): m for m in models}
        self.version = 1
        self.calls = {"patch": 0, "conflict": 0, "get": 0}

    def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        found = self.models[(namespace, name)]
        if resource_version and resource_version != found["metadata"]["resourceVersion"]:
            self.calls["conflict"] += 1
            raise APIError(409, "the object has been modified")
        self.calls["patch"] += 1
        found.setdefault("status", {}).update(copy.deepcopy(dict(status)))
        self.version += 1
        found["metadata"]["resourceVersion"] = str(self.version)
        return found

    def get_model(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls["get"] += 1
        return copy.deepcopy(self.models[(namespace, name)])

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        pass

    def post_event(self, bm: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        pass


def build(n: int, lagging: bool) -> tuple[TuningLoop, MemoryAPI, list[float]]:
    models = []
    for i in range(n):
        bm = model(f"m{i:04d}", "scale")
        bm["metadata"].update(uid=f"uid-{i}", generation=1, resourceVersion="1")
        models.append(bm)
    api = MemoryAPI(models)
    handlers = Handlers(Settings(), api, lambda *_: None, lambda ns, name: (None, []))  # type: ignore[arg-type]
    before = [slim_model(copy.deepcopy(m)) for m in api.models.values()]

    def index() -> list[Mapping[str, Any]]:
        return before if lagging else [slim_model(m) for m in api.models.values()]

    parts = dict.fromkeys(api.models, HEALTHY)

    class Observer:
        def observe(self) -> dict[ModelKey, ObservationParts]:
            return parts

    clock = [1.8e9]
    loop = TuningLoop(
        handlers, api, index, "http://prometheus.invalid",
        observer_factory=lambda url: Observer(), reload=lambda *_: None,
        clock=lambda: clock[0],
    )  # fmt: skip
    return loop, api, clock


def measure(n: int, ticks: int, lagging: bool, profile: bool) -> dict[str, float]:
    loop, api, clock = build(n, lagging)
    for _ in range(3):  # first writes: metrics, conditions
        loop.tick()
        clock[0] += 60
    calls0 = dict(api.calls)
    profiler = cProfile.Profile() if profile else None
    cpu0 = time.process_time()
    if profiler:
        profiler.enable()
    for _ in range(ticks):
        loop.tick()
        clock[0] += 60
    if profiler:
        profiler.disable()
    cpu = (time.process_time() - cpu0) / ticks
    if profiler:
        print(f"--- N={n}, {'lagging' if lagging else 'fresh'} index: cProfile, cumulative")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    per_tick = {k: (api.calls[k] - calls0[k]) / ticks for k in api.calls}
    return {"cpu_ms": 1000 * cpu, "us_per_model": 1e6 * cpu / n, **per_tick}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--ticks", type=int, default=5, help="measured ticks per N and mode")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the ticks")
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    args = ap.parse_args()
    provenance = Provenance.start()
    lines = [
        "| index | N | CPU per tick | per model | status patches | refused (409) | GETs |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines))
    for lagging in (False, True):
        for n in args.models:
            r = measure(n, args.ticks, lagging, args.profile)
            lines.append(
                f"| {'lagging' if lagging else 'fresh'} | {n} | {r['cpu_ms']:.0f} ms | "
                f"{r['us_per_model']:.0f} us | {r['patch']:.0f} | {r['conflict']:.0f} | "
                f"{r['get']:.0f} |"
            )
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        "# Tuning tick in process (bench/tuning_tick.py)\n\n"
        f"{provenance.finish().markdown()}\n"
        "Real Handlers, TuningLoop and policy; the API server is an in-memory stand-in and "
        "Prometheus a fixed observation per model (no cluster, no Prometheus). CPU per tick "
        f"is the mean over {args.ticks} steady ticks.\n\n" + "\n".join(lines) + "\n"
    )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
