"""Runs the operator: kopf, embedded, with batchop's settings.

Choices made here, and why:
- Persistence in `status.handled` (kopf's progress and last-handled configuration), a field
  the API declares, so that it rides on the creation handler's status write: one call per
  create instead of a status write and an annotation patch (controller/persistence.py).
  Objects an earlier batchop handled are read from its annotations.
- Standalone (no kopf peering): kopf pauses every replica of equal priority, so it cannot
  elect one of a Deployment's replicas. With `--leader-elect`, a coordination.k8s.io Lease
  (controller/leader.py) picks the one replica that runs kopf at all; the others stand by.
- No finalizer: there is no deletion handler, timer or daemon (see handlers.py), so kopf adds
  none and a BatchedModel can be deleted while the operator is down.
- CRD/namespace scanning only cluster-wide: a namespaced install needs no cluster rights.
- Kubernetes Events are posted only when the handlers ask (kopf's own handler log lines
  would flood `kubectl describe` with "Handler succeeded"): posting level WARNING.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from batchop.api.constants import GROUP
from batchop.controller.settings import Settings

if TYPE_CHECKING:
    from batchop.controller.persistence import Persistence

log = logging.getLogger("batchop.controller")


def operator_settings(
    settings: Settings, identity: str | None = None, persistence: Persistence | None = None
) -> Any:
    """kopf's settings for batchop; `identity` names this replica in the Events it posts;
    `persistence`: the storages, shared with the handlers (build_registry)."""
    import kopf

    from batchop.controller.persistence import Persistence

    persistence = persistence if persistence is not None else Persistence()
    ops = kopf.OperatorSettings()
    ops.persistence.progress_storage = persistence.progress
    ops.persistence.diffbase_storage = persistence.diffbase
    ops.persistence.finalizer = f"{GROUP}/finalizer"
    ops.peering.standalone = True
    ops.peering.mandatory = False
    ops.posting.enabled = True
    ops.posting.level = logging.WARNING
    if identity:
        ops.posting.reporting_instance = identity
    ops.execution.max_workers = settings.workers
    ops.watching.server_timeout = 300
    ops.watching.client_timeout = 330
    ops.networking.request_timeout = 60
    # Namespaced: no cluster-wide listing of namespaces/CRDs (a namespaced install has only
    # Roles); kinds resolve once at start. Cluster-wide, kopf watches CRDs so a PodMonitor CRD
    # installed later is noticed; without rights on CRDs it warns and resolves only at start.
    ops.scanning.disabled = not settings.all_namespaces
    return ops


def configure_logging(settings: Settings) -> None:
    """Structured (JSON) logs by default; kopf adds the object reference to each record."""
    import kopf

    fmt = {
        "json": kopf.LogFormat.JSON,
        "full": kopf.LogFormat.FULL,
        "plain": kopf.LogFormat.PLAIN,
    }[settings.log_format]
    kopf.configure(verbose=settings.verbose, log_format=fmt, log_refkey="object")
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not settings.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_quiet_watchers)


def _quiet_watchers(record: logging.LogRecord) -> bool:
    """Drop kopf's "Handler 'watch-…' succeeded." lines: one per pod or child event is noise;
    their failures and everything else still log."""
    message = str(record.msg)
    return not (
        message.startswith("Handler '")
        and message.endswith("succeeded.")
        and ("'watch-" in message or "'model-gone'" in message)
    )


def run(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM. Returns the exit code."""
    import kopf

    from batchop.controller.handlers import build_registry
    from batchop.controller.kube import Cluster, make_api_client
    from batchop.controller.persistence import Persistence

    try:
        cluster = Cluster(make_api_client(settings.kubeconfig, settings.workers + 2))
    except Exception as exc:  # kubernetes.config.ConfigException and file errors
        where = settings.kubeconfig or "in-cluster service account, then ~/.kube/config"
        print(f"batchop run: cannot configure the Kubernetes client ({where}): {exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    configure_logging(settings)
    if settings.kubeconfig:
        # kopf's own login (kubernetes client piggybacking) reads the same file.
        os.environ["KUBECONFIG"] = settings.kubeconfig
    persistence = Persistence()
    registry = build_registry(settings, cluster, persistence)
    if settings.metrics_address is not None:
        from batchop.metrics import start_metrics_server

        host, port = settings.metrics_address
        try:
            server, _thread = start_metrics_server(addr=host, port=port)
        except OSError as exc:
            print(f"batchop run: cannot serve /metrics on {host}:{port} (--metrics-address, "
                  f"BATCHOP_METRICS_ADDRESS): {exc}", file=sys.stderr)  # fmt: skip
            return 2
        log.info("serving /metrics on %s:%d", host, server.server_port)
    leadership = _lead(settings) if settings.leader_elect else None
    scope = "every namespace" if settings.all_namespaces else ", ".join(settings.namespaces)
    log.info("batchop operator starting; watching %s", scope)
    try:
        kopf.run(
            registry=registry,
            settings=operator_settings(
                settings, leadership.elector.identity if leadership else None, persistence
            ),
            standalone=True,
            clusterwide=settings.all_namespaces,
            namespaces=list(settings.namespaces),
            liveness_endpoint=settings.liveness,
        )
    finally:
        if leadership is not None:
            leadership.release()
    return 0


def _lead(settings: Settings) -> Any:
    """Block until this replica holds the Lease (see controller/leader.py)."""
    from batchop.controller.kube import make_api_client
    from batchop.controller.leader import (
        KubeLeaseStore,
        LeaseTiming,
        become_leader,
        default_identity,
        lease_namespace,
    )

    timing = LeaseTiming(
        settings.lease_duration, settings.lease_renew_deadline, settings.lease_retry_period
    )
    store = KubeLeaseStore(
        make_api_client(settings.kubeconfig),  # its own pool: renewals never queue behind handlers
        lease_namespace(settings.lease_namespace, settings.namespaces),
        settings.lease_name,
        timeout_s=timing.retry_period_s,
    )
    return become_leader(
        store, settings.lease_identity or default_identity(), timing, settings.liveness
    )
