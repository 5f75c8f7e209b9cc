"""The cluster around the batchers: traffic, a Service spreading requests over ready pods,
pods that take `startup_seconds` to become ready, Prometheus scrapes, and a controller that
calls a policy every interval on what Prometheus shows and applies its Decision.

Time advances in slices whose ends are the scrape times, control ticks and pod-ready times
(and, in closed loop, short steps); within a slice the set of ready pods is fixed, so a
slice's arrivals are assigned to pods in one vectorised draw and each pod's batcher runs
over its share at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from batchop.sim.batcher import BatcherConfig, Replica, RequestStore, advance
from batchop.sim.profile import Profile
from batchop.sim.scrape import Sample, observe, scrape
from batchop.sim.trace import Trace
from batchop.tuning.forecast import HISTORY_S as FORECAST_HISTORY_S
from batchop.tuning.overload import queue_policy
from batchop.tuning.types import Decision, Observation, TuningSpec, TuningState

DecideFn = Callable[[Observation, TuningSpec, TuningState], Decision]


@dataclass(frozen=True)
class SimPolicy:
    """A policy as the simulator runs it."""

    name: str
    decide: DecideFn
    dynamic_batching: bool = True  # False: Triton without the dynamic batcher
    interval_s: float | None = None  # overrides spec.interval_s (the HPA syncs every 15 s)


@dataclass(frozen=True)
class SimConfig:
    seed: int = 0
    clients: int | None = None  # closed loop with this many clients; None: open loop
    instances: int = 1  # instance_group count per replica
    scrape_interval_s: float = 15.0
    rate_window_s: float = 60.0  # rate(x[1m])
    summary_window_s: float = 60.0  # Triton summary quantiles' sliding window
    drain_s: float = 60.0  # requests unfinished this long after the trace ends are dropped
    timeline_step_s: float = 10.0
    # Closed loop: slice length. None = the profile's batch-1 latency, which is exact (an
    # answer cannot come back within the slice its request started in); longer is faster but
    # delays a client's next send to the end of the slice its answer arrived in.
    closed_loop_step_s: float | None = None
    progress: Callable[[float], None] | None = None  # called with the fraction done


@dataclass
class SimRun:
    """Everything a run produced; `batchop.sim.report` turns it into the JSON result."""

    profile: Profile
    trace: Trace
    spec: TuningSpec
    policy: str
    config: SimConfig
    store: RequestStore
    pods: list[Replica]
    history: list[tuple[float, int, int, int]]  # (t, desired, ready, delay_us) after each change
    decisions: list[dict[str, object]] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    dropped: int = 0
    end_s: float = 0.0


def poisson_arrivals(trace: Trace, rng: np.random.Generator) -> np.ndarray:
    """Open-loop Poisson arrivals following the trace's piecewise-constant rate."""
    parts = []
    for t0, t1, rps in trace.segments():
        n = rng.poisson(rps * (t1 - t0))
        parts.append(np.sort(rng.uniform(t0, t1, n)))
    return np.concatenate(parts) if parts else np.zeros(0)


class _Cluster:
    """Pods of one BatchedModel and the controller's view of them."""

    def __init__(self, profile: Profile, spec: TuningSpec, cfg: BatcherConfig) -> None:
        self.profile = profile
        self.cfg = cfg
        self.pods: list[Replica] = []
        self.active: list[Replica] = []  # not removed
        self.delay_us = int(spec.start_delay_us)
        for _ in range(spec.start_replicas):
            self._add(0.0, ready_s=0.0)

    def _add(self, t: float, ready_s: float) -> None:
        rep = Replica(
            id=len(self.pods),
            created_s=t,
            ready_s=ready_s,
            delay_s=self.delay_us / 1e6,
            instances=self.cfg.instances,
        )
        self.pods.append(rep)
        self.active.append(rep)

    def ready(self, t: float) -> list[Replica]:
        return [r for r in self.active if r.ready_s <= t]

    def scale(self, t: float, n: int) -> list[Replica]:
        """Set the desired count; returns pods removed (the caller drains them)."""
        removed: list[Replica] = []
        while len(self.active) < n:
            self._add(t, t + self.profile.startup_seconds)
        while len(self.active) > n:
            # Like a ReplicaSet: pods not yet ready go first, then the newest.
            starting = [r for r in self.active if r.ready_s > t]
            victim = starting[-1] if starting else self.active[-1]
            victim.removed_s = t
            self.active.remove(victim)
            removed.append(victim)
        return removed

    def set_delay(self, delay_us: int) -> None:
        self.delay_us = delay_us
        for rep in self.active:
            rep.delay_s = delay_us / 1e6


