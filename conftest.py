"""Repo-wide pytest fixtures.

`cluster` (session scope): one local Kubernetes cluster (batchop_dev.local.cluster.LocalCluster)
for the integration and e2e tests: real etcd, kube-apiserver (RBAC on), controller-manager
and scheduler run by kwokctl, with 2 fake nodes x 4 nvidia.com/gpu whose pods get 127.10.x.y
addresses, and the API server's audit log of ServiceAccounts' writes (.audit_log). It exposes
.name, .kubeconfig (Path), .kubectl(*args, input=None, check=True),
.kubectl_json(*args), .environ() (env with KUBECONFIG) and .status(). Torn down at the end.
The name defaults to batchop-test-<pid> so concurrent test sessions do not collide;
BATCHOP_TEST_CLUSTER overrides it, BATCHOP_KEEP_CLUSTER=1 leaves it running.

`image` (session scope): the operator image `make image` builds (batchop_dev.image), built
when its inputs changed, else reused; skips, saying why, where podman or mmdebstrap are
missing or podman cannot run containers here.

`probed_cluster` (session scope): the same, named <name>-e2e, in "probes" readiness mode
(batchop_dev.local.stages): pods with a readinessProbe are Ready only once a prober (the e2e
stack's pod runner) says so, as under a kubelet. e2e/conftest.py makes it the e2e `cluster`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

TEST_CLUSTER_PREFIX = "batchop-test-"


def _remove_orphaned_test_clusters(say: Callable[[str], None]) -> None:
    """Delete clusters left by test sessions that died before their teardown ran."""
    from batchop_dev.local.cluster import LocalCluster, kwok_workdir

    clusters = kwok_workdir() / "clusters"
    if not clusters.is_dir():
        return
    for path in clusters.glob(f"{TEST_CLUSTER_PREFIX}*"):
        pid = path.name.removeprefix(TEST_CLUSTER_PREFIX).split("-")[0]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        say(f"removing cluster {path.name!r} left by a dead test session")
        LocalCluster(path.name, progress=say).down()


def _session_cluster(pytestconfig: pytest.Config, suffix: str, readiness: str) -> Iterator[object]:
    from batchop_dev.local.cluster import LocalCluster

    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def say(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[cluster] {message}")

    _remove_orphaned_test_clusters(say)
    name = os.environ.get("BATCHOP_TEST_CLUSTER") or f"{TEST_CLUSTER_PREFIX}{os.getpid()}"
    local = LocalCluster(
        name + suffix, nodes=2, gpus_per_node=4, progress=say, readiness=readiness, audit=True
    )
    local.up(replace=True)
    try:
        yield local
    finally:
        if not os.environ.get("BATCHOP_KEEP_CLUSTER"):
            local.down()


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[object]:
    yield from _session_cluster(pytestconfig, "", readiness="kwok")


@pytest.fixture(scope="session")
def probed_cluster(pytestconfig: pytest.Config) -> Iterator[object]:
    yield from _session_cluster(pytestconfig, "-e2e", readiness="probes")


@pytest.fixture(scope="module")
def own_cluster(pytestconfig: pytest.Config) -> Iterator[object]:
    """A cluster of a test module's own, for what must not reach the shared ones (CRDs
    that a cluster-wide operator in another test would start acting on)."""
    yield from _session_cluster(pytestconfig, "-own", readiness="kwok")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many tests were skipped and why, always (with -q too; -rs is not needed).

    A check that cannot be judged on this machine is a `pytest.skip(reason)`, never a pass;
    this keeps every such reason in front of whoever reads the run.
    """
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, list[str]] = {}
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons.setdefault(reason.removeprefix("Skipped: "), []).append(report.nodeid)
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, {len(reasons)} reason(s)")
    for reason, nodeids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        terminalreporter.write_line(f"{len(nodeids)} x {reason}")
        for nodeid in nodeids[:5]:
            terminalreporter.write_line(f"    {nodeid}")
        if len(nodeids) > 5:
            terminalreporter.write_line(f"    ... and {len(nodeids) - 5} more")


@pytest.fixture(scope="session")
def image() -> object:
    from batchop_dev.image import ImageError, ensure_image, missing_tools, run_in_image

    try:
        built = ensure_image(log=lambda line: print(line, flush=True))
    except ImageError as exc:
        if missing_tools():
            pytest.skip(f"podman/mmdebstrap not available and not installable here: {exc}")
        raise
    probe = run_in_image(built, ["true"])
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run containers on this machine: {probe.stderr[-500:]}")
    return built
