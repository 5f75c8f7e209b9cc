"""The full local stack for e2e tests, built on the repo-wide `cluster` fixture.

`stack` (session scope): a `batchop.local.stack.LocalStack` on the test cluster: a real
Prometheus discovering the cluster's BatchedModel pods (5 s scrapes) and the pod runner
running a real tritonserver per Running pod. `stack.repository_dir` is a folder for model
repositories; `stack.prometheus.url`, `stack.runner`, `stack.observer()` are the handles.
The BatchedModel CRD is installed (an operator started before its CRD may not notice it);
the operator is not started here (tests that need it call `stack.start_operator()`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def stack(cluster: Any, tmp_path_factory: pytest.TempPathFactory,
          pytestconfig: pytest.Config) -> Iterator[Any]:
    from batchop.local.stack import LocalStack

    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def say(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[stack] {message}")

    crd = Path(__file__).resolve().parents[1] / "crds" / "batchedmodel.yaml"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/batchedmodels.batchop.io")
    local = LocalStack(cluster.kubeconfig, workdir=tmp_path_factory.mktemp("stack"), say=say)
    local.start()
    try:
        yield local
    finally:
        local.stop()
