"""An in-memory stand-in for the API server, for the controller's handler-logic tests.

It keeps objects by (kind, name), bumps a resourceVersion on every write and refuses a
status patch computed from an old resourceVersion: the three behaviours of the API server
the handlers rely on. The real API server is exercised by the integration tests.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from batchop.controller.handlers import Handlers
from batchop.controller.kube import APIError, NotServed
from batchop.controller.reconcile import slim_model
from batchop.controller.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpu-demo.yaml"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class MemoryCluster:
    """Objects of one namespace in memory; records every write."""

    def __init__(self, model: dict[str, Any], serves_pod_monitor: bool = True) -> None:
        self.model = model
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.serves_pod_monitor = serves_pod_monitor
        self.writes: list[str] = []
        self.fail_apply: APIError | None = None
        self.version = 100
        self.pods: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        if self.fail_apply:
            raise self.fail_apply
        if obj["kind"] == "PodMonitor" and not self.serves_pod_monitor:
            raise NotServed("PodMonitor (monitoring.coreos.com/v1) is not served")
        live = copy.deepcopy(dict(obj))
        live["metadata"]["resourceVersion"] = self._bump()
        self.objects[(obj["kind"], obj["metadata"]["name"])] = live
        self.writes.append(f"apply {obj['kind']}")
        return live

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, name), None)
        self.writes.append(f"delete {kind}")

    def get_child(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        self.writes.append(f"get {kind}")
        if kind == "PodMonitor" and not self.serves_pod_monitor:
            raise NotServed("PodMonitor (monitoring.coreos.com/v1) is not served")
        found = self.objects.get((kind, name))
        return copy.deepcopy(found) if found is not None else None

    def get_model(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.model)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        for pod in self.pods:
            if pod["metadata"]["name"] == name:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
        self.writes.append(f"annotate {name}")

    def post_event(self, bm: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        if resource_version and resource_version != self.model["metadata"]["resourceVersion"]:
            raise APIError(409, "the object has been modified")
        self.model.setdefault("status", {}).update(copy.deepcopy(dict(status)))
        self.model["metadata"]["resourceVersion"] = self._bump()
        self.writes.append("status")
        return self.model


class World:
    """A BatchedModel, its cluster, its pods, and what the handlers posted."""

    def __init__(self, settings: Settings | None = None, serves_pod_monitor: bool = True) -> None:
        bm = yaml.safe_load(EXAMPLE.read_text())
        bm["metadata"].update(uid="uid-1", generation=1, namespace="ml", resourceVersion="1")
        self.cluster = MemoryCluster(bm, serves_pod_monitor)
        self.events: list[tuple[str, str, str]] = []
        self.handlers = Handlers(
            settings or Settings(),
            self.cluster,
            lambda _bm, type_, reason, msg: self.events.append((type_, reason, msg)),
            lambda ns, name: (self.deployment(), self.cluster.pods),
            clock=lambda: NOW,
        )

    @property
    def pods(self) -> list[dict[str, Any]]:
        return self.cluster.pods

    @pods.setter
    def pods(self, pods: list[dict[str, Any]]) -> None:
        self.cluster.pods = pods

    @property
    def bm(self) -> dict[str, Any]:
        return slim_model(self.cluster.model)

    def deployment(self) -> dict[str, Any] | None:
        return self.cluster.objects.get(("Deployment", "cpu-demo"))

    def conditions(self) -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.cluster.model["status"]["conditions"]}
