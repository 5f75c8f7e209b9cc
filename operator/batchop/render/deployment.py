"""The Deployment that runs tritonserver for a BatchedModel.

The pod template depends only on the spec's model, server and the operator's options, never
on the queue delay: a delay change is applied live per pod and must not roll pods. The replica
count is a parameter because the operator, not the spec, decides it while tuning.
"""

from __future__ import annotations

from typing import Any

from batchop.api import constants as c
from batchop.api.models import GPU_RESOURCE, BatchedModel
from batchop.render.names import child_names, common_labels, object_meta, selector_labels
from batchop.render.options import RenderOptions

NON_ROOT_UID = 1000  # the triton-server user of NGC's tritonserver images
READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"


def triton_args(bm: BatchedModel) -> list[str]:
    """tritonserver's arguments: explicit model control loading just this model."""
    managed = [
        f"--model-repository={bm.spec.model.repository}",
        "--model-control-mode=explicit",
        f"--load-model={bm.spec.model.name}",
        f"--http-port={c.PORT_HTTP}",
        f"--grpc-port={c.PORT_GRPC}",
        f"--metrics-port={c.PORT_METRICS}",
        "--metrics-config=summary_latencies=true",
    ]
    return managed + list(bm.spec.server.args or ())


def _resources(bm: BatchedModel) -> dict[str, Any]:
    server = bm.spec.server
    resources: dict[str, Any] = {}
    if server.resources is not None:
        resources = server.resources.model_dump(by_alias=True, exclude_none=True)
    if server.gpus > 0:
        resources["limits"] = {**resources.get("limits", {}), GPU_RESOURCE: server.gpus}
    return resources


def _env(bm: BatchedModel) -> list[dict[str, Any]]:
    user = [e.model_dump(by_alias=True, exclude_none=True) for e in bm.spec.server.env or ()]
    names = {e["name"] for e in user}
    ours: list[dict[str, Any]] = []
    if "HOME" not in names:  # the root filesystem is read-only; /tmp is writable
        ours.append({"name": "HOME", "value": "/tmp"})
    if bm.spec.server.gpus == 0 and "NVIDIA_VISIBLE_DEVICES" not in names:
        # NGC images set NVIDIA_VISIBLE_DEVICES=all: without this a CPU pod on a GPU node
        # would see (and use) GPUs it was not allocated.
        ours.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    return ours + user


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": c.PORT_NAME_HTTP},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def _container(bm: BatchedModel, options: RenderOptions) -> dict[str, Any]:
    server = bm.spec.server
    container: dict[str, Any] = {
        "name": c.CONTAINER_NAME,
        "image": server.image or options.default_image,
    }
    if options.image_pull_policy:
        container["imagePullPolicy"] = options.image_pull_policy
    container |= {
        "command": ["tritonserver"],
        "args": triton_args(bm),
        "ports": [
            {"name": c.PORT_NAME_HTTP, "containerPort": c.PORT_HTTP, "protocol": "TCP"},
            {"name": c.PORT_NAME_GRPC, "containerPort": c.PORT_GRPC, "protocol": "TCP"},
            {"name": c.PORT_NAME_METRICS, "containerPort": c.PORT_METRICS, "protocol": "TCP"},
        ],
        "env": _env(bm),
        "resources": _resources(bm),
        # Model load (and a download from s3://) can take minutes: the startup probe allows
        # 15 minutes before liveness starts counting.
        "startupProbe": _probe(READY_PATH, period=5, failures=180),
        "readinessProbe": _probe(READY_PATH, period=5, failures=3),
        "livenessProbe": _probe(LIVE_PATH, period=10, failures=3),
        # Keep serving while endpoints drop the pod. An exec of the image's sleep rather than
        # kubelet's sleep action: that field is unknown before Kubernetes 1.29 (off by
        # default until 1.30), and Triton's image has /bin/sleep.
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(c.DRAIN_SECONDS)]}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": c.TMP_VOLUME, "mountPath": c.TMP_PATH},
            {"name": c.SHM_VOLUME, "mountPath": c.SHM_PATH},
            *[m.model_dump(by_alias=True) for m in server.volume_mounts or ()],
        ],
    }
    return container


def _pod_spec(bm: BatchedModel, options: RenderOptions) -> dict[str, Any]:
    server = bm.spec.server
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,  # Triton never talks to the API server
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 60,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "runAsGroup": NON_ROOT_UID,
            "fsGroup": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(bm, options)],
        "volumes": [
            {"name": c.TMP_VOLUME, "emptyDir": {}},
            # Triton's python backend and CUDA IPC use /dev/shm; the runtime's default 64 MiB
            # is too small for batched tensors.
            {"name": c.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            *[v.model_dump(by_alias=True) for v in server.volumes or ()],
        ],
    }
    if server.service_account_name:
        spec["serviceAccountName"] = server.service_account_name
    if server.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in server.image_pull_secrets]
    if server.node_selector:
        spec["nodeSelector"] = dict(server.node_selector)
    if server.tolerations:
        spec["tolerations"] = [dict(t) for t in server.tolerations]
    if server.affinity:
        spec["affinity"] = dict(server.affinity)
    return spec


def render_deployment(
    bm: BatchedModel, options: RenderOptions, replicas: int | None = None
) -> dict[str, Any]:
    """The tritonserver Deployment, at `replicas` (default: spec.scaling.replicas)."""
    count = bm.spec.scaling.replicas if replicas is None else replicas
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"replicas must be a non-negative integer, got {count!r}")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(bm, child_names(bm).deployment),
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": selector_labels(bm)},
            # Never below the serving count during a rollout (the SLO); one extra pod at a
            # time (GPUs are scarce).
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 1200,
            "template": {
                "metadata": {
                    "labels": common_labels(bm),
                    "annotations": {
                        "kubectl.kubernetes.io/default-container": c.CONTAINER_NAME,
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(c.PORT_METRICS),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": _pod_spec(bm, options),
            },
        },
    }
