"""The operator's settings, from command-line flags and environment variables.

A flag wins over its environment variable, which wins over the default. The same process
runs in a cluster (configured by the Helm chart through environment variables) and on a
laptop (flags), so every setting has both. A bad value stops the operator at start with a
message naming the flag or variable and the rule it broke, rather than failing later in a
handler where the cause is hard to see.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"
DEFAULT_RATE_WINDOW = "1m"
MIN_RATE_WINDOW_S, MAX_RATE_WINDOW_S = 10, 600
# How often the PodMonitors batchop creates ask Prometheus to scrape the Triton pods.
DEFAULT_SCRAPE_INTERVAL = "15s"
MIN_SCRAPE_INTERVAL_S, MAX_SCRAPE_INTERVAL_S = 1, 300
_DURATION = re.compile(r"^([1-9][0-9]{0,4})([smh])$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}
# The same port as batchop.metrics.DEFAULT_PORT (the chart scrapes it there).
DEFAULT_METRICS_ADDRESS = ("0.0.0.0", 8000)
LOG_FORMATS = ("json", "full", "plain")

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_DISABLED = {"", "off", "none", "false", "0"}


class SettingsError(ValueError):
    """A flag or environment variable has a value the operator cannot run with."""


@dataclass(frozen=True)
class Source:
    """Where one setting comes from: its flag (argparse dest and spelling) and its variable."""

    dest: str
    flag: str
    env: str


SOURCES: dict[str, Source] = {
    s.dest: s
    for s in (
        Source("namespaces", "--namespace", "BATCHOP_NAMESPACE"),
        Source("all_namespaces", "--all-namespaces", "BATCHOP_ALL_NAMESPACES"),
        Source("kubeconfig", "--kubeconfig", "KUBECONFIG"),
        Source("default_image", "--default-image", "BATCHOP_DEFAULT_IMAGE"),
        Source("prometheus_url", "--prometheus-url", "BATCHOP_PROMETHEUS_URL"),
        Source("rate_window", "--rate-window", "BATCHOP_RATE_WINDOW"),
        Source("pod_monitor", "--pod-monitor", "BATCHOP_POD_MONITOR"),
        Source("scrape_interval", "--scrape-interval", "BATCHOP_SCRAPE_INTERVAL"),
        Source("liveness", "--liveness", "BATCHOP_LIVENESS"),
        Source("metrics_address", "--metrics-address", "BATCHOP_METRICS_ADDRESS"),
        Source("log_format", "--log-format", "BATCHOP_LOG_FORMAT"),
        Source("workers", "--workers", "BATCHOP_WORKERS"),
        Source("verbose", "--verbose", "BATCHOP_VERBOSE"),
        Source("leader_elect", "--leader-elect", "BATCHOP_LEADER_ELECT"),
        Source("lease_namespace", "--lease-namespace", "BATCHOP_LEASE_NAMESPACE"),
        Source("lease_name", "--lease-name", "BATCHOP_LEASE_NAME"),
        Source("lease_identity", "--lease-identity", "BATCHOP_LEASE_IDENTITY"),
        Source("lease_duration", "--lease-duration", "BATCHOP_LEASE_DURATION"),
        Source("lease_renew_deadline", "--lease-renew-deadline", "BATCHOP_LEASE_RENEW_DEADLINE"),
        Source("lease_retry_period", "--lease-retry-period", "BATCHOP_LEASE_RETRY_PERIOD"),
    )
}


@dataclass(frozen=True)
class Settings:
    """Everything `batchop run` needs to know, validated."""

    namespaces: tuple[str, ...] = ()  # empty with all_namespaces: watch every namespace
    all_namespaces: bool = True
    kubeconfig: str | None = None  # None: in-cluster service account, else ~/.kube/config
    default_image: str | None = None  # None: the API's default Triton image
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    # PromQL rate window: at least ~4 scrape intervals (the chart's PodMonitor scrapes every
    # 15 s); shorter reacts sooner to a step in load, longer is smoother.
    rate_window: str = DEFAULT_RATE_WINDOW
    pod_monitor: bool = True
    scrape_interval: str = DEFAULT_SCRAPE_INTERVAL  # the PodMonitors' interval
    liveness: str | None = DEFAULT_LIVENESS  # None: no liveness endpoint
    metrics_address: tuple[str, int] | None = DEFAULT_METRICS_ADDRESS  # None: no /metrics
    log_format: str = "json"
    workers: int = 8
    verbose: bool = False
    # Leader election (controller/leader.py): several replicas, one acting. Off: this process
    # acts alone, as a single replica always did.
    leader_elect: bool = False
    lease_namespace: str | None = None  # None: the pod's namespace, else the first watched
    lease_name: str = "batchop"
    lease_identity: str | None = None  # None: hostname plus a random suffix
    lease_duration: int = 15
    lease_renew_deadline: float = 10.0
    lease_retry_period: float = 2.0


def _where(dest: str, from_flag: bool) -> str:
    src = SOURCES[dest]
    return f"flag {src.flag}" if from_flag else f"environment variable {src.env}"


def _pick(dest: str, flags: Mapping[str, Any], env: Mapping[str, str]) -> tuple[Any, bool] | None:
    """The raw value of one setting and whether it came from a flag; None when unset."""
    value = flags.get(dest)
    if value is not None:
        return value, True
    var = SOURCES[dest].env
    if var in env:
        return env[var], False
    return None


def _bool(raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{where}={raw!r}: must be a boolean (true/false, 1/0, yes/no, on/off)")


def _namespace(name: str, where: str) -> str:
    if not _NAMESPACE.match(name):
        raise SettingsError(
            f"{where}: namespace {name!r} is not a valid name (lower-case letters, digits and "
            "'-', starting and ending with a letter or digit, at most 63 characters)"
        )
    return name


def _http_url(raw: str, where: str, *, need_path: bool = False) -> str:
    url = raw.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"{where}={raw!r}: must be an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise SettingsError(f"{where}={raw!r}: bad port ({exc})") from None
    if need_path and parts.path in ("", "/"):
        raise SettingsError(f"{where}={raw!r}: must include the probe path, e.g. /healthz")
    return url


def _address(raw: str, where: str) -> tuple[str, int]:
    host, sep, port = raw.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(
            f"{where}={raw!r}: must be HOST:PORT (or :PORT) with a port in 0..65535, or 'off'"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


def _image(raw: str, where: str) -> str:
    image = raw.strip()
    if not image or any(c.isspace() for c in image):
        raise SettingsError(f"{where}={raw!r}: must be a container image reference without spaces")
    return image


def _duration(raw: str, where: str, low_s: int, high_s: int, example: str) -> str:
    match = _DURATION.match(raw.strip())
    seconds = int(match[1]) * _DURATION_UNITS[match[2]] if match else 0
    if not low_s <= seconds <= high_s:
        raise SettingsError(
            f"{where}={raw!r}: must be a Prometheus duration of whole seconds, minutes or hours "
            f"between {low_s}s and {high_s // 60}m, e.g. {example}"
        )
    return raw.strip()


def _rate_window(raw: str, where: str) -> str:
    return _duration(raw, where, MIN_RATE_WINDOW_S, MAX_RATE_WINDOW_S, "30s or 1m")


def parse_settings(flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Settings:
    """Settings from parsed flags (argparse dests, None when not given) and the environment."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}

    ns = _pick("namespaces", flags, env)
    namespaces: tuple[str, ...] = ()
    if ns is not None:
        raw, from_flag = ns
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        where = _where("namespaces", from_flag)
        namespaces = tuple(dict.fromkeys(_namespace(n.strip(), where) for n in items if n.strip()))
    every = _pick("all_namespaces", flags, env)
    all_ns = _bool(every[0], _where("all_namespaces", every[1])) if every else False
    if all_ns and namespaces:
        raise SettingsError(
            "--all-namespaces (BATCHOP_ALL_NAMESPACES) and --namespace (BATCHOP_NAMESPACE) "
            "exclude each other: give one"
        )
    values["namespaces"] = namespaces
    values["all_namespaces"] = not namespaces

    got = _pick("kubeconfig", flags, env)
    if got is not None and str(got[0]).strip():
        path = os.path.expanduser(str(got[0]).strip())
        if got[1] and not os.path.isfile(path):
            raise SettingsError(f"{_where('kubeconfig', True)}={got[0]!r}: no such file")
        values["kubeconfig"] = path

    got = _pick("default_image", flags, env)
    if got is not None:
        values["default_image"] = _image(str(got[0]), _where("default_image", got[1]))

    got = _pick("prometheus_url", flags, env)
    if got is not None:
        values["prometheus_url"] = _http_url(str(got[0]), _where("prometheus_url", got[1]))

    got = _pick("rate_window", flags, env)
    if got is not None:
        values["rate_window"] = _rate_window(str(got[0]), _where("rate_window", got[1]))

    got = _pick("pod_monitor", flags, env)
    if got is not None:
        values["pod_monitor"] = _bool(got[0], _where("pod_monitor", got[1]))

    got = _pick("scrape_interval", flags, env)
    if got is not None:
        values["scrape_interval"] = _duration(
            str(got[0]),
            _where("scrape_interval", got[1]),
            MIN_SCRAPE_INTERVAL_S,
            MAX_SCRAPE_INTERVAL_S,
            "5s or 15s",
        )

    got = _pick("liveness", flags, env)
    if got is not None:
        raw = str(got[0]).strip()
        where = _where("liveness", got[1])
        values["liveness"] = (
            None if raw.lower() in _DISABLED else _http_url(raw, where, need_path=True)
        )

    got = _pick("metrics_address", flags, env)
    if got is not None:
        raw = str(got[0]).strip()
        where = _where("metrics_address", got[1])
        values["metrics_address"] = None if raw.lower() in _DISABLED else _address(raw, where)

    got = _pick("log_format", flags, env)
    if got is not None:
        fmt = str(got[0]).strip().lower()
        if fmt not in LOG_FORMATS:
            where = _where("log_format", got[1])
            raise SettingsError(f"{where}={got[0]!r}: must be one of {', '.join(LOG_FORMATS)}")
        values["log_format"] = fmt

    got = _pick("workers", flags, env)
    if got is not None:
        where = _where("workers", got[1])
        try:
            workers = int(str(got[0]).strip())
        except ValueError:
            raise SettingsError(f"{where}={got[0]!r}: must be a whole number") from None
        if not 1 <= workers <= 256:
            raise SettingsError(f"{where}={got[0]!r}: must be between 1 and 256")
        values["workers"] = workers

    got = _pick("verbose", flags, env)
    if got is not None:
        values["verbose"] = _bool(got[0], _where("verbose", got[1]))

    values.update(_lease(flags, env))
    return Settings(**values)


