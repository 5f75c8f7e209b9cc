"""The Triton model configuration batchop sends on a live reload (explicit model control).

Only `dynamic_batching` is batchop's to change: the queue delay and the queue policy
(spec.overload, see batchop.tuning.overload); the live-reload adapter fetches the running
config and sets those fields in it.
"""

from __future__ import annotations

from typing import Any

from batchop.api.models import BatchedModel
from batchop.api.tuning_spec import tuning_spec
from batchop.tuning.overload import queue_policy


def dynamic_batching(bm: BatchedModel, delay_us: int) -> dict[str, Any]:
    """Triton's `dynamic_batching` section for this model at the given queue delay."""
    if isinstance(delay_us, bool) or not isinstance(delay_us, int) or delay_us < 0:
        raise ValueError(f"delay_us must be a non-negative integer, got {delay_us!r}")
    section: dict[str, Any] = {"max_queue_delay_microseconds": delay_us}
    if bm.spec.model.preferred_batch_sizes:
        section["preferred_batch_size"] = sorted(bm.spec.model.preferred_batch_sizes)
    section["default_queue_policy"] = queue_policy(tuning_spec(bm)).triton()
    return section


def render_model_config(bm: BatchedModel, delay_us: int) -> dict[str, Any]:
    """The model config (JSON form) with this BatchedModel's batching at `delay_us`."""
    model = bm.spec.model
    return {
        "name": model.name,
        "max_batch_size": model.max_batch_size,
        "dynamic_batching": dynamic_batching(bm, delay_us),
    }
