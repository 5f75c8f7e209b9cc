"""The pod runner: plays kubelet for the Triton pods of the local cluster.

KWOK schedules pods onto fake nodes and gives them a loopback address (127.N.x.y, N per
cluster), but nothing runs. For each Running pod carrying the BatchedModel label, this starts
a real tritonserver bound to that address with the flags the pod's container asks for, and
reports readiness back into the pod's status the way a kubelet does (the Ready/
ContainersReady conditions and containerStatuses[].ready, patched on the status
subresource). A crashed server is restarted with back-off and counted in restartCount; a
server whose pod is gone or terminating is stopped after the container's preStop sleep, as a
kubelet would (it keeps answering while clients drop the pod from their targets).

Run it on a cluster in "probes" readiness mode (batchop_dev.local.stages): there KWOK starts a pod
that has a readinessProbe as Running but not Ready, and the runner is its prober. On a cluster
with KWOK's default stage, a new pod is Ready for the second before the runner corrects it.
The runner is level-triggered: every second it compares each pod's status with what its Triton
really is and patches the difference.

    python -m batchop_dev.local.podrunner --kubeconfig K [--repository-map s3://b/m=/abs/dir]
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from batchop.api.constants import (
    CONTAINER_NAME,
    LABEL_MODEL,
    PORT_GRPC,
    PORT_HTTP,
    PORT_METRICS,
    PORT_NAME_GRPC,
    PORT_NAME_HTTP,
    PORT_NAME_METRICS,
)
from batchop_dev.local.podwatch import Pod, PodKey, PodLoop, pod_key

log = logging.getLogger("batchop.podrunner")

# Flags the runner sets itself (addresses, ports, repository, model control): taken out of
# the pod's args so Triton does not see them twice (--model-repository may repeat).
OWN_FLAGS = {
    "model-repository",
    "model-store",
    "load-model",
    "model-control-mode",
    "http-address",
    "grpc-address",
    "metrics-address",
    "http-port",
    "grpc-port",
    "metrics-port",
    "backend-directory",
    "cache-directory",
    "strict-readiness",
    "exit-timeout-secs",
    "allow-gpu-metrics",
}
# Flags that make no sense on this machine (GPU memory pools, paths inside the image).
DROPPED_FLAGS = {
    "repoagent-directory",
    "cuda-memory-pool-byte-size",
    "pinned-memory-pool-byte-size",
    "min-supported-compute-capability",
    "log-file",
    "cuda-virtual-address-size",
}
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class PodSpecError(ValueError):
    """The pod asks for something the runner cannot run locally; the message says what."""


@dataclass(frozen=True)
class LaunchSpec:
    """How to run one pod's Triton here: address, ports, repository, models, other flags."""

    container: str
    address: str
    model_repository: str
    http_port: int = PORT_HTTP
    grpc_port: int = PORT_GRPC
    metrics_port: int = PORT_METRICS
    load_models: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()


def _container(pod: Pod) -> dict[str, Any]:
    containers = pod.get("spec", {}).get("containers") or []
    if not containers:
        raise PodSpecError(f"pod {'/'.join(pod_key(pod))}: has no containers")
    for c in containers:
        if c.get("name") == CONTAINER_NAME:
            return c
    return containers[0]


def _env_values(pod: Pod, container: dict[str, Any]) -> dict[str, str]:
    """Container env a kubelet would expand in $(VAR) references (values and fieldRefs)."""
    fields = {
        "status.podIP": pod.get("status", {}).get("podIP", ""),
        "metadata.name": pod.get("metadata", {}).get("name", ""),
        "metadata.namespace": pod.get("metadata", {}).get("namespace", ""),
    }
    out: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            out[var["name"]] = _VAR.sub(lambda m: out.get(m[1], m[0]), str(var["value"]))
        else:
            path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path in fields:
                out[var["name"]] = fields[path]
    return out


def _split_flags(argv: list[str]) -> list[tuple[str, str | None]]:
    """`--name=value` / `--name value` / `--flag` tokens as (name, value) pairs."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise PodSpecError(f"argument {token!r}: expected a --flag")
        name, eq, value = token[2:].partition("=")
        if eq:
            pairs.append((name, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            pairs.append((name, argv[i + 1]))
            i += 1
        else:
            pairs.append((name, None))
        i += 1
    return pairs


def local_repository(uri: str, repository_map: dict[str, str]) -> str:
    """The local folder for a --model-repository URI: mapped, file://, or an absolute path."""
    for prefix, folder in sorted(repository_map.items(), key=lambda kv: -len(kv[0])):
        if uri == prefix or uri.startswith(prefix.rstrip("/") + "/"):
            return folder.rstrip("/") + uri[len(prefix.rstrip("/")) :]
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    if "://" in path or not path.startswith("/"):
        raise PodSpecError(
            f"--model-repository {uri!r} is not a local folder: use an absolute path or "
            "file:///abs/path, or map it with --repository-map URI=/abs/dir"
        )
    return path


