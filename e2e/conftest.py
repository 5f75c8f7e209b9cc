"""The full local stack for e2e tests, on a cluster of its own where readiness is probed.

`cluster` (session scope, overrides the repo-wide one for e2e/): the repo-wide
`probed_cluster`, whose pods are Ready only when the pod runner's Triton answers, as under a
kubelet (with KWOK's default stage a new pod was Ready, and sent requests, a second before its
Triton listened).

`stack` (session scope): a `batchop_dev.local.stack.LocalStack` on the test cluster: a real
Prometheus discovering the cluster's BatchedModel pods (5 s scrapes) and the pod runner
running a real tritonserver per Running pod. `stack.repository_dir` is a folder for model
repositories; `stack.prometheus.url`, `stack.runner`, `stack.observer()` are the handles.
The BatchedModel CRD is installed (an operator started before its CRD may not notice it);
the operator is not started by `stack` (tests that need it take the `operator` fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def cluster(probed_cluster: Any) -> Any:
    return probed_cluster


@pytest.fixture
def operator(stack: Any) -> Any:
    """`batchop run` on the stack (started once, kept for the session); the stack itself."""
    if not stack.operator_running():
        stack.start_operator()
    return stack


@pytest.fixture(scope="session")
def stack(
    cluster: Any, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Any]:
    from batchop_dev.local.stack import LocalStack

    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def say(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[stack] {message}")

    cluster.install_crd()
    local = LocalStack(cluster.kubeconfig, workdir=tmp_path_factory.mktemp("stack"), say=say)
    local.start()
    try:
        yield local
    finally:
        local.stop()
