"""The pod runner for pods whose image is in local podman storage (e.g. the operator's own).

The Triton pod runner (batchop_dev.local.podrunner) runs tritonserver as a local process; a
pod from the Helm chart instead names an image built here (`make image`). For each Running
pod whose every container image podman has, this does what a kubelet does, with podman:

- `podman run` of the pod's one container: image, command/args ($(VAR) expanded), env
  (values and fieldRefs), the pod's runAsUser/runAsGroup/fsGroup, read-only root, dropped
  capabilities, no-new-privileges; emptyDir volumes as tmpfs; projected volumes (the
  ServiceAccount's kube-api-access: a token from the TokenRequest API bound to the pod,
  ca.crt from the kube-root-ca.crt ConfigMap, the namespace) written to a folder mounted
  read-only, tokens renewed at 80 % of their life as a kubelet does;
- the in-cluster config a kubelet gives: KUBERNETES_SERVICE_HOST/PORT, here the loopback
  API server's own address (its serving certificate is valid for it: kubectl checks it);
- readiness and liveness HTTP probes on the pod's address, reported into the pod's status;
  a container that exits or fails liveness is restarted with back-off;
- the container stopped (SIGTERM, grace period, SIGKILL) when the pod goes.

Host network: every pod shares the host's, so a wildcard bind ("0.0.0.0" in the env or
args) would collide between pods (and with Triton pods on their 127.N.x.y:8000); it becomes the
pod's own address, as a pod network namespace gives each pod its own. Anything else a
kubelet would do that this does not (secret/configMap env, other volume kinds, exec probes)
is a PodSpecError naming the field: the pod shows CreateContainerConfigError, never a
half-run container.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from batchop.api.constants import LABEL_MODEL
from batchop_dev.local.podrunner import (
    ContainerState,
    PodSpecError,
    _now,
    address_in_use,
    runnable,
    status_patch,
)
from batchop_dev.local.podwatch import Pod, PodKey, PodLoop, pod_key

log = logging.getLogger("batchop.imagepods")

WILDCARD = "0.0.0.0"
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
# Not the Triton pods (podrunner runs those as processes).
SELECTOR = f"!{LABEL_MODEL}"
DEFAULT_GRACE_S = 30.0
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@dataclass(frozen=True)
class ApiEndpoint:
    """Where the API server is for a pod's in-cluster config."""

    host: str
    port: int


@dataclass(frozen=True)
class HttpProbe:
    """An httpGet probe resolved to an address (the pod's, unless it names a host)."""

    url: str
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1


@dataclass(frozen=True)
class ProjectedFile:
    """One file of a projected volume: `kind` is token, configmap or field."""

    volume: str
    path: str
    kind: str
    source: str = ""  # configmap "name/key", field path, or token audience
    expiration_s: int = 3600


@dataclass(frozen=True)
class ImageLaunch:
    """How to run one pod's container with podman. `run_args` come after `podman run`,
    with `{volumes}` standing for the host folder of the projected volumes."""

    name: str  # the podman container's name
    container: str
    image: str
    run_args: tuple[str, ...]
    files: tuple[ProjectedFile, ...] = ()
    readiness: HttpProbe | None = None
    liveness: HttpProbe | None = None
    grace_s: float = DEFAULT_GRACE_S
    address: str = ""  # the pod's IP, where its declared ports are bound
    ports: tuple[int, ...] = ()


def podman_name(pod: Pod) -> str:
    meta = pod.get("metadata", {})
    return f"k8s_{meta.get('namespace', '')}_{meta.get('name', '')}_{meta.get('uid', '')[:8]}"


def quantity_bytes(value: str, where: str) -> int:
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise PodSpecError(f"{where}={value!r}: expected a whole quantity such as 64Mi")
    return int(match.group(1)) * _FACTORS[match.group(2)]


def _fields(pod: Pod) -> dict[str, str]:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    return {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }


