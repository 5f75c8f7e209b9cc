"""The data the tuning policy reads and returns.

These types are the seam between the policy and its two callers: the operator (which fills
`Observation` from Prometheus and the API server) and the simulator (which fills it from its
own scraped counters). Both must build the same values, so they are plain frozen dataclasses
with no behaviour beyond convenience constructors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batchop.tuning.sizing import Memory


@dataclass(frozen=True)
class TuningSpec:
    """What the policy must respect, taken from a BatchedModel's spec."""

    slo_ms: float
    max_batch_size: int
    min_replicas: int = 1
    max_replicas: int = 8
    min_delay_us: int = 0
    max_delay_us: int = 20_000
    start_delay_us: int = 500
    start_replicas: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()
    tune_delay: bool = True
    tune_replicas: bool = True
    interval_s: float = 15.0
    # How often Prometheus scrapes the model's pods (the PodMonitor batchop renders:
    # RenderOptions.scrape_interval). A sample is up to this old between scrapes, so
    # staleness is judged against the longer of the two intervals (`stale_after_s`).
    scrape_interval_s: float = 15.0
    gpus_per_replica: int = 1  # spec.server.gpus; 0 = a CPU model
    # Optional prior for the batch-latency curve: (batch size, milliseconds) points, e.g.
    # from a profile. The policy refines it from observations.
    prior_batch_latency_ms: tuple[tuple[int, float], ...] = ()
    # Scale-down stabilisation window: replicas fall only to the highest count recommended
    # this long (spec.autotune.scaleDownStabilizationSeconds). Short, because the sizing
    # (tuning.sizing), not this window, is what holds replicas between bursts.
    scale_down_window_s: float = 60.0
    # The share of pod-start horizons whose busiest load the replicas are sized for
    # (spec.autotune.coverage): the one knob that trades GPUs for attainment.
    coverage: float = 0.95
    # Floor replicas by a trend of the recent rate (spec.autotune.forecast); off by default.
    forecast: bool = False
    # Overload guard (spec.overload): refuse requests that waited past the queue timeout
    # (None: derived, see tuning.overload) or arrive to a full queue (0: unbounded). On by
    # default, as in the API.
    overload_reject: bool = True
    queue_timeout_us: int | None = None
    max_queue_size: int = 0


@dataclass(frozen=True)
class Observation:
    """What Prometheus (and the API server) showed for one BatchedModel at one tick.

    Rates and averages are over the scrape rate window. `None` means the series was missing.
    """

    time_s: float
    rps: float | None = None
    avg_batch: float | None = None  # inference count / execution count
    queue_ms: float | None = None  # mean queue time per request
    compute_ms: float | None = None  # mean compute (infer) time per request = per execution
    p99_ms: float | None = None  # server-side p99 (queue + compute), worst pod
    pending: float | None = None  # requests waiting, summed over pods
    replicas: int = 1  # desired replicas (the Deployment's count)
    ready_replicas: int = 1
    delay_us: int = 0  # delay applied on the ready replicas
    age_s: float = 0.0  # how old the newest sample is
    # Replicas the cluster could still schedule beyond the current count (None: unknown).
    schedulable_headroom: int | None = None
    # Requests Triton refused (queue timeout or full queue) per second, summed over pods.
    rejected_rps: float | None = None
    # The highest arrival rate (served + refused) over one scrape interval since the last
    # tick: what the rate window's mean averages away in a burst.
    peak_rps: float | None = None
    # (time, arrival rate) points of the recent past, oldest first, for the forecast; only
    # filled when spec.autotune.forecast is on.
    rate_history: tuple[tuple[float, float], ...] = ()

    @property
    def starting_replicas(self) -> int:
        return max(0, self.replicas - self.ready_replicas)

    @property
    def complete(self) -> bool:
        return None not in (self.rps, self.avg_batch, self.compute_ms, self.p99_ms)


@dataclass(frozen=True)
class TuningState:
    """What the policy remembers between ticks. Opaque to callers: store and pass back."""

    # Learned batch-latency curve: batch size bucket -> (EWMA compute ms, weight).
    curve: tuple[tuple[float, float, float], ...] = ()
    # Recent desired replica counts with their times, for the scale-down stabilisation window.
    recommendations: tuple[tuple[float, int], ...] = ()
    last_scale_up_s: float | None = None
    last_scale_down_s: float | None = None
    last_delay_change_s: float | None = None
    extra: tuple[tuple[str, float], ...] = field(default_factory=tuple)
    # Observed p99 / predicted p99 at the running configuration (EWMA): corrects the model.
    p99_correction: float = 1.0
    # The previous tick's time and pending requests, to see a backlog grow (demand > served).
    last_time_s: float | None = None
    last_pending: float | None = None
    # The previous tick's request rate.
    last_rps: float | None = None
    # The last tick that saw replicas still starting (their effect shows only after).
    last_starting_s: float | None = None
    # The first tick that saw them all ready: windowed rates and Triton's p99 summary show
    # the new replicas only from here (up to an interval after last_starting_s).
    ready_at_s: float | None = None
    # Consecutive settled ticks whose observed p99 broke the SLO.
    slo_breaches: int = 0
    # The last tick whose request rate fell (Triton's p99 summary lags such a fall).
    last_rate_fall_s: float | None = None
    # Recent recommended delays with their times: the delay rises only to their minimum.
    delay_recommendations: tuple[tuple[float, int], ...] = ()
    # The delay before the last raise, until Triton's p99 has shown the raise (then None).
    delay_raised_from_us: int | None = None
    # A raise that broke the target: no delay this long or longer at a rate per replica near
    # or above the one it failed at, for DELAY_CEILING_S (delay, rate per replica, when).
    delay_ceiling: tuple[int, float, float] | None = None
    # What the sizing model has learned of this model's traffic (tuning.sizing).
    sizing: Memory = field(default_factory=Memory)
    # How long a new replica took to become ready (learned; the forecast looks this far).
    startup_s: float | None = None


@dataclass(frozen=True)
class Decision:
    """What to run next, and why. `changed` is false for a hold."""

    replicas: int
    delay_us: int
    reason: str
    state: TuningState
    kind: str = "hold"  # hold | scale-up | scale-down | delay-up | delay-down | ...
    predicted_p99_ms: float | None = None
    # A scale-up within two pod starts of the last scale-down: GPUs given back and asked
    # for again before pods asked for then could have been ready.
    reversal: bool = False

    def changes(self, obs: Observation) -> bool:
        return self.replicas != obs.replicas or self.delay_us != obs.delay_us
