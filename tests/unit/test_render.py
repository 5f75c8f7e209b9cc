"""The renderers: what batchop creates for a BatchedModel, checked against Kubernetes' schemas."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from bm_samples import minimal, valid_manifests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchop.api import constants as c
from batchop.api.models import BatchedModel, parse_batched_model
from batchop.render import (
    RenderOptions,
    child_names,
    render_children,
    render_deployment,
    render_model_config,
    selector_labels,
    selector_string,
)

K8S_VERSION = "1.34.0"


def bm(**spec: Any) -> BatchedModel:
    return parse_batched_model(minimal(**spec))


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return [o["kind"] for o in objects]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def validate(obj: dict[str, Any]) -> None:
    """Kubernetes' own OpenAPI schema (strict: unknown fields refused); PodMonitor by shape."""
    if obj["kind"] == "PodMonitor":
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert obj["spec"]["selector"]["matchLabels"]
        assert obj["spec"]["podMetricsEndpoints"]
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_children_of_a_scalable_model() -> None:
    objects = render_children(bm(), RenderOptions())
    assert kinds(objects) == ["Deployment", "Service", "PodDisruptionBudget", "PodMonitor"]
    for obj in objects:
        validate(obj)
        assert obj["metadata"]["namespace"] == "ml"


def test_pdb_only_when_more_than_one_replica_is_possible() -> None:
    single = bm(scaling={"replicas": 1, "minReplicas": 1, "maxReplicas": 1})
    assert "PodDisruptionBudget" not in kinds(render_children(single))
    pdb = render_children(bm(scaling={"maxReplicas": 2}))[2]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == selector_labels(bm())


def test_pod_monitor_can_be_turned_off() -> None:
    assert "PodMonitor" not in kinds(render_children(bm(), RenderOptions(pod_monitor=False)))


def test_pod_monitor_scrapes_metrics_port_and_names_the_model() -> None:
    options = RenderOptions(pod_monitor_labels={"release": "kube-prometheus-stack"})
    monitor = render_children(bm(), options)[-1]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == c.PORT_NAME_METRICS
    (relabel,) = endpoint["relabelings"]
    assert relabel["targetLabel"] == c.PROM_LABEL_MODEL
    # the Kubernetes SD meta label for the pod label (non-alphanumerics become _)
    assert relabel["sourceLabels"] == [
        "__meta_kubernetes_pod_label_"
        + "".join(ch if ch.isalnum() else "_" for ch in c.LABEL_MODEL)
    ]


def test_labels_on_every_object_and_the_pod_template() -> None:
    model = bm()
    objects = render_children(model)
    expected = {
        c.LABEL_MODEL: "resnet",
        c.LABEL_NAME: c.APP_NAME,
        c.LABEL_INSTANCE: "resnet",
        c.LABEL_MANAGED_BY: "batchop",
    }
    for obj in objects:
        assert expected.items() <= obj["metadata"]["labels"].items(), obj["kind"]
    template = objects[0]["spec"]["template"]
    assert expected.items() <= template["metadata"]["labels"].items()
    assert (
        objects[0]["spec"]["selector"]["matchLabels"].items()
        <= template["metadata"]["labels"].items()
    )
    assert selector_string(model) == "batchop.io/batchedmodel=resnet"


def test_child_names_follow_the_model() -> None:
    names = child_names(bm())
    objects = {o["kind"]: o["metadata"]["name"] for o in render_children(bm())}
    assert objects == {
        "Deployment": names.deployment,
        "Service": names.service,
        "PodDisruptionBudget": names.pod_disruption_budget,
        "PodMonitor": names.pod_monitor,
    }


def test_tritonserver_runs_the_model_in_explicit_mode_with_summaries() -> None:
    args = container(render_deployment(bm(), RenderOptions()))["args"]
    assert "--model-repository=s3://bucket/models" in args
    assert "--model-control-mode=explicit" in args
    assert "--load-model=resnet50" in args
    assert "--metrics-config=summary_latencies=true" in args