def launch_spec(pod: Pod, repository_map: dict[str, str] | None = None) -> LaunchSpec:
    """Translate a pod's tritonserver container into how to run it locally. Pure.

    Honours the container's command/args ($(VAR) expanded from its env like a kubelet);
    ports come from the args, else the container's named ports, else Triton's defaults.
    """
    where = f"pod {'/'.join(pod_key(pod))}"
    container = _container(pod)
    address = pod.get("status", {}).get("podIP")
    if not address:
        raise PodSpecError(f"{where}: has no podIP yet")
    env = _env_values(pod, container)
    argv = [
        _VAR.sub(lambda m: env.get(m[1], m[0]), str(a))
        for a in [*(container.get("command") or []), *(container.get("args") or [])]
    ]
    if argv and not argv[0].startswith("-"):
        argv = argv[1:]  # the binary, e.g. "tritonserver"
    try:
        pairs = _split_flags(argv)
    except PodSpecError as exc:
        raise PodSpecError(f"{where}, container {container.get('name')}: {exc}") from None
    values: dict[str, list[str]] = {}
    extra: list[str] = []
    for name, value in pairs:
        if name in OWN_FLAGS:
            values.setdefault(name, []).append(value or "")
        elif name not in DROPPED_FLAGS:
            extra.append(f"--{name}" if value is None else f"--{name}={value}")
    repos = values.get("model-repository", []) + values.get("model-store", [])
    if not repos:
        raise PodSpecError(f"{where}: the tritonserver args have no --model-repository")
    try:
        local = [local_repository(r, repository_map or {}) for r in repos]
    except PodSpecError as exc:
        raise PodSpecError(f"{where}: {exc}") from None
    extra += [f"--model-repository={r}" for r in local[1:]]
    named = {
        p.get("name"): int(p["containerPort"])
        for p in container.get("ports") or []
        if p.get("containerPort")
    }

    def port(flag: str, port_name: str, default: int) -> int:
        given = values.get(flag)
        try:
            return int(given[-1]) if given else int(named.get(port_name, default))
        except ValueError:
            bad = given[-1] if given else named.get(port_name)
            raise PodSpecError(f"{where}: --{flag}={bad} is not a port number") from None

    return LaunchSpec(
        container=str(container.get("name", CONTAINER_NAME)),
        address=address,
        model_repository=local[0],
        http_port=port("http-port", PORT_NAME_HTTP, PORT_HTTP),
        grpc_port=port("grpc-port", PORT_NAME_GRPC, PORT_GRPC),
        metrics_port=port("metrics-port", PORT_NAME_METRICS, PORT_METRICS),
        load_models=tuple(m for m in values.get("load-model", []) if m),
        extra_args=tuple(extra),
    )


def ports_in_use(spec: LaunchSpec) -> str | None:
    """The first of the spec's address:port pairs that something already listens on."""
    return address_in_use(spec.address, (spec.http_port, spec.grpc_port, spec.metrics_port))


def address_in_use(address: str, ports: tuple[int, ...]) -> str | None:
    """The first `address:port` something already listens on (all pods share the host's
    network here)."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError:
                return f"{address}:{port}"
    return None


def prestop_sleep_s(pod: Pod) -> float:
    """The Triton container's preStop sleep (seconds), which a kubelet runs before SIGTERM.

    Either kubelet's sleep action or an exec of `sleep N` (what batchop renders, as the
    sleep action is unknown to older Kubernetes); any other hook counts as no wait.
    """
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") == CONTAINER_NAME:
            pre_stop = (container.get("lifecycle") or {}).get("preStop") or {}
            command = (pre_stop.get("exec") or {}).get("command") or []
            if len(command) == 2 and command[0] in ("sleep", "/bin/sleep"):
                try:
                    return float(command[1])
                except ValueError:
                    return 0.0
            return float((pre_stop.get("sleep") or {}).get("seconds") or 0)
    return 0.0


def runnable(pod: Pod) -> bool:
    """A pod the runner must run: Running, with an IP, not terminating."""
    status = pod.get("status", {})
    return (
        status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and not pod.get("metadata", {}).get("deletionTimestamp")
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerState:
    """What the runner knows of one pod's Triton: what a kubelet reports for a container."""

    running: bool = False
    ready: bool = False
    restart_count: int = 0
    started_at: str | None = None
    last_exit: dict[str, Any] | None = None  # lastState.terminated
    waiting_reason: str | None = None
    message: str | None = None