def simulate(
    profile: Profile,
    trace: Trace,
    spec: TuningSpec,
    policy: SimPolicy,
    config: SimConfig | None = None,
    arrivals: np.ndarray | None = None,
) -> SimRun:
    """Run the whole trace; deterministic for a given seed. `arrivals` (sorted seconds)
    replaces the trace's Poisson traffic in open loop; the trace still sets the duration."""
    config = config or SimConfig()
    rng = np.random.default_rng(config.seed)
    guard = queue_policy(spec)  # the queue policy Triton would run for this spec
    cfg = BatcherConfig(
        max_batch_size=profile.max_batch_size,
        preferred_batch_sizes=tuple(spec.preferred_batch_sizes),
        dynamic=policy.dynamic_batching,
        instances=config.instances,
        overlap_slowdown=profile.overlap_slowdown,
        queue_timeout_s=guard.timeout_us / 1e6 if guard.reject else 0.0,
        max_queue_size=guard.max_queue_size if guard.reject else 0,
    )
    lat_s = profile.latency_table_s()
    cluster = _Cluster(profile, spec, cfg)
    closed = config.clients is not None and config.clients > 0
    if closed:
        expected = trace.mean_rate(0, trace.end) * trace.end * 1.1
        store = RequestStore(capacity=int(min(expected, 1 << 20)) + 1024)  # grows as needed
        clients = _Clients(int(config.clients or 0), trace, rng)
    else:
        if arrivals is None:
            arrivals = poisson_arrivals(trace, rng)
        store = RequestStore(np.asarray(arrivals, dtype=float))
    interval = policy.interval_s or spec.interval_s
    step = config.closed_loop_step_s or max(1e-4, lat_s[1])
    end = trace.end
    state = TuningState()
    rate_history: tuple[tuple[float, float], ...] = ()  # the forecast's range query
    samples: list[Sample] = []
    history = [(0.0, len(cluster.active), len(cluster.ready(0.0)), cluster.delay_us)]
    run = SimRun(profile, trace, spec, policy.name, config, store, cluster.pods, history)

    t = 0.0
    next_scrape = config.scrape_interval_s
    next_tick = interval
    next_progress = 0.05
    while t < end:
        nexts = [next_scrape, next_tick, end]
        nexts += [r.ready_s for r in cluster.active if r.ready_s > t]
        ready = cluster.ready(t)
        if closed:
            # Answers are handed back as batches form, so with every queue empty nothing
            # happens before the next client sends: skip ahead to it.
            quiet = all(len(r.pending) == 0 for r in ready)
            nexts.append(max(t + step, clients.soonest) if quiet else t + step)
        t_next = min(nexts)
        if closed:
            new = clients.send(t, t_next, store)
        else:
            lo = int(np.searchsorted(store.arrival[: store.n], t, side="left"))
            hi = int(np.searchsorted(store.arrival[: store.n], t_next, side="left"))
            new = np.arange(lo, hi)
        shares = _spread(new, len(ready), rng)  # none ready: never answered, so dropped
        answered = []
        for k, rep in enumerate(ready):
            if len(shares[k]) == 0 and len(rep.pending) == 0:
                continue
            done = advance(rep, shares[k], t_next, store, cfg, lat_s)
            if closed and len(done):
                answered.append(done)
            if closed and cfg.guarded and len(rep.refused_new):
                answered.append(rep.refused_new)  # a refusal is an answer too
        if answered:
            clients.answered(np.concatenate(answered), store)
        t = t_next
        if t >= next_scrape - 1e-9:
            samples.append(scrape(t, cluster.active, store, config.summary_window_s))
            samples = samples[-64:]
            next_scrape += config.scrape_interval_s
        changed = False
        if t >= next_tick - 1e-9 and t < end:
            next_tick += interval
            obs = observe(
                t,
                samples,
                config.rate_window_s,
                len(cluster.active),
                len(cluster.ready(t)),
                cluster.delay_us,
                peak_window_s=interval,
            )
            if spec.forecast:
                rate_history = (*rate_history, (t, (obs.rps or 0.0) + (obs.rejected_rps or 0.0)))
                rate_history = tuple(p for p in rate_history if p[0] > t - FORECAST_HISTORY_S)
                obs = replace(obs, rate_history=rate_history)
            decision = policy.decide(obs, spec, state)
            state = decision.state
            run.observations.append(obs)
            if decision.changes(obs):
                changed = True
                run.decisions.append(_decision_record(obs, decision))
                if decision.delay_us != obs.delay_us:
                    cluster.set_delay(max(0, int(decision.delay_us)))
                for rep in cluster.scale(t, max(0, int(decision.replicas))):
                    done = advance(rep, np.zeros(0, dtype=np.int64), math.inf, store, cfg, lat_s)
                    if closed and cfg.guarded and len(rep.refused_new):
                        done = np.concatenate((done, rep.refused_new))
                    if closed and len(done):
                        clients.answered(done, store)
        if changed or any(abs(r.ready_s - t) < 1e-9 for r in cluster.active):
            history.append((t, len(cluster.active), len(cluster.ready(t)), cluster.delay_us))
        if config.progress is not None and t / end >= next_progress:
            config.progress(t / end)
            next_progress += 0.05
    # After the trace: no new traffic; every queue drains.
    for rep in cluster.active:
        advance(rep, np.zeros(0, dtype=np.int64), math.inf, store, cfg, lat_s)
    n = store.n
    late = (store.end[:n] > end + config.drain_s) & np.isinf(store.rejected[:n])
    run.dropped += int(np.count_nonzero(late))  # refused requests were answered: not dropped
    run.end_s = end
    return run