def test_user_args_come_after_batchop_args() -> None:
    args = container(render_deployment(bm(server={"args": ["--log-verbose=1"]}), RenderOptions()))[
        "args"
    ]
    assert args[-1] == "--log-verbose=1"
    assert args.index("--model-control-mode=explicit") < len(args) - 1


def test_ports_and_probes() -> None:
    main = container(render_deployment(bm(), RenderOptions()))
    assert {(p["name"], p["containerPort"]) for p in main["ports"]} == {
        ("http", 8000),
        ("grpc", 8001),
        ("metrics", 8002),
    }
    assert main["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert main["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert main["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    # A stopping pod keeps serving while endpoints drop it, well within its grace period.
    # exec sleep, not the sleep action (unknown to Kubernetes before 1.29).
    sleep, seconds = main["lifecycle"]["preStop"]["exec"]["command"]
    drain = int(seconds)
    assert sleep == "sleep"
    grace = render_deployment(bm(), RenderOptions())["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    assert 0 < drain < grace
    service = render_children(bm())[1]
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"http", "grpc", "metrics"}


@pytest.mark.parametrize("gpus", [0, 1, 4])
def test_gpu_limit_follows_spec(gpus: int) -> None:
    main = container(render_deployment(bm(server={"gpus": gpus}), RenderOptions()))
    limits = main["resources"].get("limits", {})
    if gpus:
        assert limits["nvidia.com/gpu"] == gpus
    else:
        assert "nvidia.com/gpu" not in limits
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in main["env"]


def test_hardened_security_context() -> None:
    deployment = render_deployment(bm(), RenderOptions())
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container(deployment)["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"]["drop"] == ["ALL"]
    assert ctx["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container(deployment)["volumeMounts"]}
    assert {"/tmp", "/dev/shm"} <= mounts


def test_user_pod_settings_are_merged_in() -> None:
    server = {
        "image": "registry.local/triton:dev",
        "gpus": 2,
        "resources": {"limits": {"memory": "16Gi"}, "requests": {"cpu": "4"}},
        "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {}},
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
        "serviceAccountName": "model-reader",
        "imagePullSecrets": [{"name": "ngc"}],
    }
    deployment = render_deployment(bm(server=server), RenderOptions())
    validate(deployment)
    pod = deployment["spec"]["template"]["spec"]
    main = container(deployment)
    assert main["image"] == "registry.local/triton:dev"
    assert main["resources"] == {
        "limits": {"memory": "16Gi", "nvidia.com/gpu": 2},
        "requests": {"cpu": "4"},
    }
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in main["env"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in main["volumeMounts"]
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == server["tolerations"]
    assert pod["affinity"] == {"podAntiAffinity": {}}
    assert pod["serviceAccountName"] == "model-reader"
    assert pod["imagePullSecrets"] == [{"name": "ngc"}]


def test_default_image_comes_from_the_options() -> None:
    deployment = render_deployment(bm(), RenderOptions(default_image="mirror.local/triton:24.10"))
    assert container(deployment)["image"] == "mirror.local/triton:24.10"
    assert container(render_deployment(bm(), RenderOptions()))["image"] == c.DEFAULT_IMAGE


def test_replicas_come_from_the_caller_or_the_spec() -> None:
    model = bm(scaling={"replicas": 3})
    assert render_deployment(model, RenderOptions())["spec"]["replicas"] == 3
    assert render_children(model, RenderOptions(), replicas=5)[0]["spec"]["replicas"] == 5
    with pytest.raises(ValueError, match="replicas"):
        render_deployment(model, RenderOptions(), replicas=-1)


def test_model_config_carries_the_delay_and_preferred_sizes() -> None:
    model = bm(
        model={
            "name": "bert",
            "repository": "/m",
            "maxBatchSize": 32,
            "preferredBatchSizes": [16, 8],
        }
    )
    config = render_model_config(model, 2500)
    assert config == {
        "name": "bert",
        "max_batch_size": 32,
        "dynamic_batching": {
            "max_queue_delay_microseconds": 2500,
            "preferred_batch_size": [8, 16],
            # the default overload guard: Reject past half the 50 ms SLO (no profile given)
            "default_queue_policy": {
                "timeout_action": "REJECT",
                "default_timeout_microseconds": 25_000,
                "allow_timeout_override": False,
                "max_queue_size": 0,
            },
        },
    }
    assert "preferred_batch_size" not in render_model_config(bm(), 0)["dynamic_batching"]
    with pytest.raises(ValueError, match="delay_us"):
        render_model_config(model, -1)


def _queue_policy(**spec: Any) -> dict[str, Any]:
    return render_model_config(bm(**spec), 0)["dynamic_batching"]["default_queue_policy"]


def test_queue_policy_follows_spec_overload() -> None:
    model = {"name": "m", "repository": "/m", "maxBatchSize": 32}
    profile = [{"batchSize": 1, "milliseconds": 4}, {"batchSize": 32, "milliseconds": 12}]
    # Queue: Triton's behaviour without a guard (no timeout, unbounded), nothing refused
    assert _queue_policy(model=model, overload={"policy": "Queue"}) == {
        "timeout_action": "DELAY", "default_timeout_microseconds": 0,
        "allow_timeout_override": False, "max_queue_size": 0,
    }  # fmt: skip
    # Reject with a profile: the SLO minus a full batch (32: 12 ms)
    derived = _queue_policy(
        model={**model, "latencyProfile": profile},
        slo={"p99LatencyMilliseconds": 40},
        batching={"maxQueueDelayLimitMicroseconds": 5000},
    )
    assert (derived["timeout_action"], derived["default_timeout_microseconds"]) == (
        "REJECT",
        28_000,
    )
    # never below the delay limit + 1 ms, or a request waiting out the delay is refused
    floor = _queue_policy(
        model={**model, "latencyProfile": profile}, slo={"p99LatencyMilliseconds": 20}
    )
    assert floor["default_timeout_microseconds"] == 21_000
    given = _queue_policy(
        model=model, overload={"queueTimeoutMicroseconds": 30_000, "maxQueueSize": 64}
    )
    assert (given["default_timeout_microseconds"], given["max_queue_size"]) == (30_000, 64)


def test_renderers_do_not_modify_the_model() -> None:
    model = bm(
        server={"env": [{"name": "A", "value": "b"}], "volumes": [{"name": "v", "emptyDir": {}}]}
    )
    before = copy.deepcopy(model.model_dump())
    objects = render_children(model)
    objects[0]["spec"]["template"]["spec"]["volumes"][-1]["name"] = "changed"
    assert model.model_dump() == before


PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(valid_manifests(), st.booleans())
def test_every_valid_spec_renders_objects_kubernetes_accepts(manifest: dict, monitor: bool) -> None:
    model = parse_batched_model(manifest)
    objects = render_children(model, RenderOptions(pod_monitor=monitor))
    for obj in objects:
        validate(obj)
        assert obj["metadata"]["labels"][c.LABEL_MODEL] == model.metadata.name
    assert ("PodMonitor" in kinds(objects)) is monitor
    assert ("PodDisruptionBudget" in kinds(objects)) is (model.spec.scaling.max_replicas > 1)


@PROPS
@given(valid_manifests(), st.integers(0, 20_000))
def test_pod_template_does_not_depend_on_the_queue_delay(manifest: dict, delay: int) -> None:
    other = copy.deepcopy(manifest)
    batching = other["spec"]["batching"]
    batching["maxQueueDelayMicroseconds"] = min(delay, batching["maxQueueDelayLimitMicroseconds"])
    batching["minQueueDelayMicroseconds"] = min(
        batching["minQueueDelayMicroseconds"], batching["maxQueueDelayMicroseconds"]
    )
    other["spec"]["slo"]["p99LatencyMilliseconds"] = 100.0  # keep the delay within the SLO
    first = render_children(parse_batched_model(manifest))
    second = render_children(parse_batched_model(other))
    assert first[0] == second[0]
    assert first == second
