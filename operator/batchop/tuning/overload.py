"""The overload guard: Triton's dynamic-batching queue policy, derived once for everyone.

Triton's `default_queue_policy` bounds how long a request may wait in the batcher's queue
(`default_timeout_microseconds`) and how many may wait (`max_queue_size`); a request past
either is refused (`timeout_action: REJECT`) instead of waiting behind a backlog. The timeout
bounds queue time only: compute comes after it. So the default timeout is the SLO minus the
compute time of a full batch when a latency profile is known (a request that waited longer
would miss the SLO however it is batched), else half the SLO; and never less than the largest
queue delay the batcher may run plus one millisecond, or a request that merely waited out the
delay at low load would be refused.

The operator (render, live reload) and the simulator both call `queue_policy(spec)`, so the
policy Triton runs and the policy the simulator models cannot differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchop.tuning.curve import prior_curve
from batchop.tuning.types import TuningSpec

UNKNOWN_COMPUTE_SHARE = 0.5  # share of the SLO left for compute when no profile is known
DELAY_MARGIN_US = 1000  # the timeout exceeds the largest delay by at least this much


@dataclass(frozen=True)
class QueuePolicy:
    """What Triton's `default_queue_policy` holds. Queue: no timeout, unbounded (Triton's
    default behaviour); Reject: refuse requests past the timeout or beyond the queue size."""

    reject: bool
    timeout_us: int = 0  # 0: no timeout
    max_queue_size: int = 0  # 0: unbounded

    def triton(self) -> dict[str, Any]:
        """The `dynamic_batching.default_queue_policy` section (JSON form of the config)."""
        return {
            "timeout_action": "REJECT" if self.reject else "DELAY",
            "default_timeout_microseconds": self.timeout_us,
            "allow_timeout_override": False,
            "max_queue_size": self.max_queue_size,
        }

    def annotation(self) -> str:
        """Compact text recorded on a pod once its Triton runs this policy."""
        if not self.reject:
            return "Queue"
        return f"Reject/{self.timeout_us}us/{self.max_queue_size}"

    @property
    def guards(self) -> bool:
        """Whether any request can be refused."""
        return self.reject and (self.timeout_us > 0 or self.max_queue_size > 0)


QUEUE = QueuePolicy(reject=False)


def full_batch_ms(points: Sequence[tuple[int, float]], max_batch_size: int) -> float | None:
    """Compute time of a full batch by the profile (piecewise linear), None without one."""
    if not points:
        return None
    return prior_curve(points)(float(max_batch_size))


def default_queue_timeout_us(
    slo_ms: float,
    max_delay_us: int,
    points: Sequence[tuple[int, float]] = (),
    max_batch_size: int = 1,
) -> int:
    """The queue timeout the API derives when the user sets none (see the module doc)."""
    compute = full_batch_ms(points, max_batch_size)
    budget_ms = slo_ms - compute if compute is not None else slo_ms * UNKNOWN_COMPUTE_SHARE
    return max(int(round(budget_ms * 1000.0)), int(max_delay_us) + DELAY_MARGIN_US)


def queue_policy(spec: TuningSpec) -> QueuePolicy:
    """The queue policy a BatchedModel (as the policy sees it) runs."""
    if not spec.overload_reject:
        return QUEUE
    timeout = spec.queue_timeout_us
    if not timeout:
        timeout = default_queue_timeout_us(
            spec.slo_ms, spec.max_delay_us, spec.prior_batch_latency_ms, spec.max_batch_size
        )
    return QueuePolicy(True, int(timeout), int(spec.max_queue_size))


def live_queue_policy(batching: Mapping[str, Any]) -> QueuePolicy:
    """The policy in a live config's `dynamic_batching` (protobuf JSON: fields at their
    default are omitted, int64 comes back as a string; REJECT is the enum's default)."""
    raw = batching.get("default_queue_policy") or {}
    timeout = int(raw.get("default_timeout_microseconds", 0) or 0)
    size = int(raw.get("max_queue_size", 0) or 0)
    reject = str(raw.get("timeout_action", "REJECT")) in ("REJECT", "0")
    if not reject or (timeout == 0 and size == 0):
        # DELAY never refuses on timeout; with no timeout and no bound nothing is refused
        # either: both behave as Queue when the bound is 0
        return QueuePolicy(False, 0, size) if size else QUEUE
    return QueuePolicy(True, timeout, size)
