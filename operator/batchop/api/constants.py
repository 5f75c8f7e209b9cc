"""Names of the BatchedModel API and the labels/annotations batchop puts on what it creates.

Every other module (CRD generator, renderers, controller, chart, Prometheus relabeling) takes
these names from here so that they cannot drift apart.
"""

from __future__ import annotations

GROUP = "batchop.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "BatchedModel"
LIST_KIND = "BatchedModelList"
PLURAL = "batchedmodels"
SINGULAR = "batchedmodel"
SHORT_NAME = "bm"
CATEGORIES = ("batchop", "all")
CRD_NAME = f"{PLURAL}.{GROUP}"

# The label naming the BatchedModel, on every child object and on every pod.
LABEL_MODEL = f"{GROUP}/batchedmodel"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"

APP_NAME = "tritonserver"
MANAGER = "batchop"  # value of app.kubernetes.io/managed-by and the server-side-apply manager
COMPONENT = "inference-server"

# The queue delay (microseconds) a pod's Triton currently runs; set per pod by the operator
# after a live reload. Never on the pod template: a delay change must not roll pods.
ANNOTATION_DELAY = f"{GROUP}/max-queue-delay-us"
# Likewise the queue policy (spec.overload) it runs, as QueuePolicy.annotation() writes it.
ANNOTATION_QUEUE_POLICY = f"{GROUP}/queue-policy"

# The Prometheus label that carries the BatchedModel name after relabeling (PodMonitor here,
# kubernetes_sd relabeling in the local stack): queries group `by (namespace, batchedmodel)`.
PROM_LABEL_MODEL = "batchedmodel"
# The Kubernetes service-discovery meta label Prometheus gives the pod label LABEL_MODEL.
PROM_META_LABEL_MODEL = "__meta_kubernetes_pod_label_batchop_io_batchedmodel"

# Triton 2.51 is the release in NGC's 24.10 container.
DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"

# Triton's ports, and the names the Service/PodMonitor refer to.
PORT_HTTP = 8000
PORT_GRPC = 8001
PORT_METRICS = 8002
PORT_NAME_HTTP = "http"
PORT_NAME_GRPC = "grpc"
PORT_NAME_METRICS = "metrics"
CONTAINER_NAME = "tritonserver"

# Volumes batchop adds to every pod (read-only root filesystem: /tmp and /dev/shm writable).
TMP_VOLUME = "batchop-tmp"
SHM_VOLUME = "batchop-shm"
TMP_PATH = "/tmp"
SHM_PATH = "/dev/shm"

# Condition types reported in status.conditions.
CONDITION_TYPES = (
    "Ready",
    "Progressing",
    "Degraded",
    "SLOMet",
    "CapacityLimited",
    "MetricsAvailable",
)

# Seconds a pod keeps serving after it is told to stop (preStop sleep), while Services and
# clients drop it from their endpoints: without it a scale-down fails the requests already on
# their way to the removed pod.
DRAIN_SECONDS = 5

# How the operator names one BatchedModel everywhere (the observer's series, the handlers'
# and the tuner's per-model memory): (namespace, name).
ModelKey = tuple[str, str]
