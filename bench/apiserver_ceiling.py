"""The local API server's own ceiling: how many of the operator's calls per second it answers.

Run: .venv/bin/python bench/apiserver_ceiling.py [--models 200] [--threads 1 8 32]

Why: the operator's cold start at N models costs about 6 API calls per model, and the
operator's handler threads spend it waiting for the API server's answers. Whether "1,000
models Ready in 60 s" is reachable on a machine depends on what the API server (and etcd,
and the controller manager reacting to new Deployments) can do there at all. This asks it
directly, with no operator in the way: a plain concurrent client (the official Python client,
one pooled connection per thread, as the operator's handler threads use) sends the operator's
own calls for the operator's own objects:

- the server-side applies that create each model's children (Deployment, Service, PDB, as
  the operator renders them for the bench's models, with the owner reference);
- the status merge patches of the BatchedModels (with the resourceVersion, as the operator
  sends them).

For each thread count, a fresh set of --models BatchedModels; figures: calls per second,
and the CPU seconds the API server, etcd and the controller manager used per call (from
/proc). Writes bench/results/apiserver_ceiling.md (command, commit, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from operator_scale import component_pids, model

from batchop.controller.kube import Cluster, make_api_client
from batchop.controller.reconcile import desired_children
from batchop.controller.settings import Settings
from batchop.provenance import Provenance
from batchop_dev.local.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "apiserver_ceiling.md"
COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager")  # kwok: no pods here


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(pids: dict[str, int], threads: int, calls: list[Any], run: Any) -> dict[str, float]:
    """Run `run(call)` for every call on `threads` threads; rate and CPU per call."""
    cpu0 = {k: cpu_s(p) for k, p in pids.items()}
    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, calls))
    wall = time.monotonic() - t0
    out = {"calls": len(calls), "wall_s": wall, "per_s": len(calls) / wall}
    for k, p in pids.items():
        out[f"{k}_ms_per_call"] = 1000 * (cpu_s(p) - cpu0[k]) / len(calls)
    return out


def measure(cluster: LocalCluster, pids: dict[str, int], n: int, threads: int) -> dict[str, Any]:
    """Create n models in a fresh namespace, then time their children's applies and their
    status patches at `threads` concurrent callers."""
    ns = f"ceiling-{threads}-{int(time.time())}"
    cluster.kubectl("create", "namespace", ns)
    items = [model(f"m{i:04d}", ns, 15) for i in range(n)]
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    live = cluster.kubectl_json("get", "bm", "-n", ns)["items"]
    api = Cluster(make_api_client(str(cluster.kubeconfig), threads + 2))
    settings = Settings(namespaces=(ns,), all_namespaces=False, pod_monitor=False)
    children = [child for bm in live for child in desired_children(bm, settings)]
    applies = timed(pids, threads, children, api.apply)
    status = {"observedGeneration": 1, "replicas": 0, "readyReplicas": 0}

    def patch(bm: dict[str, Any]) -> None:
        meta = bm["metadata"]
        api.patch_status(meta["namespace"], meta["name"], status, meta["resourceVersion"])

    patches = timed(pids, threads, live, patch)
    row = {"threads": threads, "models": n, "children_per_model": len(children) / n}
    row.update({f"apply_{k}": v for k, v in applies.items()})
    row.update({f"status_{k}": v for k, v in patches.items()})
    print(json.dumps(row), flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ["threads", "server-side applies/s (create)", "status patches/s"]
    head += [f"{k} CPU ms per apply / per status patch" for k in COMPONENTS]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        cells = [str(r["threads"]), f"{r['apply_per_s']:.0f}", f"{r['status_per_s']:.0f}"]
        cells += [
            f"{r.get(f'apply_{k}_ms_per_call', 0):.1f} / {r.get(f'status_{k}_ms_per_call', 0):.1f}"
            for k in COMPONENTS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, default=200, help="BatchedModels per thread count")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--name", default="batchop-ceiling", help="local cluster name")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    provenance = Provenance.start()
    cluster = LocalCluster(args.name).up(replace=True)
    rows: list[dict[str, Any]] = []
    try:
        cluster.install_crd()
        pids = component_pids(cluster)
        missing = set(COMPONENTS) - set(pids)
        if missing:
            print(f"  no process found for {sorted(missing)}: their CPU is not shown")
        for threads in args.threads:
            rows.append(measure(cluster, pids, args.models, threads))
    finally:
        cluster.down()
    text = (
        "# API server ceiling (bench/apiserver_ceiling.py)\n\n"
        f"{provenance.finish().markdown()}\n"
        f"The local cluster's API server (kwokctl, binary runtime) answering a plain "
        f"concurrent client (official Python client, a pooled connection per thread) with "
        f"the operator's own calls for {args.models} of the bench's BatchedModels per row: "
        "server-side applies creating each model's children as the operator renders them "
        "(Deployment, Service, PDB at 0 replicas, "
        f"{rows[0]['children_per_model']:.0f} per model), then one status merge patch per "
        "model with its resourceVersion. CPU per call: the component's utime+stime over "
        "the phase divided by its calls (the controller manager's is what the new "
        "Deployments cost it).\n\n"
        f"{table(rows)}\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
