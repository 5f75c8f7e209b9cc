"""The pure half of the live reload: only the delay changes in the config sent back."""

from __future__ import annotations

import asyncio
import copy
import socket

import pytest

from batchop.act.triton_reload import (
    ServerUnreachable,
    grpc_url,
    live_delay,
    load_model,
    load_request,
    set_queue_delay_sync,
    with_queue_delay,
)
from batchop.tuning.overload import QUEUE, QueuePolicy, live_queue_policy

LIVE = {
    "name": "synth",
    "max_batch_size": 32,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "dynamic_batching": {"preferred_batch_size": [32], "max_queue_delay_microseconds": 500},
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
}


def test_only_the_delay_changes() -> None:
    original = copy.deepcopy(LIVE)
    new = with_queue_delay(LIVE, 8000)
    assert live_delay(new) == 8000
    assert original == LIVE  # input untouched
    new["dynamic_batching"]["max_queue_delay_microseconds"] = 500
    assert new == original  # nothing else differs


def test_missing_delay_reads_as_zero() -> None:
    assert live_delay({"dynamic_batching": {}}) == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "100"])
def test_bad_delay_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="delay_us"):
        with_queue_delay(LIVE, bad)  # type: ignore[arg-type]


def test_model_without_dynamic_batching_refused() -> None:
    config = {k: v for k, v in LIVE.items() if k != "dynamic_batching"}
    with pytest.raises(ValueError, match="dynamic_batching"):
        with_queue_delay(config, 100)


@pytest.mark.parametrize("grpc_port", [8001, None])
def test_nothing_listening_is_unreachable(grpc_port: int | None) -> None:
    host = "127.0.91.7"  # an address of its own: nothing else listens on its gRPC port
    with socket.socket() as s:  # a free port nobody listens on
        s.bind((host, 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerUnreachable, match=f"{host}:{port}"):
        set_queue_delay_sync(f"{host}:{port}", "synth", 100, timeout=5, grpc_port=grpc_port)


def test_grpc_url_is_on_the_same_host() -> None:
    assert grpc_url("127.10.1.5:8000") == "127.10.1.5:8001"
    assert grpc_url("127.10.1.5:8000", 9001) == "127.10.1.5:9001"


def test_the_queue_policy_is_set_when_given_and_kept_when_not() -> None:
    guard = QueuePolicy(reject=True, timeout_us=30_000, max_queue_size=16)
    new = with_queue_delay(LIVE, 500, guard)
    assert new["dynamic_batching"]["default_queue_policy"] == {
        "timeout_action": "REJECT", "default_timeout_microseconds": 30_000,
        "allow_timeout_override": False, "max_queue_size": 16,
    }  # fmt: skip
    assert live_queue_policy(new["dynamic_batching"]) == guard
    kept = with_queue_delay(new, 900)  # a delay-only change leaves the policy alone
    assert (
        kept["dynamic_batching"]["default_queue_policy"]
        == (new["dynamic_batching"]["default_queue_policy"])
    )


@pytest.mark.parametrize(
    ("live", "policy"),
    [
        # Triton 2.51's answer (protobuf JSON): defaults omitted, int64 as a string, and
        # REJECT is the enum's zero value, so a Reject policy shows only its timeout
        ({"default_timeout_microseconds": "30000"}, QueuePolicy(True, 30_000, 0)),
        ({"default_timeout_microseconds": "30000", "max_queue_size": 8},
         QueuePolicy(True, 30_000, 8)),
        ({}, QUEUE),  # no timeout, unbounded: nothing is refused
        ({"timeout_action": "DELAY"}, QUEUE),
        ({"timeout_action": "DELAY", "default_timeout_microseconds": "5"}, QUEUE),
    ],
)  # fmt: skip
def test_live_queue_policy_reads_tritons_config(live: dict, policy: QueuePolicy) -> None:
    assert live_queue_policy({"default_queue_policy": live}) == policy
    assert live_queue_policy({"default_queue_policy": policy.triton()}) == policy


@pytest.mark.parametrize(
    "model, config",
    [
        ("synth", '{"name": "synth", "dynamic_batching": {"max_queue_delay_microseconds": 500}}'),
        ("m" * 300, "é" * 200),  # lengths past one varint byte; UTF-8 counted in bytes
    ],
)
def test_the_grpc_load_request_is_what_tritons_own_schema_reads(model: str, config: str) -> None:
    """The hand-serialised RepositoryModelLoadRequest, parsed by the protobuf classes
    generated from Triton's grpc_service.proto (tritonclient's, a test dependency only)."""
    service = pytest.importorskip("tritonclient.grpc.service_pb2")
    got = service.RepositoryModelLoadRequest.FromString(load_request(model, config))
    assert got.model_name == model and got.repository_name == ""
    assert list(got.parameters) == ["config"]
    assert got.parameters["config"].WhichOneof("parameter_choice") == "string_param"
    assert got.parameters["config"].string_param == config
    want = service.RepositoryModelLoadRequest(model_name=model)
    want.parameters["config"].string_param = config
    assert load_request(model, config) == want.SerializeToString()


def test_an_unknown_protocol_is_refused_before_any_call() -> None:
    with pytest.raises(ValueError, match="via must be 'grpc' or 'http'"):
        asyncio.run(load_model("127.0.0.1:1", "synth", LIVE, via="ftp"))
