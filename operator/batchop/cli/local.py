"""`batchop local up|down|status|kubeconfig [--name N]`: the local Kubernetes cluster."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from batchop.cli import devpart
from batchop.cli.output import add_output_flag, emit

DEFAULT_NAME = "batchop"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "local",
        help="a local Kubernetes (etcd + control plane built from Go modules, run by kwokctl) "
        "with fake GPU nodes",
        description="Manage a local cluster: real etcd, kube-apiserver, kube-controller-manager "
        "and kube-scheduler run by `kwokctl --runtime binary`; KWOK fakes GPU nodes whose pods "
        "get loopback addresses (127.10.x.y in the first cluster, 127.11.x.y in a second "
        "running beside it). The first `up` builds the binaries (tens of minutes).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument(
            "--name", default=DEFAULT_NAME, help=f"cluster name (default {DEFAULT_NAME})"
        )
        sub.set_defaults(func=run)
        return sub

    up = add("up", "start a cluster and add GPU nodes")
    up.add_argument("--nodes", type=int, default=2, help="fake GPU nodes (default 2)")
    up.add_argument(
        "--gpus-per-node", type=int, default=4, help="nvidia.com/gpu per node (default 4)"
    )
    up.add_argument("--cpu", default="32", help="cpu per node (default 32)")
    up.add_argument("--memory", default="256Gi", help="memory per node (default 256Gi)")
    up.add_argument(
        "--port", type=int, default=None, help="kube-apiserver port (default: a free one)"
    )
    up.add_argument(
        "--readiness",
        choices=("kwok", "probes"),
        default="kwok",
        help="kwok: pods are Ready once they have an address (default); probes: "
        "pods with a readinessProbe wait for a prober, e.g. the pod runner",
    )
    up.add_argument(
        "--replace",
        action="store_true",
        help="delete a cluster of that name first instead of failing",
    )
    up.add_argument(
        "--crd",
        action="append",
        default=[],
        metavar="PATH",
        help="apply this manifest (e.g. crds/batchedmodel.yaml) once up; repeatable",
    )
    up.add_argument(
        "--operator",
        choices=("none", "helm"),
        default="none",
        help="helm: also `helm install` charts/batchop with the image `make image` "
        "builds, run its operator pod with podman and the BatchedModels' Triton "
        "pods as local processes, with a Prometheus; stays in the foreground "
        "until Ctrl-C, then uninstalls the chart (implies --readiness probes)",
    )
    add("down", "stop and delete a cluster")
    status = add("status", "is it up; nodes and GPUs free")
    add_output_flag(status, json_alias=True)
    add("kubeconfig", "print the path of the cluster's kubeconfig")


def run(args: argparse.Namespace) -> int:
    devpart.require(f"batchop local {args.action}")
    from pathlib import Path

    from batchop_dev.local.build import BuildError
    from batchop_dev.local.cluster import ClusterError, LocalCluster
    from batchop_dev.local.versions import PinError

    try:
        if args.action == "up":
            helm = args.operator == "helm"
            cluster = LocalCluster(
                args.name,
                nodes=args.nodes,
                gpus_per_node=args.gpus_per_node,
                cpu=args.cpu,
                memory=args.memory,
                port=args.port,
                readiness="probes" if helm else args.readiness,
            )
            cluster.up(replace=args.replace)
            for path in args.crd:
                cluster.apply_file(Path(path))
            print(cluster.kubeconfig, flush=True)
            return _serve_helm(cluster) if helm else 0
        cluster = LocalCluster(args.name)
        if args.action == "down":
            if not cluster.down():
                print(f"no cluster named {args.name!r}", file=sys.stderr)
            return 0
        if args.action == "kubeconfig":
            if not cluster.exists():
                print(
                    f"error: no cluster named {args.name!r}; `batchop local up --name "
                    f"{args.name}` first",
                    file=sys.stderr,
                )
                return 1
            print(cluster.kubeconfig)
            return 0
        return _print_status(cluster, args.output, getattr(args, "json_out", None))
    except (ClusterError, BuildError, PinError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _serve_helm(cluster: Any) -> int:
    """The chart and the stack on `cluster` until Ctrl-C/SIGTERM (batchop_dev.local.helmchart)."""
    import signal
    import threading

    devpart.require("batchop local up --operator helm")
    from batchop_dev.image import ImageError
    from batchop_dev.local.helmchart import HelmError, serve

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        serve(
            cluster.kubeconfig,
            cluster.workdir / "helm-stack",
            done,
            lambda m: print(m, file=sys.stderr, flush=True),
        )
    except (HelmError, ImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_status(cluster: Any, output: str, path: str | None = None) -> int:
    """`cluster`: a batchop_dev.local.cluster.LocalCluster (not imported here: the runtime
    package imports batchop-dev only after devpart.require)."""
    state = cluster.status()
    if output != "text":
        emit(
            {
                "name": state.name,
                "up": state.up,
                "kubeconfig": str(state.kubeconfig) if state.kubeconfig else None,
                "gpus": state.gpus,
                "gpus_free": state.gpus_free,
                "nodes": [{**vars(n), "gpus_free": n.gpus_free} for n in state.nodes],
            },
            output,
            path=path,
        )
        return 0 if state.up else 1
    if not state.up:
        print(f"cluster {state.name!r}: down")
        return 1
    print(f"cluster {state.name!r}: up; kubeconfig {state.kubeconfig}")
    print(f"GPUs: {state.gpus_free} free of {state.gpus}")
    print(f"{'NODE':<14} {'READY':<6} {'POD CIDR':<16} {'GPUS':>5} {'FREE':>5}")
    for node in state.nodes:
        print(
            f"{node.name:<14} {str(node.ready):<6} {node.pod_cidr:<16} "
            f"{node.gpus:>5} {node.gpus_free:>5}"
        )
    return 0
