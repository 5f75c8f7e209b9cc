"""`batchop explain NS/NAME`: why the tuner did what it did, from the BatchedModel's status
and its Events, in words (or `-o json|yaml`).

The facts come from the API server (the kubeconfig, as `kubectl` finds it); the shaping is
pure (`explanation`, `render_text`) so it is tested without a cluster too.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from batchop.cli.output import add_output_flag, emit

# Fields of status.lastDecision, in the order they are shown (newer operators may add the
# decision's kind and the p99 it predicted; they are shown when present).
DECISION_KEYS = (
    "time",
    "kind",
    "replicas",
    "maxQueueDelayMicroseconds",
    "predictedP99Milliseconds",
    "reason",
)


class ExplainError(Exception):
    """A problem reading the object; `code` is the exit status (2 input, 1 runtime)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "explain",
        help="why the tuner chose this delay and replica count",
        description="Read a BatchedModel and its recent Events and explain the tuner's last "
        "decision: what it decided and why, the metrics it saw, its conditions.",
    )
    p.add_argument("target", metavar="NAMESPACE/NAME", help="the BatchedModel")
    p.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig to use (default: $KUBECONFIG or ~/.kube/config)",
    )
    p.add_argument(
        "--events", type=int, default=10, metavar="N", help="how many of the newest Events to show"
    )
    add_output_flag(p)
    p.set_defaults(func=run)


def parse_target(text: str) -> tuple[str, str]:
    """NAMESPACE/NAME, checked by the rules the API applies (`flags.namespaced_name`)."""
    import argparse

    from batchop.cli.flags import namespaced_name

    try:
        return namespaced_name(text)
    except argparse.ArgumentTypeError as exc:
        raise ExplainError(f"{text!r}: {exc}", 2) from None


def _event_time(event: dict[str, Any]) -> str:
    meta = event.get("metadata") or {}
    series = event.get("series") or {}
    return str(
        event.get("lastTimestamp")
        or series.get("lastObservedTime")
        or event.get("eventTime")
        or meta.get("creationTimestamp")
        or ""
    )


def explanation(
    bm: dict[str, Any], events: list[dict[str, Any]], max_events: int = 10
) -> dict[str, Any]:
    """The facts `explain` shows, as one object (what `-o json|yaml` prints)."""
    meta = bm.get("metadata") or {}
    spec = bm.get("spec") or {}
    status = bm.get("status") or {}
    scaling = spec.get("scaling") or {}
    batching = spec.get("batching") or {}
    autotune = spec.get("autotune") or {}
    decision = status.get("lastDecision") or None
    if decision is not None:
        decision = {k: decision[k] for k in DECISION_KEYS if k in decision} | {
            k: v for k, v in decision.items() if k not in DECISION_KEYS
        }
    recent = sorted(events, key=_event_time)[-max_events:] if max_events > 0 else []
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "generation": meta.get("generation"),
        "observedGeneration": status.get("observedGeneration"),
        "slo": {"p99LatencyMilliseconds": (spec.get("slo") or {}).get("p99LatencyMilliseconds")},
        "autotune": {
            "queueDelay": autotune.get("queueDelay"),
            "replicas": autotune.get("replicas"),
        },
        "replicas": {
            "desired": scaling.get("replicas"),
            "ready": status.get("readyReplicas"),
            "pods": status.get("replicas"),
            "min": scaling.get("minReplicas"),
            "max": scaling.get("maxReplicas"),
        },
        "queueDelayMicroseconds": {
            "applied": status.get("maxQueueDelayMicroseconds"),
            "spec": batching.get("maxQueueDelayMicroseconds"),
            "min": batching.get("minQueueDelayMicroseconds"),
            "max": batching.get("maxQueueDelayLimitMicroseconds"),
        },
        "lastDecision": decision,
        "metrics": status.get("metrics") or None,
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
        "events": [
            {
                "time": _event_time(e) or None,
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": e.get("message"),
                "count": e.get("count") or (e.get("series") or {}).get("count") or 1,
            }
            for e in recent
        ],
    }


