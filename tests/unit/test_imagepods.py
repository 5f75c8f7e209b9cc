"""The image pod runner's pure half: a pod (the chart's operator pod) -> `podman run` args.

The pod is the chart's own Deployment template, rendered by the real helm binary, with what
the API server's ServiceAccount admission adds (the kube-api-access projected volume) and
what KWOK gives it (node, address), so the test follows the chart as it changes.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop_dev.local.imagepods import (
    ApiEndpoint,
    HttpProbe,
    ProjectedFile,
    api_endpoint,
    image_launch,
    podman_name,
    quantity_bytes,
)
from batchop_dev.local.podrunner import PodSpecError

CHART = Path(__file__).resolve().parents[2] / "charts" / "batchop"
API = ApiEndpoint("127.0.0.1", 32766)
KUBE_API_ACCESS = {
    "name": "kube-api-access-x7k2p",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    },
}


@pytest.fixture(scope="module")
def chart_pod() -> dict[str, Any]:
    from batchop_dev.local.tools import ensure_tools

    ensure_tools()
    helm = Path(sys.prefix) / "bin" / "helm"
    got = subprocess.run(
        [
            str(helm),
            "template",
            "rel",
            str(CHART),
            "-n",
            "ops",
            "--set",
            "image.repository=localhost/batchop",
            "--set",
            "image.tag=0.1.0-abc",
            "--set",
            "image.pullPolicy=Never",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    (dep,) = [d for d in yaml.safe_load_all(got.stdout) if d and d["kind"] == "Deployment"]
    template = dep["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    spec["volumes"].append(KUBE_API_ACCESS)
    spec["containers"][0]["volumeMounts"].append(
        {
            "name": KUBE_API_ACCESS["name"],
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
    )
    spec["nodeName"] = "gpu-node-1"
    return {
        "metadata": {
            "namespace": "ops",
            "name": "rel-batchop-5d9f-abcde",
            "uid": "0123abcd-ffff-4444-8888-000000000000",
            "labels": template["metadata"]["labels"],
        },
        "spec": spec,
        "status": {"phase": "Running", "podIP": "127.10.2.7", "hostIP": "127.0.0.1"},
    }


def _flag_values(args: tuple[str, ...], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_the_chart_pod_runs_as_a_kubelet_would(chart_pod: dict[str, Any]) -> None:
    launch = image_launch(chart_pod, API, ["--runtime", "runc"])
    args = launch.run_args
    assert launch.image == "localhost/batchop:0.1.0-abc"
    assert launch.name == podman_name(chart_pod) == "k8s_ops_rel-batchop-5d9f-abcde_0123abcd"
    assert launch.container == "operator"
    # The image's entrypoint (`batchop run`) is kept: the chart sets neither command nor args.
    assert "--entrypoint" not in args
    assert args[-1] == launch.image and args[-3:-1] == ("--name", launch.name)
    assert args[:2] == ("--network", "host") and "--runtime" in args
    assert _flag_values(args, "--hostname") == ["rel-batchop-5d9f-abcde"]
    assert _flag_values(args, "--user") == ["10001:10001"]
    assert _flag_values(args, "--group-add") == ["10001"]
    assert "--read-only" in args and "--read-only-tmpfs=false" in args
    assert "--cap-drop=ALL" in args
    assert _flag_values(args, "--security-opt") == ["no-new-privileges"]
    assert _flag_values(args, "--tmpfs") == [f"/tmp:rw,mode=1777,size={64 * 2**20}"]
    assert _flag_values(args, "--volume") == [
        "{volumes}/kube-api-access-x7k2p:/var/run/secrets/kubernetes.io/serviceaccount:ro"
    ]
    env = dict(e.split("=", 1) for e in _flag_values(args, "--env"))
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "32766"
    assert env["HOSTNAME"] == "rel-batchop-5d9f-abcde"
    # Wildcard binds become the pod's own address (host network, one address per pod).
    assert env["BATCHOP_METRICS_ADDRESS"] == "127.10.2.7:8000"
    assert env["BATCHOP_LIVENESS"] == "http://127.10.2.7:8080/healthz"
    assert env["BATCHOP_LEASE_NAMESPACE"] == "ops"
    assert env["HOME"] == "/tmp"
    assert launch.files == (
        ProjectedFile("kube-api-access-x7k2p", "token", "token", "", 3607),
        ProjectedFile("kube-api-access-x7k2p", "ca.crt", "configmap", "kube-root-ca.crt/ca.crt"),
        ProjectedFile("kube-api-access-x7k2p", "namespace", "field", "metadata.namespace"),
    )
    # Probes on the named port "health", at the pod's address.
    assert launch.readiness == HttpProbe("http://127.10.2.7:8080/healthz", 5, 10, 5, 3, 1)
    assert launch.liveness == HttpProbe("http://127.10.2.7:8080/healthz", 10, 20, 5, 3, 1)
    assert launch.grace_s == 30
    assert (launch.address, launch.ports) == ("127.10.2.7", (8000, 8080))


def test_command_args_and_env_expand_like_a_kubelet(chart_pod: dict[str, Any]) -> None:
    pod = copy.deepcopy(chart_pod)
    (container,) = pod["spec"]["containers"]
    container["command"] = ["batchop", "run"]
    container["args"] = ["--namespace=$(MY_NS)", "--metrics-address=0.0.0.0:9000", "$(NOPE)"]
    container["env"] += [
        {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "WHERE", "value": "$(MY_NS)/$(HOSTNAME)"},
    ]
    pod["spec"]["terminationGracePeriodSeconds"] = 5
    launch = image_launch(pod, API)
    assert _flag_values(launch.run_args, "--entrypoint") == [json.dumps(["batchop", "run"])]
    assert launch.run_args[-3:] == (
        "--namespace=ops",
        "--metrics-address=127.10.2.7:9000",
        "$(NOPE)",
    )
    env = dict(e.split("=", 1) for e in _flag_values(launch.run_args, "--env"))
    assert env["WHERE"] == "ops/rel-batchop-5d9f-abcde"
    assert launch.grace_s == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p: p["spec"]["containers"][0]["env"].append(
                {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
            ),
            "env S: valueFrom.secretKeyRef is not supported",
        ),
        (
            lambda p: (
                p["spec"]["volumes"].append({"name": "tmp2", "hostPath": {"path": "/"}})
                or p["spec"]["containers"][0]["volumeMounts"].append(
                    {"name": "tmp2", "mountPath": "/x"}
                )
            ),
            "volume tmp2: hostPath volumes are not supported",
        ),
        (
            lambda p: p["spec"]["containers"][0]["readinessProbe"].update(
                {"httpGet": None, "exec": {"command": ["true"]}}
            ),
            "readinessProbe: only httpGet probes",
        ),
        (
            lambda p: p["spec"]["containers"][0]["livenessProbe"]["httpGet"].update(
                {"port": "nope"}
            ),
            "livenessProbe: httpGet.port 'nope' names no port",
        ),
        (
            lambda p: p["spec"]["securityContext"].update({"runAsUser": 0}),
            "runAsNonRoot is true but runAsUser is 0",
        ),
        (
            lambda p: p["spec"]["containers"].append({"name": "sidecar", "image": "x"}),
            "exactly one container",
        ),
        (lambda p: p["status"].pop("podIP"), "has no podIP yet"),
        (
            lambda p: p["spec"]["volumes"][0]["emptyDir"].update({"sizeLimit": "1.5Gi"}),
            "volume tmp: emptyDir.sizeLimit='1.5Gi': expected a whole quantity",
        ),
    ],
)
def test_what_a_kubelet_would_do_but_this_cannot_is_refused_by_name(
    chart_pod: dict[str, Any], change: Any, message: str
) -> None:
    pod = copy.deepcopy(chart_pod)
    change(pod)
    with pytest.raises(PodSpecError, match=message.replace("(", r"\(").replace(".", r"\.")):
        image_launch(pod, API)


def test_quantities_and_the_api_endpoint(tmp_path: Path) -> None:
    assert quantity_bytes("64Mi", "x") == 64 * 2**20
    assert quantity_bytes("2G", "x") == 2 * 10**9
    assert quantity_bytes("512", "x") == 512
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "b",
        "clusters": [
            {"name": "a", "cluster": {"server": "https://10.0.0.1:6443"}},
            {"name": "c", "cluster": {"server": "https://127.0.0.1:32766"}},
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "a"}},
            {"name": "b", "context": {"cluster": "c"}},
        ],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    assert api_endpoint(path) == ApiEndpoint("127.0.0.1", 32766)
