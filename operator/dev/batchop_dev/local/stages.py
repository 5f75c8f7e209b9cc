"""KWOK stages for a cluster whose pods earn readiness from a prober, as under a kubelet.

KWOK's default pod stage makes a pod Running *and Ready* the moment it gives it an address.
That is right for the scale runs (nothing serves those pods) but wrong where the pod runner
runs a real tritonserver per pod: for the second or so until the runner patched "not ready"
over it, a new pod was an endpoint that refused connections, and the load generator (like a
Service would) sent it requests. In "probes" mode a pod that declares a readinessProbe starts
Running but not Ready, exactly as a kubelet leaves it until the probe passes; the pod runner,
playing the prober, marks it Ready once Triton answers. Pods without a readinessProbe are Ready
at once, as under a kubelet.

kwokctl uses the stages of its config file *instead of* its defaults, so the config carries
all of them: KWOK's own node and pod-complete/pod-delete stages, read from the kwok module the
binaries were built from (same pinned version, nothing copied into this project), and our
pod-start stage in place of KWOK's pod-ready.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from batchop_dev.local import build, versions

READINESS_MODES = ("kwok", "probes")

# KWOK's stages kept as they are (paths inside the kwok module), as kwokctl's binary runtime
# picks them by default (node leases on).
UPSTREAM_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

# Replaces KWOK's pod-ready: same trigger (a live Pending pod), same address and phase, but
# Ready/ContainersReady follow the kubelet rule: True only when no container has a
# readinessProbe. The pod runner reports the probed state afterwards.
POD_START_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-start-probed
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Pending'
    - key: '.status.podIP'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $ready := "True" }}
      {{ range .spec.containers }}{{ if .readinessProbe }}{{ $ready = "False" }}{{ end }}{{ end }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: {{ $ready | Quote }}
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: {{ $ready | Quote }}
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: {{ if eq $ready "True" }}true{{ else }}false{{ end }}
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"""  # noqa: E501 (a KWOK template line)


class StageError(RuntimeError):
    """KWOK's stage files could not be found; says where they were looked for."""


def kwok_module_dir(version: str) -> Path:
    """The kwok module's source for `version` (downloaded through the module proxy if needed)."""
    spec = f"{versions.KWOK_MODULE}@{version}"
    result = subprocess.run(
        [build.find_go(), "mod", "download", "-json", spec],
        cwd=versions.KWOK_MODULE_DIR,
        env=build.go_env(),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise StageError(f"`go mod download {spec}` failed: {result.stderr.strip()[-400:]}")
    return Path(json.loads(result.stdout)["Dir"])


def probed_stages(module_dir: Path) -> str:
    """All the stages of a "probes" cluster, as one multi-document YAML text."""
    documents = []
    for relative in UPSTREAM_STAGES:
        path = module_dir / relative
        if not path.is_file():
            raise StageError(f"KWOK stage {relative} not found in {module_dir}")
        documents.append(path.read_text().strip() + "\n")
    documents.append(POD_START_STAGE)
    return "---\n".join(documents)