def status_patch(pod: Pod, container: str, state: ContainerState) -> dict[str, Any] | None:
    """The status merge-patch that makes `pod` report `state`, or None if it already does.

    Pure. Other conditions and containers are kept; a condition's lastTransitionTime changes
    only when its status does.
    """
    status = pod.get("status", {})
    ready = "True" if state.ready else "False"
    now = _now()
    conditions = [dict(c) for c in status.get("conditions") or []]
    for kind in ("Ready", "ContainersReady"):
        cond = next((c for c in conditions if c.get("type") == kind), None)
        if cond is None:
            cond = {"type": kind}
            conditions.append(cond)
        if cond.get("status") != ready:
            cond["status"] = ready
            cond["lastTransitionTime"] = now
        if state.ready:
            cond.pop("reason", None)
            cond.pop("message", None)
        else:
            cond["reason"] = "ContainersNotReady"
            cond["message"] = state.message or f"containers with unready status: [{container}]"
    statuses = [dict(s) for s in status.get("containerStatuses") or []]
    current = next((s for s in statuses if s.get("name") == container), None)
    if current is None:
        image = next(
            (
                c.get("image", "")
                for c in pod.get("spec", {}).get("containers") or []
                if c.get("name") == container
            ),
            "",
        )
        current = {"name": container, "image": image, "imageID": ""}
        statuses.append(current)
    wanted: dict[str, Any] = {
        "ready": state.ready,
        "started": state.running,
        "restartCount": state.restart_count,
    }
    if state.running:
        wanted["state"] = {"running": {"startedAt": state.started_at or now}}
    else:
        wanted["state"] = {
            "waiting": {
                "reason": state.waiting_reason or "ContainerCreating",
                **({"message": state.message} if state.message else {}),
            }
        }
    wanted["lastState"] = {"terminated": state.last_exit} if state.last_exit else {}
    before = dict(current)
    current.update(wanted)
    if current == before and conditions == list(status.get("conditions") or []):
        return None
    return {
        "metadata": {"resourceVersion": pod.get("metadata", {}).get("resourceVersion")},
        "status": {"conditions": conditions, "containerStatuses": statuses},
    }


@dataclass
class _Running:
    """One pod's server and its bookkeeping."""

    uid: str
    spec: LaunchSpec | None
    state: ContainerState = field(default_factory=ContainerState)
    server: Any = None  # batchop_dev.local.triton.TritonProcess
    next_start: float = 0.0
    log_path: Path | None = None
    drain_s: float = 0.0  # the container's preStop sleep: serve this long after the pod goes
    stop_at: float | None = None  # set once the pod is gone or terminating