def _ago(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return ""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    secs = max(0, int((now - when).total_seconds()))
    if secs < 120:
        ago = f"{secs}s"
    elif secs < 7200:
        ago = f"{secs // 60}m"
    elif secs < 172800:
        ago = f"{secs // 3600}h"
    else:
        ago = f"{secs // 86400}d"
    return f"{stamp} ({ago} ago)"


def _num(v: Any, unit: str = "", fmt: str = "{:,.4g}") -> str:
    if v is None:
        return "?"
    text = fmt.format(v) if isinstance(v, int | float) else str(v)
    return f"{text}{unit}"


def _bounds(lo: Any, hi: Any, unit: str = "") -> str:
    if lo is None and hi is None:
        return ""
    return f" (bounds {_num(lo, fmt='{:,}')}..{_num(hi, fmt='{:,}')}{unit})"


def render_text(ex: dict[str, Any], now: datetime | None = None) -> str:
    """The explanation for people: state, last decision and why, metrics, conditions,
    events."""
    now = now or datetime.now(UTC)
    rep = ex["replicas"]
    delay = ex["queueDelayMicroseconds"]
    tune = ex["autotune"]
    tuned = [
        w for w, on in (("queue delay", tune["queueDelay"]), ("replicas", tune["replicas"])) if on
    ]
    lines = [
        f"BatchedModel {ex['namespace']}/{ex['name']} (generation {ex['generation']}, "
        f"observed {_num(ex['observedGeneration'])})",
        f"  SLO           p99 <= {_num(ex['slo']['p99LatencyMilliseconds'], ' ms')}",
        f"  autotune      {' and '.join(tuned) if tuned else 'off'}",
        f"  replicas      {_num(rep['ready'])} ready of {_num(rep['desired'])} desired"
        f"{_bounds(rep['min'], rep['max'])}",
        f"  queue delay   {_num(delay['applied'], ' us', '{:,}')} applied"
        f"{_bounds(delay['min'], delay['max'], ' us')}",
        "",
    ]
    decision = ex["lastDecision"]
    if decision:
        lines.append(f"Last decision: {_ago(decision.get('time'), now) or 'time unknown'}")
        if decision.get("kind"):
            lines.append(f"  kind          {decision['kind']}")
        lines.append(f"  replicas      {_num(decision.get('replicas'))}")
        delay_us = decision.get("maxQueueDelayMicroseconds")
        lines.append(f"  queue delay   {_num(delay_us, ' us', '{:,}')}")
        if decision.get("predictedP99Milliseconds") is not None:
            lines.append(f"  predicted p99 {_num(decision['predictedP99Milliseconds'], ' ms')}")
        lines.append(f"  why           {decision.get('reason') or '(no reason recorded)'}")
    else:
        lines.append("Last decision: none recorded (the tuner has not changed anything yet)")
    lines.append("")
    m = ex["metrics"]
    if m:
        lines.append("Metrics the tuner last saw (status.metrics):")
        peak = m.get("peakRequestsPerSecond")
        busiest = f" (busiest scrape interval {_num(peak, ' req/s')})" if peak is not None else ""
        lines.append(
            f"  rate {_num(m.get('requestsPerSecond'), ' req/s')}{busiest}, "
            f"p99 {_num(m.get('p99LatencyMilliseconds'), ' ms')} "
            f"(SLO {_num(ex['slo']['p99LatencyMilliseconds'], ' ms')}), "
            f"average batch {_num(m.get('averageBatchSize'))}, "
            f"queue {_num(m.get('queueMilliseconds'), ' ms')}, "
            f"rejected {_num(m.get('rejectedPerSecond'), '/s')}"
        )
    else:
        lines.append("Metrics: none recorded yet")
    lines.append("")
    if ex["conditions"]:
        lines.append("Conditions:")
        for c in ex["conditions"]:
            lines.append(
                f"  {c['type'] or '?':<17} {c['status'] or '?':<8} {c['reason'] or ''}: "
                f"{c['message'] or ''}"
            )
    else:
        lines.append("Conditions: none")
    lines.append("")
    if ex["events"]:
        lines.append("Recent events (oldest first):")
        for e in ex["events"]:
            count = f" (x{e['count']})" if e["count"] and e["count"] > 1 else ""
            lines.append(
                f"  {e['time'] or '?'}  {e['type'] or '?':<8} {e['reason'] or '?'}: "
                f"{e['message'] or ''}{count}"
            )
    else:
        lines.append("Recent events: none")
    return "\n".join(lines) + "\n"


def fetch(
    namespace: str, name: str, kubeconfig: str | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The BatchedModel and its Events, from the API server."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from batchop.api.constants import GROUP, KIND, PLURAL, VERSION

    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except (ConfigException, OSError, ValueError) as exc:
        where = kubeconfig or "(default kubeconfig)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExplainError(f"kubeconfig {where}: {first}", 2) from None
    try:
        bm = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        listing = client.CoreV1Api(api).list_namespaced_event(
            namespace,
            field_selector=f"involvedObject.name={name},involvedObject.kind={KIND}",
        )
    except ApiException as exc:
        if exc.status == 404:
            raise ExplainError(f"BatchedModel {namespace}/{name} not found") from None
        raise ExplainError(f"API server: {exc.status} {exc.reason}") from None
    except Exception as exc:  # connection refused, TLS, DNS: one line, no traceback
        raise ExplainError(
            f"cannot reach the API server: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    events = api.sanitize_for_serialization(listing).get("items") or []
    return bm, events


def run(args: argparse.Namespace) -> int:
    try:
        if args.events < 0:
            raise ExplainError(f"--events must be >= 0, got {args.events}", 2)
        namespace, name = parse_target(args.target)
        bm, events = fetch(namespace, name, args.kubeconfig)
    except ExplainError as exc:
        print(f"batchop explain: {exc}", file=sys.stderr)
        return exc.code
    ex = explanation(bm, events, args.events)
    if args.output == "text":
        sys.stdout.write(render_text(ex))
    else:
        emit(ex, args.output)
    return 0
