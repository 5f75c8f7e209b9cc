"""Per-minor Kubernetes checkers, built from Go modules into the batchop cache.

batchop claims a range of Kubernetes minors (charts/batchop/Chart.yaml kubeVersion). For each
minor in it, two checks use that minor's own code or schemas:
- `kubecheck` (checker/main.go), built against k8s.io/apiextensions-apiserver at the minor's
  newest patch: the API server's CRD create validation, CEL cost estimation included;
- kubeconform -strict, pointed at the per-minor JSON schemas kubernetes-validate bundles.
Binaries land in $BATCHOP_CACHE (default ~/.cache/batchop)/bin/kubecheck-<version>/ and
kubeconform-<version>/; a build is skipped when its binary is there, and goes to a temporary
directory renamed on success. The wrapper go.mod is generated per build: `go mod tidy`
resolves the requirement graph of the pinned version through the module proxy (minimal
version selection, so the same pin always gives the same build list).

Usage: python tests/kubeversions/checkers.py    build what is missing, print a timing per minor
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from batchop_dev.local.build import BuildError, cache_root, find_go, go_env, run_logged

Progress = Callable[[str], None]

HERE = Path(__file__).resolve().parent
CHECKER_SOURCE = HERE / "checker" / "main.go"
CHART = HERE.parents[1] / "charts" / "batchop" / "Chart.yaml"

# Newest k8s.io/apiextensions-apiserver patch on the module proxy for each minor (v0.X.Y is
# published with Kubernetes v1.X.Y). A new minor is supported by adding a line here. 1.28 is
# below the supported range: it is built to show why (its CRD validation has no quantity()).
APIEXTENSIONS = {
    28: "v0.28.15",
    29: "v0.29.15",
    30: "v0.30.14",
    31: "v0.31.14",
    32: "v0.32.13",
    33: "v0.33.13",
    34: "v0.34.13",
    35: "v0.35.10",
    36: "v0.36.6",
    37: "v0.37.2",
}
KUBECONFORM = "v0.7.0"
# The Prometheus Operator's own CRDs (example/prometheus-operator-crd/ in its Go module zip,
# fetched through the module proxy) give the schemas of the monitoring kinds the chart and
# `batchop render` emit.
PROMETHEUS_OPERATOR = "v0.85.0"
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
MONITORING_CRDS = ("servicemonitors", "podmonitors", "prometheusrules")
KUBECONFORM_PACKAGE = "github.com/yannh/kubeconform/cmd/kubeconform"
CHECKER_MODULE = "batchop.io/kubecheck"


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


@contextmanager
def _lock(root: Path) -> Iterator[None]:
    """One builder at a time (pytest workers, make): the others wait, then find it built."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "kubecheck-build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def checker_path(minor: int, root: Path | None = None) -> Path:
    return (root or cache_root()) / "bin" / f"kubecheck-{APIEXTENSIONS[minor]}" / "kubecheck"


def kubeconform_path(root: Path | None = None) -> Path:
    return (root or cache_root()) / "bin" / f"kubeconform-{KUBECONFORM}" / "kubeconform"


def monitoring_crds_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / "schemas" / f"prometheus-operator-{PROMETHEUS_OPERATOR}"