def container_env(pod: Pod, container: dict[str, Any], api: ApiEndpoint) -> dict[str, str]:
    """The environment a kubelet gives the container, wildcard binds made the pod's own."""
    where = f"pod {'/'.join(pod_key(pod))}, container {container.get('name')}"
    if container.get("envFrom"):
        raise PodSpecError(f"{where}: envFrom is not supported by the local pod runner")
    fields = _fields(pod)
    pod_ip = fields["status.podIP"]
    out: dict[str, str] = {
        "KUBERNETES_SERVICE_HOST": api.host,
        "KUBERNETES_SERVICE_PORT": str(api.port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api.port),
        "HOSTNAME": fields["metadata.name"],
    }
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            value = _VAR.sub(lambda m: out.get(m[1], m[0]), str(var.get("value", "")))
        else:
            path = ((var["valueFrom"] or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                source = next(iter(var["valueFrom"] or {"valueFrom": None}))
                raise PodSpecError(
                    f"{where}: env {name}: valueFrom.{source}"
                    f"{'=' + path if path else ''} is not supported by the "
                    "local pod runner (values and fieldRefs are)"
                )
            value = fields[path]
        out[name] = value.replace(WILDCARD, pod_ip)
    return out


def _probe(pod: Pod, container: dict[str, Any], kind: str) -> HttpProbe | None:
    probe = container.get(kind)
    if not probe:
        return None
    where = f"pod {'/'.join(pod_key(pod))}, container {container.get('name')}, {kind}"
    get = probe.get("httpGet")
    if get is None:
        raise PodSpecError(f"{where}: only httpGet probes are supported by the local pod runner")
    if str(get.get("scheme", "HTTP")).upper() != "HTTP":
        raise PodSpecError(f"{where}: httpGet.scheme {get['scheme']}: only HTTP is supported")
    port = get.get("port")
    if isinstance(port, str) and not port.isdigit():
        named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if port not in named:
            raise PodSpecError(f"{where}: httpGet.port {port!r} names no port of the container")
        port = named[port]
    host = get.get("host") or pod.get("status", {}).get("podIP", "")
    path = get.get("path", "/")
    return HttpProbe(
        url=f"http://{host}:{int(port)}{path if path.startswith('/') else '/' + path}",
        initial_delay_s=float(probe.get("initialDelaySeconds", 0)),
        period_s=float(probe.get("periodSeconds", 10)),
        timeout_s=float(probe.get("timeoutSeconds", 1)),
        failure_threshold=int(probe.get("failureThreshold", 3)),
        success_threshold=int(probe.get("successThreshold", 1)),
    )


def _projected(volume: dict[str, Any], pod: Pod, where: str) -> list[ProjectedFile]:
    files: list[ProjectedFile] = []
    name = volume["name"]
    for source in volume["projected"].get("sources") or []:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            files.append(
                ProjectedFile(
                    name,
                    token.get("path", "token"),
                    "token",
                    token.get("audience", ""),
                    int(token.get("expirationSeconds", 3600)),
                )
            )
        elif "configMap" in source:
            ref = source["configMap"]
            for item in ref.get("items") or []:
                files.append(
                    ProjectedFile(name, item["path"], "configmap", f"{ref['name']}/{item['key']}")
                )
            if not ref.get("items"):
                raise PodSpecError(f"{where}: volume {name}: a configMap source needs items")
        elif "downwardAPI" in source:
            fields = _fields(pod)
            for item in source["downwardAPI"].get("items") or []:
                path = (item.get("fieldRef") or {}).get("fieldPath")
                if path not in fields:
                    raise PodSpecError(
                        f"{where}: volume {name}: downwardAPI item {item['path']}"
                        " must be a fieldRef the local pod runner knows"
                    )
                files.append(ProjectedFile(name, item["path"], "field", path))
        else:
            raise PodSpecError(
                f"{where}: volume {name}: projected source "
                f"{next(iter(source), '?')} is not supported locally"
            )
    return files


def image_launch(
    pod: Pod, api: ApiEndpoint, run_flags: list[str] | tuple[str, ...] = ()
) -> ImageLaunch:
    """Translate a pod into a `podman run` as a kubelet would run it. Pure."""
    where = f"pod {'/'.join(pod_key(pod))}"
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    if len(containers) != 1 or spec.get("initContainers"):
        raise PodSpecError(
            f"{where}: the local pod runner runs pods of exactly one container "
            f"and no init containers (has {len(containers)})"
        )
    (container,) = containers
    if not pod.get("status", {}).get("podIP"):
        raise PodSpecError(f"{where}: has no podIP yet")
    where = f"{where}, container {container.get('name')}"
    pod_sc = spec.get("securityContext") or {}
    sc = {**pod_sc, **(container.get("securityContext") or {})}
    if sc.get("privileged"):
        raise PodSpecError(f"{where}: securityContext.privileged is not run locally")
    user, group = sc.get("runAsUser"), sc.get("runAsGroup")
    if sc.get("runAsNonRoot") and user == 0:
        raise PodSpecError(f"{where}: securityContext.runAsNonRoot is true but runAsUser is 0")
    # The pod's hostname is its name (leader election names itself after it).
    args: list[str] = [
        "--network",
        "host",
        "--hostname",
        pod["metadata"]["name"],
        "--pull",
        "never",
        *run_flags,
    ]
    if user is not None:
        args += ["--user", f"{user}:{group}" if group is not None else str(user)]
    if pod_sc.get("fsGroup") is not None:
        args += ["--group-add", str(pod_sc["fsGroup"])]
    for extra in pod_sc.get("supplementalGroups") or []:
        args += ["--group-add", str(extra)]
    if sc.get("readOnlyRootFilesystem"):
        # Kubernetes mounts nothing writable the pod did not declare; podman's default
        # tmpfs on /tmp, /var/tmp and /run would hide a missing emptyDir.
        args += ["--read-only", "--read-only-tmpfs=false"]
    caps = sc.get("capabilities") or {}
    args += [f"--cap-drop={c}" for c in caps.get("drop") or []]
    args += [f"--cap-add={c}" for c in caps.get("add") or []]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    files: list[ProjectedFile] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise PodSpecError(f"{where}: volumeMounts {mount['name']!r} names no volume")
        target = mount["mountPath"]
        if "emptyDir" in volume:
            options = "rw,mode=1777"
            limit = (volume["emptyDir"] or {}).get("sizeLimit")
            if limit:
                where_limit = f"{where}: volume {volume['name']}: emptyDir.sizeLimit"
                options += f",size={quantity_bytes(limit, where_limit)}"
            args += ["--tmpfs", f"{target}:{options}"]
        elif "projected" in volume:
            files += _projected(volume, pod, where)
            args += ["--volume", f"{{volumes}}/{volume['name']}:{target}:ro"]
        else:
            kind = next((k for k in volume if k != "name"), "?")
            raise PodSpecError(
                f"{where}: volume {volume['name']}: {kind} volumes are not "
                "supported by the local pod runner (emptyDir and projected are)"
            )
    env = container_env(pod, container, api)
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]

    def expand(items: list[Any] | None) -> list[str]:
        return [
            _VAR.sub(lambda m: env.get(m[1], m[0]), str(a)).replace(
                WILDCARD, pod["status"]["podIP"]
            )
            for a in items or []
        ]

    command = expand(container.get("command"))
    if command:
        args += ["--entrypoint", json.dumps(command)]
    image = container.get("image")
    if not image:
        raise PodSpecError(f"{where}: has no image")
    args += ["--name", podman_name(pod), image, *expand(container.get("args"))]
    grace = spec.get("terminationGracePeriodSeconds")
    return ImageLaunch(
        name=podman_name(pod),
        container=str(container.get("name")),
        image=str(image),
        run_args=tuple(args),
        files=tuple(files),
        readiness=_probe(pod, container, "readinessProbe"),
        liveness=_probe(pod, container, "livenessProbe"),
        grace_s=float(DEFAULT_GRACE_S if grace is None else grace),
        address=pod["status"]["podIP"],
        ports=tuple(
            int(p["containerPort"])
            for p in container.get("ports") or []
            if p.get("containerPort") and p.get("protocol", "TCP") == "TCP"
        ),
    )


def api_endpoint(kubeconfig: Path) -> ApiEndpoint:
    """The API server's host and port from a kubeconfig's current cluster."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(
        c["context"]
        for c in config["contexts"]
        if c["name"] == config.get("current-context", config["contexts"][0]["name"])
    )
    server = next(
        c["cluster"]["server"] for c in config["clusters"] if c["name"] == context["cluster"]
    )
    url = urlsplit(server)
    return ApiEndpoint(host=url.hostname or "127.0.0.1", port=url.port or 443)


@dataclass
class ProbeState:
    """Where one probe stands: consecutive results and when it runs next."""

    next_at: float
    successes: int = 0
    failures: int = 0


def probe_once(probe: HttpProbe) -> bool:
    """One HTTP GET; 200-399 is a success, as for a kubelet."""
    try:
        with urllib.request.urlopen(probe.url, timeout=probe.timeout_s) as resp:
            return 200 <= resp.status < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class _Pod:
    uid: str
    launch: ImageLaunch | None
    state: ContainerState = field(default_factory=ContainerState)
    proc: subprocess.Popen[bytes] | None = None
    next_start: float = 0.0
    files_due: float = 0.0  # when the projected files need refreshing
    ready: ProbeState | None = None
    live: ProbeState | None = None


class ImagePodRunner(PodLoop):
    """Runs, with podman, each Running pod (not a Triton pod) whose images podman has.

    `start()` returns at once; `stop()` stops every container it started.
    """

    def __init__(
        self,
        kubeconfig: Path | str,
        *,
        workdir: Path,
        poll_s: float = 1.0,
        max_backoff_s: float = 20.0,
    ) -> None:
        super().__init__(kubeconfig, name="imagepods", poll_s=poll_s)
        self.workdir = workdir
        self.max_backoff_s = max_backoff_s
        self._pods: dict[PodKey, _Pod] = {}
        self._images: dict[str, tuple[bool, float]] = {}
        self._api = api_endpoint(self.kubeconfig)
        from batchop_dev.image import run_flags

        self._run_flags = run_flags()
        self._stoppers: list[threading.Thread] = []

    def start(self) -> ImagePodRunner:
        if shutil.which("podman") is None:
            raise PodSpecError("podman is not installed: pods from local images cannot run")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start_loop(SELECTOR)
        return self

    def running(self) -> dict[PodKey, str]:
        """podman container name per pod whose container runs (for tests)."""
        return {
            k: p.launch.name
            for k, p in self._pods.items()
            if p.launch is not None and p.proc is not None and p.proc.poll() is None
        }

    def log_path(self, key: PodKey) -> Path:
        return self.workdir / f"{key[0]}_{key[1]}.log"

    def _has_images(self, pod: Pod) -> bool:
        now = time.monotonic()
        for container in pod.get("spec", {}).get("containers") or []:
            ref = container.get("image", "")
            known = self._images.get(ref)
            if known is None or (not known[0] and now - known[1] > 10):
                got = subprocess.run(["podman", "image", "exists", ref], capture_output=True)
                known = (got.returncode == 0, now)
                self._images[ref] = known
            if not known[0]:
                return False
        return True

    def reconcile_once(self) -> None:
        assert self._watch is not None
        pods = {k: p for k, p in self._watch.pods.items() if runnable(p)}
        for key in list(self._pods):
            if key not in pods or pods[key]["metadata"].get("uid") != self._pods[key].uid:
                self._stop_pod(key)
        for key, pod in pods.items():
            if self._stop.is_set():
                return
            if key in self._pods or self._has_images(pod):
                self._sync(key, pod)

    def _sync(self, key: PodKey, pod: Pod) -> None:
        run = self._pods.get(key)
        if run is None:
            try:
                launch: ImageLaunch | None = image_launch(pod, self._api, self._run_flags)
                message = None
            except PodSpecError as exc:
                launch, message = None, str(exc)
                log.error("%s", exc)
            run = _Pod(uid=pod["metadata"].get("uid", ""), launch=launch)
            run.state.message = message
            run.state.waiting_reason = "CreateContainerConfigError" if launch is None else None
            self._pods[key] = run
        now = time.monotonic()
        state, launch = run.state, run.launch
        if launch is not None:
            if run.proc is not None and run.proc.poll() is not None:
                self._exited(key, run, now)
            if run.proc is None and now >= run.next_start:
                self._start_container(key, pod, run, now)
            elif run.proc is not None and now >= run.files_due:
                try:
                    self._write_files(pod, run, now)
                except Exception as exc:  # the old token stays valid a while: retry soon
                    log.warning("pod %s/%s: renewing its projected files: %s", *key, exc)
                    run.files_due = now + 10.0
            if run.proc is not None:
                self._probe(key, run, now)
        patch = status_patch(pod, launch.container if launch else "", state)
        if patch is not None:
            from kubernetes.client.exceptions import ApiException

            try:
                self._core.patch_namespaced_pod_status(
                    key[1], key[0], patch, _content_type="application/merge-patch+json"
                )
            except ApiException as exc:
                if exc.status not in (404, 409):
                    log.warning("patching status of pod %s/%s: %s", *key, exc.reason)
                self._wake.set()

    def _exited(self, key: PodKey, run: _Pod, now: float) -> None:
        assert run.proc is not None
        code = run.proc.returncode
        log.warning("container of pod %s/%s exited (%s); restarting", *key, code)
        state = run.state
        state.last_exit = {
            "exitCode": code,
            "reason": "Error" if code else "Completed",
            "startedAt": state.started_at,
            "finishedAt": _now(),
        }
        state.restart_count += 1
        state.running = state.ready = False
        state.waiting_reason = "CrashLoopBackOff"
        run.proc = None
        run.next_start = now + min(self.max_backoff_s, 2.0 ** (state.restart_count - 1))

    def _volumes_dir(self, run: _Pod) -> Path:
        assert run.launch is not None
        return self.workdir / "volumes" / run.launch.name

    def _write_files(self, pod: Pod, run: _Pod, now: float) -> None:
        """Write (or renew) the projected files; renew tokens at 80 % of their life."""
        assert run.launch is not None
        ns, name = pod_key(pod)
        base = self._volumes_dir(run)
        fields = _fields(pod)
        life = min([f.expiration_s for f in run.launch.files if f.kind == "token"] or [3600])
        for item in run.launch.files:
            if item.kind == "token":
                body: dict[str, Any] = {
                    "spec": {
                        "expirationSeconds": item.expiration_s,
                        "boundObjectRef": {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": name,
                            "uid": run.uid,
                        },
                    }
                }
                if item.source:
                    body["spec"]["audiences"] = [item.source]
                got = self._core.create_namespaced_service_account_token(
                    fields["spec.serviceAccountName"], ns, body
                )
                text = got.status.token
            elif item.kind == "configmap":
                cm_name, _, cm_key = item.source.partition("/")
                data = self._core.read_namespaced_config_map(cm_name, ns).data or {}
                if cm_key not in data:
                    raise PodSpecError(f"configMap {ns}/{cm_name} has no key {cm_key}")
                text = data[cm_key]
            else:
                text = fields[item.source]
            path = base / item.volume / item.path
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.new")
            partial.write_text(text)
            partial.chmod(0o644)
            partial.replace(path)  # atomic: the container sees the old or the new file
        run.files_due = now + 0.8 * life

    def _start_container(self, key: PodKey, pod: Pod, run: _Pod, now: float) -> None:
        from kubernetes.client.exceptions import ApiException

        assert run.launch is not None
        state = run.state
        try:
            self._write_files(pod, run, now)
        except (ApiException, PodSpecError, OSError) as exc:
            # As a kubelet: the container waits until its volumes can be made.
            state.waiting_reason = "ContainerCreating"
            state.message = f"volumes: {getattr(exc, 'reason', None) or exc}"
            run.next_start = now + 2.0
            return
        busy = address_in_use(run.launch.address, run.launch.ports)
        if busy:
            # Another process (not a pod of another local cluster: each has a network of its
            # own) holds the address: say so and retry, rather than crash-loop the container.
            state.waiting_reason = "PortInUse"
            state.message = f"{busy} is already in use on this machine"
            run.next_start = now + self.max_backoff_s / 4
            return
        subprocess.run(
            ["podman", "rm", "--force", "--ignore", run.launch.name],
            capture_output=True,
            timeout=60,
        )
        args = [a.replace("{volumes}", str(self._volumes_dir(run))) for a in run.launch.run_args]
        with open(self.log_path(key), "ab") as out:
            run.proc = subprocess.Popen(
                ["podman", "run", "--rm", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        log.info("pod %s/%s: podman run %s", *key, run.launch.image)
        state.running, state.ready, state.started_at = True, False, _now()
        state.waiting_reason = state.message = None
        if run.launch.readiness is not None:
            run.ready = ProbeState(next_at=now + run.launch.readiness.initial_delay_s)
        if run.launch.liveness is not None:
            run.live = ProbeState(next_at=now + run.launch.liveness.initial_delay_s)

    def _probe(self, key: PodKey, run: _Pod, now: float) -> None:
        assert run.launch is not None
        readiness, liveness = run.launch.readiness, run.launch.liveness
        if readiness is None:
            run.state.ready = True  # no readinessProbe: Ready once running, as a kubelet
        elif run.ready is not None and now >= run.ready.next_at:
            ok = probe_once(readiness)
            run.ready.next_at = now + readiness.period_s
            run.ready.successes = run.ready.successes + 1 if ok else 0
            run.ready.failures = 0 if ok else run.ready.failures + 1
            if run.ready.successes >= readiness.success_threshold:
                run.state.ready = True
            elif run.ready.failures >= readiness.failure_threshold:
                run.state.ready = False
        if liveness is not None and run.live is not None and now >= run.live.next_at:
            ok = probe_once(liveness)
            run.live.next_at = now + liveness.period_s
            run.live.failures = 0 if ok else run.live.failures + 1
            if run.live.failures >= liveness.failure_threshold:
                log.warning(
                    "pod %s/%s: liveness probe failed %d times; restarting", *key, run.live.failures
                )
                self._kill(run.launch, run.proc, run.launch.grace_s)
                run.live = None  # the exit is seen next tick and restarts it

    def _kill(
        self, launch: ImageLaunch, proc: subprocess.Popen[bytes] | None, grace_s: float
    ) -> None:
        """SIGTERM, grace period, SIGKILL (podman stop), in the background."""

        def stop() -> None:
            subprocess.run(
                ["podman", "stop", "--ignore", "--time", str(int(grace_s)), launch.name],
                capture_output=True,
                timeout=grace_s + 60,
            )
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()  # the client; the container itself goes below
            # `run --rm` removes it; a container whose client died would be left running.
            subprocess.run(
                ["podman", "rm", "--force", "--ignore", launch.name],
                capture_output=True,
                timeout=120,
            )

        thread = threading.Thread(target=stop, name=f"stop-{launch.name}", daemon=True)
        thread.start()
        self._stoppers.append(thread)

    def _stop_pod(self, key: PodKey) -> None:
        run = self._pods.pop(key)
        if run.launch is not None and run.proc is not None:
            log.info("pod %s/%s gone: stopping its container", *key)
            self._kill(run.launch, run.proc, run.launch.grace_s)

    def stop(self) -> None:
        self._stop_loop()
        for key in list(self._pods):
            self._stop_pod(key)
        for thread in self._stoppers:
            thread.join(timeout=DEFAULT_GRACE_S + 60)

    def __enter__(self) -> ImagePodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
