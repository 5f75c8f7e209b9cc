"""The chart installed by Helm into the local cluster, its operator run from the local image.

`batchop local up --operator helm` and e2e/test_helm_install.py share this: the values that
point the chart at the image built by `make image` (pullPolicy Never: nothing is pulled) and
at the local stack's Prometheus, and thin `helm` calls. The operator's pod is run by
batchop_dev.local.imagepods (podman), the BatchedModels' Triton pods by the pod runner.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from batchop_dev.image import IMAGE, OperatorImage

REPO = Path(__file__).resolve().parents[4]
CHART = REPO / "charts" / "batchop"
RELEASE = "batchop"
NAMESPACE = "batchop-system"


class HelmError(RuntimeError):
    """A helm command failed; the message has its output."""


def helm_binary() -> Path:
    """The helm extracted into this venv by batchop_dev.local.tools."""
    from batchop_dev.local.tools import ensure_tools

    ensure_tools()
    return Path(sys.prefix) / "bin" / "helm"


def local_values(
    image: OperatorImage,
    prometheus_url: str,
    *,
    scrape_interval_s: float = 5.0,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """`--set` values for the local stack: this image, never pulled; the stack's Prometheus
    (rate window ~4 scrapes); a PodMonitor per model at the stack's scrape interval, which
    the stack's Prometheus Operator turns into the Prometheus's scrape jobs."""
    repository, _, tag = image.tag.rpartition(":")
    if repository != IMAGE or not tag:
        raise HelmError(f"image {image.tag!r} is not a {IMAGE}:<tag> built by make image")
    return {
        "image.repository": repository,
        "image.tag": tag,
        "image.pullPolicy": "Never",
        "prometheus.url": prometheus_url,
        "prometheus.rateWindow": f"{max(10, round(4 * scrape_interval_s))}s",
        "podMonitorPerModel": "true",
        "podMonitorInterval": f"{scrape_interval_s:g}s",
        "logFormat": "plain",
        **(extra or {}),
    }


def helm(kubeconfig: Path, *args: str, timeout_s: float = 600) -> str:
    """Run helm against the cluster; raise HelmError with its output when it fails."""
    got = subprocess.run(
        [str(helm_binary()), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if got.returncode != 0:
        raise HelmError(
            f"helm {' '.join(args[:2])} failed (exit {got.returncode}): "
            f"{(got.stdout + got.stderr).strip()[-3000:]}"
        )
    return got.stdout


def set_flags(values: dict[str, str]) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        out += ["--set-string" if key.endswith(("tag", "url")) else "--set", f"{key}={value}"]
    return out


def install(
    kubeconfig: Path,
    values: dict[str, str],
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    upgrade: bool = False,
    wait_s: int = 300,
) -> str:
    """`helm install` (or `upgrade`) the chart and wait until the operator's pod is Ready."""
    verb = ["upgrade", release, str(CHART)] if upgrade else ["install", release, str(CHART)]
    return helm(
        kubeconfig,
        *verb,
        "-n",
        namespace,
        "--create-namespace",
        *set_flags(values),
        "--wait",
        f"--timeout={wait_s}s",
        timeout_s=wait_s + 60,
    )


def service_monitor(
    kubeconfig: Path, values: dict[str, str], *, release: str = RELEASE, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """The chart's ServiceMonitor for these values, rendered by `helm template` (the local
    cluster has no Prometheus Operator, so it is not installed; the stack's Prometheus is
    configured from it instead)."""
    text = helm(
        kubeconfig,
        "template",
        release,
        str(CHART),
        "-n",
        namespace,
        *set_flags(
            {
                **values,
                "metrics.serviceMonitor.enabled": "true",
                "metrics.serviceMonitor.interval": "5s",
                "metrics.serviceMonitor.scrapeTimeout": "4s",
            }
        ),
        "--show-only",
        "templates/servicemonitor.yaml",
    )
    (monitor,) = [d for d in yaml.safe_load_all(text) if d]
    return dict(monitor)


def scrape_operator(
    prometheus: Any,
    kubeconfig: Path,
    values: dict[str, str],
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[str]:
    """Point the stack's Prometheus at the installed operator through the chart's own
    ServiceMonitor (and the installed Service it selects). Returns the job names."""
    monitor = service_monitor(kubeconfig, values, release=release, namespace=namespace)
    manifest = helm(kubeconfig, "get", "manifest", release, "-n", namespace)
    services = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Service"]
    if len(services) != 1:
        raise HelmError(f"release {release}: expected one Service, found {len(services)}")
    return list(prometheus.add_service_monitor(monitor, services[0]))


def uninstall(kubeconfig: Path, *, release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    return helm(kubeconfig, "uninstall", release, "-n", namespace, "--wait")


def serve(
    kubeconfig: Path, workdir: Path, done: threading.Event, say: Callable[[str], None]
) -> None:
    """`batchop local up --operator helm`: the stack (Prometheus, the Triton pod runner, the
    image pod runner) on the cluster, the chart installed with the local image, until `done`
    is set; then the chart is uninstalled and the stack stopped (the cluster stays).

    examples/cpu-demo.yaml applies as it is: its repository path is mapped to a synthetic
    model written from the cpu-demo latency profile.
    """
    from batchop.sim.profile import load_profile
    from batchop_dev.image import ensure_image
    from batchop_dev.local.imagepods import ImagePodRunner
    from batchop_dev.local.stack import LocalStack
    from batchop_dev.local.triton import write_model_repository

    image = ensure_image(log=say)
    say(f"image {image.tag} ({'built' if image.built else 'reused'})")
    examples = REPO / "examples"
    demo = yaml.safe_load((examples / "cpu-demo.yaml").read_text())
    workdir.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(
        kubeconfig,
        workdir=workdir,
        say=say,
        repository_map={demo["spec"]["model"]["repository"]: str(workdir / "models")},
    )
    write_model_repository(
        stack.repository_dir,
        demo["spec"]["model"]["name"],
        load_profile(examples / "profiles" / "cpu-demo.yaml"),
    )
    runner = ImagePodRunner(kubeconfig, workdir=workdir / "image-pods")
    installed = False
    try:
        stack.start()
        runner.start()
        say(f"image pod runner up (container logs in {runner.workdir})")
        values = local_values(
            image, stack.prometheus.url, scrape_interval_s=stack.prometheus.scrape_interval_s
        )
        install(kubeconfig, values)
        installed = True
        scrape_operator(stack.prometheus, kubeconfig, values)
        say(
            f"helm release {RELEASE!r} in {NAMESPACE}: the operator runs from {image.tag}, "
            f"scraped by {stack.prometheus.url} through the chart's ServiceMonitor; "
            f"try `kubectl --kubeconfig {kubeconfig} apply -f {examples / 'cpu-demo.yaml'}`. "
            "Ctrl-C uninstalls the chart and stops the stack (the cluster stays up)."
        )
        while not done.wait(1.0):
            pass
    finally:
        try:
            if installed:
                say("helm uninstall")
                uninstall(kubeconfig)
        finally:
            runner.stop()
            stack.stop()