def fetch_monitoring_crds(go: str, root: Path, progress: Progress) -> None:
    """Copy the ServiceMonitor/PodMonitor/PrometheusRule CRDs out of the module zip."""
    spec = f"{PROMETHEUS_OPERATOR_MODULE}@{PROMETHEUS_OPERATOR}"
    progress(f"fetching {spec} (module zip, ~4 MB) for the monitoring CRDs")
    with tempfile.TemporaryDirectory(prefix="promop-") as work:
        result = subprocess.run(
            [go, "mod", "download", "-json", spec],
            cwd=work,
            env=go_env(),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise BuildError(f"go mod download {spec} failed: {result.stdout}{result.stderr}")
        source = Path(json.loads(result.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
        staged = Path(work) / "crds"
        staged.mkdir()
        for name in MONITORING_CRDS:
            shutil.copy(source / f"monitoring.coreos.com_{name}.yaml", staged)
        final = monitoring_crds_dir(root)
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)
        shutil.move(staged, final)


def _monitoring_crds_present(root: Path) -> bool:
    where = monitoring_crds_dir(root)
    return all((where / f"monitoring.coreos.com_{n}.yaml").is_file() for n in MONITORING_CRDS)


def _install(built: Path, final: Path) -> None:
    """Move a finished binary into place atomically (its directory appears whole or not)."""
    partial = final.parent.with_name(f".{final.parent.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    shutil.move(built, partial / final.name)
    shutil.rmtree(final.parent, ignore_errors=True)
    partial.rename(final.parent)


def build_checker(go: str, minor: int, root: Path, progress: Progress) -> float:
    """Build kubecheck against the minor's apiextensions-apiserver; seconds taken."""
    version = APIEXTENSIONS[minor]
    final = checker_path(minor, root)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"kubecheck-{version}.log"
    log.write_text("")
    started = time.monotonic()
    progress(
        f"building kubecheck for Kubernetes 1.{minor} (k8s.io/apiextensions-apiserver "
        f"{version}); log: {log}"
    )
    with tempfile.TemporaryDirectory(prefix="kubecheck-") as work:
        module = Path(work)
        shutil.copy(CHECKER_SOURCE, module / "main.go")
        (module / "go.mod").write_text(
            f"module {CHECKER_MODULE}\n\ngo 1.22\n\n"
            f"require k8s.io/apiextensions-apiserver {version}\n"
        )
        tidy = go_env()
        tidy["GOFLAGS"] = tidy["GOFLAGS"].replace("-mod=readonly", "").strip()
        result = subprocess.run(
            [go, "mod", "tidy"], cwd=module, env=tidy, capture_output=True, text=True
        )
        with open(log, "a") as out:
            out.write(f"$ go mod tidy\n{result.stdout}{result.stderr}")
        if result.returncode != 0:
            raise BuildError(f"go mod tidy for kubecheck {version} failed; full log: {log}")
        command = [
            go,
            "build",
            "-v",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(module / "kubecheck"),
            ".",
        ]
        if shutil.which("nice"):
            command = ["nice", "-n", "10", *command]
        run_logged(command, module, log, f"go build kubecheck 1.{minor}", progress)
        _install(module / "kubecheck", final)
    took = time.monotonic() - started
    progress(f"built kubecheck for 1.{minor} in {_elapsed(took)}")
    return took


def build_kubeconform(go: str, root: Path, progress: Progress) -> float:
    """`go install` kubeconform at its pinned version; seconds taken."""
    final = kubeconform_path(root)
    log = root / "logs" / f"kubeconform-{KUBECONFORM}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    started = time.monotonic()
    progress(f"building kubeconform {KUBECONFORM}; log: {log}")
    with tempfile.TemporaryDirectory(prefix="kubeconform-") as work:
        env = go_env()
        env["GOBIN"] = work
        env["GOFLAGS"] = env["GOFLAGS"].replace("-mod=readonly", "").strip()
        command = [
            go,
            "install",
            "-v",
            "-trimpath",
            "-ldflags",
            "-s -w",
            f"{KUBECONFORM_PACKAGE}@{KUBECONFORM}",
        ]
        with open(log, "a") as out:
            result = subprocess.run(
                command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        if result.returncode != 0:
            raise BuildError(f"go install kubeconform {KUBECONFORM} failed; full log: {log}")
        _install(Path(work) / "kubeconform", final)
    took = time.monotonic() - started
    progress(f"built kubeconform in {_elapsed(took)}")
    return took


def ensure_checkers(
    minors: list[int] | None = None, progress: Progress | None = None, root: Path | None = None
) -> dict[str, float]:
    """Build every missing checker (all pinned minors by default); seconds per build done."""
    say = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    where = root or cache_root()
    wanted = sorted(APIEXTENSIONS) if minors is None else minors
    took: dict[str, float] = {}
    missing = [m for m in wanted if not os.access(checker_path(m, where), os.X_OK)]
    if (
        not missing
        and os.access(kubeconform_path(where), os.X_OK)
        and _monitoring_crds_present(where)
    ):
        return took
    go = find_go()
    with _lock(where):
        if not _monitoring_crds_present(where):
            fetch_monitoring_crds(go, where, say)
        if not os.access(kubeconform_path(where), os.X_OK):
            took["kubeconform"] = build_kubeconform(go, where, say)
        for minor in missing:
            if not os.access(checker_path(minor, where), os.X_OK):  # another builder's?
                took[f"1.{minor}"] = build_checker(go, minor, where, say)
    return took


def main() -> int:
    started = time.monotonic()
    try:
        took = ensure_checkers()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, seconds in took.items():
        print(f"{name}: {_elapsed(seconds)}", file=sys.stderr)
    print(
        f"Kubernetes version checkers ready ({_elapsed(time.monotonic() - started)}): "
        f"1.{min(APIEXTENSIONS)}..1.{max(APIEXTENSIONS)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
