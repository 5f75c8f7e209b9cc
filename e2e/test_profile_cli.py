"""`batchop profile` against a real tritonserver on loopback.

One server serves four models: the real MLP, the sleep model (cpu-demo's profile), a model
without batching (max_batch_size 0) and a model whose one execution takes 5 s. The command
runs as users run it (a subprocess); its profile must be what `batchop plan` and `batchop
simulate` read, its `-o yaml` what a BatchedModel accepts, and every failure one clear line
with a nonzero exit and nothing written. `--bm` finds a Ready pod of a BatchedModel on the
session's local stack (the pod runner runs the real MLP on the pod's 127.10.x.y address).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchop.api.constants import LABEL_MODEL
from batchop.api.models import parse_batched_model
from batchop.sim.profile import load_profile
from batchop_dev.local.triton import TritonProcess, write_model_repository
from batchop_dev.local.triton.mlp import write_mlp_repository

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CPU_DEMO = ROOT / "examples" / "profiles" / "cpu-demo.yaml"
MODELS = ["mlp", "synth", "nobatch", "slow"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    tmp = tmp_path_factory.mktemp("profile")
    repo = tmp / "repo"
    write_mlp_repository(repo, "mlp", max_batch_size=16, max_queue_delay_us=2000)
    write_model_repository(repo, "synth", CPU_DEMO, max_batch_size=8)
    slow = tmp / "slow.yaml"
    slow.write_text("name: slow\nmax_batch_size: 2\nbatch_latency_ms: {1: 5000}\n")
    write_model_repository(repo, "slow", slow)
    # Triton's own way of saying "no batching": max_batch_size 0, no dynamic_batching
    nobatch = write_model_repository(repo, "nobatch", CPU_DEMO, max_batch_size=1)
    config = (nobatch / "config.pbtxt").read_text()
    head, _, rest = config.partition("dynamic_batching {")
    config = head + rest.split("}\n", 1)[1]
    (nobatch / "config.pbtxt").write_text(config.replace("max_batch_size: 1", "max_batch_size: 0"))
    with TritonProcess(
        repo, address="127.0.80.10", load_models=MODELS, log_path=tmp / "triton.log"
    ) as triton:
        yield triton


def _batchop(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchop", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_profile_of_the_real_model_feeds_plan_simulate_and_a_manifest(
    server: TritonProcess, tmp_path: Path
) -> None:
    out = tmp_path / "mlp.yaml"
    run = _batchop(
        "profile", "--url", server.url, "--model", "mlp", "--out", str(out), "--repeats", "5",
        "--startup-seconds", "3", "-o", "yaml",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "100%" in run.stderr  # progress, on stderr (not a terminal: one line per 10%)
    profile = load_profile(out)
    assert profile.name == "mlp" and profile.max_batch_size == 16
    assert profile.startup_seconds == 3
    assert [b for b, _ in profile.batch_latency_ms] == list(range(1, 17))
    assert "#  batch    median" in out.read_text()  # the spread, beside the fit
    # -o yaml: the same curve, as fields a BatchedModel takes
    fields = yaml.safe_load(run.stdout)
    manifest = yaml.safe_load((ROOT / "examples" / "cpu-demo.yaml").read_text())
    manifest["spec"]["model"].update(fields["spec"]["model"])
    bm = parse_batched_model(manifest)
    assert bm.spec.model.name == "mlp" and bm.spec.model.max_batch_size == 16
    assert bm.spec.model.profile_points() == profile.batch_latency_ms
    # the file is what plan and simulate read
    plan = _batchop("plan", "--profile", str(out), "--rps", "200", "--slo-ms", "50", "-o", "json")
    assert plan.returncode == 0, plan.stderr
    trace = tmp_path / "t.csv"
    trace.write_text("second,rps\n0,100\n60,300\n120,0\n")
    sim = tmp_path / "sim.json"
    simulate = _batchop(
        "simulate", "--profile", str(out), "--trace", str(trace), "--slo-ms", "50",
        "--policy", "batchop", "--json", str(sim),
    )  # fmt: skip
    assert simulate.returncode == 0, simulate.stderr
    assert sim.stat().st_size > 0


def test_text_output_shows_the_spread_and_the_sleep_models_time_is_at_least_its_profile(
    server: TritonProcess, tmp_path: Path
) -> None:
    out = tmp_path / "synth.yaml"
    run = _batchop(
        "profile", "--url", f"http://{server.url}", "--model", "synth", "--out", str(out),
        "--repeats", "3", "--warmup", "1", "--name", "synth-measured",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "p10-p90 ms" in run.stdout and "time per inference at batch 8" in run.stdout
    assert "latencyProfile:" in run.stdout  # the fields to paste, after the table
    measured = load_profile(out)
    assert measured.name == "synth-measured" and measured.max_batch_size == 8
    # the sleep model sleeps at least its table's time: what is measured is the execution
    want = load_profile(CPU_DEMO)
    for batch, ms in measured.batch_latency_ms:
        assert ms >= want.latency_ms(batch) * 0.999, (batch, ms)


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("nobatch", [], "does not batch: its config has max_batch_size 0"),
        ("absent", [], "model 'absent' is not ready"),
        ("synth", ["--max-batch-size", "9"], "--max-batch-size 9 is outside 1..8"),
        ("slow", ["--timeout", "1"], "did not answer within --timeout 1 s"),
    ],
)
def test_failures_name_the_model_and_rule_exit_nonzero_and_leave_out_untouched(
    server: TritonProcess, tmp_path: Path, model: str, extra: list[str], message: str
) -> None:
    out = tmp_path / "p.yaml"
    out.write_text("an earlier profile\n")
    run = _batchop("profile", "--url", server.url, "--model", model, "--out", str(out), *extra)
    assert run.returncode == 1, run.stdout + run.stderr
    assert message in run.stderr, run.stderr
    assert f"http://{server.url}" in run.stderr
    assert "Traceback" not in run.stderr
    assert out.read_text() == "an earlier profile\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]  # no temporary left


def _ready_pod_ip(cluster: Any, namespace: str, bm: str, model: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"{LABEL_MODEL}={bm}")
        for pod in pods["items"]:
            ip = pod["status"].get("podIP")
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions", [])
            )
            if ip and ready:
                try:  # KWOK may mark a pod Ready a moment before its Triton answers
                    url = f"http://{ip}:8000/v2/models/{model}/ready"
                    with urllib.request.urlopen(url, timeout=2) as r:
                        if r.status == 200:
                            return ip
                except OSError:
                    pass
        time.sleep(0.5)
    raise AssertionError(f"no pod of {namespace}/{bm} Ready with Triton after 120 s")


def test_profile_of_a_batchedmodel_measures_its_ready_pod(
    cluster: Any, stack: Any, tmp_path: Path
) -> None:
    if stack.operator_running():  # its Deployment would add pods of its own
        stack.stop_operator()
    cluster.install_crd()
    namespace = f"profile-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    try:
        repo = tmp_path / "repo"
        write_mlp_repository(repo, "mlp", max_batch_size=8)
        bm = {
            "apiVersion": "batchop.io/v1alpha1",
            "kind": "BatchedModel",
            "metadata": {"name": "real", "namespace": namespace},
            "spec": {
                "model": {"name": "mlp", "repository": str(repo), "maxBatchSize": 8},
                "server": {"gpus": 0},
                "autotune": {"queueDelay": False, "replicas": False},
            },
        }
        args = [f"--model-repository={repo}", "--model-control-mode=explicit", "--load-model=mlp"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "real-a", "namespace": namespace, "labels": {LABEL_MODEL: "real"}},
            "spec": {
                "containers": [
                    {
                        "name": "tritonserver",
                        "image": "triton:none",
                        "command": ["tritonserver"],
                        "args": args,
                    }
                ]
            },
        }
        items = {"apiVersion": "v1", "kind": "List", "items": [bm, pod]}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(items))
        ip = _ready_pod_ip(cluster, namespace, "real", "mlp")
        out = tmp_path / "real.yaml"
        run = _batchop(
            "profile", "--bm", f"{namespace}/real", "--kubeconfig", str(cluster.kubeconfig),
            "--out", str(out), "--repeats", "3",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert f"http://{ip}:8000" in run.stdout
        profile = load_profile(out)
        assert profile.name == "mlp" and profile.max_batch_size == 8
        missing = _batchop(
            "profile", "--bm", f"{namespace}/absent", "--kubeconfig", str(cluster.kubeconfig),
            "--out", str(tmp_path / "absent.yaml"),
        )  # fmt: skip
        assert missing.returncode == 1
        assert f"BatchedModel {namespace}/absent not found" in missing.stderr
        assert not (tmp_path / "absent.yaml").exists()
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