def _spread(new: np.ndarray, n_ready: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A Service picks a ready endpoint roughly at random for each request."""
    if n_ready == 0:
        return []
    if n_ready == 1:
        return [new]
    if len(new) == 0:
        return [new] * n_ready
    if len(new) == 1:
        k = int(rng.integers(0, n_ready))
        return [new if i == k else new[:0] for i in range(n_ready)]
    choice = rng.integers(0, n_ready, size=len(new))
    order = np.argsort(choice, kind="stable")
    bounds = np.searchsorted(choice[order], np.arange(n_ready + 1))
    return [new[order[bounds[k] : bounds[k + 1]]] for k in range(n_ready)]


def _decision_record(obs: Observation, d: Decision) -> dict[str, object]:
    return {
        "t": round(obs.time_s, 3),
        "kind": d.kind,
        "replicas": d.replicas,
        "delay_us": d.delay_us,
        "from_replicas": obs.replicas,
        "from_delay_us": obs.delay_us,
        "reason": d.reason,
        "predicted_p99_ms": d.predicted_p99_ms,
        "observed_rps": obs.rps,
        "observed_p99_ms": obs.p99_ms,
        "reversal": d.reversal,
    }


class _Clients:
    """Closed loop: each client sends, waits for the answer, thinks, sends again.

    Think time is exponential with mean clients / rate(t), so that with fast answers the
    offered load follows the trace, and when the server slows down the load falls with it (as
    it does for real users). Answers are noticed at the end of the slice they arrive in; with
    the default slice (batch-1 latency) that is never later than the next send.
    """

    def __init__(self, n: int, trace: Trace, rng: np.random.Generator) -> None:
        self.n = n
        self.trace = trace
        self.rng = rng
        self._seconds = np.asarray(trace.seconds)
        self._rps = np.asarray(trace.rps)
        self.in_flight = np.zeros(n, dtype=bool)
        self.next_send = self._after(np.zeros(n))
        self._soonest = 0.0  # no idle client sends before this
        self._asleep = bool(np.isinf(self.next_send).any())  # some wait for a nonzero rate

    def _rates(self, t: np.ndarray) -> np.ndarray:
        seconds, rps = self._seconds, self._rps
        i = np.clip(np.searchsorted(seconds, t, side="right") - 1, 0, len(rps) - 1)
        return np.where((t >= seconds[0]) & (t < seconds[-1]), rps[i], 0.0)

    def _after(self, t: np.ndarray) -> np.ndarray:
        if len(t) <= 8:  # a few answers per slice: plain Python is cheaper than numpy
            rates = np.array([self.trace.rate_at(x) for x in t.tolist()])
        else:
            rates = self._rates(t)
        mean = np.where(rates > 0, self.n / np.maximum(rates, 1e-12), np.inf)
        return t + self.rng.exponential(1.0, len(t)) * mean

    @property
    def soonest(self) -> float:
        """No idle client sends before this (a lower bound)."""
        return self._soonest

    def send(self, t: float, t_next: float, store: RequestStore) -> np.ndarray:
        if self._asleep and self.trace.rate_at(t) > 0:  # the trace woke up after a zero rate
            idle = np.flatnonzero(~self.in_flight & np.isinf(self.next_send))
            self.next_send[idle] = self._after(np.full(len(idle), t))
            self._asleep = False
            self._soonest = t
        if self._soonest >= t_next:
            return np.zeros(0, dtype=np.int64)
        due = np.flatnonzero(~self.in_flight & (self.next_send < t_next))
        if len(due) == 0:
            waiting = self.next_send[~self.in_flight]
            self._soonest = float(waiting.min()) if len(waiting) else math.inf
            return np.zeros(0, dtype=np.int64)
        times = np.maximum(self.next_send[due], t)
        order = np.argsort(times, kind="stable")
        self.in_flight[due] = True
        return store.append(times[order], due[order])

    def answered(self, done: np.ndarray, store: RequestStore) -> None:
        who = store.client[done]
        self.in_flight[who] = False
        # served: at the end of its batch; refused by the queue policy: at the refusal
        back = np.minimum(store.end[done], store.rejected[done])
        self.next_send[who] = when = self._after(back)
        self._soonest = min(self._soonest, float(when.min()))
        self._asleep = self._asleep or bool(np.isinf(when).any())