def _seconds(raw: Any, where: str, *, whole: bool) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600 or (whole and not value.is_integer()):
        kind = "a whole number of seconds" if whole else "a number of seconds"
        raise SettingsError(f"{where}={raw!r}: must be {kind} in (0, 3600]")
    return value


def _lease(flags: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The leader-election settings; the three durations obey client-go's rules."""
    values: dict[str, Any] = {}
    got = _pick("leader_elect", flags, env)
    if got is not None:
        values["leader_elect"] = _bool(got[0], _where("leader_elect", got[1]))
    got = _pick("lease_namespace", flags, env)
    if got is not None and str(got[0]).strip():
        values["lease_namespace"] = _namespace(
            str(got[0]).strip(), _where("lease_namespace", got[1])
        )
    got = _pick("lease_name", flags, env)
    if got is not None:
        name = str(got[0]).strip()
        if not _NAMESPACE.match(name):  # a Lease name: the same DNS-label rule, simplest
            raise SettingsError(
                f"{_where('lease_name', got[1])}={got[0]!r}: must be lower-case letters, "
                "digits and '-', starting and ending with a letter or digit, at most 63"
            )
        values["lease_name"] = name
    got = _pick("lease_identity", flags, env)
    if got is not None and str(got[0]).strip():
        identity = str(got[0]).strip()
        if len(identity) > 128 or any(c.isspace() for c in identity):
            raise SettingsError(
                f"{_where('lease_identity', got[1])}={got[0]!r}: must be at most 128 "
                "characters without spaces"
            )
        values["lease_identity"] = identity
    durations = {"lease_duration": True, "lease_renew_deadline": False, "lease_retry_period": False}
    for dest, whole in durations.items():
        got = _pick(dest, flags, env)
        if got is not None:
            seconds = _seconds(got[0], _where(dest, got[1]), whole=whole)
            values[dest] = int(seconds) if whole else seconds
    from batchop.controller.leader import LeaseTiming

    defaults = Settings()
    timing = LeaseTiming(
        values.get("lease_duration", defaults.lease_duration),
        values.get("lease_renew_deadline", defaults.lease_renew_deadline),
        values.get("lease_retry_period", defaults.lease_retry_period),
    )
    problems = timing.problems()
    if problems:
        named = ", ".join(f"{SOURCES[d].flag} ({SOURCES[d].env})" for d in durations)
        raise SettingsError(f"{'; '.join(problems)}: check {named}")
    return values
