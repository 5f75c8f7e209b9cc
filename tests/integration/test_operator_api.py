"""The BatchedModel API on a real API server: CRD, printer columns, explain, refusals."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from operator_harness import bm_manifest, delete_namespace, new_namespace

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api_ns(cluster: Any) -> Iterator[str]:
    cluster.install_crd()
    ns = new_namespace(cluster, "bm-api")
    yield ns
    delete_namespace(cluster, ns)


def test_crd_is_established_with_short_name_and_category(cluster: Any) -> None:
    cluster.install_crd()
    crd = cluster.kubectl_json("get", "crd", "batchedmodels.batchop.io")
    assert crd["spec"]["names"]["shortNames"] == ["bm"]
    assert "batchop" in crd["spec"]["names"]["categories"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.scaling.replicas"
    assert "status" in version["subresources"]


def test_get_bm_shows_the_printer_columns(cluster: Any, api_ns: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(bm_manifest("columns", api_ns)))
    header = cluster.kubectl("get", "bm", "-n", api_ns).stdout.splitlines()[0].split()
    assert header == [
        "NAME", "READY", "REPLICAS", "DELAY(US)", "P99(MS)", "SLO(MS)", "RPS", "BATCH", "AGE"
    ]  # fmt: skip
    row = cluster.kubectl("get", "bm", "columns", "-n", api_ns).stdout.splitlines()[1].split()
    assert row[0] == "columns" and "50" in row  # the SLO column reads spec.slo


def test_explain_shows_field_descriptions(cluster: Any, api_ns: str) -> None:
    spec = cluster.kubectl("explain", "bm.spec").stdout
    for field in ("model", "server", "scaling", "batching", "slo", "autotune"):
        assert field in spec
    assert "What to serve" in spec
    batching = cluster.kubectl("explain", "bm.spec.batching").stdout
    assert "maxQueueDelayMicroseconds" in batching and "minQueueDelayMicroseconds" in batching
    delay = cluster.kubectl("explain", "bm.spec.batching.maxQueueDelayMicroseconds").stdout
    assert "DESCRIPTION" in delay and len(delay.split("DESCRIPTION:")[1].strip()) > 20


def test_defaults_are_filled_by_the_api_server(cluster: Any, api_ns: str) -> None:
    bare = bm_manifest("defaults", api_ns)
    for section in ("server", "scaling", "batching", "slo", "autotune"):
        del bare["spec"][section]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(bare))
    stored = cluster.kubectl_json("get", "bm", "defaults", "-n", api_ns)
    assert stored["spec"]["scaling"]["replicas"] >= 1
    assert stored["spec"]["slo"]["p99LatencyMilliseconds"] > 0
    assert "maxQueueDelayMicroseconds" in stored["spec"]["batching"]


Edit = Callable[[dict[str, Any]], None]


def setp(path: str, value: Any) -> Edit:
    def edit(m: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = m
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return edit


def delp(path: str) -> Edit:
    def edit(m: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = m
        for key in parents:
            node = node[key]
        del node[leaf]

    return edit


def both(*edits: Edit) -> Edit:
    def edit(m: dict[str, Any]) -> None:
        for e in edits:
            e(m)

    return edit


# (case id, edit to a valid manifest, text the refusal must contain: the field's path)
INVALID: list[tuple[str, Edit, str]] = [
    ("batch-zero", setp("spec.model.maxBatchSize", 0), "spec.model.maxBatchSize"),
    ("batch-string", setp("spec.model.maxBatchSize", "big"), "spec.model.maxBatchSize"),
    ("model-name-empty", setp("spec.model.name", ""), "spec.model.name"),
    ("repo-missing", delp("spec.model.repository"), "spec.model.repository"),
    ("preferred-too-big", setp("spec.model.preferredBatchSizes", [64]),
     "spec.model.preferredBatchSizes"),
    ("preferred-dup", setp("spec.model.preferredBatchSizes", [16, 16]),
     "spec.model.preferredBatchSizes"),
    ("gpus-negative", setp("spec.server.gpus", -1), "spec.server.gpus"),
    ("gpus-huge", setp("spec.server.gpus", 65), "spec.server.gpus"),
    ("image-space", setp("spec.server.image", "triton server:1"), "spec.server.image"),
    ("args-reserved", setp("spec.server.args", ["--model-repository=/x"]), "spec.server.args"),
    ("env-no-name", setp("spec.server.env", [{"value": "x"}]), "spec.server.env[0].name"),
    ("replicas-over-max", setp("spec.scaling.replicas", 9), "spec.scaling.replicas"),
    ("replicas-float", setp("spec.scaling.replicas", 1.5), "spec.scaling.replicas"),
    ("min-over-max", both(setp("spec.scaling.minReplicas", 3), setp("spec.scaling.replicas", 3),
                          setp("spec.scaling.maxReplicas", 2)), "spec.scaling.minReplicas"),
    ("max-zero", setp("spec.scaling.maxReplicas", 0), "spec.scaling.maxReplicas"),
    ("min-zero-autotuned", both(setp("spec.scaling.minReplicas", 0),
                                setp("spec.autotune.replicas", True)), "spec.scaling.minReplicas"),
    ("delay-over-limit", both(setp("spec.batching.maxQueueDelayMicroseconds", 30000),
                              setp("spec.slo.p99LatencyMilliseconds", 100)),
     "spec.batching.maxQueueDelayMicroseconds"),
    ("delay-negative", setp("spec.batching.maxQueueDelayMicroseconds", -1),
     "spec.batching.maxQueueDelayMicroseconds"),
    ("min-delay-over-delay", setp("spec.batching.minQueueDelayMicroseconds", 1000),
     "spec.batching.minQueueDelayMicroseconds"),
    ("delay-over-slo", both(setp("spec.batching.maxQueueDelayLimitMicroseconds", 100000),
                            setp("spec.batching.maxQueueDelayMicroseconds", 60000)),
     "spec.batching.maxQueueDelayMicroseconds"),
    ("slo-zero", setp("spec.slo.p99LatencyMilliseconds", 0), "spec.slo.p99LatencyMilliseconds"),
    ("interval-short", setp("spec.autotune.intervalSeconds", 1), "spec.autotune.intervalSeconds"),
    ("prom-url", setp("spec.autotune.prometheusUrl", "prometheus:9090"),
     "spec.autotune.prometheusUrl"),
    ("tune-string", setp("spec.autotune.queueDelay", "yes"), "spec.autotune.queueDelay"),
    ("unknown-model-field", setp("spec.model.fooBar", 1), "spec.model.fooBar"),
    ("unknown-spec-field", setp("spec.bogus", {}), "spec.bogus"),
    ("spec-missing", delp("spec"), "spec"),
    ("name-invalid", setp("metadata.name", "Bad_Name"), "metadata.name"),
]  # fmt: skip


def test_the_table_is_large_enough() -> None:
    assert len(INVALID) >= 20 and len({case for case, _, _ in INVALID}) == len(INVALID)


@pytest.mark.parametrize(("case", "edit", "field"), INVALID, ids=[c for c, _, _ in INVALID])
def test_invalid_manifest_is_refused_naming_the_field(
    cluster: Any, api_ns: str, case: str, edit: Edit, field: str
) -> None:
    manifest = copy.deepcopy(bm_manifest(f"bad-{case}", api_ns))
    edit(manifest)
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, f"{case} was accepted"
    assert field in result.stderr, result.stderr
    listed = cluster.kubectl_json("get", "bm", "-n", api_ns)["items"]
    assert f"bad-{case}" not in [bm["metadata"]["name"] for bm in listed]
