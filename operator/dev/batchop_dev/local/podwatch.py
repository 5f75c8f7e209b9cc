"""A cache of the pods matching a label selector, kept by list + watch like an informer.

The pod runner and Prometheus's file-based discovery both need "the BatchedModel pods now".
A background thread lists (recording the resourceVersion), then watches from it; on a 410
Gone or any error it lists again, and it relists every `resync_s` regardless, so a missed
event costs at most one resync period. Pods are kept as plain dicts (the API's JSON).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PodKey = tuple[str, str]  # (namespace, name)
Pod = dict[str, Any]


def pod_key(pod: Pod) -> PodKey:
    meta = pod.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


class PodWatch:
    """Keeps `pods` current for `label_selector`; calls `on_change()` after every change.

    Build with an API client (kubernetes.client.ApiClient). `start()` returns once the first
    list is in; `stop()` ends the thread within about `watch_timeout_s`.
    """

    def __init__(
        self,
        api_client: Any,
        label_selector: str,
        on_change: Callable[[], None] | None = None,
        *,
        resync_s: float = 30.0,
        watch_timeout_s: int = 5,
    ) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self.label_selector = label_selector
        self.on_change = on_change or (lambda: None)
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self._lock = threading.Lock()
        self._pods: dict[PodKey, Pod] = {}
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="podwatch", daemon=True)
        self.errors = 0

    @property
    def pods(self) -> dict[PodKey, Pod]:
        with self._lock:
            return dict(self._pods)

    def start(self, timeout_s: float = 30.0) -> PodWatch:
        self._thread.start()
        if not self._listed.wait(timeout_s):
            raise TimeoutError(f"could not list pods ({self.label_selector}) in {timeout_s:g}s")
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.watch_timeout_s + 5)

    def _list(self) -> str:
        resp = self._core.list_pod_for_all_namespaces(
            label_selector=self.label_selector, _preload_content=False
        )
        import json

        body = json.loads(resp.data)
        pods = {pod_key(p): p for p in body.get("items", [])}
        with self._lock:
            changed = pods != self._pods
            self._pods = pods
        self._listed.set()
        if changed:
            self.on_change()
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, resource_version: str, until: float) -> None:
        from kubernetes import watch

        w = watch.Watch()
        while not self._stop.is_set() and time.monotonic() < until:
            for event in w.stream(
                self._core.list_pod_for_all_namespaces,
                label_selector=self.label_selector,
                resource_version=resource_version,
                timeout_seconds=self.watch_timeout_s,
                allow_watch_bookmarks=True,
                deserialize=False,  # plain dicts: no model objects to build per event
            ):
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    raise RuntimeError(f"watch error: {obj}")
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                if kind == "BOOKMARK":
                    continue
                with self._lock:
                    if kind == "DELETED":
                        self._pods.pop(pod_key(obj), None)
                    else:
                        self._pods[pod_key(obj)] = obj
                self.on_change()
                if self._stop.is_set():
                    break

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rv = self._list()
                self._watch(rv, time.monotonic() + self.resync_s)
            except Exception as exc:  # 410 Gone, API server restarting, ...: relist
                self.errors += 1
                log.debug("pod watch (%s) restarting: %s", self.label_selector, exc)
                self._stop.wait(1.0)


class PodLoop:
    """A kubelet-like, level-triggered loop over the pods one selector picks.

    `reconcile_once()` runs every `poll_s`, and at once when the watch sees a change. The
    subclass (the Triton pod runner, the image pod runner) starts the loop with `_start_loop`
    once its own set-up is done and stops what it runs after `_stop_loop`.
    """

    def __init__(self, kubeconfig: Path | str, *, name: str, poll_s: float = 1.0) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._watch: PodWatch | None = None
        self._core: Any = None

    def reconcile_once(self) -> None:
        raise NotImplementedError

    def _start_loop(self, label_selector: str) -> None:
        from kubernetes import client
        from kubernetes import config as kconfig

        api = kconfig.new_client_from_config(config_file=str(self.kubeconfig))
        self._core = client.CoreV1Api(api)
        self._watch = PodWatch(api, label_selector, self._wake.set, resync_s=30.0).start()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile_once()
            except Exception:
                log.exception("%s tick failed", self._thread.name)
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _stop_loop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._watch is not None:
            self._watch.stop()