class PodRunner(PodLoop):
    """Runs a tritonserver per Running BatchedModel pod of the cluster at `kubeconfig`.

    `start()` returns at once (a background thread reconciles); `stop()` stops every server.
    """

    def __init__(
        self,
        kubeconfig: Path | str,
        *,
        repository_map: dict[str, str] | None = None,
        log_dir: Path | None = None,
        poll_s: float = 1.0,
        max_backoff_s: float = 20.0,
    ) -> None:
        super().__init__(kubeconfig, name="podrunner", poll_s=poll_s)
        self.repository_map = dict(repository_map or {})
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="batchop-podrunner-"))
        self.max_backoff_s = max_backoff_s
        self._servers: dict[PodKey, _Running] = {}
        self.patches = 0

    def start(self) -> PodRunner:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._start_loop(LABEL_MODEL)
        return self

    def servers(self) -> dict[PodKey, Any]:
        """The live TritonProcess per pod (for tests and the demo)."""
        return {k: r.server for k, r in self._servers.items() if r.server is not None}

    def reconcile_once(self) -> None:
        assert self._watch is not None
        pods = {k: p for k, p in self._watch.pods.items() if runnable(p)}
        now = time.monotonic()
        for key in list(self._servers):
            run = self._servers[key]
            if key in pods and pods[key]["metadata"].get("uid") == run.uid:
                continue
            # Gone or terminating: like a kubelet, run the preStop sleep (the server keeps
            # answering while clients drop the pod), then stop it.
            if run.stop_at is None:
                run.stop_at = now + (run.drain_s if run.server is not None else 0.0)
            if now >= run.stop_at or key in pods:  # a new pod of that name needs the address
                self._stop_server(key)
        for key, pod in pods.items():
            if self._stop.is_set():
                return
            self._sync_pod(key, pod)

    def _sync_pod(self, key: PodKey, pod: Pod) -> None:
        from batchop_dev.local.triton import TritonProcess

        run = self._servers.get(key)
        if run is None:
            try:
                spec: LaunchSpec | None = launch_spec(pod, self.repository_map)
                message = None
            except PodSpecError as exc:
                spec, message = None, str(exc)
                log.error("%s", exc)
            run = _Running(
                uid=pod["metadata"].get("uid", ""), spec=spec, drain_s=prestop_sleep_s(pod)
            )
            run.state.message = message
            run.state.waiting_reason = "CreateContainerConfigError" if spec is None else None
            run.log_path = self.log_dir / f"{key[0]}_{key[1]}.log"
            self._servers[key] = run
        state = run.state
        now = time.monotonic()
        if run.spec is not None:
            if run.server is not None and run.server.proc.poll() is not None:
                code = run.server.proc.returncode
                log.warning("triton of pod %s/%s exited (%s); restarting", *key, code)
                state.last_exit = {
                    "exitCode": code if code >= 0 else 128 - code,
                    "reason": "Error" if code else "Completed",
                    "startedAt": state.started_at,
                    "finishedAt": _now(),
                }
                state.restart_count += 1
                state.running = state.ready = False
                state.waiting_reason = "CrashLoopBackOff"
                run.server = None
                run.next_start = now + min(self.max_backoff_s, 2.0 ** (state.restart_count - 1))
            busy = None
            if run.server is None and now >= run.next_start:
                busy = ports_in_use(run.spec)
            if busy:
                # Another process (a server left over from an earlier run, say) holds the
                # address: say so and retry later instead of crash-looping Triton.
                state.waiting_reason = "PortInUse"
                state.message = f"{busy} is already in use on this machine"
                state.running = state.ready = False
                run.next_start = now + self.max_backoff_s / 4
            elif run.server is None and now >= run.next_start:
                spec = run.spec
                try:
                    run.server = TritonProcess(
                        spec.model_repository,
                        spec.address,
                        spec.http_port,
                        spec.grpc_port,
                        spec.metrics_port,
                        spec.load_models,
                        spec.extra_args,
                        log_path=run.log_path,
                    ).start()
                    state.running, state.started_at = True, _now()
                    state.waiting_reason = state.message = None
                except (OSError, ValueError, RuntimeError) as exc:
                    log.error("pod %s/%s: cannot start tritonserver: %s", *key, exc)
                    run.spec = None
                    state.waiting_reason, state.message = "CreateContainerError", str(exc)
            if run.server is not None:
                state.ready = run.server.is_ready()
        patch = status_patch(pod, run.spec.container if run.spec else CONTAINER_NAME, state)
        if patch is not None:
            self._patch(key, patch)

    def _patch(self, key: PodKey, patch: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.patch_namespaced_pod_status(
                key[1], key[0], patch, _content_type="application/merge-patch+json"
            )
            self.patches += 1
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or changed under us: next tick
                log.warning("patching status of pod %s/%s: %s", *key, exc.reason)
            self._wake.set()

    def _stop_server(self, key: PodKey) -> None:
        run = self._servers.pop(key)
        if run.server is not None:
            log.info("stopping triton of pod %s/%s", *key)
            run.server.stop(timeout=5)

    def stop(self) -> None:
        self._stop_loop()
        for key in list(self._servers):
            self._stop_server(key)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parse_map(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        uri, eq, folder = item.partition("=")
        if not eq or not folder.startswith("/"):
            raise SystemExit(f"--repository-map {item!r}: expected URI=/absolute/folder")
        out[uri] = folder
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchop_dev.local.podrunner",
        description="Play kubelet for the Triton pods of a local cluster: run a real "
        "tritonserver per Running BatchedModel pod, on the pod's address.",
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument(
        "--repository-map",
        action="append",
        default=[],
        metavar="URI=DIR",
        help="run pods whose --model-repository is URI from local DIR",
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="tritonserver logs")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    runner = PodRunner(
        args.kubeconfig, repository_map=_parse_map(args.repository_map), log_dir=args.log_dir
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    runner.start()
    log.info("pod runner watching %s (tritonserver logs in %s)", args.kubeconfig, runner.log_dir)
    try:
        while not done.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
