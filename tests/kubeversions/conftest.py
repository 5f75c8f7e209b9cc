"""Fixtures of the per-minor checks: the supported range, the checkers, the objects.

The range is what charts/batchop/Chart.yaml claims (kubeVersion ">=1.X.0-0") up to the newest
minor with a pinned checker; the checkers are built on first use (minutes per minor, with
progress) and cached in ~/.cache/batchop like the local cluster's binaries.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkers  # noqa: E402
import schemas  # noqa: E402
from supported import CHART, EXAMPLES, HELM_VALUE_SETS, supported_minors  # noqa: E402


@pytest.fixture(scope="session")
def built(pytestconfig: pytest.Config) -> None:
    """Every checker, built now if missing (progress on the terminal)."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def say(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[kubecheck] {message}")

    try:
        checkers.ensure_checkers(progress=say)
    except checkers.BuildError as exc:
        pytest.fail(f"building the Kubernetes version checkers failed: {exc}")


def _run(*command: str) -> str:
    got = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, f"{' '.join(command)}:\n{got.stderr}"
    return got.stdout


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """What batchop puts in a cluster: `batchop render` of each example and `helm template`
    of the chart (CRD included), by source."""
    from batchop_dev.local.tools import ensure_tools

    ensure_tools()
    bin_dir = Path(sys.prefix) / "bin"
    out: dict[str, list[dict[str, Any]]] = {}
    for example in EXAMPLES:
        text = _run(str(bin_dir / "batchop"), "render", "-f", str(example))
        out[f"render {example.name}"] = [d for d in yaml.safe_load_all(text) if d]
    for name, sets in HELM_VALUE_SETS.items():
        args = [
            str(bin_dir / "helm"),
            "template",
            "rel",
            str(CHART),
            "-n",
            "batchop-system",
            "--include-crds",
        ]
        for s in sets:
            args += ["--set", s]
        out[f"helm {name}"] = [d for d in yaml.safe_load_all(_run(*args)) if d]
    return out


@pytest.fixture(scope="session")
def monitoring_schemas(
    built: None, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], dict[str, Any]]:
    where = checkers.monitoring_crds_dir()
    files = sorted(where.glob("*.yaml"))
    assert len(files) == len(checkers.MONITORING_CRDS), f"monitoring CRDs missing in {where}"
    return schemas.write_crd_schemas(files, tmp_path_factory.mktemp("monitoring-schemas"))


@pytest.fixture(scope="session")
def schema_root(
    rendered: dict[str, list[dict[str, Any]]],
    monitoring_schemas: dict[Any, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """kubeconform's schema tree: v1.X.0-standalone-strict/<kind>-<group>-<version>.json for
    every supported minor, the kinds batchop renders, monitoring kinds included."""
    root = tmp_path_factory.mktemp("kubeconform-schemas")
    kinds = {(d["apiVersion"], d["kind"]) for docs in rendered.values() for d in docs}
    kinds |= {("apps/v1", "Deployment")}  # the negative control's kind
    for minor in supported_minors():
        out = root / f"v1.{minor}.0-standalone-strict"
        schemas.write_kubernetes_schemas(minor, kinds - set(monitoring_schemas), out)
        schemas.write_crd_schemas(sorted(checkers.monitoring_crds_dir().glob("*.yaml")), out)
    return root
