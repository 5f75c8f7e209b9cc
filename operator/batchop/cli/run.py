"""`batchop run`: the operator, in or out of a cluster."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from batchop.controller.settings import SOURCES, SettingsError, parse_settings


def register(subparsers: Any) -> None:
    env = {dest: src.env for dest, src in SOURCES.items()}
    p = subparsers.add_parser(
        "run",
        help="run the operator (reconciles BatchedModels, tunes delay and replicas)",
        description="Run the batchop operator. Every flag has an environment variable; a flag "
        "wins over its variable.",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        dest="namespaces",
        action="append",
        metavar="NS",
        help=f"watch this namespace (repeatable; env {env['namespaces']}, comma-separated)",
    )
    scope.add_argument(
        "--all-namespaces",
        "-A",
        dest="all_namespaces",
        action="store_const",
        const=True,
        help=f"watch every namespace (the default; env {env['all_namespaces']})",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig to use (env KUBECONFIG; default: in-cluster, else ~/.kube/config)",
    )
    p.add_argument(
        "--default-image",
        metavar="IMAGE",
        help=f"Triton image for models that set none (env {env['default_image']})",
    )
    p.add_argument(
        "--prometheus-url",
        metavar="URL",
        help=f"Prometheus for models that set none (env {env['prometheus_url']})",
    )
    p.add_argument(
        "--rate-window",
        metavar="DURATION",
        help="PromQL rate window for Triton's counters, >= ~4 scrape intervals (default 1m; "
        f"env {env['rate_window']})",
    )
    p.add_argument(
        "--pod-monitor",
        dest="pod_monitor",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"create a PodMonitor per model (default on; env {env['pod_monitor']})",
    )
    p.add_argument(
        "--scrape-interval",
        metavar="DURATION",
        help="how often the PodMonitors have Prometheus scrape Triton (default 15s; keep the "
        f"rate window >= ~4 of them; env {env['scrape_interval']})",
    )
    p.add_argument(
        "--liveness",
        metavar="URL",
        help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz, or 'off' "
        f"(env {env['liveness']})",
    )
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help=f"serve the operator's /metrics here, or 'off' (default 0.0.0.0:8000; "
        f"env {env['metrics_address']})",
    )
    p.add_argument(
        "--log-format",
        choices=("json", "full", "plain"),
        help=f"log format (default json; env {env['log_format']})",
    )
    p.add_argument(
        "--workers",
        type=str,
        metavar="N",
        help=f"threads for handlers (default 8; env {env['workers']})",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_const",
        const=True,
        help=f"debug logs (env {env['verbose']})",
    )
    ha = p.add_argument_group(
        "leader election", "several replicas, exactly one acting (a coordination.k8s.io Lease)"
    )
    ha.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"act only while holding the Lease (default off; env {env['leader_elect']})",
    )
    ha.add_argument(
        "--lease-namespace",
        metavar="NS",
        help="namespace of the Lease (default: the pod's, else the first watched, else "
        f"default; env {env['lease_namespace']})",
    )
    ha.add_argument(
        "--lease-name",
        metavar="NAME",
        help=f"name of the Lease (default batchop; env {env['lease_name']})",
    )
    ha.add_argument(
        "--lease-identity",
        metavar="ID",
        help=f"this replica's name in the Lease (default HOSTNAME_random; env "
        f"{env['lease_identity']})",
    )
    ha.add_argument(
        "--lease-duration",
        metavar="SECONDS",
        help="how long a standby waits after the last renewal it saw (default 15; env "
        f"{env['lease_duration']})",
    )
    ha.add_argument(
        "--lease-renew-deadline",
        metavar="SECONDS",
        help="the leader exits if it has not renewed for this long; < lease duration "
        f"(default 10; env {env['lease_renew_deadline']})",
    )
    ha.add_argument(
        "--lease-retry-period",
        metavar="SECONDS",
        help=f"how often to try or renew (default 2; env {env['lease_retry_period']})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = parse_settings(vars(args))
    except SettingsError as exc:
        print(f"batchop run: {exc}", file=sys.stderr)
        return 2
    from batchop.controller.app import run as run_operator

    return run_operator(settings)
