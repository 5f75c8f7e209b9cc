"""The policy's view of a BatchedModel: the bounds and targets `decide()` must respect.

The one mapping from the API to `batchop.tuning.types.TuningSpec`. The operator's tuning
loop (on the stored manifest), `batchop simulate`, `batchop plan` (from a profile and flags)
and any tool reading a BatchedModel go through `tuning_spec`, so they all hand the policy
the same numbers, with the API's own defaults for what a spec leaves out.

Two choices, made here once:
- `gpus_per_replica` is `spec.server.gpus` as written, 0 for a CPU model. The policy never
  weighs replicas by GPUs (it minimises replicas); the figure is for accounting, where a CPU
  model counting as one GPU would be a false figure (and would let a future GPU-capacity
  check limit a CPU model by GPUs it never asks for).
- `preferred_batch_sizes` is sorted: Triton treats the list as a set (the renderer writes it
  sorted, the simulated batcher sorts it), so two specs that differ only in order are the
  same spec and must map to equal TuningSpecs.

To extend: a new spec field the policy needs is one more line in `tuning_spec`; the
operator, the simulator and plan pick it up from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any, Protocol

from pydantic import ValidationError

from batchop.api.errors import SpecError, Violation
from batchop.api.models import BatchedModel, BatchedModelSpec, ModelSpec, violations
from batchop.tuning.types import TuningSpec


class Profile(Protocol):
    """What the simulator's latency profile gives a TuningSpec (batchop.sim.profile)."""

    max_batch_size: int
    gpus_per_replica: int
    batch_latency_ms: tuple[tuple[int, float], ...]


def tuning_spec(
    bm: BatchedModel | BatchedModelSpec, prior_batch_latency_ms: tuple[tuple[int, float], ...] = ()
) -> TuningSpec:
    """TuningSpec from a validated BatchedModel (or its spec). The prior is
    `prior_batch_latency_ms` if given, else spec.model.latencyProfile."""
    spec = bm.spec if isinstance(bm, BatchedModel) else bm
    return TuningSpec(
        slo_ms=float(spec.slo.p99_latency_milliseconds),
        max_batch_size=spec.model.max_batch_size,
        min_replicas=spec.scaling.min_replicas,
        max_replicas=spec.scaling.max_replicas,
        min_delay_us=spec.batching.min_queue_delay_microseconds,
        max_delay_us=spec.batching.max_queue_delay_limit_microseconds,
        start_delay_us=spec.batching.max_queue_delay_microseconds,
        start_replicas=spec.scaling.replicas,
        preferred_batch_sizes=tuple(sorted(spec.model.preferred_batch_sizes or ())),
        tune_delay=spec.autotune.queue_delay,
        tune_replicas=spec.autotune.replicas,
        interval_s=float(spec.autotune.interval_seconds),
        scale_down_window_s=float(spec.autotune.scale_down_stabilization_seconds),
        coverage=float(spec.autotune.coverage),
        forecast=spec.autotune.forecast,
        gpus_per_replica=spec.server.gpus,
        prior_batch_latency_ms=prior_batch_latency_ms or spec.model.profile_points(),
        overload_reject=spec.overload.policy == "Reject",
        queue_timeout_us=spec.overload.queue_timeout_microseconds or None,
        max_queue_size=spec.overload.max_queue_size,
    )


def manifest_tuning_spec(manifest: Mapping[str, Any]) -> TuningSpec:
    """TuningSpec from a stored BatchedModel (camelCase dict, as the API server returns it).

    Only `spec` is read and it is validated by the API's pydantic models, so defaults come
    from the models and a spec the API would refuse raises `SpecError` (naming the field)
    instead of being tuned from half-understood numbers.
    """
    raw = manifest.get("spec")
    if not isinstance(raw, Mapping):
        raise SpecError([Violation("spec", f"must be a mapping, got {raw!r}")])
    try:
        spec = BatchedModelSpec.model_validate(dict(raw), by_alias=True, by_name=False)
    except ValidationError as exc:
        found = [Violation(f"spec.{v.path}".rstrip("."), v.message) for v in violations(exc)]
        name = (manifest.get("metadata") or {}).get("name")
        raise SpecError(found, name=name if isinstance(name, str) else None) from None
    return tuning_spec(spec)


@cache
def api_defaults() -> TuningSpec:
    """What a BatchedModel that sets nothing optional maps to (max batch size 1)."""
    model = ModelSpec(name="defaults", repository="/models", max_batch_size=1)
    return tuning_spec(BatchedModelSpec(model=model))


def profile_tuning_spec(profile: Profile, slo_ms: float, **given: Any) -> TuningSpec:
    """TuningSpec for a simulated or planned model: the profile's batch limit, GPUs and
    latency curve (as the prior), the SLO, the bounds `given` (TuningSpec field names; None
    means not given) and the API's defaults for the rest, as a BatchedModel would have."""
    unknown = set(given) - set(TuningSpec.__dataclass_fields__)
    if unknown:
        raise TypeError(f"not TuningSpec fields: {sorted(unknown)}")
    return replace(
        api_defaults(),
        slo_ms=float(slo_ms),
        max_batch_size=profile.max_batch_size,
        gpus_per_replica=profile.gpus_per_replica,
        prior_batch_latency_ms=profile.batch_latency_ms,
        **{k: v for k, v in given.items() if v is not None},
    )
