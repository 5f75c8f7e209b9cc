"""The operator's few calls to the API server, through the official client.

Children are written with server-side apply (field manager `batchop`, force): the API
server merges, batchop owns exactly the fields it sets, and re-applying an unchanged object
writes nothing. Status is a JSON merge patch of the status subresource carrying the
resourceVersion it was computed from, so a concurrent writer causes a conflict (and a
recompute) instead of a lost update.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from batchop.api.constants import API_VERSION, MANAGER, PLURAL
from batchop.controller.reconcile import resource_path


class NotServed(Exception):
    """The API server does not serve this kind (e.g. the PodMonitor CRD is not installed)."""


class APIError(Exception):
    """An API call failed; `status` is the HTTP code (0: no answer), `message` the server's,
    `details` its Status details (`name`, `kind`: which object it was about, when one)."""

    def __init__(self, status: int, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.details = dict(details or {})

    @property
    def retryable(self) -> bool:
        return self.status in (0, 409, 429) or self.status >= 500


def make_api_client(kubeconfig: str | None, connections: int = 0) -> Any:
    """A client for the cluster: in-cluster service account, else the kubeconfig.

    `connections`: keep at least this many HTTPS connections open, one per thread that calls
    (kopf's handler threads and the tuning thread). The client's default is 5 per CPU; a thread
    finding the pool empty opens a connection and closes it after one call, a TLS handshake
    per API call.
    """
    import kubernetes

    config = kubernetes.client.Configuration()
    config.connection_pool_maxsize = max(config.connection_pool_maxsize, connections)
    if kubeconfig:
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=config)
    else:
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(client_configuration=config)
    return kubernetes.client.ApiClient(config)


def _status_error(status: int, data: bytes | None) -> APIError:
    """The API server's Status message for a failed call."""
    text = (data or b"").decode(errors="replace")
    details: Any = {}
    try:
        answer = json.loads(text)
        message = answer.get("message") or text
        details = answer.get("details") or {}
    except (ValueError, AttributeError):
        message = text
    return APIError(
        status, message or f"HTTP {status}", details if isinstance(details, dict) else {}
    )


def _error(exc: Exception) -> APIError:
    status = int(getattr(exc, "status", 0) or 0)
    body = getattr(exc, "body", None)
    message = str(exc)
    if body:
        try:
            message = json.loads(body).get("message") or message
        except (ValueError, AttributeError):
            message = body.decode() if isinstance(body, bytes) else str(body)
    return APIError(status, message)


class Cluster:
    """The API calls the handlers make; one instance shared by all handler threads."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        try:
            method, url, headers, body, post = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                method, url, header_params=headers, body=body, post_params=post, _request_timeout=60
            )
            data = response.read()
        except OSError as exc:  # connection refused/reset: the API server is away
            raise APIError(0, f"no answer from the API server: {exc}") from None
        except Exception as exc:  # urllib3 errors, the client's own ApiException
            if type(exc).__module__.startswith(("urllib3", "kubernetes")):
                raise _error(exc) from None
            raise
        if not 200 <= response.status <= 299:
            raise _status_error(response.status, data)
        return json.loads(data) if data else {}

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply one child; returns the live object."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        try:
            return self._call(
                "PATCH",
                path,
                query=[("fieldManager", MANAGER), ("force", "true")],
                body=dict(obj),
                content_type="application/apply-patch+yaml",
            )
        except APIError as exc:
            if exc.status == 404 and obj["apiVersion"] not in ("v1", "apps/v1", "policy/v1"):
                raise NotServed(f"{obj['kind']} ({obj['apiVersion']}) is not served") from None
            raise

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete one child; gone already is fine."""
        try:
            self._call(
                "DELETE",
                resource_path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except APIError as exc:
            if exc.status != 404:
                raise

    def get_child(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """One child, or None when it is absent; NotServed when its kind is (e.g. PodMonitor
        without prometheus-operator's CRD): the API server's 404 then names no object."""
        try:
            found = self._call("GET", resource_path(api_version, kind, namespace, name))
        except APIError as exc:
            if exc.status == 404 and exc.details.get("name") != name:
                raise NotServed(f"{kind} ({api_version}) is not served") from None
            if exc.status == 404:
                return None
            raise
        found.setdefault("apiVersion", api_version)
        found.setdefault("kind", kind)
        return found

    def get_model(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}")
        except APIError as exc:
            if exc.status == 404:
                return None
            raise

    def post_event(self, bm: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about a BatchedModel (for threads outside kopf's handlers)."""
        import socket
        from datetime import UTC, datetime

        meta = bm["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._call(
            "POST",
            f"/api/v1/namespaces/{meta['namespace']}/events",
            body={
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {
                    "apiVersion": bm.get("apiVersion", API_VERSION),
                    "kind": bm.get("kind", "BatchedModel"),
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta.get("uid"),
                },
                "type": type_,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": MANAGER},
                "reportingComponent": MANAGER,
                "reportingInstance": socket.gethostname()[:128],
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge annotations into a pod (the per-pod record of what its Triton runs)."""
        self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body={"metadata": {"annotations": dict(annotations)}},
            content_type="application/merge-patch+json",
        )

    def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        """Merge-patch the status subresource; 409 when the object moved on since."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._call(
            "PATCH",
            f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status",
            body=body,
            content_type="application/merge-patch+json",
        )
