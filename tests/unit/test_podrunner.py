"""The pod runner's pure half: pod -> how to run Triton, and state -> pod status patch."""

from __future__ import annotations

from typing import Any

import pytest

from batchop_dev.local.podrunner import (
    ContainerState,
    LaunchSpec,
    PodSpecError,
    launch_spec,
    local_repository,
    prestop_sleep_s,
    runnable,
    status_patch,
)


def _pod(args: list[str], **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "bm-0", "uid": "u1", "resourceVersion": "7"},
        "spec": {
            "containers": [
                {"name": "tritonserver", "command": ["tritonserver"], "args": args, **container}
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "127.10.1.5",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "t0"},
            ],
            "containerStatuses": [
                {
                    "name": "tritonserver",
                    "image": "img",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {}},
                }
            ],
        },
    }


def test_launch_spec_honours_args_and_replaces_local_concerns() -> None:
    pod = _pod(
        [
            "--model-repository=file:///models",
            "--model-control-mode=explicit",
            "--load-model=resnet",
            "--http-port=9000",
            "--metrics-config=summary_latencies=true",
            "--backend-directory=/opt/tritonserver/backends",
            "--pinned-memory-pool-byte-size",
            "268435456",
            "--log-verbose=1",
        ]
    )
    spec = launch_spec(pod)
    assert spec == LaunchSpec(
        container="tritonserver",
        address="127.10.1.5",
        model_repository="/models",
        http_port=9000,
        load_models=("resnet",),
        extra_args=("--metrics-config=summary_latencies=true", "--log-verbose=1"),
    )


def test_ports_from_named_container_ports_and_env_expansion() -> None:
    pod = _pod(
        ["--model-repository=$(REPO)", "--load-model=$(MODEL)"],
        env=[{"name": "REPO", "value": "/srv/repo"}, {"name": "MODEL", "value": "m"}],
        ports=[{"name": "metrics", "containerPort": 9102}, {"name": "http", "containerPort": 81}],
    )
    spec = launch_spec(pod)
    assert (spec.model_repository, spec.load_models) == ("/srv/repo", ("m",))
    assert (spec.http_port, spec.grpc_port, spec.metrics_port) == (81, 8001, 9102)


def test_remote_repository_needs_a_map() -> None:
    pod = _pod(["--model-repository=s3://bucket/models", "--load-model=m"])
    with pytest.raises(PodSpecError, match=r"pod ns/bm-0: .*s3://bucket/models.*repository-map"):
        launch_spec(pod)
    spec = launch_spec(pod, {"s3://bucket": "/local/b"})
    assert spec.model_repository == "/local/b/models"


@pytest.mark.parametrize("uri", ["models", "gs://x/y", "file://rel/path"])
def test_local_repository_rejects_non_absolute(uri: str) -> None:
    with pytest.raises(PodSpecError, match="not a local folder"):
        local_repository(uri, {})


def test_missing_repository_and_bad_port_are_named() -> None:
    with pytest.raises(PodSpecError, match="no --model-repository"):
        launch_spec(_pod(["--load-model=m"]))
    with pytest.raises(PodSpecError, match="--http-port=eighty is not a port"):
        launch_spec(_pod(["--model-repository=/m", "--http-port=eighty"]))


def test_runnable_only_running_with_ip_and_not_terminating() -> None:
    pod = _pod(["--model-repository=/m"])
    assert runnable(pod)
    assert not runnable({**pod, "status": {**pod["status"], "phase": "Pending"}})
    assert not runnable({**pod, "status": {**pod["status"], "podIP": ""}})
    terminating = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "now"}}
    assert not runnable(terminating)


def test_not_ready_triton_overrides_a_ready_pod() -> None:
    pod = _pod(["--model-repository=/m"])
    patch = status_patch(pod, "tritonserver", ContainerState(running=True, started_at="t1"))
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "7"  # optimistic concurrency
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["lastTransitionTime"] != "t0"
    assert conds["ContainersReady"]["status"] == "False"
    assert conds["PodScheduled"] == {"type": "PodScheduled", "status": "True"}
    (cs,) = patch["status"]["containerStatuses"]
    assert cs["ready"] is False and cs["image"] == "img"
    assert cs["state"] == {"running": {"startedAt": "t1"}}


def test_patch_is_none_once_status_matches() -> None:
    pod = _pod(["--model-repository=/m"])
    state = ContainerState(
        running=True,
        ready=True,
        started_at="t1",
        restart_count=2,
        last_exit={"exitCode": 137, "reason": "Error"},
    )
    patch = status_patch(pod, "tritonserver", state)
    assert patch is not None
    (cs,) = patch["status"]["containerStatuses"]
    assert cs["restartCount"] == 2 and cs["lastState"]["terminated"]["exitCode"] == 137
    applied = {**pod, "status": {**pod["status"], **patch["status"]}}
    assert status_patch(applied, "tritonserver", state) is None


def test_waiting_container_reports_reason_and_message() -> None:
    pod = _pod(["--model-repository=s3://x"])
    state = ContainerState(waiting_reason="CreateContainerConfigError", message="no map")
    patch = status_patch(pod, "tritonserver", state)
    assert patch is not None
    (cs,) = patch["status"]["containerStatuses"]
    assert cs["state"] == {"waiting": {"reason": "CreateContainerConfigError", "message": "no map"}}
    ready = next(c for c in patch["status"]["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "no map"


def test_ports_in_use_names_the_taken_address() -> None:
    import socket

    from batchop_dev.local.podrunner import ports_in_use
    from batchop_dev.local.prometheus import free_port

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        spec = LaunchSpec(
            container="c",
            address="127.0.0.1",
            model_repository="/m",
            http_port=port,
            grpc_port=free_port(),
            metrics_port=free_port(),
        )
        assert ports_in_use(spec) == f"127.0.0.1:{port}"
    assert ports_in_use(spec) is None


def test_prestop_sleep_is_read_from_the_triton_container_only() -> None:
    assert prestop_sleep_s(_pod([])) == 0.0
    pod = _pod([], lifecycle={"preStop": {"sleep": {"seconds": 5}}})
    assert prestop_sleep_s(pod) == 5.0
    other = {"name": "sidecar", "lifecycle": {"preStop": {"sleep": {"seconds": 30}}}}
    pod["spec"]["containers"].append(other)
    assert prestop_sleep_s(pod) == 5.0
    exec_only = _pod([], lifecycle={"preStop": {"exec": {"command": ["true"]}}})
    assert prestop_sleep_s(exec_only) == 0.0
    exec_sleep = _pod([], lifecycle={"preStop": {"exec": {"command": ["sleep", "5"]}}})
    assert prestop_sleep_s(exec_sleep) == 5.0
    bad = _pod([], lifecycle={"preStop": {"exec": {"command": ["sleep", "soon"]}}})
    assert prestop_sleep_s(bad) == 0.0


def test_prestop_sleep_of_a_rendered_pod_is_the_drain_time() -> None:
    """The runner honours the hook batchop renders (whatever its form)."""
    from bm_samples import minimal

    from batchop.api import constants as c
    from batchop.api.models import parse_batched_model
    from batchop.render.deployment import render_deployment
    from batchop.render.options import RenderOptions

    deployment = render_deployment(parse_batched_model(minimal()), RenderOptions())
    pod = {"spec": deployment["spec"]["template"]["spec"]}
    assert prestop_sleep_s(pod) == c.DRAIN_SECONDS
